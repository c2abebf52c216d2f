// The Idempotency-Key table (src/idempotency/key-table.ts) against a plain model (an array of
// entries and a Map from scope to entry), operation by operation: finds, inserts, blind
// re-inserts of a known scope (recovery does them), time passing, the expiry sweep, and
// snapshots taken while all of that goes on, whose entries must be exactly those held when the
// snapshot started and which must restore (from misaligned bytes) to the model's keys. Small
// limits and scopes crowded onto a few home slots exercise eviction, wrap-around, backward-shift
// deletion and segment growth. Written by a review of the table, kept as its test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bodyFingerprint } from '../src/idempotency/claim.ts';
import { ENTRY_BYTES, KeyTable } from '../src/idempotency/key-table.ts';

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

interface E { n: number; h0: number; h1: number; h2: number; f0: number; f1: number; second: number; seq: number }
const scopeId = (e: { h0: number; h1: number; h2: number }) => `${e.h0}/${e.h1}/${e.h2}`;

class Model {
  ring: E[] = [];
  tail = 0; head = 0;
  index = new Map<string, number>();
  forgotten = 0;
  constructor(readonly maxKeys: number, readonly window: number) {}
  entry(n: number) { return this.ring[n - this.tail]!; }
  evict() {
    const e = this.ring.shift()!;
    if (this.index.get(scopeId(e)) === e.n) { this.index.delete(scopeId(e)); this.forgotten++; }
    this.tail++;
  }
  insert(k: Omit<E, 'n'>) {
    if (this.maxKeys === 0) return;
    if (this.head - this.tail >= this.maxKeys) this.evict();
    const e = { ...k, n: this.head++ };
    this.ring.push(e);
    this.index.set(scopeId(e), e.n);
  }
  find(k: { h0: number; h1: number; h2: number }, now: number): number {
    const n = this.index.get(scopeId(k));
    if (n === undefined) return -1;
    if (this.entry(n).second + this.window < now) { this.index.delete(scopeId(k)); this.forgotten++; return -1; }
    return n;
  }
  expire(now: number, max: number) {
    let c = 0;
    while (c < max && this.ring.length > 0 && this.ring[0]!.second + this.window < now) { this.evict(); c++; }
    return c;
  }
}

function unpack(chunks: Uint8Array[]): Omit<E, 'n'>[] {
  const out: Omit<E, 'n'>[] = [];
  for (const c of chunks) {
    const buf = new Uint8Array(c); // aligned copy
    const w = new Uint32Array(buf.buffer);
    const f = new Float64Array(buf.buffer);
    for (let i = 0; i < buf.byteLength / ENTRY_BYTES; i++) out.push({ h0: w[i * 8]!, h1: w[i * 8 + 1]!, h2: w[i * 8 + 2]!, f0: w[i * 8 + 3]!, f1: w[i * 8 + 4]!, second: w[i * 8 + 5]!, seq: f[i * 4 + 3]! });
  }
  return out;
}

function check(cond: boolean, msg: string) { if (!cond) throw new Error(msg); }

function run(seed: number, maxKeys: number, window: number, ops: number, scopes: number): number {
  const r = rng(seed);
  const slice = 1 + Math.floor(r() * 6);
  let snapshots = 0;
  const t = new KeyTable(maxKeys, window);
  const m = new Model(maxKeys, window);
  let now = 1_000_000;
  let seq = 1;
  let snap: { chunks: Uint8Array[]; expected: Omit<E, 'n'>[] } | null = null;
  const scope = () => {
    const id = Math.floor(r() * scopes);
    // many scopes share low h0 bits: long probe chains, wrap-around of the index
    const h0 = r() < 0.5 ? (id % 7) : (id * 2654435761) >>> 0;
    return { h0: h0 >>> 0, h1: id, h2: 0xabc };
  };
  for (let op = 0; op < ops; op++) {
    const x = r();
    if (x < 0.45) {
      // a write: find then remember if unknown (as acceptor does)
      const s = scope();
      const a = t.find(s, now); const b = m.find(s, now);
      check(a === b, `seed ${seed} op ${op}: find ${a} vs model ${b}`);
      if (a >= 0) {
        check(t.seqOf(a) === m.entry(b).seq, `seed ${seed} op ${op}: seqOf`);
        check(t.sameRequest(a, { ...s, f0: m.entry(b).f0, f1: m.entry(b).f1 }), `seed ${seed} op ${op}: sameRequest`);
      } else {
        const f0 = Math.floor(r() * 2 ** 32), f1 = Math.floor(r() * 2 ** 32);
        // receive time up to 3 s before now (not monotone)
        const atMs = (now - Math.floor(r() * 3)) * 1000 + Math.floor(r() * 1000);
        t.remember({ ...s, f0, f1 }, seq, atMs); m.insert({ ...s, f0, f1, second: Math.floor(atMs / 1000), seq });
        seq++;
      }
    } else if (x < 0.55) {
      // blind insert (zombie maker: scope already indexed, e.g. recovery/replay)
      const s = scope();
      const atMs = now * 1000;
      t.remember({ ...s, f0: 1, f1: 2 }, seq, atMs); m.insert({ ...s, f0: 1, f1: 2, second: now, seq }); seq++;
    } else if (x < 0.62) {
      now += Math.floor(r() * 3);
    } else if (x < 0.66) {
      const max = 1 + Math.floor(r() * 5);
      const a = t.expire(now, max), b = m.expire(now, max);
      check(a === b, `seed ${seed} op ${op}: expire ${a} vs ${b}`);
    } else if (x < 0.69) {
      if (snap === null) {
        const chunks: Uint8Array[] = [];
        snap = { chunks, expected: m.ring.map(({ n, ...rest }) => rest) };
        t.beginSnapshot((e) => chunks.push(e), slice);
      }
    } else if (x < 0.78) {
      if (snap !== null) {
        const more = t.snapshotSlice();
        if (!more) {
          t.endSnapshot();
          const got = unpack(snap.chunks);
          check(JSON.stringify(got) === JSON.stringify(snap.expected), `seed ${seed} op ${op}: snapshot content differs (${got.length} vs ${snap.expected.length})`);
          // restore into a fresh table and compare against a model restored the same way
          const t2 = new KeyTable(maxKeys, window);
          const m2 = new Model(maxKeys, window);
          for (const c of snap.chunks) {
            // misaligned copy, like a msgpack-decoded value
            const holder = new Uint8Array(c.byteLength + 3); holder.set(c, 3);
            t2.restore(holder.subarray(3), now);
          }
          for (const e of got) if (!(e.second + window < now)) m2.insert(e);
          const held = [...t2.held()].map((e) => JSON.stringify(e)).sort();
          const mheld = [...m2.index.values()].map((n) => { const { n: _, ...rest } = m2.entry(n); return JSON.stringify({ h0: rest.h0, h1: rest.h1, h2: rest.h2, f0: rest.f0, f1: rest.f1, second: rest.second, seq: rest.seq }); }).sort();
          check(JSON.stringify(held) === JSON.stringify(mheld), `seed ${seed} op ${op}: restore held differs`);
          check(t2.oldestSeq() === (m2.ring[0]?.seq ?? null), `seed ${seed} op ${op}: restore oldestSeq`);
          // Copy-on-write writes whole slices too: never a chunk per insert.
          check(snap.chunks.length <= Math.ceil(got.length / slice) + 1, `seed ${seed} op ${op}: ${snap.chunks.length} chunks for ${got.length} entries in slices of ${slice}`);
          snapshots++;
          snap = null;
        }
      }
    } else {
      // probe lookups without side effects on model expiry mismatch: compare find at now
      const s = scope();
      const a = t.find(s, now), b = m.find(s, now);
      check(a === b, `seed ${seed} op ${op}: find2 ${a} vs ${b}`);
    }
    check(t.size === m.index.size, `seed ${seed} op ${op}: size ${t.size} vs ${m.index.size}`);
    check(t.forgotten === m.forgotten, `seed ${seed} op ${op}: forgotten ${t.forgotten} vs ${m.forgotten}`);
    check(t.oldestSeq() === (m.ring[0]?.seq ?? null), `seed ${seed} op ${op}: oldestSeq ${t.oldestSeq()} vs ${m.ring[0]?.seq}`);
  }
  // final: held set equal
  const held = [...t.held()].map((e) => `${e.h0}/${e.h1}/${e.h2}:${e.seq}`).sort();
  const mheld = [...m.index.entries()].map(([k, n]) => `${k}:${m.entry(n).seq}`).sort();
  check(JSON.stringify(held) === JSON.stringify(mheld), `seed ${seed}: final held differs`);
  return snapshots;
}


const configs: Array<[number, number, number, number]> = [
  // maxKeys, window seconds, operations, distinct scopes
  [0, 5, 1000, 50], [1, 5, 3000, 10], [2, 5, 3000, 10], [3, 3, 3000, 20], [7, 4, 6000, 30], [32, 6, 10000, 100],
  [100, 10, 10000, 300], [4096, 3000, 20000, 8000], [6000, 400, 30000, 20000], [20000, 1_000_000, 60000, 200000],
];

test('the key table behaves as a plain model would, snapshots included', () => {
  let snapshots = 0;
  for (let seed = 1; seed <= 4; seed++) {
    for (const [maxKeys, window, ops, scopes] of configs) snapshots += run(seed * 7919 + maxKeys, maxKeys, window, ops, scopes);
  }
  check(snapshots > 100, `snapshots were taken (${snapshots})`);
});

test('bodyFingerprint: the JSON whitespace between tokens does not count; a compact body hashes as before that rule (keys kept across an upgrade still match)', () => {
  // The rule before: FNV-1a and a multiply-xor lane over every byte, seeded with the length.
  const before = (body: Uint8Array): readonly [number, number] => {
    const mix = (h: number) => {
      h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
      h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
      return (h ^ (h >>> 16)) >>> 0;
    };
    let a = 0x811c9dc5;
    let b = 0x9747b28c ^ body.length;
    for (const byte of body) {
      a = Math.imul(a ^ byte, 0x01000193);
      b = Math.imul(b ^ byte, 0x5bd1e995);
      b ^= b >>> 15;
    }
    return [mix(a), mix(b ^ a)];
  };
  const bytes = (text: string) => Buffer.from(text, 'utf8');
  fc.assert(
    fc.property(fc.jsonValue(), fc.integer({ min: 1, max: 4 }), (value, indent) => {
      const compact = JSON.stringify(value);
      const pretty = JSON.stringify(value, null, indent).replace(/\n/g, '\r\n');
      assert.deepEqual(bodyFingerprint(bytes(compact)), before(bytes(compact)), 'compact: unchanged');
      assert.deepEqual(bodyFingerprint(bytes(pretty)), bodyFingerprint(bytes(compact)), 'pretty-printed: the same request');
    }),
    { numRuns: 500 },
  );
  // Whitespace inside strings counts (escaped quotes and backslashes do not end a string).
  assert.notDeepEqual(bodyFingerprint(bytes('{"a":"x y"}')), bodyFingerprint(bytes('{"a":"xy"}')));
  assert.notDeepEqual(bodyFingerprint(bytes('{"a":"q\\" y"}')), bodyFingerprint(bytes('{"a":"q\\"y"}')));
  assert.notDeepEqual(bodyFingerprint(bytes('{"a":"\\\\", "b":" "}')), bodyFingerprint(bytes('{"a":"\\\\","b":""}')));
  assert.deepEqual(bodyFingerprint(bytes('{"a":"\\\\", "b":" "}')), bodyFingerprint(bytes('{"a":"\\\\","b":" "}')));
});
