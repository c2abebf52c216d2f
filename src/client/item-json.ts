// A write's batch item as JSON (the text POST /batch carries per item), and the body inside it.
import type { WriteMethod } from './types.ts';

/**
 * The write's batch item as JSON, made once when it is queued: the same text JSON.stringify of
 * { method, path, body, idempotencyKey } gives (a body that serializes to nothing is left out, as
 * there), without building that wrapper object per write.
 */
export function itemJson(method: WriteMethod, path: string, body: unknown, idempotencyKey: string): string {
  const head = `{"method":"${method}","path":${JSON.stringify(path)}`;
  const bodyJson = body === undefined ? undefined : (JSON.stringify(body) as string | undefined);
  const key = `"idempotencyKey":${JSON.stringify(idempotencyKey)}}`;
  return bodyJson === undefined ? `${head},${key}` : `${head},"body":${bodyJson},${key}`;
}

/** The body JSON inside a write's batch item (itemJson's text), or null when it has none: what the write sends alone. */
export function itemBodyJson(write: { method: WriteMethod; path: string; idempotencyKey: string; json: string }): string | null {
  const head = `{"method":"${write.method}","path":${JSON.stringify(write.path)},"body":`;
  const tail = `,"idempotencyKey":${JSON.stringify(write.idempotencyKey)}}`;
  return write.json.startsWith(head) ? write.json.slice(head.length, write.json.length - tail.length) : null;
}

const BATCH_HEAD = Buffer.from('{"requests":[');
const BATCH_TAIL = Buffer.from(']}');

/**
 * The POST /batch body of `items` (each with its itemJson text and that text's UTF-8 byte length),
 * as bytes: `{"requests":[item,item,...]}`. Written straight into one Buffer: joining the texts
 * first made one string of the whole batch (~290 KB for 1,000 products), and V8 gives every
 * string over 128 KB pages of their own, mapped and unmapped each time; on this machine that
 * join and its encoding cost 2.2 ms a batch against 0.16 ms here (measured, 1,000 products).
 */
export function batchBodyBytes(items: ReadonlyArray<{ json: string; bytes: number }>): Buffer {
  let length = BATCH_HEAD.length + BATCH_TAIL.length + Math.max(0, items.length - 1);
  for (const item of items) length += item.bytes;
  const body = Buffer.allocUnsafeSlow(length);
  let at = BATCH_HEAD.copy(body, 0);
  for (let i = 0; i < items.length; i++) {
    if (i > 0) body[at++] = 0x2c; // ,
    at += body.write(items[i]!.json, at, 'utf8');
  }
  BATCH_TAIL.copy(body, at);
  return body;
}
