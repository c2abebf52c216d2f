// Big mappings beside track events: clients send 100,000-id mapping requests in a loop (add, then
// remove, so every request changes the collection) while track events at 256 connections keep
// the server's main thread saturated. Reports mapping ids applied per second and track-event
// latency with and without the mapping load (target: p99 with ≤ 2 × without), once with the
// worker pool and once without. Without and with mapping load are measured alternately over
// several rounds, medians reported.
//
// The track events come from wrk -t1 when it is installed (issue 11): one C thread leaves the
// server its core, so the server saturates before the generator does. autocannon (a whole core
// of JavaScript) saturates first, and then its p99 measures itself more than the server.
//   npm run bench:mapping -- [seconds=10] [mappingClients=1] [rounds=3] [wrk|autocannon]
import { createProducts, quiet, someDevices } from './lib/populate.ts';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { trackEventLoad, type TrackLatency } from './lib/load.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { runWrk, wrkInstalled } from './lib/wrk.ts';
import { upperMedian as median } from './lib/stats.ts';

const seconds = Number(process.argv[2] ?? 10);
const mappingClients = Number(process.argv[3] ?? 1);
const rounds = Number(process.argv[4] ?? 3);
const generator = process.argv[5] ?? (wrkInstalled() ? 'wrk' : 'autocannon');
const IDS = 100_000;
const CONNECTIONS = 256;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** The 1-minute load average: what else the machine is running. */
const loadAverage = () => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

async function trackEvents(server: RunningServer, dids: string[]): Promise<TrackLatency> {
  if (generator !== 'wrk') return trackEventLoad(server.url, BENCH_KEY, dids, CONNECTIONS, seconds);
  // wrk sends one body: one device, the same event (each is still a new journal record).
  const body = JSON.stringify({ did: dids[0], name: 'product_view', timestamp: 1_700_000_000_000, info: [{ name: 'sku', value: 'p1', type: 'string' }] });
  const started = performance.now();
  const r = runWrk(`${server.url}/msv_cevt`, body, { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, CONNECTIONS, seconds);
  return { requests: r.requests, p50: r.p50Ms, p99: r.p99Ms, max: r.maxMs, non2xx: r.non2xx + r.errors, seconds: (performance.now() - started) / 1000 };
}

interface MappingReport {
  ids: number;
  requests: number;
  seconds: number;
  failures: number;
}

/** Mapping clients, each its own process, looping until stopped; `started` once each had an answer. */
function mappingLoad(server: RunningServer, clients: number): { started: Promise<void>; stop(): Promise<MappingReport> } {
  const children = Array.from({ length: clients }, (_, c) =>
    spawn(process.execPath, ['--import', 'tsx', 'bench/lib/mapping-client.ts', server.url, BENCH_KEY, `bench-${c}`, String(IDS)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] }),
  );
  const starts: Array<Promise<void>> = [];
  const reports = children.map(
    (child) =>
      new Promise<MappingReport>((resolve) => {
        let out = '';
        let markStarted: () => void = () => undefined;
        starts.push(new Promise((r) => (markStarted = r)));
        child.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.startsWith('started\n')) markStarted();
        });
        child.once('close', () => {
          markStarted();
          resolve(JSON.parse(out.replace(/^started\n/, '')));
        });
      }),
  );
  return {
    started: Promise.all(starts).then(() => undefined),
    async stop() {
      for (const child of children) child.kill('SIGTERM');
      const all = await Promise.all(reports);
      return {
        ids: all.reduce((n, r) => n + r.ids, 0),
        requests: all.reduce((n, r) => n + r.requests, 0),
        failures: all.reduce((n, r) => n + r.failures, 0),
        seconds: Math.max(...all.map((r) => r.seconds)),
      };
    },
  };
}

async function run(workers: number): Promise<string> {
  const server = await startIntake({ MAPPING_WORKERS: String(workers) });
  try {
    const target = { url: server.url, key: BENCH_KEY };
    await createProducts(target, IDS);
    for (let c = 0; c < mappingClients; c++) {
      await fetch(`${server.url}/collection`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ id: `bench-${c}`, name: 'bench' }) });
    }
    const dids = await someDevices(target, 200);
    // Warm-up: track events alone, then beside the mapping clients.
    await trackEvents(server, dids);
    const warm = mappingLoad(server, mappingClients);
    await warm.started;
    await trackEvents(server, dids);
    await warm.stop();
    const without: TrackLatency[] = [];
    const withLoad: TrackLatency[] = [];
    const loads: string[] = [];
    const applied = { ids: 0, requests: 0, seconds: 0, failures: 0 };
    for (let round = 0; round < rounds; round++) {
      await sleep(500); // the last mapping of the round before is answered
      without.push(await trackEvents(server, dids));
      const quietLoad = loadAverage();
      const load = mappingLoad(server, mappingClients);
      await load.started;
      await sleep(500); // the clients' next bodies are on their way
      withLoad.push(await trackEvents(server, dids));
      loads.push(`${quietLoad.toFixed(1)} / ${loadAverage().toFixed(1)}`);
      const mapping = await load.stop();
      applied.ids += mapping.ids;
      applied.requests += mapping.requests;
      applied.failures += mapping.failures;
      applied.seconds += mapping.seconds;
    }
    const m = (list: TrackLatency[], key: 'p50' | 'p99' | 'max' | 'requests') => median(list.map((l) => l[key]));
    const ratio = m(withLoad, 'p99') / Math.max(1, m(without, 'p99'));
    return `| ${workers === 0 ? 'off (main thread)' : `${workers} worker${workers > 1 ? 's' : ''}`} | ${m(without, 'p50')} / ${m(without, 'p99')} / ${m(without, 'max')} | ${m(withLoad, 'p50')} / ${m(withLoad, 'p99')} / ${m(withLoad, 'max')} | ${ratio.toFixed(2)} (${withLoad.map((w, i) => (w.p99 / Math.max(1, without[i]!.p99)).toFixed(2)).join(', ')}) | ${Math.round(applied.ids / applied.seconds).toLocaleString('en')} (${applied.requests} requests, ${applied.failures} failed) | ${Math.round(m(without, 'requests') / seconds).toLocaleString('en')} / ${Math.round(m(withLoad, 'requests') / seconds).toLocaleString('en')} | ${loads.join(', ')} |`;
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  quiet();
  const rows: string[] = [];
  for (const workers of [1, 0]) {
    rows.push(await run(workers));
    process.stderr.write(`${rows.at(-1)}\n`);
  }
  printTable(
    `mapping ${new Date().toISOString()}: ${mappingClients} clients looping ${IDS.toLocaleString('en')}-id mapping requests (add, remove, ...) beside track events at ${CONNECTIONS} connections from ${generator === 'wrk' ? 'wrk -t1' : 'autocannon'}, ${seconds} s per measurement, medians of ${rounds} alternating rounds`,
    ['mapping parse', 'track p50 / p99 / max ms, no mappings', 'with mappings', 'p99 ratio, median (each round) — target ≤ 2', 'mapping ids applied / s', 'track req/s without / with', 'load average without / with, each round'],
    rows,
  );
}

runBench(main);
