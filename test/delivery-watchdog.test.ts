// The delivery worker's heartbeat (durable-signal.ts), watched by the main thread (delivery.ts
// restarts a worker whose beats stop). Real worker threads beat through the compiled module, as
// the delivery worker does; one of them then blocks its event loop for good, which no sink
// deadline inside the worker could notice.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { DurableSignal, watchHeartbeat } from '../src/delivery/durable-signal.ts';

const MODULE = new URL('../dist/src/delivery/durable-signal.js', import.meta.url).href;

/** A thread beating like the delivery worker; after `hangAfterMs` (unless null) its event loop spins forever. */
function beatingThread(signal: DurableSignal, timeoutMs: number, hangAfterMs: number | null): Worker {
  const code = `
    const { workerData } = require('node:worker_threads');
    import(${JSON.stringify(MODULE)}).then(({ DurableSignal, heartbeatMs }) => {
      const signal = new DurableSignal(workerData.buffer);
      signal.beat();
      setInterval(() => signal.beat(), heartbeatMs(workerData.timeoutMs));
      if (workerData.hangAfterMs !== null) setTimeout(() => { for (;;) {} }, workerData.hangAfterMs);
    });`;
  return new Worker(code, { eval: true, workerData: { buffer: signal.buffer, timeoutMs, hangAfterMs } });
}

test('a worker whose event loop stops turning is noticed once its beats stop for the timeout, and terminate() ends it', async () => {
  const signal = new DurableSignal();
  const worker = beatingThread(signal, 300, 800);
  const started = performance.now();
  const silentMs = await new Promise<number>((resolve) => watchHeartbeat(signal, 300, 2_000, resolve));
  const after = performance.now() - started;
  assert.ok(signal.beats > 1, 'it beat before it hung');
  assert.ok(silentMs >= 300, `silent for ${silentMs} ms`);
  assert.ok(after >= 800 + 300 && after < 3_000, `noticed after ${Math.round(after)} ms`);
  const exited = once(worker, 'exit');
  await worker.terminate();
  assert.equal((await exited)[0], 1);
});

test('a worker that keeps beating is left alone', async () => {
  const signal = new DurableSignal();
  const worker = beatingThread(signal, 200, null);
  let silent = false;
  const stop = watchHeartbeat(signal, 200, 2_000, () => (silent = true));
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  stop();
  assert.equal(silent, false);
  assert.ok(signal.beats >= 5);
  await worker.terminate();
});
