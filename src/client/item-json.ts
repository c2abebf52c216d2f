// A write's batch item as JSON (the text POST /batch carries per item), and the body inside it.
import type { WriteMethod } from './types.ts';

/**
 * A write's body as JSON, made once when it is queued (undefined: it has none, a DELETE, or a
 * body JSON.stringify leaves out), and the UTF-8 length of its whole batch item. The item itself,
 * `{"method":…,"path":…,"body":…,"idempotencyKey":…}` (the text JSON.stringify of that object
 * gives), is written straight into the batch body around the body's JSON (batchBodyBytes). It
 * was one string per write, joined from four pieces and copied again when V8 flattened it:
 * 1.34 µs a product against 0.97 for JSON.stringify and Buffer.byteLength alone (a
 * microbenchmark, 2026-11-30), and the largest allocation of the client's own per write after
 * the caller's body. With the client's keys (client.ts), the client's CPU per item in
 * `bench:batch`'s batches fell about 5% (medians of 10 alternating pairs, 8.7 → 8.2 µs).
 */
export interface ItemJson {
  bodyJson: string | undefined;
  bytes: number;
}

export function itemJson(method: WriteMethod, path: string, body: unknown, idempotencyKey: string): ItemJson {
  const bodyJson = body === undefined ? undefined : (JSON.stringify(body) as string | undefined);
  const bodyBytes = bodyJson === undefined ? 0 : BODY_KEY.length + Buffer.byteLength(bodyJson);
  return { bodyJson, bytes: head(method, path).bytes + bodyBytes + tailBytes(idempotencyKey) };
}

/** The body JSON inside a write's batch item, or null when it has none: what the write sends alone. */
export function itemBodyJson(write: { bodyJson: string | undefined }): string | null {
  return write.bodyJson ?? null;
}

const BODY_KEY = ',"body":';

/**
 * `{"method":"POST","path":"/product"` (`text`), the same with `,"body":` (`withBody`), and the
 * UTF-8 length of `text` (the client percent-encodes every id it puts in a path, so it is ASCII,
 * but it is counted and written as UTF-8 all the same). The last one is kept: the writes of a
 * sync mostly share theirs.
 */
let lastHead = { method: '', path: '', text: '', withBody: '', bytes: 0 };
function head(method: WriteMethod, path: string): typeof lastHead {
  if (lastHead.method !== method || lastHead.path !== path) {
    const text = `{"method":"${method}","path":${JSON.stringify(path)}`;
    lastHead = { method, path, text, withBody: text + BODY_KEY, bytes: Buffer.byteLength(text) };
  }
  return lastHead;
}

/**
 * `,"idempotencyKey":"<key>"}`. A key is printable ASCII (checked when the write is made): only
 * `"` and `\` need escaping, and without them its JSON is the key in quotes.
 */
const KEY_OPEN = ',"idempotencyKey":"';
const NEEDS_ESCAPE = /["\\]/;
function tailText(key: string): string {
  return NEEDS_ESCAPE.test(key) ? `,"idempotencyKey":${JSON.stringify(key)}}` : `${KEY_OPEN}${key}"}`;
}
/** tailText(key).length, without making the text for a key that needs no escaping (nearly all). */
function tailBytes(key: string): number {
  return NEEDS_ESCAPE.test(key) ? tailText(key).length : KEY_OPEN.length + key.length + 2;
}

const BATCH_HEAD = Buffer.from('{"requests":[');
const BATCH_TAIL = Buffer.from(']}');

/**
 * The POST /batch body of `items` (each with its method, path, key, body JSON and item length),
 * as bytes: `{"requests":[item,item,...]}`. Written straight into one Buffer: joining the texts
 * first made one string of the whole batch (~290 KB for 1,000 products), and V8 gives every
 * string over 128 KB pages of their own, mapped and unmapped each time; on this machine that
 * join and its encoding cost 2.2 ms a batch against 0.16 ms here (measured, 1,000 products).
 */
export function batchBodyBytes(items: ReadonlyArray<{ method: WriteMethod; path: string; idempotencyKey: string; bodyJson: string | undefined; bytes: number }>): Buffer {
  let length = BATCH_HEAD.length + BATCH_TAIL.length + Math.max(0, items.length - 1);
  for (const item of items) length += item.bytes;
  const body = Buffer.allocUnsafeSlow(length);
  let at = BATCH_HEAD.copy(body, 0);
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    if (i > 0) body[at++] = 0x2c; // ,
    // Three native writes an item: as quick as one of a string joined per write, without making
    // that string (a loop over the ASCII pieces in JavaScript was no quicker: measured). The key
    // is printable ASCII (checked, or made so), written as latin1, one byte a character.
    const { text, withBody } = head(item.method, item.path);
    at += body.write(item.bodyJson === undefined ? text : withBody, at, 'utf8');
    if (item.bodyJson !== undefined) at += body.write(item.bodyJson, at, 'utf8');
    at += body.write(tailText(item.idempotencyKey), at, 'latin1');
  }
  // The lengths were counted when the writes were queued, apart from this writing: a miscount
  // would leave unwritten bytes of allocUnsafeSlow in the body, or cut an item. A loud failure
  // of the batch instead (a review's suggestion).
  if (at + BATCH_TAIL.length !== length) throw new Error(`the batch body came out ${at + BATCH_TAIL.length} bytes long against ${length} counted (a bug in intake/client)`);
  BATCH_TAIL.copy(body, at);
  return body;
}
