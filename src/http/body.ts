// Request body rules of CONTRACT.md §2: accepted content types and encodings, gzip inflation
// under the same size limit, and JSON that must be an object.
import { gunzipSync } from 'node:zlib';
import type { Settings } from '../config/settings.ts';

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

/** Parses a body that must be a JSON object. */
export function parseJsonObject(raw: Buffer): DecodeResult {
  if (raw.length === 0) return { ok: false, error: 'malformed', message: 'request body is empty' };
  let parsed: unknown;
  const text = raw.toString('utf8');
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, error: 'malformed', message: 'request body is not valid JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, error: 'malformed', message: 'request body must be a JSON object' };
  }
  return { ok: true, body: parsed as Record<string, unknown>, text };
}
