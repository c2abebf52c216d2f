// Rate limits shared by the HTTP edge threads (issue 21, CONTRACT.md §9: per key, whatever the
// thread): in one thread SharedRateLimits answers exactly as RateLimits does; across real worker
// threads a key's bucket is one bucket (never more than its tokens granted, however the threads
// race), keys stay independent, threads agree on each key's slot, and the refused count is one.
// This file is also the worker threads' entry (startThread(import.meta.url)): see the end.
import { isMainThread, parentPort, workerData, type Worker } from 'node:worker_threads';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RateLimits } from '../src/http/rate-limits.ts';
import { SharedRateLimits, sharedClockMs } from '../src/edge/shared-rate-limits.ts';
import { startThread } from '../src/workers/threads.ts';

/** What a worker thread is asked to do (workerData). */
interface Job {
  mode: 'hammer' | 'clock';
  buffer: SharedArrayBuffer;
  /** Int32 [0]: 0 until the main thread says go, so that all threads start at once. */
  start: SharedArrayBuffer;
  /** take() number i is for keys[i % keys.length], counts[i % counts.length] tokens. */
  keys: string[];
  counts: number[];
  attempts: number;
}

/** What a worker thread answers when done. */
interface Tally {
  grantedTokensByKey: Record<string, number>;
  refused: number;
}

/** Runs `jobs` on worker threads, released together; their tallies. */
async function runThreads(jobs: Omit<Job, 'start'>[]): Promise<Tally[]> {
  const start = new SharedArrayBuffer(4);
  const workers: Worker[] = jobs.map((job) => startThread(import.meta.url, { ...job, start }));
  try {
    const tallies = workers.map(
      (worker) =>
        new Promise<Tally>((resolve, reject) => {
          worker.on('error', reject);
          worker.on('exit', (code) => reject(new Error(`worker exited (${code}) before answering`)));
          worker.on('message', (message: 'ready' | Tally) => {
            if (message !== 'ready') resolve(message);
          });
        }),
    );
    const ready = workers.map((worker) => new Promise<void>((resolve) => worker.on('message', (message) => message === 'ready' && resolve())));
    await Promise.all(ready);
    const go = new Int32Array(start);
    Atomics.store(go, 0, 1);
    Atomics.notify(go, 0);
    return await Promise.all(tallies);
  } finally {
    await Promise.all(workers.map((worker) => worker.terminate()));
  }
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

if (isMainThread) {
  describe('SharedRateLimits in one thread', () => {
    test('answers as RateLimits does: burst, refill, count > 1 all or none, refund, Retry-After', () => {
      let nowMs = 0;
      const shared = SharedRateLimits.create(2, 5, 64, () => nowMs);
      const local = new RateLimits(2, 5);
      assert.equal(shared.enabled, true);
      assert.equal(shared.burst, 5);
      // [ms, key, count (negative: refund), expected take() answer]
      const steps: [number, string, number, number | null][] = [
        [0, 'a', 1, 0],
        [0, 'a', 1, 0],
        [0, 'a', 1, 0],
        [0, 'a', 1, 0],
        [0, 'a', 1, 0], // the burst: 5 at once
        [0, 'a', 1, 1], // the 6th: 1 token comes in 0.5 s -> 1
        [0, 'a', 3, 2], // 3 tokens take 1.5 s -> 2
        [0, 'b', 5, 0], // another key: its own full bucket
        [500, 'a', 2, 1], // 1 token there, 2 asked: none taken
        [500, 'a', 1, 0], // all or none: the refused 2 left the 1 token
        [500, 'a', 1, 1],
        [500, 'a', -1, null], // refund
        [500, 'a', 1, 0],
        [500, 'a', 6, 3], // more than the burst: refused, 6 tokens take 3 s
        [2_500, 'a', 4, 0], // 2 s: 4 tokens
        [2_500, 'a', 1, 1],
        [60_000, 'a', -3, null], // refund into a bucket already refilled to the burst: capped
        [60_000, 'a', 5, 0], // refill stops at the burst
        [60_000, 'a', 1, 1],
        [60_000, 'nobody', -2, null], // refund for a key that never took: nothing
        [60_000, 'nobody', 5, 0],
        [60_000, 'nobody', 1, 1],
      ];
      for (const [atMs, key, count, expected] of steps) {
        nowMs = atMs;
        if (count < 0) {
          shared.refund(key, -count);
          local.refund(key, -count);
          continue;
        }
        const answer = shared.take(key, -12345 /* ignored */, count);
        assert.equal(answer, local.take(key, atMs, count), `at ${atMs} ms, ${key} x${count}`);
        assert.equal(answer, expected, `at ${atMs} ms, ${key} x${count}`);
      }
      assert.equal(shared.limited, local.limited);
      assert.equal(shared.limited, 8);
    });

    test('answers as RateLimits does over a long pseudo-random sequence of keys, times, counts and refunds', () => {
      for (const [perSecond, burst] of [
        [500, 20],
        [2, 5],
        [0.5, 3],
        [1000, 0], // burst 0: one second's worth
      ] as const) {
        let nowMs = 0;
        const shared = SharedRateLimits.create(perSecond, burst, 16, () => nowMs);
        const local = new RateLimits(perSecond, burst);
        assert.equal(shared.burst, local.burst);
        let seed = 42;
        const next = (n: number): number => {
          seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
          return (seed >>> 8) % n;
        };
        for (let i = 0; i < 20_000; i++) {
          nowMs += next(4) === 0 ? next(3_000) : 0;
          const key = `key-${next(5)}`;
          const count = 1 + next(Math.ceil(local.burst) + 1);
          if (next(10) === 0) {
            shared.refund(key, count);
            local.refund(key, count);
          } else {
            assert.equal(shared.take(key, nowMs, count), local.take(key, nowMs, count), `step ${i} (${perSecond}/s, burst ${burst})`);
          }
        }
        assert.equal(shared.limited, local.limited);
        assert.ok(shared.limited > 1000, 'the sequence is limited often');
      }
    });

    test('a full table: a key beyond maxKeys shares a bucket with another key (limited, not unlimited, no error)', () => {
      let nowMs = 0;
      const limits = SharedRateLimits.create(0.001, 1, 4, () => nowMs);
      assert.equal(limits.maxKeys, 4);
      for (const key of ['k1', 'k2', 'k3', 'k4']) assert.equal(limits.take(key, 0, 1), 0);
      // Every slot holds a spent bucket, so whichever the fifth key shares, it is refused.
      assert.ok(limits.take('k5', 0, 1) > 0);
      assert.ok(limits.take('k6', 0, 1) > 0);
      nowMs = 1_000_000; // 1000 s: one token each
      assert.equal(limits.take('k5', 0, 1), 0);
    });

    test('maxKeys is rounded up to a power of two; the header carries the settings to attach()', () => {
      const created = SharedRateLimits.create(7, 9, 1000);
      assert.equal(created.maxKeys, 1024);
      assert.equal(created.buffer.byteLength, 64 + 1024 * 32);
      const attached = SharedRateLimits.attach(created.buffer);
      assert.deepEqual([attached.enabled, attached.burst, attached.maxKeys], [true, 9, 1024]);
      assert.equal(SharedRateLimits.create(0, 0).enabled, false);
      assert.equal(SharedRateLimits.create(0, 0).maxKeys, 65_536);
      // Both views are one table.
      for (let i = 0; i < 9; i++) assert.equal(created.take('k', 0), 0);
      assert.ok(attached.take('k', 0) > 0);
      assert.equal(created.limited, 1);
    });

    test('refuses bad settings and buffers that are not its own', () => {
      assert.throws(() => SharedRateLimits.create(-1, 1), RangeError);
      assert.throws(() => SharedRateLimits.create(Number.NaN, 1), RangeError);
      assert.throws(() => SharedRateLimits.create(1, Infinity), RangeError);
      assert.throws(() => SharedRateLimits.create(1, 1, 0), RangeError);
      assert.throws(() => SharedRateLimits.create(1, 1, 1.5), RangeError);
      assert.throws(() => SharedRateLimits.create(1, 1, 2 ** 20 + 1), RangeError);
      assert.throws(() => SharedRateLimits.attach(new SharedArrayBuffer(64 + 32)), TypeError);
      assert.throws(() => SharedRateLimits.attach(new ArrayBuffer(96) as unknown as SharedArrayBuffer), TypeError);
      const truncated = new SharedArrayBuffer(64 + 32);
      new Uint8Array(truncated).set(new Uint8Array(SharedRateLimits.create(1, 1, 2).buffer).subarray(0, 96));
      assert.throws(() => SharedRateLimits.attach(truncated), TypeError);
    });

    test('a lock left held (its thread gone mid-take) is taken over after ~100 ms, not waited on forever', () => {
      const limits = SharedRateLimits.create(0.001, 2, 8);
      assert.equal(limits.take('k', 0), 0);
      // The one slot in use; its lock word is the Int32 at byte +8 (see the layout in the module).
      const fingerprints = new BigInt64Array(limits.buffer, 64);
      const slot = fingerprints.findIndex((f, i) => i % 4 === 0 && f !== 0n) / 4;
      assert.ok(slot >= 0);
      const lockWord = new Int32Array(limits.buffer, 64 + slot * 32 + 8, 1);
      Atomics.store(lockWord, 0, 1);
      const startedMs = performance.now();
      assert.equal(limits.take('k', 0), 0);
      const waitedMs = performance.now() - startedMs;
      assert.ok(waitedMs >= 90 && waitedMs < 2_000, `waited ${waitedMs} ms`);
      assert.equal(Atomics.load(lockWord, 0), 0, 'released after');
      assert.ok(limits.take('k', 0) > 0);
    });
  });

  describe('SharedRateLimits across worker threads', () => {
    test('4 threads racing on one key get exactly its burst, never more; limited counts every refusal', async () => {
      // A burst that takes a while to drain (~200,000 takes), so that threads spun up on two
      // shared cores are all running before it is gone: with 50,000 tokens, one thread
      // descheduled for a few ms (the full suite running beside) found none left.
      const burst = 400_000;
      const limits = SharedRateLimits.create(1e-6, burst, 1024); // ~0 refill: 1 token in 11 days
      const attempts = 300_000;
      const tallies = await runThreads(Array.from({ length: 4 }, () => ({ mode: 'hammer' as const, buffer: limits.buffer, keys: ['hot'], counts: [1, 2, 3], attempts })));
      const granted = sum(tallies.map((t) => t.grantedTokensByKey['hot'] ?? 0));
      assert.equal(granted, burst, `tokens granted per thread: ${tallies.map((t) => t.grantedTokensByKey['hot']).join(', ')}`);
      // Threads got shares: they really raced (at least two; on two shared cores a third or fourth
      // may be scheduled only after the burst is gone).
      assert.ok(tallies.filter((t) => (t.grantedTokensByKey['hot'] ?? 0) > 0).length >= 2, JSON.stringify(tallies));
      const refused = sum(tallies.map((t) => t.refused));
      assert.ok(refused > 3 * attempts);
      assert.equal(limits.limited, refused);
      assert.ok(limits.take('hot', 0) > 0);
    });

    test('two keys hammered by the same threads stay independent: each gets exactly its own burst', async () => {
      const burst = 3_000;
      const limits = SharedRateLimits.create(1e-6, burst, 1024);
      const tallies = await runThreads(Array.from({ length: 4 }, (_, i) => ({ mode: 'hammer' as const, buffer: limits.buffer, keys: i % 2 === 0 ? ['x', 'y'] : ['y', 'x'], counts: [1], attempts: 10_000 })));
      for (const key of ['x', 'y']) assert.equal(sum(tallies.map((t) => t.grantedTokensByKey[key] ?? 0)), burst, key);
      assert.equal(limits.limited, sum(tallies.map((t) => t.refused)));
      assert.equal(limits.take('z', 0, burst), 0, 'a third key is untouched');
    });

    test('threads claiming 500 new keys at once, in different orders, agree on every key\'s slot', async () => {
      const keys = Array.from({ length: 500 }, (_, i) => `sk_live_${i.toString(36).padStart(6, '0')}`);
      const limits = SharedRateLimits.create(1e-6, 1, 512); // nearly full: long probe runs
      const orders = [keys, [...keys].reverse(), [...keys.slice(250), ...keys.slice(0, 250)], [...keys.slice(125), ...keys.slice(0, 125)].reverse()];
      const tallies = await runThreads(orders.map((order) => ({ mode: 'hammer' as const, buffer: limits.buffer, keys: order, counts: [1], attempts: 2 * order.length })));
      for (const key of keys) assert.equal(sum(tallies.map((t) => t.grantedTokensByKey[key] ?? 0)), 1, key);
      assert.equal(limits.limited, 4 * 1000 - 500);
    });

    test('the clock is common to all threads', async () => {
      const beforeMs = sharedClockMs();
      const [tally] = await runThreads([{ mode: 'clock', buffer: SharedRateLimits.create(1, 1, 1).buffer, keys: [], counts: [], attempts: 0 }]);
      const afterMs = sharedClockMs();
      const workerMs = tally!.refused; // the worker's sharedClockMs() reading
      assert.ok(workerMs > beforeMs - 1 && workerMs < afterMs + 1, `${beforeMs} <= ${workerMs} <= ${afterMs}`);
    });
  });
} else {
  // A worker thread (runThreads()): attach, say ready, wait for the go, then take() as told.
  const job = workerData as Job;
  const limits = SharedRateLimits.attach(job.buffer);
  parentPort!.postMessage('ready');
  const go = new Int32Array(job.start);
  // Spun, not Atomics.wait()ed: all threads leave within µs of the go, and really race.
  while (Atomics.load(go, 0) === 0);
  if (job.mode === 'clock') {
    parentPort!.postMessage({ grantedTokensByKey: {}, refused: sharedClockMs() } satisfies Tally);
  } else {
    const grantedTokensByKey: Record<string, number> = {};
    let refused = 0;
    for (let i = 0; i < job.attempts; i++) {
      const key = job.keys[i % job.keys.length]!;
      const count = job.counts[i % job.counts.length]!;
      if (limits.take(key, performance.now(), count) === 0) grantedTokensByKey[key] = (grantedTokensByKey[key] ?? 0) + count;
      else refused++;
    }
    parentPort!.postMessage({ grantedTokensByKey, refused } satisfies Tally);
  }
}
