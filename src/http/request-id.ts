// x-request-id (CONTRACT.md §9): every response carries one, the client's own when it sent a
// usable one (1 to 128 printable ASCII characters), else a fresh one. Fresh ids are a random
// prefix chosen at start and a counter: unique across restarts, and no randomness per request.
import { randomBytes } from 'node:crypto';

const MAX_LENGTH = 128;
const PREFIX = `${randomBytes(6).toString('base64url')}-`;
let counter = 0;

/** 1 to 128 characters from space to tilde (uWS has already trimmed spaces at either end). */
function usable(id: string): boolean {
  if (id.length === 0 || id.length > MAX_LENGTH) return false;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

/** The request's id: `sent` (its x-request-id header, '' when absent) if usable, else a new one. */
export function requestIdFor(sent: string): string {
  return sent !== '' && usable(sent) ? sent : PREFIX + (++counter).toString(36);
}
