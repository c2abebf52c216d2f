// The remembered Idempotency-Keys (CONTRACT.md §10), compactly: a ring of fixed-size entries in
// typed arrays, oldest first, plus an open-addressing index from a key's hash to its entry.
//
// An entry is 32 bytes: the 96-bit hash of workspace, method, path and key (the scope), a 64-bit
// fingerprint of the request body, the second it was accepted, and the journal seq of its record
// (from which the first answer is rebuilt). The index costs 4 bytes per slot at a load of at
// most one half: about 40 bytes per remembered key in all, nothing per request without a key.
//
// Limits: at most `maxKeys` entries (the oldest are forgotten first) and `windowSeconds` of age
// (older entries are swept out each second). The ring and the index start small and double as
// keys arrive (a doubling rebuilds the index: about 20 ms per million keys, once per doubling).
//
// Entries are numbered in insertion order (which is journal order); entry n lives at position
// n % capacity. A snapshot (snapshot-writer.ts) writes the entries it found at its start in
// slices; an insert that would overwrite one it has not written yet, or a doubling that would
// move it, makes it write them first (copy-on-write, as for the other state).

/** Bytes of one entry: 6 × u32 (scope ×3, fingerprint ×2, second) + f64 seq. */
export const ENTRY_BYTES = 32;
/** Bytes a journal record carries: the scope hash (12) and the fingerprint (8). */
export const RECORD_BYTES = 20;
const INITIAL_CAPACITY = 1 << 12;

/** A request's identity in the table: scope hash words and fingerprint words. */
export interface KeyHash {
  readonly h0: number;
  readonly h1: number;
  readonly h2: number;
  readonly f0: number;
  readonly f1: number;
}

/** Reads the 20 bytes a journal record carries (scope, then fingerprint; little-endian words). */
export function keyHashOf(bytes: Uint8Array): KeyHash {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { h0: view.getUint32(0, true), h1: view.getUint32(4, true), h2: view.getUint32(8, true), f0: view.getUint32(12, true), f1: view.getUint32(16, true) };
}

/** A snapshot's view: it wants entries [frontier, end) and hears each slice it is given. */
interface SnapshotSink {
  frontier: number;
  readonly end: number;
  readonly capture: (entries: Uint8Array) => void;
}

export class KeyTable {
  readonly maxKeys: number;
  readonly windowSeconds: number;
  /** Keys that left the table (window or limit) while still the latest for their scope. */
  forgotten = 0;
  private capacity = 0;
  private h0 = new Uint32Array(0);
  private h1 = new Uint32Array(0);
  private h2 = new Uint32Array(0);
  private f0 = new Uint32Array(0);
  private f1 = new Uint32Array(0);
  private second = new Uint32Array(0);
  private seq = new Float64Array(0);
  /** position + 1 of the entry holding a scope; 0: empty. Size a power of two. */
  private index = new Uint32Array(0);
  private mask = 0;
  /** Entry numbers: the ring holds [tail, head). */
  private tail = 0;
  private head = 0;
  /** Scopes in the index (a scope written again replaces its entry there). */
  private live = 0;
  private snapshot: SnapshotSink | null = null;

  constructor(maxKeys: number, windowSeconds: number) {
    this.maxKeys = maxKeys;
    this.windowSeconds = windowSeconds;
    this.resize(Math.min(INITIAL_CAPACITY, Math.max(1, maxKeys)));
  }

  /** Keys held (one per scope). */
  get size(): number {
    return this.live;
  }

  /**
   * The journal seq of the oldest entry held, or null: retention keeps its record (a retried app
   * launch is answered from its record).
   */
  oldestSeq(): number | null {
    return this.head > this.tail ? this.seq[this.tail % this.capacity]! : null;
  }

  /**
   * The entry number of `key`'s scope, or -1 when unknown. An entry past the window at `nowSeconds`
   * is forgotten here (a forgotten key is a new key).
   */
  find(key: KeyHash, nowSeconds: number): number {
    const slot = this.slotOfScope(key);
    if (slot < 0) return -1;
    const position = this.index[slot]! - 1;
    if (this.second[position]! + this.windowSeconds < nowSeconds) {
      this.deleteSlot(slot);
      this.forgotten++;
      return -1;
    }
    return this.numberAt(position);
  }

  /** True when entry `n` was made by a request with this body fingerprint. */
  sameRequest(n: number, key: KeyHash): boolean {
    const p = n % this.capacity;
    return this.f0[p] === key.f0 && this.f1[p] === key.f1;
  }

  /** The journal seq of entry `n`. */
  seqOf(n: number): number {
    return this.seq[n % this.capacity]!;
  }

  /** Remembers `key` as answered by journal record `seq`, accepted at `atMs`. */
  remember(key: KeyHash, seq: number, atMs: number): void {
    this.insert(key.h0, key.h1, key.h2, key.f0, key.f1, Math.floor(atMs / 1000), seq);
  }

  /** Forgets entries older than the window, oldest first, at most `max`; returns how many went. */
  expire(nowSeconds: number, max: number): number {
    let n = 0;
    while (n < max && this.head > this.tail && this.second[this.tail % this.capacity]! + this.windowSeconds < nowSeconds) {
      this.evictOldest();
      n++;
    }
    return n;
  }

  /** Entries written by a snapshot come back: the newer entry of a scope wins. */
  restore(packed: Uint8Array, nowSeconds: number): void {
    // Typed-array views need aligned offsets; a decoded value may sit anywhere in its buffer.
    const entries = packed.byteOffset % 8 === 0 ? packed : new Uint8Array(packed);
    const words = new Uint32Array(entries.buffer, entries.byteOffset, entries.byteLength / 4);
    const seqs = new Float64Array(entries.buffer, entries.byteOffset, entries.byteLength / 8);
    for (let i = 0; i < entries.byteLength / ENTRY_BYTES; i++) {
      const w = i * 8;
      const second = words[w + 5]!;
      if (second + this.windowSeconds < nowSeconds) continue;
      this.insert(words[w]!, words[w + 1]!, words[w + 2]!, words[w + 3]!, words[w + 4]!, second, seqs[i * 4 + 3]!);
    }
  }

  /** Every key held (the latest entry of each scope), in index order. */
  *held(): Generator<{ h0: number; h1: number; h2: number; f0: number; f1: number; second: number; seq: number }> {
    for (const at of this.index) {
      if (at === 0) continue;
      const p = at - 1;
      yield { h0: this.h0[p]!, h1: this.h1[p]!, h2: this.h2[p]!, f0: this.f0[p]!, f1: this.f1[p]!, second: this.second[p]!, seq: this.seq[p]! };
    }
  }

  // ---- snapshots

  /** A snapshot starts: it will write the entries held now, through `capture`, in slices. */
  beginSnapshot(capture: (entries: Uint8Array) => void): void {
    this.snapshot = { frontier: this.tail, end: this.head, capture };
  }

  /** Writes the snapshot's next slice of at most `max` entries; false when it has them all. */
  snapshotSlice(max: number): boolean {
    const s = this.snapshot;
    if (s === null || s.frontier >= s.end) return false;
    this.captureUpTo(Math.min(s.end, s.frontier + max));
    return s.frontier < s.end;
  }

  endSnapshot(): void {
    this.snapshot = null;
  }

  /** Packs entries [frontier, to) for the snapshot and moves its frontier. */
  private captureUpTo(to: number): void {
    const s = this.snapshot!;
    if (to <= s.frontier) return;
    const out = new Uint8Array((to - s.frontier) * ENTRY_BYTES);
    const words = new Uint32Array(out.buffer);
    const seqs = new Float64Array(out.buffer);
    for (let n = s.frontier, i = 0; n < to; n++, i++) {
      const p = n % this.capacity;
      const w = i * 8;
      words[w] = this.h0[p]!;
      words[w + 1] = this.h1[p]!;
      words[w + 2] = this.h2[p]!;
      words[w + 3] = this.f0[p]!;
      words[w + 4] = this.f1[p]!;
      words[w + 5] = this.second[p]!;
      seqs[i * 4 + 3] = this.seq[p]!;
    }
    s.frontier = to;
    s.capture(out);
  }

  // ---- the ring and the index

  private insert(h0: number, h1: number, h2: number, f0: number, f1: number, second: number, seq: number): void {
    if (this.maxKeys === 0) return;
    if (this.head - this.tail >= this.maxKeys) this.evictOldest();
    if (this.head - this.tail >= this.capacity) this.resize(Math.min(this.capacity * 2, this.maxKeys));
    const n = this.head++;
    const p = n % this.capacity;
    // Entry n - capacity lived here: a running snapshot that still needs it writes it first.
    const s = this.snapshot;
    if (s !== null && n - this.capacity >= s.frontier && n - this.capacity < s.end) this.captureUpTo(n - this.capacity + 1);
    this.h0[p] = h0;
    this.h1[p] = h1;
    this.h2[p] = h2;
    this.f0[p] = f0;
    this.f1[p] = f1;
    this.second[p] = second;
    this.seq[p] = seq;
    let slot = h0 & this.mask;
    for (;;) {
      const at = this.index[slot]!;
      if (at === 0) {
        this.index[slot] = p + 1;
        this.live++;
        return;
      }
      const q = at - 1;
      if (this.h0[q] === h0 && this.h1[q] === h1 && this.h2[q] === h2) {
        this.index[slot] = p + 1; // the scope's newer entry; the older one stays in the ring, unindexed
        return;
      }
      slot = (slot + 1) & this.mask;
    }
  }

  private evictOldest(): void {
    const p = this.tail % this.capacity;
    const slot = this.slotOfPosition(p);
    if (slot >= 0) {
      this.deleteSlot(slot);
      this.forgotten++;
    }
    this.tail++;
  }

  /** The entry number of the entry at position `p` (between tail and head). */
  private numberAt(p: number): number {
    const base = this.tail - (this.tail % this.capacity);
    const n = base + p;
    return n < this.tail ? n + this.capacity : n;
  }

  private slotOfScope(key: KeyHash): number {
    let slot = key.h0 & this.mask;
    for (;;) {
      const at = this.index[slot]!;
      if (at === 0) return -1;
      const q = at - 1;
      if (this.h0[q] === key.h0 && this.h1[q] === key.h1 && this.h2[q] === key.h2) return slot;
      slot = (slot + 1) & this.mask;
    }
  }

  private slotOfPosition(p: number): number {
    let slot = this.h0[p]! & this.mask;
    for (;;) {
      const at = this.index[slot]!;
      if (at === 0) return -1;
      if (at === p + 1) return slot;
      slot = (slot + 1) & this.mask;
    }
  }

  /** Linear probing's backward-shift deletion: no tombstones, probes stay short. */
  private deleteSlot(slot: number): void {
    let hole = slot;
    let j = slot;
    for (;;) {
      j = (j + 1) & this.mask;
      const at = this.index[j]!;
      if (at === 0) break;
      const home = this.h0[at - 1]! & this.mask;
      // The entry at j may move into the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (!stays) {
        this.index[hole] = at;
        hole = j;
      }
    }
    this.index[hole] = 0;
    this.live--;
  }

  /** A new ring of `capacity` entries (same entry numbers) and an index at most half full. */
  private resize(capacity: number): void {
    const s = this.snapshot;
    // Entries a running snapshot still needs but the ring no longer holds live would not move.
    if (s !== null && s.frontier < Math.min(this.tail, s.end)) this.captureUpTo(Math.min(this.tail, s.end));
    const old = { h0: this.h0, h1: this.h1, h2: this.h2, f0: this.f0, f1: this.f1, second: this.second, seq: this.seq, index: this.index, capacity: this.capacity };
    this.capacity = capacity;
    this.h0 = new Uint32Array(capacity);
    this.h1 = new Uint32Array(capacity);
    this.h2 = new Uint32Array(capacity);
    this.f0 = new Uint32Array(capacity);
    this.f1 = new Uint32Array(capacity);
    this.second = new Uint32Array(capacity);
    this.seq = new Float64Array(capacity);
    let slots = 1;
    while (slots < capacity * 2) slots *= 2;
    this.index = new Uint32Array(slots);
    this.mask = slots - 1;
    if (old.capacity === 0) return;
    // Move every entry still indexed (zombies, replaced by a newer entry of their scope, go).
    const indexed = new Uint8Array(old.capacity);
    for (const at of old.index) if (at !== 0) indexed[at - 1] = 1;
    this.live = 0;
    for (let n = this.tail; n < this.head; n++) {
      const from = n % old.capacity;
      const to = n % capacity;
      this.h0[to] = old.h0[from]!;
      this.h1[to] = old.h1[from]!;
      this.h2[to] = old.h2[from]!;
      this.f0[to] = old.f0[from]!;
      this.f1[to] = old.f1[from]!;
      this.second[to] = old.second[from]!;
      this.seq[to] = old.seq[from]!;
      if (indexed[from] === 1) {
        let slot = this.h0[to]! & this.mask;
        while (this.index[slot] !== 0) slot = (slot + 1) & this.mask;
        this.index[slot] = to + 1;
        this.live++;
      }
    }
  }
}
