// x-request-id (CONTRACT.md §9): every response carries one, the client's own when it sent a
// usable one (1 to 128 printable ASCII characters), else a fresh one. Fresh ids are a random
// prefix chosen at start and a counter: unique across restarts, and no randomness per request.
import { randomBytes } from 'node:crypto';
import { printableAscii } from './printable.ts';

const MAX_LENGTH = 128;
const PREFIX = `${randomBytes(6).toString('base64url')}-`;
let counter = 0;

/**
 * The request's id: `sent` (its x-request-id header, '' when absent) if it is 1 to 128
 * characters from space to tilde (uWS has already trimmed spaces at either end), else a new one.
 */
export function requestIdFor(sent: string): string {
  return sent !== '' && printableAscii(sent, MAX_LENGTH, 0x20) ? sent : PREFIX + (++counter).toString(36);
}
