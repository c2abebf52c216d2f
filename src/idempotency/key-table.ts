// The remembered Idempotency-Keys (CONTRACT.md §10), compactly: a ring of fixed-size entries in
// typed arrays, oldest first, plus an open-addressing index from a key's hash to its entry.
//
// An entry is 32 bytes: the 96-bit hash of workspace, method, path and key (the scope), a 64-bit
// fingerprint of the request body, the second it was accepted, and the journal seq of its record
// (from which the first answer is rebuilt). The index costs 4 bytes per slot at a load of at
// most one half: about 40 bytes per remembered key in all, nothing per request without a key.
//
// Limits: at most `maxKeys` entries (the oldest are forgotten first) and `windowSeconds` of age
// (older entries are swept out each second). The ring is allocated once, at `maxKeys` entries:
// the kernel backs its pages only as they are written (160 MB of address space at the default
// 5,000,000 keys, 0.3 MB of memory until used), so it never moves. The index is 256 segments
// that each double when half full: a doubling rehashes a 256th of the keys (a doubling of one
// index of millions of keys held the event loop for up to half a second).
//
// Entries are numbered in insertion order (which is journal order); entry n lives at position
// n % maxKeys. A snapshot (snapshot-writer.ts) writes the entries it found at its start in
// slices; an insert that would overwrite one it has not written yet makes it write a slice
// first (copy-on-write, as for the other state).

/** Bytes of one entry: 6 × u32 (scope ×3, fingerprint ×2, second) + f64 seq. */
export const ENTRY_BYTES = 32;
/** Bytes a journal record carries: the scope hash (12) and the fingerprint (8). */
export const RECORD_BYTES = 20;
/** Index segments (by the scope hash's second word); each grows on its own. */
const SEGMENTS = 256;
const SEGMENT_INITIAL_SLOTS = 16;

/** A key's scope: the hash of workspace, method, path and key, as three words. */
export interface Scope {
  readonly h0: number;
  readonly h1: number;
  readonly h2: number;
}

/** A request's identity in the table: its scope and its body's fingerprint words. */
export interface KeyHash extends Scope {
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
  readonly sliceEntries: number;
  readonly capture: (entries: Uint8Array) => void;
}

/** One segment of the index: slots hold position + 1 of an entry, 0 when empty. */
interface Segment {
  slots: Uint32Array;
  mask: number;
  live: number;
}

export class KeyTable {
  readonly maxKeys: number;
  readonly windowSeconds: number;
  /** Keys that left the table (window or limit) while still the latest for their scope. */
  forgotten = 0;
  private readonly h0: Uint32Array;
  private readonly h1: Uint32Array;
  private readonly h2: Uint32Array;
  private readonly f0: Uint32Array;
  private readonly f1: Uint32Array;
  private readonly second: Uint32Array;
  private readonly seq: Float64Array;
  private readonly segments: Segment[] = [];
  /** Entry numbers: the ring holds [tail, head). */
  private tail = 0;
  private head = 0;
  /** Scopes in the index (a scope written again replaces its entry there). */
  private live = 0;
  private snapshot: SnapshotSink | null = null;

  constructor(maxKeys: number, windowSeconds: number) {
    this.maxKeys = maxKeys;
    this.windowSeconds = windowSeconds;
    this.h0 = new Uint32Array(maxKeys);
    this.h1 = new Uint32Array(maxKeys);
    this.h2 = new Uint32Array(maxKeys);
    this.f0 = new Uint32Array(maxKeys);
    this.f1 = new Uint32Array(maxKeys);
    this.second = new Uint32Array(maxKeys);
    this.seq = new Float64Array(maxKeys);
    for (let i = 0; i < SEGMENTS; i++) this.segments.push({ slots: new Uint32Array(SEGMENT_INITIAL_SLOTS), mask: SEGMENT_INITIAL_SLOTS - 1, live: 0 });
  }

  /**
   * Forgets every key (the counts since start stay). Cluster mode: a leader that steps down
   * rebuilds its state, keys included, from its own journal (cluster-node.ts).
   */
  clear(): void {
    for (const segment of this.segments) {
      segment.slots = new Uint32Array(SEGMENT_INITIAL_SLOTS);
      segment.mask = SEGMENT_INITIAL_SLOTS - 1;
      segment.live = 0;
    }
    this.tail = 0;
    this.head = 0;
    this.live = 0;
    this.snapshot = null;
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
    return this.head > this.tail ? this.seq[this.tail % this.maxKeys]! : null;
  }

  /**
   * The entry number of `key`'s scope, or -1 when unknown. An entry past the window at `nowSeconds`
   * is forgotten here (a forgotten key is a new key).
   */
  find(key: Scope, nowSeconds: number): number {
    const segment = this.segments[key.h1 & (SEGMENTS - 1)]!;
    const slot = this.slotOfScope(segment, key);
    if (slot < 0) return -1;
    const position = segment.slots[slot]! - 1;
    if (this.second[position]! + this.windowSeconds < nowSeconds) {
      this.deleteSlot(segment, slot);
      this.forgotten++;
      return -1;
    }
    return this.numberAt(position);
  }

  /** True when entry `n` was made by a request with this body fingerprint. */
  sameRequest(n: number, key: KeyHash): boolean {
    const p = n % this.maxKeys;
    return this.f0[p] === key.f0 && this.f1[p] === key.f1;
  }

  /** The journal seq of entry `n`. */
  seqOf(n: number): number {
    return this.seq[n % this.maxKeys]!;
  }

  /** Remembers `key` as answered by journal record `seq`, accepted at `atMs`. */
  remember(key: KeyHash, seq: number, atMs: number): void {
    this.insert(key.h0, key.h1, key.h2, key.f0, key.f1, Math.floor(atMs / 1000), seq);
  }

  /** Forgets entries older than the window, oldest first, at most `max`; returns how many went. */
  expire(nowSeconds: number, max: number): number {
    let n = 0;
    while (n < max && this.head > this.tail && this.second[this.tail % this.maxKeys]! + this.windowSeconds < nowSeconds) {
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
    for (const segment of this.segments) {
      for (const at of segment.slots) {
        if (at === 0) continue;
        const p = at - 1;
        yield { h0: this.h0[p]!, h1: this.h1[p]!, h2: this.h2[p]!, f0: this.f0[p]!, f1: this.f1[p]!, second: this.second[p]!, seq: this.seq[p]! };
      }
    }
  }

  // ---- snapshots

  /**
   * A snapshot starts: it will write the entries held now, through `capture`, in slices of at
   * most `sliceEntries` (also when an insert makes it write early).
   */
  beginSnapshot(capture: (entries: Uint8Array) => void, sliceEntries: number): void {
    this.snapshot = { frontier: this.tail, end: this.head, sliceEntries, capture };
  }

  /** Writes the snapshot's next slice; false once it has them all. */
  snapshotSlice(): boolean {
    const s = this.snapshot;
    if (s === null || s.frontier >= s.end) return false;
    this.captureUpTo(Math.min(s.end, s.frontier + s.sliceEntries));
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
      const p = n % this.maxKeys;
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
    const n = this.head++;
    const p = n % this.maxKeys;
    // Entry n - maxKeys lived here: a running snapshot that still needs it writes a slice from
    // its frontier first (a whole slice, not one entry: a chunk per insert would be wasteful).
    const s = this.snapshot;
    const old = n - this.maxKeys;
    if (s !== null && old >= s.frontier && old < s.end) this.captureUpTo(Math.min(s.end, Math.max(old + 1, s.frontier + s.sliceEntries)));
    this.h0[p] = h0;
    this.h1[p] = h1;
    this.h2[p] = h2;
    this.f0[p] = f0;
    this.f1[p] = f1;
    this.second[p] = second;
    this.seq[p] = seq;
    const segment = this.segments[h1 & (SEGMENTS - 1)]!;
    let slot = h0 & segment.mask;
    for (;;) {
      const at = segment.slots[slot]!;
      if (at === 0) {
        segment.slots[slot] = p + 1;
        segment.live++;
        this.live++;
        if (segment.live * 2 > segment.slots.length) this.grow(segment);
        return;
      }
      const q = at - 1;
      if (this.h0[q] === h0 && this.h1[q] === h1 && this.h2[q] === h2) {
        segment.slots[slot] = p + 1; // the scope's newer entry; the older one stays in the ring, unindexed
        return;
      }
      slot = (slot + 1) & segment.mask;
    }
  }

  private evictOldest(): void {
    const p = this.tail % this.maxKeys;
    const segment = this.segments[this.h1[p]! & (SEGMENTS - 1)]!;
    const slot = this.slotOfPosition(segment, p);
    if (slot >= 0) {
      this.deleteSlot(segment, slot);
      this.forgotten++;
    }
    this.tail++;
  }

  /** The entry number of the entry at position `p` (between tail and head). */
  private numberAt(p: number): number {
    const base = this.tail - (this.tail % this.maxKeys);
    const n = base + p;
    return n < this.tail ? n + this.maxKeys : n;
  }

  private slotOfScope(segment: Segment, key: Scope): number {
    let slot = key.h0 & segment.mask;
    for (;;) {
      const at = segment.slots[slot]!;
      if (at === 0) return -1;
      const q = at - 1;
      if (this.h0[q] === key.h0 && this.h1[q] === key.h1 && this.h2[q] === key.h2) return slot;
      slot = (slot + 1) & segment.mask;
    }
  }

  private slotOfPosition(segment: Segment, p: number): number {
    let slot = this.h0[p]! & segment.mask;
    for (;;) {
      const at = segment.slots[slot]!;
      if (at === 0) return -1;
      if (at === p + 1) return slot;
      slot = (slot + 1) & segment.mask;
    }
  }

  /** Linear probing's backward-shift deletion: no tombstones, probes stay short. */
  private deleteSlot(segment: Segment, slot: number): void {
    const { slots, mask } = segment;
    let hole = slot;
    let j = slot;
    for (;;) {
      j = (j + 1) & mask;
      const at = slots[j]!;
      if (at === 0) break;
      const home = this.h0[at - 1]! & mask;
      // The entry at j may move into the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (!stays) {
        slots[hole] = at;
        hole = j;
      }
    }
    slots[hole] = 0;
    segment.live--;
    this.live--;
  }

  /** Doubles one segment's slots and puts its entries back. */
  private grow(segment: Segment): void {
    const old = segment.slots;
    segment.slots = new Uint32Array(old.length * 2);
    segment.mask = segment.slots.length - 1;
    for (const at of old) {
      if (at === 0) continue;
      let slot = this.h0[at - 1]! & segment.mask;
      while (segment.slots[slot] !== 0) slot = (slot + 1) & segment.mask;
      segment.slots[slot] = at;
    }
  }
}
