// Where each item's `body` lies in the raw bytes of a POST /batch. An item is held to what the
// same request alone would be held to, and alone its body is exactly those bytes: its
// Idempotency-Key fingerprint is of the body's bytes (so a write sent alone and then retried in
// a batch, or the other way round, is recognised when the client serializes the body the same
// way both times, as JSON.stringify, json.dumps and friends do), and its size limit counts them.
// A re-serialization (JSON.stringify of the parsed value) would change spacing and escapes of
// any client that does not write compact JSON, and make such retries conflicts.
//
// itemBodySlices runs only on a body JSON.parse has accepted, so it may skip over values without
// checking them. requestElementSpans runs before any parse: it never loops past the end, and what
// it finds is checked by parsing each piece (body.ts, parseJsonBytes).

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const REQUESTS = Buffer.from('"requests"');
const BODY = Buffer.from('"body"');

class Scanner {
  at = 0;
  /** Whether value() met JSON whitespace between tokens inside the last object or array it skipped. */
  spaced = false;
  /** Whether any whitespace between tokens was met so far, anywhere. */
  spacedAnywhere = false;
  constructor(readonly json: Buffer) {}

  space(): void {
    const json = this.json;
    let at = this.at;
    for (;;) {
      const byte = json[at];
      if (byte !== 0x20 && byte !== 0x0a && byte !== 0x0d && byte !== 0x09) break;
      at++;
    }
    if (at !== this.at) this.spacedAnywhere = true;
    this.at = at;
  }

  /** At a `"`: moves past the string's closing quote (one not escaped by an odd run of `\`). */
  string(): void {
    const json = this.json;
    let from = this.at + 1;
    for (;;) {
      const quote = json.indexOf(QUOTE, from);
      if (quote === -1) throw new Error('unterminated string');
      let backslashes = 0;
      for (let i = quote - 1; json[i] === BACKSLASH; i--) backslashes++;
      from = quote + 1;
      if (backslashes % 2 === 0) break;
    }
    this.at = from;
  }

  /** At a key: reads it, and says whether it is `name` (compared decoded when it has escapes). */
  keyIs(name: Buffer): boolean {
    const json = this.json;
    const start = this.at;
    this.string();
    const end = this.at;
    // Compared in place: a Buffer view per key was a tenth of a batch's CPU (profiled).
    let escaped = false;
    let same = end - start === name.length;
    for (let i = start; i < end && (same || !escaped); i++) {
      const byte = json[i]!;
      if (byte === BACKSLASH) escaped = true;
      if (same && byte !== name[i - start]) same = false;
    }
    if (!escaped) return same;
    return JSON.parse(json.toString('utf8', start, end)) === JSON.parse(name.toString('utf8'));
  }

  /** Moves past one value of any kind. */
  value(): void {
    const json = this.json;
    const first = json[this.at];
    if (first === QUOTE) return this.string();
    if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
      let depth = 0;
      let spaced = false;
      do {
        // Only bytes JSON.parse has not seen can end inside an object (requestElementSpans).
        if (this.at >= json.length) throw new Error('unterminated value');
        const byte = json[this.at];
        if (byte === QUOTE) {
          this.string();
          continue;
        }
        if (byte === OPEN_OBJECT || byte === OPEN_ARRAY) depth++;
        else if (byte === CLOSE_OBJECT || byte === CLOSE_ARRAY) depth--;
        else if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) spaced = true;
        this.at++;
      } while (depth > 0);
      this.spaced = spaced;
      if (spaced) this.spacedAnywhere = true;
      return;
    }
    this.spaced = true;
    // A number, true, false or null: up to the next delimiter.
    let at = this.at;
    for (;;) {
      const byte = json[at];
      if (byte === undefined || byte === COMMA || byte === CLOSE_OBJECT || byte === CLOSE_ARRAY || byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) break;
      at++;
    }
    this.at = at;
  }

  expect(byte: number): void {
    if (this.json[this.at] !== byte) throw new Error(`expected ${String.fromCharCode(byte)} at ${this.at}`);
    this.at++;
  }

  /**
   * At `{`: calls `member(isTarget)` with the scanner on each member's value, `isTarget` saying
   * whether its key is `target`; the callback must move past the value.
   */
  members(target: Buffer, member: (isTarget: boolean) => void): void {
    this.expect(OPEN_OBJECT);
    this.space();
    if (this.json[this.at] === CLOSE_OBJECT) {
      this.at++;
      return;
    }
    for (;;) {
      this.space();
      const isTarget = this.keyIs(target);
      this.space();
      this.expect(COLON);
      this.space();
      member(isTarget);
      this.space();
      if (this.json[this.at] === COMMA) {
        this.at++;
        continue;
      }
      this.expect(CLOSE_OBJECT);
      return;
    }
  }
}

/** Int32 slots per item in BatchSlices.items. */
export const SLICE_SLOTS = 3;

export interface BatchSlices {
  /**
   * For each item: its body's bytes as [start, end) at [3i, 3i + 1], or -1, -1 when the item has
   * no `body`; at 3i + 2, 1 when the body is an object or array with no JSON whitespace between
   * its tokens (its fingerprint is then a plain hash of the bytes: compactFingerprintInto), else 0.
   */
  items: Int32Array;
  /** The whole body has no JSON whitespace between tokens (batchBodyFingerprint). */
  compact: boolean;
}

/** What one scan of a batch body finds (scanBatch). */
interface BatchScan extends BatchSlices {
  /** Each element of the "requests" array as [start, end) at [2i, 2i + 1]. */
  elements: Int32Array;
}

const EMPTY = new Int32Array(0);

/** `array`, or a copy at least twice as long when it is shorter than `needed` (new slots -1). */
function grown(array: Int32Array, needed: number): Int32Array {
  if (needed <= array.length) return array;
  const bigger = new Int32Array(Math.max(needed, array.length * 2, 64)).fill(-1);
  bigger.set(array);
  return bigger;
}

/**
 * One pass over a batch body: where each element of its "requests" array lies, and in each
 * element that is an object, where its `body` lies and whether it is compact. A key given twice
 * counts by its last occurrence, as JSON.parse does. null when the scan cannot follow the bytes,
 * when an array holds more than `maxElements` elements, or (`oneRequestsKey`) when the envelope
 * gives "requests" twice: the scan may run on bytes nothing has checked, so what it allocates
 * stays bounded by the body's use (a review: 2 million elements of `0,`, a few KB gzip'd, or
 * 290,000 empty "requests" keys, each made megabytes of arrays before the 422 or the 400).
 */
function scanBatch(json: Buffer, maxElements: number, oneRequestsKey: boolean): BatchScan | null {
  const scanner = new Scanner(json);
  let elements: Int32Array | null = null;
  let items: Int32Array | null = null;
  let requestsKeys = 0;
  try {
    scanner.space();
    scanner.members(REQUESTS, (isRequests) => {
      if (!isRequests) return scanner.value();
      requestsKeys++;
      if (oneRequestsKey && requestsKeys > 1) throw new Error('"requests" given twice');
      elements = null;
      items = null;
      if (json[scanner.at] !== OPEN_ARRAY) return scanner.value();
      let spans: Int32Array = EMPTY;
      let found: Int32Array = EMPTY;
      let count = 0;
      scanner.at++;
      scanner.space();
      if (json[scanner.at] === CLOSE_ARRAY) scanner.at++;
      else {
        for (;;) {
          scanner.space();
          if (count === maxElements) throw new Error('more elements than the scan takes');
          spans = grown(spans, 2 * count + 2);
          found = grown(found, SLICE_SLOTS * count + SLICE_SLOTS);
          spans[2 * count] = scanner.at;
          if (json[scanner.at] === OPEN_OBJECT) {
            const at = SLICE_SLOTS * count;
            const slots = found;
            scanner.members(BODY, (isBody) => {
              const start = scanner.at;
              scanner.value();
              if (isBody) {
                slots[at] = start;
                slots[at + 1] = scanner.at;
                slots[at + 2] = scanner.spaced ? 0 : 1;
              }
            });
          } else scanner.value();
          spans[2 * count + 1] = scanner.at;
          count++;
          scanner.space();
          if (json[scanner.at] === COMMA) {
            scanner.at++;
            continue;
          }
          scanner.expect(CLOSE_ARRAY);
          break;
        }
      }
      elements = spans.subarray(0, 2 * count);
      items = found.subarray(0, SLICE_SLOTS * count);
    });
    // Only whitespace may follow the object.
    scanner.space();
    if (scanner.at !== json.length) return null;
  } catch {
    return null;
  }
  if (elements === null || items === null) return null;
  return { elements, items, compact: !scanner.spacedAnywhere };
}

/**
 * Where the bodies of the `count` items of the batch in `json` lie, and whether the body is
 * compact. null when the bytes do not hold `count` items (not expected for a body whose parsed
 * form passed the envelope schema; the caller then has no byte ranges).
 */
export function itemBodySlices(json: Buffer, count: number): BatchSlices | null {
  // Not `count` as the limit: with "requests" given twice JSON.parse keeps the last, and a longer
  // first one made the scan give up, so the items were measured and fingerprinted from
  // JSON.stringify (found by a review: a 500 on a deep body, a key's replay taken for a reuse).
  const scan = scanBatch(json, Math.max(count, MAX_SCANNED_ELEMENTS), false);
  return scan === null || scan.elements.length !== 2 * count ? null : { items: scan.items, compact: scan.compact };
}

/**
 * The most elements requestElementSpans follows: BATCH_MAX_ITEMS' own maximum (settings.ts). A
 * body with more is parsed whole, as before, and refused by the envelope's schema.
 */
const MAX_SCANNED_ELEMENTS = 100_000;

/**
 * A batch body's "requests" elements as [start, end) (two Int32 per element) and its items'
 * slices, for parsing a big batch item by item (body.ts, parseJsonBytes). null when the body is
 * not laid out as one object whose "requests" key is given once and holds a non-empty array, or
 * when the scan cannot follow the bytes. Runs on bytes no parser has checked: the caller parses
 * each piece and the envelope around them, and takes the whole body's JSON.parse when any fails.
 */
export function requestElementSpans(json: Buffer): { elements: Int32Array; slices: BatchSlices } | null {
  const scan = scanBatch(json, MAX_SCANNED_ELEMENTS, true);
  if (scan === null || scan.elements.length === 0) return null;
  return { elements: scan.elements, slices: { items: scan.items, compact: scan.compact } };
}
