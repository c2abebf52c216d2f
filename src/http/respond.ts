// Every response goes out through `send`, inside res.cork(), so status line, headers and body
// leave in one write. Every response carries x-request-id (CONTRACT.md §9) and at most one more
// header (allow, retry-after, idempotent-replayed). The corked writer reads module-level slots
// instead of a fresh closure per response (cork runs its callback synchronously, so the slots
// cannot be overwritten meanwhile).
import type { HttpResponse } from 'uWebSockets.js';
import { SUCCESS_BODY } from '../actors/acceptor.ts';
import { ERRORS, errorBody, type ErrorSpec } from './errors.ts';
import { H_CONTENT_TYPE, H_REQUEST_ID, nativeBytes } from './native-strings.ts';

const JSON_TYPE = 'application/json';
// The constant parts of most answers, as bytes (native-strings.ts).
const JSON_TYPE_BYTES = nativeBytes(JSON_TYPE);
const SUCCESS_BYTES = nativeBytes(SUCCESS_BODY);

let slotRes: HttpResponse | null = null;
let slotStatus = '';
let slotType = JSON_TYPE;
let slotBody = '';
let slotClose = false;
let slotRequestId = '';
let slotHeader: string | null = null;
let slotHeaderValue = '';

function writeCorked(): void {
  const res = slotRes!;
  // uWS writes "200 OK" itself when no status was written: one native call less per success.
  if (slotStatus !== OK) res.writeStatus(slotStatus);
  res.writeHeader(H_CONTENT_TYPE, slotType === JSON_TYPE ? JSON_TYPE_BYTES : slotType);
  res.writeHeader(H_REQUEST_ID, slotRequestId);
  if (slotHeader !== null) res.writeHeader(slotHeader, slotHeaderValue);
  if (slotClose) res.end(slotBody === SUCCESS_BODY ? SUCCESS_BYTES : slotBody, true);
  else if (slotBody === SUCCESS_BODY) endAsDrained(res, SUCCESS_BYTES, SUCCESS_BYTES.byteLength);
  else endAsDrained(res, slotBody, slotBody.length < PLAIN_BYTES_UP_TO ? byteLengthOf(slotBody) : Buffer.byteLength(slotBody));
}

/**
 * Every answer is sent with tryEnd: what the socket does not take goes as it drains. end()
 * copied it into uWS's own buffer, without limit: one connection that pipelined 20,000
 * `GET /openapi.json` (680 KB of requests, no key needed, 67 KB an answer) and read nothing made
 * the server hold 1.3 GB of answers for it (found by a review, 2026-11-29), and 2,000,000
 * pipelined `GET /healthz` (34 bytes each, a 170-byte answer) 290 MB (a review, 2026-11-30: until
 * then answers under 16 Ki characters still went through end()). A request pipelined behind an
 * answer still being sent closes the connection (uWS), cutting that answer off: pipelining
 * clients read as they go.
 */

/** Bodies shorter than this are measured by a loop (ASCII is one byte a character). */
const PLAIN_BYTES_UP_TO = 256;

/** UTF-8 length of a short string: Buffer.byteLength's native call costs more for these. */
function byteLengthOf(s: string): number {
  const n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    return Buffer.byteLength(s);
  }
  return n;
}

/**
 * Ends `res` with `body`, the part the socket cannot take now sent as it drains. The response
 * stays pending until then, and uWS closes a connection that sends another request while one
 * is pending: a client that pipelines without reading is cut off, not buffered for.
 */
function endAsDrained(res: HttpResponse, body: string | ArrayBuffer, byteLength: number): void {
  const startOffset = res.getWriteOffset();
  const [ok, done] = res.tryEnd(body, byteLength);
  if (ok || done) return;
  // The rest goes as bytes: the offsets uWS gives count bytes.
  const bytes = typeof body === 'string' ? Buffer.from(body) : Buffer.from(body as ArrayBuffer);
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  res.onWritable((offset) => {
    if (aborted) return true;
    const [written, finished] = res.tryEnd(bytes.subarray(offset - startOffset), byteLength);
    return written || finished;
  });
}

export interface SendOptions {
  close?: boolean;
  contentType?: string;
  header?: readonly [string, string];
}

/**
 * Answers `res`. A big body that the socket cannot take at once registers its own onAborted
 * (endAsDrained): uWS keeps one handler per response, so a caller's is replaced; callers finish
 * their own bookkeeping before they send.
 */
export function send(res: HttpResponse, requestId: string, statusLine: string, body: string, options?: SendOptions): void {
  slotRes = res;
  slotStatus = statusLine;
  slotBody = body;
  slotRequestId = requestId;
  slotClose = options?.close ?? false;
  slotType = options?.contentType ?? JSON_TYPE;
  slotHeader = options?.header?.[0] ?? null;
  slotHeaderValue = options?.header?.[1] ?? '';
  try {
    res.cork(writeCorked);
  } finally {
    slotRes = null;
  }
}

export function sendError(res: HttpResponse, requestId: string, error: ErrorSpec, message?: string, options?: SendOptions): void {
  send(res, requestId, error.statusLine, errorBody(error, message), options);
}

export const OK = '200 OK';
export const UNPROCESSABLE = '422 Unprocessable Entity';

const STATUS_LINES = new Map<number, string>([[200, OK], [422, UNPROCESSABLE], ...Object.values(ERRORS).map((e): [number, string] => [e.status, e.statusLine])]);

/** The status line of an answer that came from the state as a code (an edge thread, a follower). */
export function statusLine(code: number): string {
  return STATUS_LINES.get(code) ?? `${code} Status`;
}
