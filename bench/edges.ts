// npm run bench:edges (and the end of npm run bench): edge threads (HTTP_THREADS, issue 21).
// Two intake servers, HTTP_THREADS=1 and HTTP_THREADS=2, fresh data directories, the same
// devices, measured in alternating rounds on a track event (the commonest write) and a product
// upsert:
// - at a fixed rate (autocannon, 64 connections): server CPU per request, all threads (utime +
//   stime from /proc/<pid>/stat), =2 ÷ =1 (target ≤ 1.15: the hand-off's cost); and the state
//   thread's own CPU per request (the main thread, /proc/<pid>/task/<pid>/stat) at =2 ÷ the whole
//   server's at =1 (target ≤ 0.35: one state thread then carries ≥ 3× one thread's rate);
// - saturated (wrk -t1 -c256): throughput =2 ÷ =1 (target ≥ 1.0 on these 2 cores, shared with wrk).
//   npm run bench:edges -- [seconds per run=10] [rounds=3] [ratePerSec=6000]
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpuSeconds, threadCpuSeconds } from './lib/cpu.ts';
import { pooledLoad, trackBody } from './lib/load.ts';
import { quiet, someDevices } from './lib/populate.ts';
import { runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { runWrk, wrkInstalled } from './lib/wrk.ts';
import { median } from './lib/stats.ts';

const RATE_CONNECTIONS = 64;
const SATURATION_CONNECTIONS = 256;
const SATURATION_SECONDS = 5;
const TARGET_CPU_RATIO = 1.15;
const TARGET_STATE_SHARE = 0.35;
const TARGET_THROUGHPUT_RATIO = 1.0;

interface Scenario {
  name: string;
  request: (i: number, did: (i: number) => string) => { path: string; body: string };
}

const SCENARIOS: Scenario[] = [
  { name: 'track event', request: (i, did) => ({ path: '/msv_cevt', body: trackBody(did(i), i) }) },
  { name: 'product upsert', request: (i) => ({ path: '/product', body: JSON.stringify({ id: `p${i % 10_000}`, name: `Product ${i}`, price: (i % 500) + 0.99, status: 'inStock', url: `https://shop.example/p/${i}` }) }) },
];

interface Run {
  requests: number;
  rps: number;
  p99: number;
  non2xx: number;
  cpuUs: number;
  stateUs: number;
}

async function fixedRate(server: RunningServer, scenario: Scenario, did: (i: number) => string, seconds: number, ratePerSec: number): Promise<Run> {
  const pid = server.child.pid!;
  const cpu0 = cpuSeconds(pid);
  const state0 = threadCpuSeconds(pid, pid);
  const r = await pooledLoad(server.url, BENCH_KEY, (i) => scenario.request(i, did), RATE_CONNECTIONS, ratePerSec, seconds, scenario.name);
  const n = Math.max(1, r.requests);
  return { requests: r.requests, rps: r.rps, p99: r.p99, non2xx: r.unexpected, cpuUs: ((cpuSeconds(pid) - cpu0) / n) * 1e6, stateUs: ((threadCpuSeconds(pid, pid) - state0) / n) * 1e6 };
}

function saturated(server: RunningServer, scenario: Scenario, did: (i: number) => string): Run {
  const { path, body } = scenario.request(0, did);
  const pid = server.child.pid!;
  const cpu0 = cpuSeconds(pid);
  const state0 = threadCpuSeconds(pid, pid);
  const run = runWrk(`${server.url}${path}`, body, { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, SATURATION_CONNECTIONS, SATURATION_SECONDS);
  const n = Math.max(1, run.requests);
  return { requests: run.requests, rps: run.requestsPerSec, p99: run.p99Ms, non2xx: run.non2xx + run.errors, cpuUs: ((cpuSeconds(pid) - cpu0) / n) * 1e6, stateUs: ((threadCpuSeconds(pid, pid) - state0) / n) * 1e6 };
}

const verdict = (met: boolean) => (met ? 'met' : '**missed**');

export async function edgeBench(seconds = 10, rounds = 3, ratePerSec = 6000): Promise<string> {
  quiet();
  const one = await startIntake({ HTTP_THREADS: '1' });
  const two = await startIntake({ HTTP_THREADS: '2' });
  const results: Record<string, { one: Run[]; two: Run[]; satOne: Run[]; satTwo: Run[] }> = {};
  try {
    const dids = await someDevices({ url: one.url, key: BENCH_KEY }, 1000);
    const dids2 = await someDevices({ url: two.url, key: BENCH_KEY }, 1000);
    for (let round = 0; round < rounds; round++) {
      for (const scenario of SCENARIOS) {
        const entry = (results[scenario.name] ??= { one: [], two: [], satOne: [], satTwo: [] });
        // Alternate which goes first: the second of a pair meets a warmer (or more loaded) machine.
        const order = round % 2 === 0 ? ([[one, dids, entry.one], [two, dids2, entry.two]] as const) : ([[two, dids2, entry.two], [one, dids, entry.one]] as const);
        for (const [server, d, into] of order) into.push(await fixedRate(server, scenario, (i) => d[i % d.length]!, seconds, ratePerSec));
        if (wrkInstalled() && scenario.name === 'track event') {
          const satOrder = round % 2 === 0 ? ([[one, dids, entry.satOne], [two, dids2, entry.satTwo]] as const) : ([[two, dids2, entry.satTwo], [one, dids, entry.satOne]] as const);
          for (const [server, d, into] of satOrder) into.push(saturated(server, scenario, (i) => d[i % d.length]!));
        }
      }
    }
  } finally {
    await Promise.all([one.stop(), two.stop()]);
  }
  const rows = SCENARIOS.map((s) => {
    const r = results[s.name]!;
    const cpu1 = median(r.one.map((x) => x.cpuUs));
    const cpu2 = median(r.two.map((x) => x.cpuUs));
    const state2 = median(r.two.map((x) => x.stateUs));
    const cpuRatio = cpu2 / cpu1;
    const share = state2 / cpu1;
    return `| ${s.name} | ${cpu1.toFixed(1)} | ${cpu2.toFixed(1)} | ${cpuRatio.toFixed(2)} (≤ ${TARGET_CPU_RATIO}: ${verdict(cpuRatio <= TARGET_CPU_RATIO)}) | ${state2.toFixed(1)} | ${share.toFixed(2)} (≤ ${TARGET_STATE_SHARE}: ${verdict(share <= TARGET_STATE_SHARE)}) | ${(cpu2 - cpu1).toFixed(1)} | ${median(r.one.map((x) => x.p99))} / ${median(r.two.map((x) => x.p99))} | ${r.one.concat(r.two).reduce((a, x) => a + x.non2xx, 0)} |`;
  });
  const track = results['track event']!;
  const satRow =
    track.satOne.length === 0
      ? 'wrk is not installed: the saturated regime was not measured.'
      : (() => {
          const rps1 = median(track.satOne.map((x) => x.rps));
          const rps2 = median(track.satTwo.map((x) => x.rps));
          const ratio = rps2 / rps1;
          return [
            '| scenario | =1 req/s; p99 ms; CPU µs/req | =2 req/s; p99 ms; CPU µs/req; state thread µs/req | throughput =2 ÷ =1 (target) |',
            '|---|---|---|---|',
            `| track event, wrk -t1 -c${SATURATION_CONNECTIONS}, ${SATURATION_SECONDS} s × ${rounds} | ${Math.round(rps1)}; ${median(track.satOne.map((x) => x.p99))}; ${median(track.satOne.map((x) => x.cpuUs)).toFixed(1)} | ${Math.round(rps2)}; ${median(track.satTwo.map((x) => x.p99))}; ${median(track.satTwo.map((x) => x.cpuUs)).toFixed(1)}; ${median(track.satTwo.map((x) => x.stateUs)).toFixed(1)} | ${ratio.toFixed(2)} (≥ ${TARGET_THROUGHPUT_RATIO}: ${verdict(ratio >= TARGET_THROUGHPUT_RATIO)}) |`,
          ].join('\n');
        })();
  const rounding = (runs: Run[], pick: (r: Run) => number) => runs.map((r) => pick(r).toFixed(1)).join(', ');
  return [
    `### Edge threads (HTTP_THREADS), ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `Fixed rate: ${ratePerSec}/s over ${RATE_CONNECTIONS} connections, ${seconds} s × ${rounds} alternating rounds per server (medians). CPU per request: every thread of the process; state thread: the main thread alone.`,
    '',
    '| scenario | =1 CPU µs/req | =2 CPU µs/req | =2 ÷ =1 (target) | =2 state thread µs/req | state ÷ whole at =1 (target) | hand-off cost µs/req | p99 ms =1 / =2 | non-2xx |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    satRow,
    '',
    'Rounds (CPU µs/req, =1 | =2 | =2 state): ' + SCENARIOS.map((s) => `${s.name}: ${rounding(results[s.name]!.one, (r) => r.cpuUs)} | ${rounding(results[s.name]!.two, (r) => r.cpuUs)} | ${rounding(results[s.name]!.two, (r) => r.stateUs)}`).join('; ') + '.',
    '',
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  runBench(async () => {
    const markdown = await edgeBench(Number(process.argv[2] ?? 10), Number(process.argv[3] ?? 3), Number(process.argv[4] ?? 6000));
    const dir = `${ROOT}bench/results`;
    mkdirSync(dir, { recursive: true });
    const file = `${dir}/${new Date().toISOString().slice(0, 10)}-edges.md`;
    writeFileSync(file, markdown);
    process.stdout.write(`${markdown}\nwritten to ${file.slice(ROOT.length)}\n`);
  });
}
