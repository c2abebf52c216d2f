// npm run bench:forwarding: followers as edges (issue 21 item 3). A leader and one follower (the
// compiled build, their own data directories) on our own PostgreSQL (initdb on a free port, fsync
// on), started by the bench. Track events at a fixed rate from 64 connections, in alternating
// rounds sent to the leader directly and to the follower, which validates and forwards them:
//
// - the follower's CPU per request (utime + stime, all threads, /proc/<pid>/stat), from the
//   round's start until it has applied what the leader committed in it. In a direct round that is
//   replication alone; in a forwarded round it adds the edge work and the forwarding. The
//   difference is what forwarding a write costs the follower;
// - the leader's CPU per request: a forwarded write (one frame per follower turn, parsed on the
//   state thread) against one sent to it directly (HTTP, parsing, validation on the leader);
// - PostgreSQL's CPU per request (its whole process tree);
// - latency p50 and p99 of a light paced client beside the load (bench/lib/paced-track.ts, its own
//   process, timed to 0.1 ms; autocannon's own figures are whole milliseconds): what forwarding adds;
// - commands per forwarded frame (the leader's intake_cluster_forward_* counters).
//
//   npm run bench:forwarding -- [seconds per run=8] [rounds=3] [ratePerSec=2000] [httpThreads=1]
//   (a quick smoke run: npm run bench:forwarding -- 3 1 1000)
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { appliedSeq, caughtUp, LocalClusterNode, waitForLeader } from './lib/cluster-nodes.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { trackLoad } from './lib/load.ts';
import { startPacedTrack } from './lib/paced-track.ts';
import { someDevices } from './lib/populate.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT } from './lib/servers.ts';
import { freePort, startOwnPostgres, type OwnServer } from './lib/sink-servers.ts';
import { alternately, upperMedian as median } from './lib/stats.ts';

const seconds = Number(process.argv[2] ?? 8);
const rounds = Number(process.argv[3] ?? 3);
const ratePerSec = Number(process.argv[4] ?? 2000);
const httpThreads = Number(process.argv[5] ?? 1);
const CONNECTIONS = 64;
const DEVICES = 200;
/** The paced client's rate beside the load: its latencies are the ones reported. */
const LATENCY_PROBE_PER_SEC = 100;




const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A counter's value from a node's /metrics (0 when absent). */
async function counter(node: LocalClusterNode, name: string): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

interface Round {
  leaderUs: number;
  followerUs: number;
  pgUs: number;
  p50: number;
  p99: number;
  /** autocannon's, whole ms. */
  loadP99: number;
  rps: number;
  unexpected: number;
  commandsPerFrame: number | null;
}

async function round(target: LocalClusterNode, leader: LocalClusterNode, follower: LocalClusterNode, pg: OwnServer, dids: readonly string[], title: string): Promise<Round> {
  await caughtUp(follower, await appliedSeq(leader));
  const frames0 = await counter(leader, 'intake_cluster_forward_frames_total');
  const commands0 = await counter(leader, 'intake_cluster_forward_commands_total');
  const cpu0 = { leader: cpuSeconds(leader.pid!), follower: cpuSeconds(follower.pid!), pg: pg.cpuSeconds() };
  const paced = startPacedTrack(target.url, BENCH_KEY, dids[0]!, LATENCY_PROBE_PER_SEC);
  const load = await trackLoad(target.url, BENCH_KEY, dids, CONNECTIONS, ratePerSec, seconds, title);
  const latency = await paced.stop();
  const leaderCpu = cpuSeconds(leader.pid!) - cpu0.leader;
  await caughtUp(follower, await appliedSeq(leader));
  const followerCpu = cpuSeconds(follower.pid!) - cpu0.follower;
  // Until the follower has applied the round's records, as the report says: its catch-up reads
  // are PostgreSQL's work too (it was read before the catch-up; found by a review).
  const pgCpu = pg.cpuSeconds() - cpu0.pg;
  const frames = (await counter(leader, 'intake_cluster_forward_frames_total')) - frames0;
  const commands = (await counter(leader, 'intake_cluster_forward_commands_total')) - commands0;
  // Both clients' requests: the servers' CPU went to all of them.
  const n = Math.max(1, load.requests + latency.sent);
  return {
    leaderUs: (leaderCpu / n) * 1e6,
    followerUs: (followerCpu / n) * 1e6,
    pgUs: (pgCpu / n) * 1e6,
    p50: latency.p50,
    p99: latency.p99,
    loadP99: load.p99,
    rps: load.rps,
    unexpected: load.unexpected + latency.non200 + latency.errors,
    commandsPerFrame: frames === 0 ? null : commands / frames,
  };
}

async function main(): Promise<void> {
  const date = new Date();
  const work = mkdtempSync(join(tmpdir(), 'intake-bench-forwarding-'));
  process.stderr.write(`node logs: ${work} (removed at the end of a run that succeeds)\n`);
  const pg = await startOwnPostgres({ fsync: true });
  const env = { CLUSTER_POSTGRES_URL: pg.url, CLUSTER_NAME: 'bench', SERVICE_KEYS: BENCH_KEY, HTTP_THREADS: String(httpThreads) };
  const leader = new LocalClusterNode({ name: 'node1', port: await freePort(), dataDir: join(work, 'node1'), logFile: join(work, 'node1.log'), env });
  const follower = new LocalClusterNode({ name: 'node2', port: await freePort(), dataDir: join(work, 'node2'), logFile: join(work, 'node2.log'), env });
  const direct: Round[] = [];
  const forwarded: Round[] = [];
  try {
    await leader.start();
    await waitForLeader([leader]);
    await follower.start();
    while (!(await follower.ready())) await sleep(50);
    const dids = await someDevices({ url: leader.url, key: BENCH_KEY }, DEVICES);
    const warm = Math.min(seconds, 5);
    await trackLoad(leader.url, BENCH_KEY, dids, CONNECTIONS, ratePerSec, warm, 'warm-up: leader');
    await trackLoad(follower.url, BENCH_KEY, dids, CONNECTIONS, ratePerSec, warm, 'warm-up: follower');
    for (let r = 0; r < rounds; r++) {
      const runDirect = async () => direct.push(await round(leader, leader, follower, pg, dids, `to the leader @ ${ratePerSec}/s, round ${r + 1}/${rounds}`));
      const runForwarded = async () => forwarded.push(await round(follower, leader, follower, pg, dids, `through the follower @ ${ratePerSec}/s, round ${r + 1}/${rounds}`));
      await alternately(r, runDirect, runForwarded);
    }
  } finally {
    await Promise.all([leader.stop(), follower.stop()]);
    leader.closeLog();
    follower.closeLog();
    await pg.stop();
  }

  const fmt = (n: number, digits = 1) => n.toLocaleString('en', { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const m = (rs: Round[], pick: (r: Round) => number) => median(rs.map(pick));
  const d = { leader: m(direct, (r) => r.leaderUs), follower: m(direct, (r) => r.followerUs), pg: m(direct, (r) => r.pgUs), p50: m(direct, (r) => r.p50), p99: m(direct, (r) => r.p99) };
  const f = { leader: m(forwarded, (r) => r.leaderUs), follower: m(forwarded, (r) => r.followerUs), pg: m(forwarded, (r) => r.pgUs), p50: m(forwarded, (r) => r.p50), p99: m(forwarded, (r) => r.p99) };
  const perFrame = forwarded.map((r) => r.commandsPerFrame).filter((v): v is number => v !== null);
  const rows = [
    `| leader CPU µs / request | ${fmt(d.leader)} | ${fmt(f.leader)} | ${(f.leader / d.leader).toFixed(2)}× |`,
    `| follower CPU µs / request (replication; + edge work and forwarding when forwarded) | ${fmt(d.follower)} | ${fmt(f.follower)} | +${fmt(f.follower - d.follower)} µs: forwarding one write |`,
    `| follower's forwarding ÷ the leader's direct request | – | ${fmt(f.follower - d.follower)} ÷ ${fmt(d.leader)} | ${((f.follower - d.follower) / d.leader).toFixed(2)}× |`,
    `| PostgreSQL CPU µs / request | ${fmt(d.pg)} | ${fmt(f.pg)} | ${(f.pg / d.pg).toFixed(2)}× |`,
    `| latency p50 ms (paced client, ${LATENCY_PROBE_PER_SEC}/s beside the load) | ${fmt(d.p50)} | ${fmt(f.p50)} | ${f.p50 >= d.p50 ? '+' : ''}${fmt(f.p50 - d.p50)} ms |`,
    `| latency p99 ms (same) | ${fmt(d.p99)} | ${fmt(f.p99)} | ${f.p99 >= d.p99 ? '+' : ''}${fmt(f.p99 - d.p99)} ms |`,
    `| commands per forwarded frame | – | ${perFrame.length === 0 ? '–' : fmt(median(perFrame))} | |`,
  ];
  const notes = [
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; the load generator (autocannon, in this process), both nodes and PostgreSQL 15 (our own, fsync on) on this machine. HTTP_THREADS=${httpThreads} on both nodes. Command: \`npm run bench:forwarding -- ${seconds} ${rounds} ${ratePerSec} ${httpThreads}\`.`,
    `Track events at ${fmt(ratePerSec, 0)}/s from ${CONNECTIONS} connections (plus ${LATENCY_PROBE_PER_SEC}/s from the paced client) for ${seconds} s per round, ${rounds} rounds each way, alternating; medians. CPU: utime + stime of each process (all threads) ÷ requests answered; the follower's and PostgreSQL's until the follower has applied the round's records.`,
    `Rounds, direct: leader µs ${direct.map((r) => fmt(r.leaderUs)).join(', ')}; follower µs ${direct.map((r) => fmt(r.followerUs)).join(', ')}; paced p50/p99 ms ${direct.map((r) => `${r.p50}/${r.p99}`).join(', ')}; autocannon p99 ms ${direct.map((r) => r.loadP99).join(', ')}; req/s ${direct.map((r) => fmt(r.rps, 0)).join(', ')}; non-200 ${direct.reduce((a, r) => a + r.unexpected, 0)}.`,
    `Rounds, forwarded: leader µs ${forwarded.map((r) => fmt(r.leaderUs)).join(', ')}; follower µs ${forwarded.map((r) => fmt(r.followerUs)).join(', ')}; paced p50/p99 ms ${forwarded.map((r) => `${r.p50}/${r.p99}`).join(', ')}; autocannon p99 ms ${forwarded.map((r) => r.loadP99).join(', ')}; req/s ${forwarded.map((r) => fmt(r.rps, 0)).join(', ')}; non-200 ${forwarded.reduce((a, r) => a + r.unexpected, 0)}; commands per frame ${perFrame.map((v) => fmt(v, 2)).join(', ')}.`,
  ];
  const title = `# Bench: writes forwarded by a follower vs sent to the leader, ${date.toISOString()}`;
  const headers = ['measure', 'to the leader', 'through the follower', 'difference'];
  printTable(title, headers, rows, notes.flatMap((n) => [n, '']));
  const dir = `${ROOT}bench/results`;
  mkdirSync(dir, { recursive: true });
  const file = `${dir}/${date.toISOString().slice(0, 10)}-forwarding-t${httpThreads}.md`;
  writeFileSync(file, [title, '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, '', ...notes.flatMap((n) => [n, '']), ''].join('\n'));
  process.stdout.write(`written to ${file.slice(ROOT.length)}\n`);
  rmSync(work, { recursive: true, force: true });
}

runBench(async () => {
  await main();
  process.exit(0);
});
