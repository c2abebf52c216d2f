// The Idempotency-Key header (CONTRACT.md §10): what a valid key is, and the two hashes a keyed
// request is known by. The scope hash covers workspace, method, path (with the decoded :id) and
// key, so a key means something only for that one endpoint of that one workspace: SHA-256 cut to
// 96 bits (two scopes share a hash with a probability of about n² / 2^97, 2e-16 for five million
// keys), a cryptographic hash because a client of one workspace must not be able to make up a
// key whose scope hash is another workspace's. The fingerprint covers the decoded (inflated)
// body, so that a retry with the same key and another body is told apart: 64 bits of a fast
// non-cryptographic hash (two 32-bit lanes), since a made-up collision only fools the client's
// own key (a retry with another body replayed instead of refused).
import { hash } from 'node:crypto';
import { printableAscii } from '../http/printable.ts';
import { RECORD_BYTES, type KeyHash } from './key-table.ts';

export { validIdempotencyKey } from '../http/printable.ts';

const EMPTY_BODY = new Uint8Array(0);

/** A body's fingerprint: two 32-bit words. */
export type Fingerprint = readonly [number, number];

/** Murmur3's finalizer: every input bit reaches every output bit. */
function mix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** JSON's whitespace bytes: space, tab, line feed, carriage return. */
function isJsonSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/**
 * The body without the JSON whitespace between tokens (whitespace inside strings is kept). A
 * string's end is its first `"` not escaped by a `\`.
 */
function withoutJsonSpace(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length);
  let n = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const byte = body[i]!;
    if (inString) {
      out[n++] = byte;
      if (byte === 0x5c && i + 1 < body.length) out[n++] = body[++i]!;
      else if (byte === 0x22) inString = false;
    } else if (!isJsonSpace(byte)) {
      out[n++] = byte;
      if (byte === 0x22) inString = true;
    }
  }
  return out.subarray(0, n);
}

/**
 * The hash of a body that has no JSON whitespace between tokens, in one pass; null as soon as it
 * meets some (the caller hashes the body without it then). Most bodies are compact: they are
 * read once, not scanned and then hashed.
 */
function compactHash(body: Uint8Array): Fingerprint | null {
  let a = 0x811c9dc5;
  let b = 0x9747b28c ^ body.length;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < body.length; i++) {
    const byte = body[i]!;
    if (inString) {
      if (escaped) escaped = false;
      else if (byte === 0x5c) escaped = true;
      else if (byte === 0x22) inString = false;
    } else if (byte === 0x22) inString = true;
    else if (isJsonSpace(byte)) return null;
    a = Math.imul(a ^ byte, 0x01000193);
    b = Math.imul(b ^ byte, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return [mix(a), mix(b ^ a)];
}

/**
 * The fingerprint of a decoded body: FNV-1a and a second multiply-xor lane with another prime,
 * each finalized. In JS: one native SHA-256 call per request cost more than the loop over a
 * typical body (a few hundred bytes).
 *
 * Over the body's bytes without the JSON whitespace between tokens, so that the same document
 * sent pretty-printed and compact (a batch item and the request alone, CONTRACT.md §13) is one
 * request. A compact body is hashed as it is: its fingerprint is what it was before this rule
 * (keys remembered before an upgrade still match). Key order and escapes still count: `{"a":1,
 * "b":2}` and `{"b":2,"a":1}` are two requests.
 */
export function bodyFingerprint(decoded: Uint8Array = EMPTY_BODY): Fingerprint {
  // Compacted, the body has no whitespace left: compactHash reads it through.
  return compactHash(decoded) ?? compactHash(withoutJsonSpace(decoded))!;
}

/**
 * bodyFingerprint() of bytes[start, end) when the caller knows they hold no JSON whitespace
 * between tokens (batch-slices.ts finds that out while it scans a batch): the same two words, by
 * compactHash's arithmetic without its string tracking, written to out[at] and out[at + 1] (no
 * view or pair allocated per item). It was a tenth of a batch item's CPU.
 */
export function compactFingerprintInto(bytes: Uint8Array, start: number, end: number, out: Uint32Array, at: number): void {
  let a = 0x811c9dc5;
  let b = 0x9747b28c ^ (end - start);
  for (let i = start; i < end; i++) {
    const byte = bytes[i]!;
    a = Math.imul(a ^ byte, 0x01000193);
    b = Math.imul(b ^ byte, 0x5bd1e995);
    b ^= b >>> 15;
  }
  out[at] = mix(a);
  out[at + 1] = mix(b ^ a);
}

/**
 * The fingerprint of a whole POST /batch body, for its batch-level key. Only the batch answers
 * kept in memory compare it (batch-answers.ts: never journaled, gone after a restart or a leader
 * change, and the leader computes it itself for a forwarded batch), so it need not be
 * bodyFingerprint()'s words, only follow its rule (whitespace between tokens does not count): a
 * native SHA-256 of the body without that whitespace, cut to 64 bits. bodyFingerprint()'s loop
 * over a 1,000-item batch was 6% of the batch's CPU in a profile. `compact`: the scan of the batch
 * (batch-slices.ts) found no whitespace between tokens; null when it could not tell.
 */
export function batchBodyFingerprint(decoded: Uint8Array, compact: boolean | null): Fingerprint {
  const digest = hash('sha256', compact === true ? decoded : withoutJsonSpace(decoded), 'binary');
  return [word(digest, 0), word(digest, 4)];
}

/**
 * The digest comes as a latin1 ("binary") string, one character per byte: a Buffer per digest is
 * a native allocation the GC has to track, and cost three times as much (measured).
 */
function word(digest: string, at: number): number {
  return (digest.charCodeAt(at) | (digest.charCodeAt(at + 1) << 8) | (digest.charCodeAt(at + 2) << 16) | (digest.charCodeAt(at + 3) << 24)) >>> 0;
}


/** A keyed request: its key, its scope hash (at once) and its body fingerprint (once the body is in). */
export class IdempotencyClaim implements KeyHash {
  readonly key: string;
  readonly h0: number;
  readonly h1: number;
  readonly h2: number;
  f0 = 0;
  f1 = 0;

  /** `scope`: the scope hash an edge computed already (fromParts); otherwise it is computed here. */
  constructor(workspace: string, method: string, path: string, key: string, scope?: readonly [number, number, number]) {
    this.key = key;
    if (scope !== undefined) {
      this.h0 = scope[0];
      this.h1 = scope[1];
      this.h2 = scope[2];
      return;
    }
    // The key is last and holds no newline, so the joined text parses back one way only.
    const digest = hash('sha256', `${workspace}\n${method}\n${path}\n${key}`, 'binary');
    this.h0 = word(digest, 0);
    this.h1 = word(digest, 4);
    this.h2 = word(digest, 8);
  }

  /** A claim an edge computed: its scope hash and fingerprint came with the command. */
  static fromParts(key: string, scope: readonly [number, number, number], fingerprint: Fingerprint): IdempotencyClaim {
    const claim = new IdempotencyClaim('', '', '', key, scope);
    claim.fingerprint(fingerprint);
    return claim;
  }

  /** Sets the fingerprint from bodyFingerprint() (computed here, or in a worker). */
  fingerprint([f0, f1]: Fingerprint): void {
    this.f0 = f0;
    this.f1 = f1;
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
