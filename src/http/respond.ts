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
  res.end(slotBody === SUCCESS_BODY ? SUCCESS_BYTES : slotBody, slotClose);
}

export interface SendOptions {
  close?: boolean;
  contentType?: string;
  header?: readonly [string, string];
}

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
