// Request body rules of CONTRACT.md §2: accepted content types and encodings, gzip inflation
// under the same size limit, and JSON that must be an object.
import { gunzipSync } from 'node:zlib';
import type { Settings } from '../config/settings.ts';
import { BodyTooDeepError, MAX_JSON_DEPTH, nestsDeeperThan } from '../schemas/validators.ts';

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
/** `text`: the body as the string it was parsed from (an edge sends it on to the state). */
export type DecodeResult = { ok: true; body: Record<string, unknown>; text: string } | DecodeError;

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

/**
 * JSON.parse of a request body's text, every string well-formed (see SURROGATE_ESCAPE).
 * `nestedBodyDepth`: the level at which the body carries other bodies, each judged alone (a
 * batch: 3, the envelope, its requests, an item; 0: none).
 */
export function parseJson(text: string, nestedBodyDepth = 0): unknown {
  const value: unknown = JSON.parse(text);
  if (!SURROGATE_ESCAPE.test(text)) return value;
  // wellFormed() recurses: a body nested 10,000 deep overflowed the stack, answered 400 "not
  // valid JSON" (a review). Refused as too deep, as the validators refuse it.
  if (nestedBodyDepth === 0) {
    if (nestsDeeperThan(value, MAX_JSON_DEPTH)) throw new BodyTooDeepError();
    return wellFormed(value, MAX_JSON_DEPTH);
  }
  // A batch is not refused whole for one item's depth (a review found a 63-level item, valid
  // alone, sinking its whole batch with a 400 once any item held an escaped emoji): its items'
  // bodies are made well-formed down to MAX_JSON_DEPTH, and an item deeper than that is left
  // as it is, to be refused by its validator as it is alone (400, too deep).
  return wellFormed(value, nestedBodyDepth + MAX_JSON_DEPTH);
}

/** Parses a body that must be a JSON object (`nestedBodyDepth`: see parseJson). */
export function parseJsonObject(raw: Buffer, nestedBodyDepth = 0): DecodeResult {
  if (raw.length === 0) return { ok: false, error: 'malformed', message: 'request body is empty' };
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
  return { ok: true, body: parsed as Record<string, unknown>, text };
}
