// Delivery downstream under load (issue 9): track events at 256 connections with both sinks on
// (NATS JetStream and PostgreSQL, each our own server on a free port, PostgreSQL with fsync on)
// against the same run with sinks off, in alternating rounds; the steady delivery rate into
// each sink and its lag; then a sink outage (both servers stopped for `outageSec` while the load
// goes on) and the rate at which each sink catches up once they are back.
//   npm run bench:delivery -- [durationSec=15] [rounds=2] [outageSec=60] [connections=256]
import { writeFileSync, mkdirSync } from 'node:fs';
import { cpuSeconds } from './lib/cpu.ts';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { runLoad, type LoadResult } from './lib/load.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { startOwnNats, startOwnPostgres, type OwnServer } from './lib/sink-servers.ts';
import { upperMedian as median } from './lib/stats.ts';

const durationSec = Number(process.argv[2] ?? 15);
const rounds = Number(process.argv[3] ?? 2);
const outageSec = Number(process.argv[4] ?? 60);
const connections = Number(process.argv[5] ?? 256);
const SINKS = ['nats', 'postgres'] as const;

interface SinkSample {
  delivered: number;
  lag: number;
}

async function sinkSamples(url: string): Promise<Record<string, SinkSample>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, SinkSample> = {};
  for (const sink of SINKS) {
    const read = (name: string) => Number(new RegExp(`^${name}\\{sink="${sink}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
    out[sink] = { delivered: read('intake_sink_delivered_seq'), lag: read('intake_sink_lag_records') };
  }
  return out;
}

async function launchDid(server: RunningServer): Promise<string> {
  const res = await fetch(`${server.url}/mcrs_appl_v1`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: LAUNCH_BODY });
  return ((await res.json()) as { did: string }).did;
}

function eventBody(did: string): string {
  return JSON.stringify({ did, name: 'product_view', timestamp: 1700000000000, info: [{ name: 'sku', value: 'A-1', type: 'string' }, { name: 'qty', value: 2, type: 'integer' }] });
}

async function trackLoad(server: RunningServer, did: string, seconds: number, title: string): Promise<LoadResult> {
  return runLoad({ url: server.url, path: '/msv_cevt', body: eventBody(did), headers: { 'x-service-key': BENCH_KEY }, connections, durationSec: seconds, title });
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return (performance.now() - started) / 1000;
}

interface RoundResult {
  load: LoadResult;
  cpuUsPerRequest: number;
  /** CPU µs per request of the NATS and PostgreSQL servers (on the same cores here). */
  natsUsPerRequest: number;
  postgresUsPerRequest: number;
  /** Per sink: records confirmed during the load window ÷ its length, the largest lag sampled, seconds to drain after. */
  sinks: Record<string, { rate: number; maxLag: number; drainSec: number }> | null;
}

let streamNumber = 0;
function sinkEnv(nats: OwnServer, pg: OwnServer): Record<string, string> {
  streamNumber++;
  return {
    SINK_NATS_URL: nats.url,
    SINK_NATS_STREAM: `BENCH_${streamNumber}`,
    SINK_NATS_SUBJECT_PREFIX: `bench${streamNumber}`,
    SINK_POSTGRES_URL: pg.url,
    SINK_POSTGRES_TABLE: `bench_${streamNumber}`,
  };
}

async function round(withSinks: boolean, nats: OwnServer, pg: OwnServer): Promise<RoundResult> {
  const server = await startIntake(withSinks ? sinkEnv(nats, pg) : {});
  try {
    const did = await launchDid(server);
    const pid = server.child.pid!;
    const first = withSinks ? await sinkSamples(server.url) : null;
    const maxLag: Record<string, number> = { nats: 0, postgres: 0 };
    let sampling = withSinks;
    const sampler = (async () => {
      while (sampling) {
        await new Promise((resolve) => setTimeout(resolve, 500));
        if (!sampling) break;
        const s = await sinkSamples(server.url);
        for (const sink of SINKS) maxLag[sink] = Math.max(maxLag[sink]!, s[sink]!.lag);
      }
    })();
    const cpu0 = cpuSeconds(pid);
    const nats0 = nats.cpuSeconds();
    const pg0 = pg.cpuSeconds();
    const started = performance.now();
    const load = await trackLoad(server, did, durationSec, withSinks ? 'intake, sinks on' : 'intake, sinks off');
    const seconds = (performance.now() - started) / 1000;
    const cpu = cpuSeconds(pid) - cpu0;
    const natsCpu = nats.cpuSeconds() - nats0;
    const pgCpu = pg.cpuSeconds() - pg0;
    sampling = false;
    await sampler;
    let sinks: RoundResult['sinks'] = null;
    if (withSinks) {
      const end = await sinkSamples(server.url);
      sinks = {};
      for (const sink of SINKS) {
        const drainSec = await until(`${sink} drained`, async () => (await sinkSamples(server.url))[sink]!.lag === 0, 600_000);
        sinks[sink] = { rate: (end[sink]!.delivered - first![sink]!.delivered) / seconds, maxLag: Math.max(maxLag[sink]!, end[sink]!.lag), drainSec };
      }
    }
    return { load, cpuUsPerRequest: (cpu / load.total) * 1e6, natsUsPerRequest: (natsCpu / load.total) * 1e6, postgresUsPerRequest: (pgCpu / load.total) * 1e6, sinks };
  } finally {
    await server.stop();
  }
}

async function outage(nats: OwnServer, pg: OwnServer): Promise<{ backlog: Record<string, number>; catchUp: Record<string, { seconds: number; rate: number }>; load: LoadResult }> {
  const server = await startIntake(sinkEnv(nats, pg));
  try {
    const did = await launchDid(server);
    await nats.stop();
    await pg.stop();
    const load = await trackLoad(server, did, outageSec, `sinks down for ${outageSec} s`);
    const backlog = await sinkSamples(server.url);
    await nats.start();
    await pg.start();
    const catchUp: Record<string, { seconds: number; rate: number }> = {};
    await Promise.all(
      SINKS.map(async (sink) => {
        const seconds = await until(`${sink} caught up`, async () => (await sinkSamples(server.url))[sink]!.lag === 0, 1_800_000);
        catchUp[sink] = { seconds, rate: backlog[sink]!.lag / seconds };
      }),
    );
    return { backlog: { nats: backlog.nats!.lag, postgres: backlog.postgres!.lag }, catchUp, load };
  } finally {
    await server.stop();
  }
}


async function main(): Promise<void> {
  const nats = await startOwnNats();
  const pg = await startOwnPostgres({ fsync: true });
  const off: RoundResult[] = [];
  const on: RoundResult[] = [];
  for (let r = 0; r < rounds; r++) {
    off.push(await round(false, nats, pg));
    on.push(await round(true, nats, pg));
  }
  const down = await outage(nats, pg);
  await nats.stop();
  await pg.stop();

  const reqs = (rs: RoundResult[]) => median(rs.map((r) => r.load.requestsPerSec));
  const p99 = (rs: RoundResult[]) => median(rs.map((r) => r.load.p99Ms));
  const cpu = (rs: RoundResult[]) => median(rs.map((r) => r.cpuUsPerRequest));
  const non2xx = (rs: RoundResult[]) => rs.reduce((n, r) => n + r.load.non2xx + r.load.errors, 0);
  const when = new Date().toISOString();
  const sinkCpu = (sink: string) => median(on.map((r) => (sink === 'nats' ? r.natsUsPerRequest : r.postgresUsPerRequest)));
  const rows = [
    `| sinks off | ${Math.round(reqs(off)).toLocaleString('en')} | ${p99(off)} | ${cpu(off).toFixed(1)} | | ${non2xx(off)} | | | |`,
    ...SINKS.map(
      (sink, i) =>
        `| sinks on: ${sink} | ${i === 0 ? Math.round(reqs(on)).toLocaleString('en') : ''} | ${i === 0 ? p99(on) : ''} | ${i === 0 ? cpu(on).toFixed(1) : ''} | ${sinkCpu(sink).toFixed(1)} | ${i === 0 ? non2xx(on) : ''} | ${Math.round(median(on.map((r) => r.sinks![sink]!.rate))).toLocaleString('en')} | ${median(on.map((r) => r.sinks![sink]!.maxLag)).toLocaleString('en')} | ${median(on.map((r) => r.sinks![sink]!.drainSec)).toFixed(1)} |`,
    ),
  ];
  const ratio = reqs(on) / reqs(off);
  const notes = [
    `Throughput with sinks on / off: **${ratio.toFixed(2)}** (rounds: ${on.map((r, i) => (r.load.requestsPerSec / off[i]!.load.requestsPerSec).toFixed(2)).join(', ')}).`,
    `Outage: both sink servers stopped for ${outageSec} s under the same load (${Math.round(down.load.requestsPerSec).toLocaleString('en')} req/s, p99 ${down.load.p99Ms} ms, non-2xx ${down.load.non2xx + down.load.errors}), then started: ` +
      SINKS.map((sink) => `${sink} caught up ${down.backlog[sink]!.toLocaleString('en')} records in ${down.catchUp[sink]!.seconds.toFixed(1)} s (**${Math.round(down.catchUp[sink]!.rate).toLocaleString('en')} records/s**)`).join('; ') +
      '.',
  ];
  const title = `bench:delivery, track events, ${connections} connections, ${durationSec} s × ${rounds} rounds, ${when}`;
  const headers = ['intake', 'req/s', 'p99 ms', 'intake CPU µs/request (all threads)', 'sink server CPU µs/request', 'non-2xx', 'delivered records/s during the load', 'largest lag (records)', 'drained after the load (s)'];
  printTable(title, headers, rows, notes);
  mkdirSync(`${ROOT}bench/results`, { recursive: true });
  writeFileSync(`${ROOT}bench/results/${when.slice(0, 10)}-delivery.md`, [title, '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, '', ...notes, ''].join('\n'));
}

runBench(main);
