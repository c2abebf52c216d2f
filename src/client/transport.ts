// One HTTP attempt with Node's own fetch (undici, keep-alive): gzip above a threshold, a
// timeout, the answer read to the end. It never retries; retry.ts decides that.
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';

const gzip = promisify(gzipCallback);

/** A request body ready to send: the bytes on the wire, and whether they are gzip'd. Made once per body, reused by every retry. */
export interface PreparedBody {
  bytes: Uint8Array;
  gzipped: boolean;
  /** Size before gzip. */
  jsonBytes: number;
}

/** `json`: the body's text, or its UTF-8 bytes. */
export async function prepareBody(json: string | Buffer, gzipThresholdBytes: number): Promise<PreparedBody> {
  const raw = typeof json === 'string' ? Buffer.from(json, 'utf8') : json;
  if (raw.length < gzipThresholdBytes) return { bytes: raw, gzipped: false, jsonBytes: raw.length };
  // Level 1: batches of JSON shrink ~5-10x at a fraction of level 6's CPU. An output chunk of
  // half the input takes the whole output in one pass of the thread pool: with zlib's 16 KiB
  // default a batch took about five, each waiting for a turn of this (busy) thread, and the
  // next batch left some 20 ms after a slot freed (measured).
  const out = await gzip(raw, { level: 1, chunkSize: Math.max(16 * 1024, Math.ceil(raw.length / 2)) });
  // The output may be a view of that whole chunk: copied out, the body held (for retries) is its
  // gzip'd size, not half its JSON's.
  const bytes = out.byteLength * 2 < out.buffer.byteLength ? Buffer.from(out) : out;
  return { bytes, gzipped: true, jsonBytes: raw.length };
}

export type Attempt =
  | { kind: 'answer'; status: number; headers: Headers; body: unknown; text: string }
  | { kind: 'network'; error: unknown }
  /** The answer's body was longer than maxAnswerBytes: cut off unread. */
  | { kind: 'too-large'; status: number };

export interface AttemptRequest {
  url: string;
  method: 'POST' | 'DELETE';
  serviceKey: string;
  body: PreparedBody | null;
  idempotencyKey: string | null;
  timeoutMs: number;
  /** The answer's body is read up to this many bytes. */
  maxAnswerBytes: number;
}

export async function attempt(request: AttemptRequest): Promise<Attempt> {
  const headers: Record<string, string> = { 'x-service-key': request.serviceKey };
  if (request.idempotencyKey !== null) headers['idempotency-key'] = request.idempotencyKey;
  if (request.body !== null) {
    headers['content-type'] = 'application/json';
    if (request.body.gzipped) headers['content-encoding'] = 'gzip';
  }
  try {
    const res = await fetch(request.url, {
      method: request.method,
      headers,
      // undici takes any Uint8Array; the DOM-derived BodyInit type does not say so.
      body: (request.body?.bytes ?? null) as BodyInit | null,
      // A whole number of ms (AbortSignal.timeout throws for a fraction, and the deadline is performance.now()-based).
      signal: AbortSignal.timeout(Math.max(1, Math.floor(request.timeoutMs))),
      // A redirect is answered, not followed: fetch sent the x-service-key header along to
      // wherever a 302 pointed (another origin included), and a 307's body, already sent once,
      // failed in undici and was retried as a network error (a review).
      redirect: 'manual',
    });
    // Reading the body is part of the attempt: a connection dropped mid-answer is a network error.
    const text = await readText(res, request.maxAnswerBytes);
    if (text === null) return { kind: 'too-large', status: res.status };
    let body: unknown = null;
    try {
      body = text === '' ? null : JSON.parse(text);
    } catch {
      body = null;
    }
    return { kind: 'answer', status: res.status, headers: res.headers, body, text };
  } catch (error) {
    return { kind: 'network', error };
  }
}

/** The body's text, or null once it is longer than `maxBytes` (the rest is not read: the stream is cancelled). */
async function readText(res: Response, maxBytes: number): Promise<string | null> {
  if (res.body === null) return '';
  if (Number(res.headers.get('content-length') ?? NaN) > maxBytes) {
    await res.body.cancel();
    return null;
  }
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > maxBytes) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, bytes).toString('utf8');
}
