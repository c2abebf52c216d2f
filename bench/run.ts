// npm run bench: server CPU time per request, for every write scenario, for intake (as `npm start`
// runs it: the compiled build, fresh data directory) and for the bare uWebSockets.js + LMDB
// yardstick in the same run, beside throughput and p99.
//
// - CPU per request: the server's utime + stime (all its threads, /proc/<pid>/stat) over a run,
//   divided by the requests it answered, both servers at the same fixed rate (RATE/s, 64
//   connections), in interleaved rounds (medians). At saturation a slower round answers fewer
//   requests and every cost per event-loop turn then weighs more per request; on 2 cores shared
//   with the load generator a ratio of throughputs measures the client as much as the server.
// - Throughput and p99: 256 connections, autocannon.
// - The saturated regime, beside the fixed rate: wrk -t1 -c256 (one thread in C leaves the
//   server more of the machine) on track event and app launch, both servers in alternating
//   rounds: CPU per request split into user and kernel time, throughput ratio, and whether one
//   of intake's snapshots ran in a round. Saturated, many requests share each event-loop
//   wakeup, epoll_wait and journal commit, so the kernel time both servers pay per request
//   falls and intake's own JS work per request weighs more in the ratio (README, Performance).
// - Scenarios: the 200s of the targets, a mapping add of 100 ids, a track event with one schema
//   violation (422) and with a wrong key (401): refused requests must be cheap, or invalid
//   traffic is the cheapest way to load the server.
//   npm run bench -- [seconds per run=10] [rounds=3] [ratePerSec=8000] [only=name,name...]
//   (`only`: scenarios whose name contains one of these; the track event always runs, the 422
//   and 401 are compared with it; `edges`: the edge-thread scenarios of bench/edges.ts, which
//   run after the others unless `only` leaves them out)
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { cpuSeconds, cpuSplitSeconds } from './lib/cpu.ts';
import { pacedLoad } from './lib/paced.ts';
import { createProducts, quiet, someDevices } from './lib/populate.ts';
import { runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startBareUwsLmdb, startIntake, type RunningServer } from './lib/servers.ts';
import { runWrk, wrkInstalled, type WrkResult } from './lib/wrk.ts';
import { edgeBench } from './edges.ts';
import { alternately, median } from './lib/stats.ts';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
const ratePerSec = Number(process.argv[4] ?? 8000);
const only = process.argv[5]?.split(',') ?? null;
const RATE_CONNECTIONS = 64;
const SATURATION_CONNECTIONS = 256;
/** The saturated regime (wrk): rounds of this many seconds per server and scenario. */
const SATURATION_SECONDS = 5;
const SATURATION_ROUNDS = 2;
/** The idle measurement's length: CPU ticks are 10 ms, so a few seconds. */
const IDLE_SECONDS = 5;
const PRODUCTS = 10_000;
const COLLECTIONS = 100;
/** Bodies built before a run and sent round robin (building them per request loads the client). */
const POOL_SIZE = 4096;

interface Scenario {
  name: string;
  /** Path and body of request number i. */
  request: (i: number, did: (i: number) => string) => { path: string; body: string };
  key?: string;
  /** The yardstick does the same work for it (parse, journal, answer): compared with it. */
  yardstick: boolean;
  /** Its target: intake CPU ÷ yardstick CPU, or ÷ intake's 200 track event. */
  target?: { ratio: number; of: 'yardstick' | 'track event' };
  /** Measured saturated too (wrk), against the yardstick: its CPU-ratio target there. */
  saturated?: { cpuRatio: number };
}

const TS = 1_700_000_000_000;
const ALL_SCENARIOS: Scenario[] = [
  {
    name: 'track event',
    request: (i, did) => ({ path: '/msv_cevt', body: JSON.stringify({ did: did(i), name: 'product_view', timestamp: TS + i, info: [{ name: 'sku', value: `p${i % PRODUCTS}`, type: 'string' }, { name: 'qty', value: 1 + (i % 3), type: 'integer' }] }) }),
    yardstick: true,
    target: { ratio: 1.3, of: 'yardstick' },
    saturated: { cpuRatio: 1.3 },
  },
  { name: 'app launch (new device)', request: () => ({ path: '/mcrs_appl_v1', body: LAUNCH_BODY }), yardstick: true, target: { ratio: 1.6, of: 'yardstick' }, saturated: { cpuRatio: 1.6 } },
  {
    name: 'identify',
    request: (i, did) => ({ path: '/msv_cs_id', body: JSON.stringify({ did: did(i), clientCustomerId: `customer-${i % 10_000}`, timestamp: TS, info: [{ name: 'email', value: `user${i % 10_000}@example.com`, type: 'string' }, { name: 'plan', value: i % 2 === 0 ? 'pro' : 'free', type: 'string' }] }) }),
    yardstick: true,
    target: { ratio: 1.4, of: 'yardstick' },
  },
  {
    name: 'push token',
    request: (i, did) => ({ path: '/mpush_token', body: JSON.stringify({ did: did(i), type: i % 2 === 0 ? 'fcm' : 'apns', token: `token-${i}-${'x'.repeat(100)}`, timestamp: TS }) }),
    yardstick: true,
    target: { ratio: 1.4, of: 'yardstick' },
  },
  {
    name: 'product upsert',
    request: (i) => ({ path: '/product', body: JSON.stringify({ id: `p${i % PRODUCTS}`, name: `Product ${i}`, price: (i % 500) + 0.99, originalHigherPrice: (i % 500) + 5, status: i % 7 === 0 ? 'outOfStock' : 'inStock', url: `https://shop.example/p/${i}` }) }),
    yardstick: true,
    target: { ratio: 1.5, of: 'yardstick' },
  },
  {
    name: 'mapping add (100 ids)',
    request: (i) => {
      const from = (i * 100) % PRODUCTS;
      return { path: `/collection/c${i % COLLECTIONS}/products/add`, body: JSON.stringify({ products: Array.from({ length: 100 }, (_, k) => `p${(from + k) % PRODUCTS}`) }) };
    },
    yardstick: true,
  },
  {
    name: 'track event, one schema violation (422)',
    request: (i, did) => ({ path: '/msv_cevt', body: JSON.stringify({ did: did(i), name: 'x'.repeat(121), timestamp: TS + i, info: [{ name: 'sku', value: `p${i % PRODUCTS}`, type: 'string' }, { name: 'qty', value: 1 + (i % 3), type: 'integer' }] }) }),
    yardstick: false,
    target: { ratio: 1.0, of: 'track event' },
  },
  {
    name: 'track event, wrong key (401)',
    request: (i, did) => ({ path: '/msv_cevt', body: JSON.stringify({ did: did(i), name: 'product_view', timestamp: TS + i, info: [{ name: 'sku', value: `p${i % PRODUCTS}`, type: 'string' }, { name: 'qty', value: 1 + (i % 3), type: 'integer' }] }) }),
    key: 'not-a-key-of-this-server-0123456789',
    yardstick: false,
    target: { ratio: 0.5, of: 'track event' },
  },
];

const SCENARIOS = ALL_SCENARIOS.filter((s, i) => only === null || i === 0 || only.some((word) => s.name.includes(word)));

interface Run {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  /** Answers other than the expected status, and connection errors. */
  unexpected: number;
  cpuUsPerRequest: number;
}

function expectedStatus(scenario: Scenario): number {
  return scenario.key !== undefined ? 401 : scenario.name.includes('(422)') ? 422 : 200;
}

function load(server: RunningServer, scenario: Scenario, did: (i: number) => string, connections: number, rate: number | null, title: string): Promise<Run> {
  const pool = Array.from({ length: POOL_SIZE }, (_, i) => {
    const { path, body } = scenario.request(i, did);
    return { path, body: Buffer.from(body) };
  });
  let i = 0;
  const cpu0 = cpuSeconds(server.child.pid!);
  if (rate !== null) {
    // A steady rate (lib/paced.ts): autocannon's overallRate sends each second's quota in a burst.
    return pacedLoad({ url: server.url, headers: { 'x-service-key': scenario.key ?? BENCH_KEY, 'content-type': 'application/json' }, connections, ratePerSec: rate, seconds, request: (n) => pool[n % POOL_SIZE]! }).then((r) => {
      const cpu = cpuSeconds(server.child.pid!) - cpu0;
      const expected = r.statuses.get(expectedStatus(scenario)) ?? 0;
      return { requests: r.requests, rps: r.rps, p50: r.p50, p99: r.p99, unexpected: r.requests - expected + r.errors, cpuUsPerRequest: (cpu / Math.max(1, r.requests)) * 1e6 };
    });
  }
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections,
        duration: seconds,
        ...(rate === null ? {} : { overallRate: rate }),
        title,
        headers: { 'x-service-key': scenario.key ?? BENCH_KEY, 'content-type': 'application/json' },
        requests: [{ method: 'POST', setupRequest: (req) => ({ ...req, ...pool[i++ % POOL_SIZE]! }) }],
      },
      (error, r) => {
        if (error) return reject(error);
        const cpu = cpuSeconds(server.child.pid!) - cpu0;
        const stats = (r as unknown as { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats ?? {};
        const expected = stats[String(expectedStatus(scenario))]?.count ?? 0;
        resolve({ requests: r.requests.total, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, unexpected: r.requests.total - expected + r.errors, cpuUsPerRequest: (cpu / Math.max(1, r.requests.total)) * 1e6 });
      },
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

const SATURATED_THROUGHPUT_TARGET = 0.75;
const verdict = (met: boolean) => (met ? 'met' : '**missed**');
/** The middle value; of an even count, the mean of the two middle ones (of 2 rounds: their mean, not the larger). */

interface SaturatedRun extends WrkResult {
  cpuUsPerRequest: number;
  /** The same split into user and kernel time: the kernel's share (sockets, epoll, fsync) is what both servers pay alike. */
  userUsPerRequest: number;
  sysUsPerRequest: number;
  /** Snapshots intake started during the run (SNAPSHOT_EVERY_RECORDS): their CPU counts in the run's. */
  snapshots: number;
}

let snapshotsStarted = 0;

/** wrk -t1 -c256 for SATURATION_SECONDS on one scenario's first body; the server's CPU over it. */
async function wrkRun(server: RunningServer, scenario: Scenario, did: (i: number) => string): Promise<SaturatedRun> {
  const { path, body } = scenario.request(0, did);
  const headers = { 'x-service-key': scenario.key ?? BENCH_KEY, 'content-type': 'application/json' };
  const snapshots0 = snapshotsStarted;
  const cpu0 = cpuSplitSeconds(server.child.pid!);
  const run = runWrk(`${server.url}${path}`, body, headers, SATURATION_CONNECTIONS, SATURATION_SECONDS);
  const cpu1 = cpuSplitSeconds(server.child.pid!);
  // wrk ran synchronously: let the server's log lines of the run arrive.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const perRequest = (seconds: number) => (seconds / Math.max(1, run.requests)) * 1e6;
  return {
    ...run,
    cpuUsPerRequest: perRequest(cpu1.user + cpu1.sys - cpu0.user - cpu0.sys),
    userUsPerRequest: perRequest(cpu1.user - cpu0.user),
    sysUsPerRequest: perRequest(cpu1.sys - cpu0.sys),
    snapshots: snapshotsStarted - snapshots0,
  };
}

/** CPU ms a second each server spends with no request at all (timers, polls, GC), over IDLE_SECONDS. */
async function idleCpu(servers: readonly RunningServer[]): Promise<number[]> {
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const before = servers.map((s) => cpuSeconds(s.child.pid!));
  const startedAt = performance.now();
  await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
  const seconds = (performance.now() - startedAt) / 1000;
  return servers.map((s, i) => ((cpuSeconds(s.child.pid!) - before[i]!) / seconds) * 1000);
}

async function main(): Promise<void> {
  quiet();
  const date = new Date();
  const yardstick = await startBareUwsLmdb();
  const intake = await startIntake();
  intake.onLog((entry) => {
    if (entry.msg === 'snapshot started') snapshotsStarted++;
  });
  const cpu: Record<string, { intake: number[]; yardstick: number[] }> = {};
  const saturation: Record<string, { intake: Run; yardstick?: Run }> = {};
  const saturated: Record<string, { intake: SaturatedRun[]; yardstick: SaturatedRun[] }> = {};
  let idle: number[] = [];
  try {
    const target = { url: intake.url, key: BENCH_KEY };
    const dids = await someDevices(target, 1000);
    const did = (i: number) => dids[i % dids.length]!;
    await createProducts(target, PRODUCTS);
    for (let c = 0; c < COLLECTIONS; c++) {
      await fetch(`${intake.url}/collection`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ id: `c${c}`, name: `Collection ${c}` }) });
    }
    const yardDid = () => 'yardstick-device-id-01';
    await load(intake, SCENARIOS[0]!, did, RATE_CONNECTIONS, ratePerSec, 'warm-up intake');
    await load(yardstick, SCENARIOS[0]!, yardDid, RATE_CONNECTIONS, ratePerSec, 'warm-up yardstick');
    idle = await idleCpu([intake, yardstick]);
    for (let round = 0; round < rounds; round++) {
      for (const scenario of SCENARIOS) {
        const entry = (cpu[scenario.name] ??= { intake: [], yardstick: [] });
        const runYardstick = async () => {
          if (scenario.yardstick) entry.yardstick.push((await load(yardstick, scenario, yardDid, RATE_CONNECTIONS, ratePerSec, `yardstick: ${scenario.name} @ ${ratePerSec}/s`)).cpuUsPerRequest);
        };
        const runIntake = async () => {
          entry.intake.push((await load(intake, scenario, did, RATE_CONNECTIONS, ratePerSec, `intake: ${scenario.name} @ ${ratePerSec}/s`)).cpuUsPerRequest);
        };
        // Even rounds the yardstick first, odd rounds intake first (until 2026-11-29 always the
        // yardstick first, though this said "alternating"; a review).
        await alternately(round, runYardstick, runIntake);
      }
    }
    for (const scenario of SCENARIOS) {
      saturation[scenario.name] = {
        intake: await load(intake, scenario, did, SATURATION_CONNECTIONS, null, `intake: ${scenario.name} @ ${SATURATION_CONNECTIONS} connections`),
        ...(scenario.yardstick ? { yardstick: await load(yardstick, scenario, yardDid, SATURATION_CONNECTIONS, null, `yardstick: ${scenario.name} @ ${SATURATION_CONNECTIONS} connections`) } : {}),
      };
    }
    // The saturated regime: wrk -t1 -c256 (one C thread leaves the server more of the two cores
    // than autocannon does), both servers in alternating rounds, CPU per request as above.
    if (wrkInstalled()) {
      for (let round = 0; round < SATURATION_ROUNDS; round++) {
        for (const scenario of SCENARIOS.filter((s) => s.saturated !== undefined)) {
          const entry = (saturated[scenario.name] ??= { intake: [], yardstick: [] });
          await alternately(
            round,
            async () => entry.yardstick.push(await wrkRun(yardstick, scenario, yardDid)),
            async () => entry.intake.push(await wrkRun(intake, scenario, did)),
          );
        }
      }
    }
  } finally {
    await Promise.all([yardstick.stop(), intake.stop()]);
  }

  const trackCpu = median(cpu['track event']!.intake);
  const rows = SCENARIOS.map((s) => {
    const mine = median(cpu[s.name]!.intake);
    const theirs = s.yardstick ? median(cpu[s.name]!.yardstick) : null;
    const ratio = s.target?.of === 'track event' ? mine / trackCpu : theirs === null ? null : mine / theirs;
    const sat = saturation[s.name]!;
    const targetText = s.target === undefined ? '' : `${ratio!.toFixed(2)} (≤ ${s.target.ratio}${s.target.of === 'track event' ? ' × track' : ''}: ${ratio! <= s.target.ratio ? 'met' : '**missed**'})`;
    return `| ${s.name} | ${mine.toFixed(1)} | ${theirs === null ? '' : theirs.toFixed(1)} | ${targetText} | ${Math.round(sat.intake.rps).toLocaleString('en')} / ${sat.intake.p99} | ${sat.yardstick === undefined ? '' : `${Math.round(sat.yardstick.rps).toLocaleString('en')} / ${sat.yardstick.p99}`} | ${sat.intake.unexpected} |`;
  });
  const spread = (values: number[]) => values.map((v) => v.toFixed(1)).join(', ');
  const ratioOfMedians = (a: number[], b: number[]) => median(a) / median(b);
  const satRows = Object.entries(saturated).map(([name, runs]) => {
    const scenario = SCENARIOS.find((s) => s.name === name)!;
    const fixed = median(cpu[name]!.intake) / median(cpu[name]!.yardstick);
    const cpuRatio = ratioOfMedians(runs.intake.map((r) => r.cpuUsPerRequest), runs.yardstick.map((r) => r.cpuUsPerRequest));
    const rpsRatio = ratioOfMedians(runs.intake.map((r) => r.requestsPerSec), runs.yardstick.map((r) => r.requestsPerSec));
    const cell = (r: SaturatedRun[]) => `${median(r.map((x) => x.cpuUsPerRequest)).toFixed(1)} µs (user ${median(r.map((x) => x.userUsPerRequest)).toFixed(1)} + kernel ${median(r.map((x) => x.sysUsPerRequest)).toFixed(1)}); ${Math.round(median(r.map((x) => x.requestsPerSec))).toLocaleString('en')} req/s; p99 ${median(r.map((x) => x.p99Ms)).toFixed(1)} ms`;
    const non2xx = runs.intake.reduce((a, r) => a + r.non2xx + r.errors, 0);
    return `| ${name} | ${fixed.toFixed(2)} | ${cell(runs.intake)} | ${cell(runs.yardstick)} | ${cpuRatio.toFixed(2)} (≤ ${scenario.saturated!.cpuRatio}: ${verdict(cpuRatio <= scenario.saturated!.cpuRatio)}) | ${rpsRatio.toFixed(2)} (≥ ${SATURATED_THROUGHPUT_TARGET}: ${verdict(rpsRatio >= SATURATED_THROUGHPUT_TARGET)}) | ${non2xx} |`;
  });
  const satRounds = Object.entries(saturated)
    .map(([name, runs]) => `${name}: intake ${runs.intake.map((r) => `${r.cpuUsPerRequest.toFixed(1)} µs @ ${Math.round(r.requestsPerSec)}/s${r.snapshots > 0 ? ' (a snapshot ran)' : ''}`).join(', ')}; yardstick ${runs.yardstick.map((r) => `${r.cpuUsPerRequest.toFixed(1)} µs @ ${Math.round(r.requestsPerSec)}/s`).join(', ')}`)
    .join('; ');
  const satSection =
    satRows.length === 0
      ? ['wrk is not installed (apt-get install wrk): the saturated regime was not measured.']
      : [
          `Both regimes side by side. Fixed rate: the table above. Saturated: wrk -t1 -c${SATURATION_CONNECTIONS}, ${SATURATION_ROUNDS} alternating rounds of ${SATURATION_SECONDS} s per server (medians), the same first body every request.`,
          '',
          '| scenario | CPU ratio at the fixed rate | intake saturated: CPU / request; req/s; p99 | yardstick saturated | CPU ratio saturated (target) | throughput ratio (target) | intake non-2xx |',
          '|---|---|---|---|---|---|---|',
          ...satRows,
          '',
          `Saturated rounds: ${satRounds}.`,
        ];
  const markdown = [
    `# Bench ${date.toISOString()}`,
    '',
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; load generator on the same machine. Command: \`npm run bench -- ${seconds} ${rounds} ${ratePerSec}${only === null ? '' : ` ${only.join(',')}`}\`. CPU per request: the server's utime + stime (all threads) ÷ requests answered, at ${ratePerSec.toLocaleString('en')} requests/s from ${RATE_CONNECTIONS} connections, median of ${rounds} interleaved rounds of ${seconds} s. Throughput and p99: ${SATURATION_CONNECTIONS} connections, autocannon, ${seconds} s.`,
    '',
    '| scenario | intake CPU µs / request | yardstick (bare uWS + LMDB) CPU µs / request | ratio (target) | intake req/s / p99 ms at 256 | yardstick req/s / p99 ms at 256 | unexpected answers |',
    '|---|---|---|---|---|---|---|',
    ...rows,
    '',
    ...satSection,
    '',
    `Idle, after the warm-up (no request for ${IDLE_SECONDS} s, both servers at once): intake ${idle[0]!.toFixed(1)} ms of CPU a second, yardstick ${idle[1]!.toFixed(1)}. At a fixed rate this is part of every request's figure (at ${ratePerSec.toLocaleString('en')}/s, 1 ms/s is ${(1000 / ratePerSec).toFixed(2)} µs a request).`,
    '',
    'Rounds (intake CPU µs / request): ' + SCENARIOS.map((s) => `${s.name}: ${spread(cpu[s.name]!.intake)}`).join('; ') + '.',
    '',
    // Edge threads (issue 21): HTTP_THREADS=2 against =1, with the same seconds, rounds and rate
    // (bench/edges.ts; alone: npm run bench:edges). Skipped when `only` names other scenarios.
    ...(only === null || only.includes('edges') ? [await edgeBench(seconds, rounds, ratePerSec)] : []),
  ].join('\n');
  const dir = `${ROOT}bench/results`;
  mkdirSync(dir, { recursive: true });
  const file = `${dir}/${date.toISOString().slice(0, 10)}.md`;
  writeFileSync(file, markdown);
  process.stdout.write(`${markdown}\nwritten to ${file.slice(ROOT.length)}\n`);
}

runBench(main);
