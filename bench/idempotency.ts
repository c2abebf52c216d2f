// Idempotency-Key costs (issue 10), two figures:
// 1. Memory per remembered key: 1,000,000 track events with a new key each, against a second
//    fresh server that gets 1,000,000 track events without a key; anonymous RSS and heap growth
//    per request, with minus without (target ≤ 64 bytes per key).
// 2. Server CPU per request, track events with a new key each against without a key, in
//    alternating rounds on one server at the same fixed rate (target ≤ 1.10). Both carry one
//    header with a fresh id (`idempotency-key`, or `x-nonce`), so the load generator does the
//    same work for both. A fixed rate, not saturation: at saturation a slower round answers
//    fewer requests, and every fixed cost per event-loop turn then weighs more per request.
//   npm run bench:idempotency -- [keys=1000000] [roundSec=10] [rounds=5] [ratePerSec=8000]
//   (keys=0: the CPU rounds only)
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { pacedLoad } from './lib/paced.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { metricValue, settledMemory } from './lib/memory.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, startIntake, type RunningServer } from './lib/servers.ts';
import { upperMedian as median } from './lib/stats.ts';

const keys = Number(process.argv[2] ?? 1_000_000);
const roundSec = Number(process.argv[3] ?? 10);
const rounds = Number(process.argv[4] ?? 5);
const ratePerSec = Number(process.argv[5] ?? 8000);
const connections = 64;
/** Keys remembered before the CPU rounds, so the table is not tiny while they run. */
const CPU_WARM_KEYS = 200_000;
const WARM_UP = 20_000;

async function launchDid(server: RunningServer): Promise<string> {
  const res = await fetch(`${server.url}/mcrs_appl_v1`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: LAUNCH_BODY });
  return ((await res.json()) as { did: string }).did;
}

interface Sent {
  requests: number;
  reqPerSec: number;
  p99: number;
}

/**
 * Track events, each with a fresh id in `header`: `amount` requests as fast as they go
 * (autocannon's [<id>]), or `seconds` at ratePerSec, steadily (paced.ts; until 2026-11-30
 * autocannon's overallRate, which sends each second's quota in a burst).
 */
function trackEvents(server: RunningServer, did: string, header: string, limit: { amount: number } | { seconds: number }, title: string): Promise<Sent> {
  const body = JSON.stringify({ did, name: 'product_view', timestamp: 1700000000000, info: [{ name: 'sku', value: 'A-1', type: 'string' }] });
  if ('seconds' in limit) {
    process.stderr.write(`${title}: ${ratePerSec}/s for ${limit.seconds} s, paced\n`);
    const run = `${process.pid}-${Date.now()}`;
    const bytes = Buffer.from(body);
    return pacedLoad({
      url: server.url,
      headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
      connections,
      ratePerSec,
      seconds: limit.seconds,
      perRequest: true,
      request: (i) => ({ path: '/msv_cevt', body: bytes, headers: { [header]: `${run}-${i}` } }),
    }).then((r) => {
      const unexpected = r.requests - (r.statuses.get(200) ?? 0);
      if (unexpected > 0) throw new Error(`${title}: ${unexpected} non-200`);
      // Still in flight when the run ended (5 s after the last was due): the server fell behind.
      if (r.errors > 0) process.stderr.write(`${title}: ${r.errors} unanswered at the end (the server fell behind the rate)\n`);
      return { requests: r.requests, reqPerSec: r.rps, p99: r.p99 };
    });
  }
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: `${server.url}/msv_cevt`,
        method: 'POST',
        connections: 128,
        amount: limit.amount,
        idReplacement: true,
        title,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json', [header]: '[<id>]' },
        body,
      },
      (error, r) =>
        error ? reject(error) : r.non2xx > 0 || r.errors > 0 ? reject(new Error(`${title}: ${r.non2xx} non-2xx, ${r.errors} errors`)) : resolve({ requests: r.requests.total, reqPerSec: r.requests.average, p99: r.latency.p99 }),
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

/** Growth of heap and anonymous RSS per request over `keys` track events with (or without) a key each. */
async function memoryPerRequest(header: string): Promise<{ heap: number; rss: number; held: number }> {
  const server = await startIntake({ SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' });
  try {
    const did = await launchDid(server);
    await trackEvents(server, did, header, { amount: WARM_UP }, `warm-up (${header})`);
    const base = await settledMemory(server);
    await trackEvents(server, did, header, { amount: keys }, `${keys} track events (${header})`);
    const after = await settledMemory(server);
    return { heap: (after.heap - base.heap) / keys, rss: (after.rss - base.rss) / keys, held: await metricValue(server, 'intake_idempotency_keys') };
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  const none = { heap: Number.NaN, rss: Number.NaN, held: 0 };
  const without = keys > 0 ? await memoryPerRequest('x-nonce') : none;
  const keyed = keys > 0 ? await memoryPerRequest('idempotency-key') : none;
  process.stderr.write(`memory: without ${JSON.stringify(without)}, keyed ${JSON.stringify(keyed)}\n`);

  const server = await startIntake();
  const cpu: Record<'plain' | 'keyed', number[]> = { plain: [], keyed: [] };
  const rates: Record<'plain' | 'keyed', Sent[]> = { plain: [], keyed: [] };
  try {
    const did = await launchDid(server);
    const pid = server.child.pid!;
    await trackEvents(server, did, 'idempotency-key', { amount: CPU_WARM_KEYS }, 'warm-up');
    for (let r = 0; r < rounds; r++) {
      for (const [kind, header] of [['plain', 'x-nonce'], ['keyed', 'idempotency-key']] as const) {
        const before = cpuSeconds(pid);
        const sent = await trackEvents(server, did, header, { seconds: roundSec }, `${kind} round ${r + 1}`);
        cpu[kind].push(((cpuSeconds(pid) - before) / sent.requests) * 1e6);
        rates[kind].push(sent);
      }
    }
  } finally {
    await server.stop();
  }
  const ratios = cpu.keyed.map((k, i) => k / cpu.plain[i]!);
  printTable(
    `bench:idempotency ${new Date().toISOString()}: ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Node ${process.version}`,
    ['measure', 'without a key', 'with a new key each', 'per key'],
    [
      `| heap bytes per request, ${keys.toLocaleString('en')} track events (after major GC) | ${without.heap.toFixed(1)} | ${keyed.heap.toFixed(1)} | ${(keyed.heap - without.heap).toFixed(1)} |`,
      `| anonymous RSS bytes per request, ${keys.toLocaleString('en')} track events | ${without.rss.toFixed(1)} | ${keyed.rss.toFixed(1)} | **${(keyed.rss - without.rss).toFixed(1)}** |`,
      `| server CPU µs per track event (median of ${rounds} rounds at ${ratePerSec.toLocaleString('en')}/s) | ${median(cpu.plain).toFixed(1)} | ${median(cpu.keyed).toFixed(1)} | ratio **${median(ratios).toFixed(3)}** (${ratios.map((x) => x.toFixed(3)).join(', ')}) |`,
      `| req/s, p99 ms (median) | ${Math.round(median(rates.plain.map((x) => x.reqPerSec))).toLocaleString('en')}, ${median(rates.plain.map((x) => x.p99))} | ${Math.round(median(rates.keyed.map((x) => x.reqPerSec))).toLocaleString('en')}, ${median(rates.keyed.map((x) => x.p99))} | |`,
    ],
    [`Keys held after the keyed memory run: ${keyed.held.toLocaleString('en')}. Targets: ≤ 64 bytes per key; CPU with a key ≤ 1.10 × without.`],
  );
}

runBench(main);
