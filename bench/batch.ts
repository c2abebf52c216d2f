// POST /batch against single requests (issue 20): 100,000 product upserts sent (1) as single
// requests from 64 keep-alive connections (autocannon), (2) as batches of 1,000 through
// intake/client, each phase on a fresh server, with a light steady track-event load beside both.
// Reports wall time, items/s, server CPU per item (utime + stime of all threads, /proc), and the
// track events' p50/p99. Targets: batches >= 5x the single-request rate, CPU per item <= 0.3x.
// Each phase runs `rounds` times, the order alternating (singles first, then batches first), and
// the ratios are those of the medians: one run of each spread 0.26-0.32x in CPU on one morning.
//   npm run bench:batch -- [items=100000] [connections=64] [batchItems=1000] [trackPerSec=200] [concurrentBatches=4] [rounds=3]
import { writeFileSync, mkdirSync } from 'node:fs';
import autocannon from 'autocannon';
// The compiled client, as `intake/client` resolves for a user (package.json exports), not tsx's
// transpile of the sources, which costs the client about 15% more CPU here.
import { createClient } from 'intake/client';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { startPacedTrack, type PacedResult } from './lib/paced-track.ts';
import { runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { median } from './lib/stats.ts';

const items = Number(process.argv[2] ?? 100_000);
const connections = Number(process.argv[3] ?? 64);
const batchItems = Number(process.argv[4] ?? 1_000);
const trackPerSec = Number(process.argv[5] ?? 200);
const concurrentBatches = Number(process.argv[6] ?? 4);
const rounds = Number(process.argv[7] ?? 3);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error('rounds must be a whole number, at least 1');
const WARM_UP_ITEMS = 5_000;

const product = (prefix: string, i: number) => ({
  id: `${prefix}-${i}`,
  name: `Product ${i}`,
  description: 'A plain cotton shirt, machine washable.',
  url: `https://shop.example/p/${i}`,
  image: `https://cdn.example/p/${i}.jpg`,
  price: 19.99 + (i % 100),
  vendor: 'Acme',
  status: 'inStock' as const,
});

interface Phase {
  name: string;
  wallSec: number;
  perSec: number;
  cpuUsPerItem: number;
  /** This process's CPU (the load generator: autocannon, or the client) per item. */
  senderUsPerItem: number;
  track: PacedResult;
  non200: number;
}

async function launchDid(server: RunningServer): Promise<string> {
  const res = await fetch(`${server.url}/mcrs_appl_v1`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: LAUNCH_BODY });
  return ((await res.json()) as { did: string }).did;
}

/** What a phase's sender reports: items that failed, and when the last answer came (performance.now()). */
interface Sent {
  failed: number;
  lastAnswerAtMs: number;
}

/**
 * `amount` product upserts, one request each, from `connections` connections. The phase ends at
 * the last answer: autocannon calls back on its next one-second tick, which made single requests
 * look up to a sixth slower (their wall times came out in whole seconds, 5.02 and 6.02 s, the
 * last answer 0.4 s before; found 2026-11-30).
 */
function singles(server: RunningServer, prefix: string, amount: number): Promise<Sent> {
  let i = 0;
  let lastAnswerAtMs = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections,
        amount,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
        requests: [{ method: 'POST', path: '/product', setupRequest: (req) => ({ ...req, body: JSON.stringify(product(prefix, i++)) }) }],
      },
      (error, r) => (error ? reject(error) : resolve({ failed: r.non2xx + r.errors, lastAnswerAtMs })),
    );
    instance.on('response', () => {
      lastAnswerAtMs = performance.now();
    });
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

/** `amount` product upserts through intake/client in batches of `batchItems` (client defaults otherwise: gzip above 16 KiB). */
async function batches(server: RunningServer, prefix: string, amount: number, gzipThresholdBytes?: number): Promise<Sent> {
  const client = createClient({
    gzipThresholdBytes,
    url: server.url,
    serviceKey: BENCH_KEY,
    maxBatchItems: batchItems,
    maxBatchBytes: 3 * 1024 * 1024,
    maxConcurrentBatches: concurrentBatches,
    maxQueueItems: amount + 1,
    maxQueueBytes: 1024 * 1024 * 1024,
  });
  let failed = 0;
  const writes: Array<Promise<unknown>> = [];
  for (let i = 0; i < amount; i++) {
    writes.push(client.upsertProduct(product(prefix, i)).catch(() => failed++));
    // A producer that yields as it goes (as a catalog sync reading its source does): the first
    // batches leave while the rest is made, instead of after all 100,000 writes are queued.
    if (i % batchItems === batchItems - 1) await new Promise((resolve) => setImmediate(resolve));
  }
  await client.close();
  await Promise.all(writes);
  return { failed, lastAnswerAtMs: performance.now() };
}

async function phase(name: string, send: (server: RunningServer, prefix: string, amount: number) => Promise<Sent>): Promise<Phase> {
  const server = await startIntake({ SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' });
  try {
    await send(server, 'warm', WARM_UP_ITEMS);
    const did = await launchDid(server);
    const track = startPacedTrack(server.url, BENCH_KEY, did, trackPerSec);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const pid = server.child.pid!;
    const cpuBefore = cpuSeconds(pid);
    const senderBefore = process.cpuUsage();
    track.measureFromNow();
    const started = performance.now();
    const { failed: non200, lastAnswerAtMs } = await send(server, 'p', items);
    const wallSec = (lastAnswerAtMs - started) / 1000;
    const cpu = cpuSeconds(pid) - cpuBefore;
    const sender = process.cpuUsage(senderBefore);
    const trackResult = await track.stop();
    process.stderr.write(`${name}: ${wallSec.toFixed(2)} s, cpu ${cpu.toFixed(2)} s, track ${JSON.stringify(trackResult)}\n`);
    return { name, wallSec, perSec: items / wallSec, cpuUsPerItem: (cpu * 1e6) / items, senderUsPerItem: (sender.user + sender.system) / items, track: trackResult, non200 };
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  const singleName = `${items.toLocaleString('en-US')} single requests, ${connections} connections`;
  const batchedName = `batches of ${batchItems.toLocaleString('en-US')} via intake/client (${concurrentBatches} in flight, gzip'd)`;
  // On loopback gzip only costs: the same without it shows what inflating adds to the server's CPU.
  const plainName = `the same, not gzip'd (gzipThresholdBytes: Infinity)`;
  const runs: Array<{ single: Phase; batched: Phase; plain: Phase }> = [];
  for (let round = 0; round < rounds; round++) {
    const runSingle = () => phase(`${singleName} (round ${round + 1})`, singles);
    const runBatched = () => phase(`${batchedName} (round ${round + 1})`, (server, prefix, amount) => batches(server, prefix, amount));
    const runPlain = () => phase(`${plainName} (round ${round + 1})`, (server, prefix, amount) => batches(server, prefix, amount, Infinity));
    if (round % 2 === 0) {
      const single = await runSingle();
      const batched = await runBatched();
      runs.push({ single, batched, plain: await runPlain() });
    } else {
      const plain = await runPlain();
      const batched = await runBatched();
      runs.push({ single: await runSingle(), batched, plain });
    }
  }
  const med = (pick: (r: (typeof runs)[number]) => number) => median(runs.map(pick));
  const singleRate = med((r) => r.single.perSec);
  const singleCpu = med((r) => r.single.cpuUsPerItem);
  const rate = med((r) => r.batched.perSec) / singleRate;
  const cpu = med((r) => r.batched.cpuUsPerItem) / singleCpu;
  const plainRate = med((r) => r.plain.perSec) / singleRate;
  const plainCpu = med((r) => r.plain.cpuUsPerItem) / singleCpu;
  const row = (p: Phase) =>
    `| ${p.name} | ${p.wallSec.toFixed(2)} | ${Math.round(p.perSec).toLocaleString('en-US')} | ${p.cpuUsPerItem.toFixed(1)} | ${p.senderUsPerItem.toFixed(1)} | ${p.track.p50} / ${p.track.p99} / ${p.track.max} (${p.track.sent}, non-200 ${p.track.non200 + p.track.errors}) | ${p.non200} |`;
  const text = [
    `# bench:batch ${new Date().toISOString()}`,
    '',
    `Machine: ${(await import('node:os')).cpus().length} × ${(await import('node:os')).cpus()[0]?.model ?? '?'}, Node ${process.version}; load generator on the same machine. Command: \`npm run bench:batch -- ${items} ${connections} ${batchItems} ${trackPerSec} ${concurrentBatches} ${rounds}\`.`,
    `${items.toLocaleString('en-US')} product upserts (new ids, ~250-byte bodies) on a fresh server per phase, after ${WARM_UP_ITEMS.toLocaleString('en-US')} warm-up upserts sent the same way. Wall: from the first request to the last answer. Server CPU: utime + stime of the server process (all threads) over the phase ÷ items; it includes the track events (${trackPerSec}/s from a separate process, timed send to answer). ${rounds} rounds, in the order run (odd rounds singles first, even rounds batches first); the ratios are those of the medians.`,
    '',
    '| phase | wall s | items/s | server CPU µs / item | sender CPU µs / item (this process: autocannon or the client) | track events p50 / p99 / max ms (sent) | failed items |',
    '|---|---|---|---|---|---|---|',
    ...runs.flatMap((r, i) => (i % 2 === 0 ? [row(r.single), row(r.batched), row(r.plain)] : [row(r.plain), row(r.batched), row(r.single)])),
    '',
    `Medians: singles ${Math.round(singleRate).toLocaleString('en-US')} items/s, ${singleCpu.toFixed(1)} µs an item; gzip'd batches ${Math.round(med((r) => r.batched.perSec)).toLocaleString('en-US')}, ${med((r) => r.batched.cpuUsPerItem).toFixed(1)} µs; not gzip'd ${Math.round(med((r) => r.plain.perSec)).toLocaleString('en-US')}, ${med((r) => r.plain.cpuUsPerItem).toFixed(1)} µs.`,
    `Batches / singles: **${rate.toFixed(1)}×** the rate (target ≥ 5: ${rate >= 5 ? 'met' : '**missed**'}), **${cpu.toFixed(2)}×** the server CPU per item (target ≤ 0.3: ${cpu <= 0.3 ? 'met' : '**missed**'}).`,
    `Not gzip'd: **${plainRate.toFixed(1)}×** the rate, **${plainCpu.toFixed(2)}×** the CPU per item.`,
    `Per round (gzip'd, not gzip'd): ${runs.map((r, i) => `${i + 1}: ${(r.batched.perSec / r.single.perSec).toFixed(1)}× / ${(r.batched.cpuUsPerItem / r.single.cpuUsPerItem).toFixed(2)}×, ${(r.plain.perSec / r.single.perSec).toFixed(1)}× / ${(r.plain.cpuUsPerItem / r.single.cpuUsPerItem).toFixed(2)}×`).join('; ')}.`,
    '',
  ].join('\n');
  process.stdout.write(text);
  mkdirSync(`${ROOT}bench/results`, { recursive: true });
  // The run's own date: a fixed one overwrote an earlier day's results.
  writeFileSync(`${ROOT}bench/results/${new Date().toISOString().slice(0, 10)}-batch.md`, text);
}

runBench(main);
