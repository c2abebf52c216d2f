// Device and session ids: 21 characters of nanoid's URL-safe alphabet from a crypto-random pool
// (126 bits), the same ids nanoid() makes. nanoid() builds its string one character at a time,
// which V8 keeps as a chain of ~10 rope nodes (~300 bytes) until something flattens it; with a
// million devices holding two ids each, that is most of their memory. Decoding the characters
// from a buffer gives one flat 40-byte string instead.
import { randomFillSync } from 'node:crypto';
import { urlAlphabet } from 'nanoid';

export const ID_LENGTH = 21;
const POOL_IDS = 512;
const pool = Buffer.allocUnsafe(ID_LENGTH * POOL_IDS);
let offset = pool.length;
const chars = Buffer.allocUnsafe(ID_LENGTH);
const alphabet = Buffer.from(urlAlphabet, 'latin1');

export function newId(): string {
  if (offset + ID_LENGTH > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  // 64 characters: masking a random byte with 63 picks each one with equal probability.
  for (let i = 0; i < ID_LENGTH; i++) chars[i] = alphabet[pool[offset + i]! & 63]!;
  offset += ID_LENGTH;
  return chars.toString('latin1', 0, ID_LENGTH);
}
