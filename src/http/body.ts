// Request body rules of CONTRACT.md §2: accepted content types and encodings, gzip inflation
// under the same size limit, and JSON that must be an object.
import { gunzipSync } from 'node:zlib';
import type { Settings } from '../config/settings.ts';
import { BodyTooDeepError, MAX_JSON_DEPTH, nestsDeeperThan } from '../schemas/validators.ts';
import { requestElementSpans, type BatchSlices } from './batch-slices.ts';

/** The body limit of a route's kind (inflated size too): the mapping and batch endpoints have their own. */
export function bodyLimitBytes(limit: 'body' | 'mapping' | 'batch', settings: Pick<Settings, 'bodyLimitBytes' | 'mappingBodyLimitBytes' | 'batchBodyLimitBytes'>): number {
  return limit === 'mapping' ? settings.mappingBodyLimitBytes : limit === 'batch' ? settings.batchBodyLimitBytes : settings.bodyLimitBytes;
}

/** application/json (any parameters), text/plain, or no content-type at all. */
export function acceptsContentType(header: string): boolean {
  if (header === '' || header === 'application/json') return true;
  const semicolon = header.indexOf(';');
  const media = (semicolon === -1 ? header : header.slice(0, semicolon)).trim().toLowerCase();
  return media === 'application/json' || media === 'text/plain';
}

export type Encoding = 'identity' | 'gzip';

/** The body's content-encoding, or null when we cannot decode it (415). */
export function bodyEncoding(header: string): Encoding | null {
  if (header === '') return 'identity';
  const value = header.trim().toLowerCase();
  if (value === '' || value === 'identity') return 'identity';
  if (value === 'gzip' || value === 'x-gzip') return 'gzip';
  return null;
}

export type DecodeError = { ok: false; error: 'tooLarge' | 'malformed'; message: string };
/**
 * `text`: the body as the string it was parsed from (an edge sends it on to the state); null for
 * a big batch, parsed item by item (parseJsonBytes) and sent on as bytes. `slices`: see ParsedBytes.
 */
export type DecodeResult = { ok: true; body: Record<string, unknown>; text: string | null; slices: BatchSlices | null } | DecodeError;

/** Inflates a gzip body under the size limit (identity bodies pass through). */
export function inflateBody(bytes: Buffer, encoding: Encoding, limitBytes: number): { ok: true; raw: Buffer } | DecodeError {
  if (encoding === 'identity') return { ok: true, raw: bytes };
  try {
    return { ok: true, raw: gunzipSync(bytes, { maxOutputLength: limitBytes }) };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
      return { ok: false, error: 'tooLarge', message: `inflated body is larger than ${limitBytes} bytes` };
    }
    return { ok: false, error: 'malformed', message: 'body is not valid gzip' };
  }
}

/**
 * A JSON escape of a UTF-16 surrogate (\uD800 to \uDFFF): only a body holding one can parse to a
 * string with an unpaired surrogate (raw UTF-8 bytes cannot encode one; invalid bytes decode to
 * U+FFFD). UTF-8 cannot hold an unpaired surrogate either: the journal, exports and sinks would
 * store U+FFFD in its place, and after a restart the state would differ from the one the
 * acknowledged writes made (two product ids differing only there became one). So such strings,
 * keys included, become well-formed (each unpaired surrogate U+FFFD) as they are parsed, here
 * and wherever a thread parses a body's text again (parseJson): memory holds what the journal holds.
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

interface WellFormedString {
  isWellFormed(): boolean;
  toWellFormed(): string;
}

function wellFormedString(text: string): string {
  const s = text as unknown as WellFormedString;
  return s.isWellFormed() ? text : s.toWellFormed();
}

/** `value` with its strings well-formed, down to `levels` levels (`value` is level 1); deeper parts as they are. */
function wellFormed(value: unknown, levels: number): unknown {
  if (typeof value === 'string') return wellFormedString(value);
  if (typeof value !== 'object' || value === null || levels <= 0) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = wellFormed(value[i], levels - 1);
    return value;
  }
  const object = value as Record<string, unknown>;
  const keys = Object.keys(object);
  if (keys.every((key) => wellFormedString(key) === key)) {
    for (const key of keys) object[key] = wellFormed(object[key], levels - 1);
    return object;
  }
  // A key to rename: a new object, the keys in their order (defined, so that a key named
  // "__proto__" stays a key).
  const renamed: Record<string, unknown> = {};
  for (const key of keys) Object.defineProperty(renamed, wellFormedString(key), { value: wellFormed(object[key], levels - 1), enumerable: true, writable: true, configurable: true });
  return renamed;
}

/** JSON.parse of `text`, its strings well-formed down to `levels` levels. */
function parseWellFormed(text: string, levels: number): unknown {
  const value: unknown = JSON.parse(text);
  return SURROGATE_ESCAPE.test(text) ? wellFormed(value, levels) : value;
}

/**
 * JSON.parse of a request body's text, every string well-formed (see SURROGATE_ESCAPE).
 * `nestedBodyDepth`: the level at which the body carries other bodies, each judged alone (a
 * batch: 3, the envelope, its requests, an item; 0: none).
 */
export function parseJson(text: string, nestedBodyDepth = 0): unknown {
  if (nestedBodyDepth === 0) {
    const value: unknown = JSON.parse(text);
    if (!SURROGATE_ESCAPE.test(text)) return value;
    // wellFormed() recurses: a body nested 10,000 deep overflowed the stack, answered 400 "not
    // valid JSON" (a review). Refused as too deep, as the validators refuse it.
    if (nestsDeeperThan(value, MAX_JSON_DEPTH)) throw new BodyTooDeepError();
    return wellFormed(value, MAX_JSON_DEPTH);
  }
  // A batch is not refused whole for one item's depth (a review found a 63-level item, valid
  // alone, sinking its whole batch with a 400 once any item held an escaped emoji): its items'
  // bodies are made well-formed down to MAX_JSON_DEPTH, and an item deeper than that is left
  // as it is, to be refused by its validator as it is alone (400, too deep).
  return parseWellFormed(text, nestedBodyDepth + MAX_JSON_DEPTH);
}

/** The level of a batch's items: the envelope, its "requests" array, an item. */
const BATCH_ITEM_LEVEL = 3;

/**
 * Bodies from this size on that carry batch items are parsed item by item. V8 puts every string
 * over 128 KB on pages of its own, mapped and unmapped each time: decoding a 290 KB batch of
 * 1,000 products into one string cost 1.3 ms on this machine, and a string per item 0.3 ms.
 */
const PARSE_BY_ITEM_FROM_BYTES = 64 * 1024;

/**
 * parseJson of the UTF-8 `raw`. A big batch is parsed in pieces, each item alone and the envelope
 * around them with a 0 in each item's place: what the whole body's JSON.parse gives, without the
 * string of the whole body. The scan that finds the items runs on unparsed bytes, so every piece
 * is checked: the pieces are exactly the body's bytes, each item a JSON value in an array of the
 * envelope, so the whole is valid JSON when they all parse. Anything else (a piece that does not
 * parse, a layout the scan does not follow) takes the whole body's JSON.parse, and its error.
 */
export function parseJsonBytes(raw: Buffer, nestedBodyDepth = 0): ParsedBytes {
  return parseBatchByItem(raw, nestedBodyDepth) ?? { value: parseJson(raw.toString('utf8'), nestedBodyDepth), slices: null };
}

/**
 * A parsed body, and for a batch parsed item by item, where its items' bodies lie in the bytes
 * (the same scan found them: the batch's fingerprints and sizes need not scan again).
 */
export interface ParsedBytes {
  value: unknown;
  slices: BatchSlices | null;
}

/** A big batch in `raw` parsed item by item (see parseJsonBytes), or null when it is not one or cannot be. */
function parseBatchByItem(raw: Buffer, nestedBodyDepth: number): ParsedBytes | null {
  if (nestedBodyDepth !== BATCH_ITEM_LEVEL || raw.length < PARSE_BY_ITEM_FROM_BYTES) return null;
  const levels = nestedBodyDepth + MAX_JSON_DEPTH;
  const scan = requestElementSpans(raw);
  if (scan === null) return null;
  const spans = scan.elements;
  const count = spans.length / 2;
  try {
    // Spans start and end at ASCII bytes, never inside a UTF-8 sequence: each piece decodes as
    // it does inside the whole.
    let envelopeText = raw.toString('utf8', 0, spans[0]);
    for (let i = 0; i < count; i++) envelopeText += '0' + raw.toString('utf8', spans[2 * i + 1], i + 1 < count ? spans[2 * i + 2] : raw.length);
    const envelope = parseWellFormed(envelopeText, levels);
    if (typeof envelope !== 'object' || envelope === null || Array.isArray(envelope)) return null;
    const requests = (envelope as { requests?: unknown }).requests;
    if (!Array.isArray(requests) || requests.length !== count) return null;
    for (let i = 0; i < count; i++) {
      if (requests[i] !== 0) return null;
      requests[i] = parseWellFormed(raw.toString('utf8', spans[2 * i], spans[2 * i + 1]), levels - (BATCH_ITEM_LEVEL - 1));
    }
    return { value: envelope, slices: scan.slices };
  } catch {
    return null;
  }
}

/** Parses a body that must be a JSON object (`nestedBodyDepth`: see parseJson). */
export function parseJsonObject(raw: Buffer, nestedBodyDepth = 0): DecodeResult {
  if (raw.length === 0) return { ok: false, error: 'malformed', message: 'request body is empty' };
  const byItem = parseBatchByItem(raw, nestedBodyDepth);
  if (byItem !== null) return { ok: true, body: byItem.value as Record<string, unknown>, text: null, slices: byItem.slices };
  let parsed: unknown;
  let text: string;
  try {
    text = raw.toString('utf8');
  } catch {
    // Longer than V8's longest string: the limits stop far below (MAX_BODY_BYTES, settings.ts).
    return { ok: false, error: 'tooLarge', message: 'request body is larger than this server can parse' };
  }
  try {
    parsed = parseJson(text, nestedBodyDepth);
  } catch (error) {
    return { ok: false, error: 'malformed', message: error instanceof BodyTooDeepError ? error.message : 'request body is not valid JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, error: 'malformed', message: 'request body must be a JSON object' };
  }
  return { ok: true, body: parsed as Record<string, unknown>, text, slices: null };
}
