// The Idempotency-Key header (CONTRACT.md §10): what a valid key is, and the two hashes a keyed
// request is known by. The scope hash covers workspace, method, path (with the decoded :id) and
// key, so a key means something only for that one endpoint of that one workspace; the
// fingerprint covers the decoded (inflated) body, so a retry with the same key and another body
// is told apart. SHA-256, cut to 96 and 64 bits: two scopes share a hash with a probability of
// about n² / 2^97 (2e-16 for five million keys). SHA-256 rather than a faster hash: a client
// of one workspace must not be able to make up a key whose scope hash is another workspace's.
import { hash } from 'node:crypto';
import { RECORD_BYTES, type KeyHash } from './key-table.ts';

const MAX_KEY_LENGTH = 255;

/** 1 to 255 printable ASCII characters (0x21 to 0x7E). */
export function validIdempotencyKey(key: string): boolean {
  if (key.length === 0 || key.length > MAX_KEY_LENGTH) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

const EMPTY_BODY = new Uint8Array(0);

/** The fingerprint of a decoded body: the first 8 bytes of its SHA-256 (a Buffer of 32). */
export function bodyFingerprint(body: Uint8Array = EMPTY_BODY): Buffer {
  return hash('sha256', body, 'buffer');
}

/** A keyed request: its key, its scope hash (at once) and its body fingerprint (once the body is in). */
export class IdempotencyClaim implements KeyHash {
  readonly key: string;
  readonly h0: number;
  readonly h1: number;
  readonly h2: number;
  f0 = 0;
  f1 = 0;

  constructor(workspace: string, method: string, path: string, key: string) {
    this.key = key;
    // The key is last and holds no newline, so the joined text parses back one way only.
    const scope = hash('sha256', `${workspace}\n${method}\n${path}\n${key}`, 'buffer');
    this.h0 = scope.readUInt32LE(0);
    this.h1 = scope.readUInt32LE(4);
    this.h2 = scope.readUInt32LE(8);
  }

  /** Sets the fingerprint from bodyFingerprint() (computed here, or in a worker: then a Uint8Array). */
  fingerprint(bytes: Uint8Array): void {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.f0 = buffer.readUInt32LE(0);
    this.f1 = buffer.readUInt32LE(4);
  }

  /** The 20 bytes the write's journal record carries: scope, then fingerprint. */
  recordBytes(): Buffer {
    // allocUnsafe: from Node's pool (no zeroing); every byte is written below.
    const out = Buffer.allocUnsafe(RECORD_BYTES);
    out.writeUInt32LE(this.h0, 0);
    out.writeUInt32LE(this.h1, 4);
    out.writeUInt32LE(this.h2, 8);
    out.writeUInt32LE(this.f0, 12);
    out.writeUInt32LE(this.f1, 16);
    return out;
  }
}
