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
