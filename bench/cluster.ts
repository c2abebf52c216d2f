// npm run bench:cluster: cluster mode (CONTRACT.md §12) against single-node mode, in one run.
//
// - Single node: intake as `npm start` runs it, fresh data directory.
// - Cluster: a leader and one follower (the compiled build, their own data directories), on our
//   own PostgreSQL (initdb on a free port, fsync on: honest commit costs), started by the bench.
// - CPU per request at a fixed rate: track events at RATE/s from 64 connections for SECONDS,
//   single node and leader in alternating rounds (medians). The server's utime + stime, all its
//   threads (/proc/<pid>/stat), ÷ requests answered. PostgreSQL's CPU (postmaster and every
//   backend) over the cluster round, follower catch-up included, ÷ the same requests.
// - The follower's CPU per applied record: its CPU from the start of a cluster round until it has
//   applied everything the leader committed in it, ÷ the records it applied (GET /cluster
//   appliedSeq).
// - Throughput and p99 at 256 connections: wrk -t1 -c256 (one C thread leaves the 2 cores to the
//   server more than autocannon would), single node and leader, directly, in `rounds` alternating
//   rounds (medians; every round is listed).
// - Failover stall: HAProxy (config from deploy/haproxy.cfg) in front of failoverNodes nodes (3:
//   the two above and one more follower), 4 clients sending track events through it, each in a
//   loop (an Idempotency-Key each; after a non-200 it waits 20 ms). kill -9 of the leader, then
//   the time from the kill to the first 200 through HAProxy for a request sent after the kill,
//   and the other answers the clients got meanwhile; the killed node is restarted (same data
//   directory and port) and has caught up before the next kill, so every node is back. CLUSTER_LEASE_MS is the
//   default (5000) unless set in the environment.
//
//   npm run bench:cluster -- [seconds per run=8] [rounds=3] [ratePerSec=4000] [kills=10] [saturationSeconds=5] [failoverNodes=3]
//   (a quick smoke run: npm run bench:cluster -- 3 1 2000 2 3)
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { appliedSeq, caughtUp, LocalClusterNode, waitForLeader } from './lib/cluster-nodes.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { trackBody, trackLoad } from './lib/load.ts';
import { ensureHaproxy, startHaproxy, type RunningHaproxy } from './lib/haproxy.ts';
import { someDevices } from './lib/populate.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { freePort, startOwnPostgres, type OwnServer } from './lib/sink-servers.ts';
import { runWrk, wrkInstalled, type WrkResult } from './lib/wrk.ts';
import { alternately, upperMedian as median } from './lib/stats.ts';
import { SETTINGS } from '../src/config/settings.ts';

const seconds = Number(process.argv[2] ?? 8);
const rounds = Number(process.argv[3] ?? 3);
const ratePerSec = Number(process.argv[4] ?? 4000);
const kills = Number(process.argv[5] ?? 10);
const saturationSeconds = Number(process.argv[6] ?? 5);
/**
 * Nodes behind HAProxy for the failover part: the leader and one follower of the CPU rounds, and
 * more followers started for it. With three, a killed leader leaves two followers, neither of
 * which takes over at once: the one that does not shows whether followers stay in the load
 * balancer (holding writes) through the takeover. (Before 2026-11-29: two nodes.)
 */
const failoverNodes = Number(process.argv[7] ?? 3);
if (!Number.isInteger(failoverNodes) || failoverNodes < 2) throw new Error('failoverNodes must be a whole number, at least 2');
const RATE_CONNECTIONS = 64;
const SATURATION_CONNECTIONS = 256;
const DEVICES = 200;
const LEASE_MS = Number(process.env.CLUSTER_LEASE_MS ?? 5000);
/** The failover clients' pause after an answer other than 200 (the stall's resolution). */
const RETRY_PAUSE_MS = 20;
/** Clients writing through HAProxy during the failover part, each one request at a time. */
const FAILOVER_WRITERS = 4;

const TARGETS = { throughput: 0.7, leaderCpu: 1.25, followerCpu: 0.25, stallMs: LEASE_MS + 1000 };




const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface ClusterRound {
  leaderUs: number;
  pgUs: number;
  followerUsPerRecord: number;
  records: number;
  catchUpMs: number;
  rps: number;
  unexpected: number;
  p50Ms: number;
  p99Ms: number;
}

async function singleRound(single: RunningServer, dids: readonly string[], title: string): Promise<{ us: number; rps: number; unexpected: number; p50Ms: number; p99Ms: number }> {
  const pid = single.child.pid!;
  const cpu0 = cpuSeconds(pid);
  const run = await trackLoad(single.url, BENCH_KEY, dids, RATE_CONNECTIONS, ratePerSec, seconds, title);
  return { us: ((cpuSeconds(pid) - cpu0) / Math.max(1, run.requests)) * 1e6, rps: run.rps, unexpected: run.unexpected, p50Ms: run.p50, p99Ms: run.p99 };
}

async function clusterRound(leader: LocalClusterNode, follower: LocalClusterNode, pg: OwnServer, dids: readonly string[], title: string): Promise<ClusterRound> {
  const fromSeq = await caughtUp(follower, await appliedSeq(leader));
  const leader0 = cpuSeconds(leader.pid!);
  const follower0 = cpuSeconds(follower.pid!);
  const pg0 = pg.cpuSeconds();
  const run = await trackLoad(leader.url, BENCH_KEY, dids, RATE_CONNECTIONS, ratePerSec, seconds, title);
  const leaderCpu = cpuSeconds(leader.pid!) - leader0;
  const endedAt = performance.now();
  const toSeq = await caughtUp(follower, await appliedSeq(leader));
  const catchUpMs = performance.now() - endedAt;
  const followerCpu = cpuSeconds(follower.pid!) - follower0;
  const pgCpu = pg.cpuSeconds() - pg0;
  const records = Math.max(1, toSeq - fromSeq);
  return {
    leaderUs: (leaderCpu / Math.max(1, run.requests)) * 1e6,
    pgUs: (pgCpu / Math.max(1, run.requests)) * 1e6,
    followerUsPerRecord: (followerCpu / records) * 1e6,
    records,
    catchUpMs,
    rps: run.rps,
    unexpected: run.unexpected,
    p50Ms: run.p50,
    p99Ms: run.p99,
  };
}

/**
 * FAILOVER_WRITERS clients writing through HAProxy, each in a loop; every answer is reported with
 * its send and answer times. (One client before 2026-11-29: its write held by a follower during a
 * takeover was the only request in flight, so it could not show what the others would get.)
 */
class WriteLoop {
  private stopped = false;
  private n = 0;
  /** Called with every answer: its times, status (0: no answer) and a label such as "503 from haproxy". */
  private listeners: Array<(sentAt: number, doneAt: number, status: number, label: string) => void> = [];
  readonly done: Promise<void>;
  oks = 0;

  constructor(private readonly url: string, private readonly did: string) {
    this.done = Promise.all(Array.from({ length: FAILOVER_WRITERS }, () => this.run())).then(() => undefined);
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const i = this.n++;
      const sentAt = performance.now();
      let status = 0;
      let label = '';
      try {
        const res = await fetch(`${this.url}/msv_cevt`, {
          method: 'POST',
          headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json', 'idempotency-key': `failover-${process.pid}-${i}` },
          body: trackBody(this.did, i),
          // Longer than a follower holds a write through a takeover (CLUSTER_FORWARD_TIMEOUT_MS,
          // lease + 3 s by default): at 5 s some held writes timed out here, answered later.
          signal: AbortSignal.timeout(LEASE_MS + 5_000),
        });
        status = res.status;
        // Every answer of intake carries x-request-id; haproxy's own (no server up) does not.
        label = `${status} from ${res.headers.has('x-request-id') ? 'a node' : 'haproxy'}`;
        await res.arrayBuffer();
      } catch (error) {
        status = 0;
        const cause = (error as { cause?: { code?: string } }).cause?.code;
        label = `no answer (${cause ?? (error instanceof Error ? error.name : 'error')})`;
      }
      const doneAt = performance.now();
      if (status === 200) this.oks++;
      for (const listener of this.listeners) listener(sentAt, doneAt, status, label);
      if (status !== 200) await sleep(RETRY_PAUSE_MS);
    }
  }

  /** The first 200 for a request sent at or after `since`: its answer time. Counts what came before it. */
  firstOkAfter(since: number, timeoutMs: number): Promise<{ at: number; seen: Record<string, number> }> {
    return new Promise((resolve, reject) => {
      const seen: Record<string, number> = {};
      const timer = setTimeout(() => {
        this.listeners = this.listeners.filter((l) => l !== listener);
        reject(new Error(`no 200 through haproxy within ${timeoutMs} ms of the kill`));
      }, timeoutMs);
      const listener = (sentAt: number, doneAt: number, status: number, label: string): void => {
        if (sentAt < since) return;
        if (status === 200) {
          clearTimeout(timer);
          this.listeners = this.listeners.filter((l) => l !== listener);
          resolve({ at: doneAt, seen });
        } else seen[label] = (seen[label] ?? 0) + 1;
      };
      this.listeners.push(listener);
    });
  }

  stop(): Promise<void> {
    this.stopped = true;
    return this.done;
  }
}

function describe(seen: Record<string, number>): string {
  const entries = Object.entries(seen);
  return entries.length === 0 ? 'nothing else' : entries.map(([label, n]) => `${n} × ${label}`).join(', ');
}

interface Kill {
  stallMs: number;
  killed: string;
  newLeader: string;
  /** Answers other than 200 the client got during the stall, by kind. */
  seen: Record<string, number>;
  rejoinMs: number;
}

async function failover(nodes: LocalClusterNode[], haproxy: RunningHaproxy, did: string): Promise<Kill[]> {
  const loop = new WriteLoop(haproxy.url, did);
  const results: Kill[] = [];
  try {
    for (let k = 0; k < kills; k++) {
      const leader = await waitForLeader(nodes, 60_000);
      // The loop writes through haproxy to this leader before the kill.
      await loop.firstOkAfter(performance.now(), 30_000);
      const killedAt = performance.now();
      const stall = loop.firstOkAfter(killedAt, 60_000);
      await leader.kill('SIGKILL');
      const { at, seen } = await stall;
      const newLeader = await waitForLeader(nodes, 10_000);
      const restartedAt = performance.now();
      await leader.start();
      await caughtUp(leader, await appliedSeq(newLeader));
      const rejoinMs = performance.now() - restartedAt;
      results.push({ stallMs: at - killedAt, killed: leader.name, newLeader: newLeader.name, seen, rejoinMs });
      process.stderr.write(`kill ${k + 1}/${kills}: ${leader.name} killed, ${newLeader.name} leads; first 200 through haproxy after ${Math.round(at - killedAt)} ms (meanwhile: ${describe(seen)}); ${leader.name} rejoined in ${Math.round(rejoinMs)} ms\n`);
      // Let haproxy's checks see the restarted follower before the next kill.
      await sleep(500);
    }
  } finally {
    await loop.stop();
  }
  return results;
}

async function main(): Promise<void> {
  const date = new Date();
  const work = mkdtempSync(join(tmpdir(), 'intake-bench-cluster-'));
  const haproxyBin = ensureHaproxy();
  if (!wrkInstalled()) throw new Error("wrk is not installed and could not be installed: apt-get install -y wrk");
  process.stderr.write(`node and haproxy logs: ${work} (removed at the end of a run that succeeds)\n`);
  const pg = await startOwnPostgres({ fsync: true });
  const single = await startIntake();
  const env = { CLUSTER_POSTGRES_URL: pg.url, CLUSTER_NAME: 'bench', SERVICE_KEYS: BENCH_KEY };
  const nodes: LocalClusterNode[] = [];
  for (let i = 1; i <= Math.max(2, failoverNodes); i++) {
    nodes.push(new LocalClusterNode({ name: `node${i}`, port: await freePort(), dataDir: join(work, `node${i}`), logFile: join(work, `node${i}.log`), env }));
  }
  let haproxy: RunningHaproxy | null = null;
  const singleCpu: number[] = [];
  const singleRps: number[] = [];
  /** The single node's p50 and p99 (ms) at the fixed rate, by round. */
  const singleLatency: Array<{ p50Ms: number; p99Ms: number }> = [];
  const cluster: ClusterRound[] = [];
  let unexpectedSingle = 0;
  /** CPU ms per second of the idle cluster (measured during the single-node rounds). */
  const idle = { leader: [] as number[], follower: [] as number[], pg: [] as number[] };
  /** The saturated rounds (wrk), in the order run: single node and leader alternating which goes first. */
  const saturated: Array<{ single: WrkResult; leader: WrkResult; cpu: { single: number; leader: number; pg: number; follower: number } }> = [];
  /** CPU µs per request (the follower: per record applied) in the saturated rounds. */
  let stalls: Kill[] = [];
  try {
    // node1 first, so that it leads; node2 follows.
    await nodes[0]!.start();
    const leader = await waitForLeader([nodes[0]!]);
    await nodes[1]!.start();
    const follower = nodes[1]!;
    const singleDids = await someDevices({ url: single.url, key: BENCH_KEY }, DEVICES);
    const leaderDids = await someDevices({ url: leader.url, key: BENCH_KEY }, DEVICES);

    const warm = Math.min(seconds, 5);
    await trackLoad(single.url, BENCH_KEY, singleDids, RATE_CONNECTIONS, ratePerSec, warm, 'warm-up single node');
    await trackLoad(leader.url, BENCH_KEY, leaderDids, RATE_CONNECTIONS, ratePerSec, warm, 'warm-up leader');
    for (let round = 0; round < rounds; round++) {
      const runSingle = async () => {
        // The cluster is idle meanwhile: what it costs to stand by (polls, lease renewals).
        const idle0 = { at: performance.now(), leader: cpuSeconds(leader.pid!), follower: cpuSeconds(follower.pid!), pg: pg.cpuSeconds() };
        const r = await singleRound(single, singleDids, `single node @ ${ratePerSec}/s, round ${round + 1}/${rounds}`);
        const idleSeconds = (performance.now() - idle0.at) / 1000;
        idle.leader.push(((cpuSeconds(leader.pid!) - idle0.leader) / idleSeconds) * 1000);
        idle.follower.push(((cpuSeconds(follower.pid!) - idle0.follower) / idleSeconds) * 1000);
        idle.pg.push(((pg.cpuSeconds() - idle0.pg) / idleSeconds) * 1000);
        singleCpu.push(r.us);
        singleRps.push(r.rps);
        singleLatency.push({ p50Ms: r.p50Ms, p99Ms: r.p99Ms });
        unexpectedSingle += r.unexpected;
      };
      const runCluster = async () => {
        cluster.push(await clusterRound(leader, follower, pg, leaderDids, `leader @ ${ratePerSec}/s, round ${round + 1}/${rounds}`));
      };
      await alternately(round, runSingle, runCluster);
    }

    const headers = { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' };
    const perRequest = (cpuSec: number, requests: number) => (cpuSec / Math.max(1, requests)) * 1e6;
    // One 5 s run each spread 0.57-0.81x between runs of one day (2026-11-29): as many rounds as
    // the fixed-rate part, alternating which mode goes first, and the medians.
    for (let round = 0; round < rounds; round++) {
      process.stderr.write(`wrk -t1 -c${SATURATION_CONNECTIONS} ${saturationSeconds}s, round ${round + 1}/${rounds}: ${round % 2 === 0 ? 'single node, then leader' : 'leader, then single node'}\n`);
      const runSingle = () => {
        const cpu0 = cpuSeconds(single.child.pid!);
        const result = runWrk(`${single.url}/msv_cevt`, trackBody(singleDids[0]!, round), headers, SATURATION_CONNECTIONS, saturationSeconds);
        return { result, cpuUs: perRequest(cpuSeconds(single.child.pid!) - cpu0, result.requests) };
      };
      const runLeader = async () => {
        const fromSeq = await caughtUp(follower, await appliedSeq(leader));
        const sat0 = { leader: cpuSeconds(leader.pid!), follower: cpuSeconds(follower.pid!), pg: pg.cpuSeconds() };
        const result = runWrk(`${leader.url}/msv_cevt`, trackBody(leaderDids[0]!, round), headers, SATURATION_CONNECTIONS, saturationSeconds);
        const leaderCpu = cpuSeconds(leader.pid!) - sat0.leader;
        const pgCpu = pg.cpuSeconds() - sat0.pg;
        const toSeq = await caughtUp(follower, await appliedSeq(leader));
        const followerCpu = cpuSeconds(follower.pid!) - sat0.follower;
        return { result, leader: perRequest(leaderCpu, result.requests), pg: perRequest(pgCpu, result.requests), follower: perRequest(followerCpu, toSeq - fromSeq) };
      };
      let s1: ReturnType<typeof runSingle>;
      let l1: Awaited<ReturnType<typeof runLeader>>;
      if (round % 2 === 0) {
        s1 = runSingle();
        l1 = await runLeader();
      } else {
        l1 = await runLeader();
        s1 = runSingle();
      }
      saturated.push({ single: s1.result, leader: l1.result, cpu: { single: s1.cpuUs, leader: l1.leader, pg: l1.pg, follower: l1.follower } });
    }

    // The failover's other followers, caught up before haproxy sends them anything.
    for (const extra of nodes.slice(2)) {
      await extra.start();
      await caughtUp(extra, await appliedSeq(leader));
    }
    haproxy = await startHaproxy(
      haproxyBin,
      { bind: `127.0.0.1:${await freePort()}`, servers: nodes.map((node) => ({ name: node.name, address: `127.0.0.1:${node.port}` })), statsSocket: join(work, 'haproxy.sock') },
      join(work, 'haproxy.cfg'),
      join(work, 'haproxy.log'),
    );
    if (kills > 0) stalls = await failover(nodes, haproxy, leaderDids[0]!);
  } finally {
    await haproxy?.stop();
    await Promise.all([single.stop(), ...nodes.map((node) => node.stop())]);
    for (const node of nodes) node.closeLog();
    await pg.stop();
  }

  const single1 = median(singleCpu);
  const leader1 = median(cluster.map((r) => r.leaderUs));
  const pg1 = median(cluster.map((r) => r.pgUs));
  const follower1 = median(cluster.map((r) => r.followerUsPerRecord));
  const verdict = (ok: boolean) => (ok ? 'met' : '**missed**');
  const fmt = (n: number, digits = 1) => n.toLocaleString('en', { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const cpuRatio = leader1 / single1;
  const followerRatio = follower1 / leader1;
  const rows = [
    `| CPU µs / track event at ${fmt(ratePerSec, 0)}/s: intake process | ${fmt(single1)} | ${fmt(leader1)} (leader) | ${cpuRatio.toFixed(2)}× | ≤ ${TARGETS.leaderCpu}×: ${verdict(cpuRatio <= TARGETS.leaderCpu)} |`,
    `| CPU µs / track event at ${fmt(ratePerSec, 0)}/s: PostgreSQL (fsync on, all its processes) | – | ${fmt(pg1)} | | (reported) |`,
    `| CPU µs / track event: leader + PostgreSQL | ${fmt(single1)} | ${fmt(leader1 + pg1)} | ${((leader1 + pg1) / single1).toFixed(2)}× | (reported) |`,
    `| p99 ms at ${fmt(ratePerSec, 0)}/s (p50), medians | ${fmt(median(singleLatency.map((r) => r.p99Ms)), 2)} (${fmt(median(singleLatency.map((r) => r.p50Ms)), 2)}) | ${fmt(median(cluster.map((r) => r.p99Ms)), 2)} (${fmt(median(cluster.map((r) => r.p50Ms)), 2)}) | | (reported) |`,
    `| follower CPU µs / applied record | – | ${fmt(follower1)} | ${followerRatio.toFixed(2)}× the leader's per request | ≤ ${TARGETS.followerCpu}×: ${verdict(followerRatio <= TARGETS.followerCpu)} |`,
  ];
  if (saturated.length > 0) {
    const med = (pick: (r: (typeof saturated)[number]) => number) => median(saturated.map(pick));
    const singleRps = med((r) => r.single.requestsPerSec);
    const leaderRps = med((r) => r.leader.requestsPerSec);
    const ratio = leaderRps / singleRps;
    rows.push(`| req/s at ${SATURATION_CONNECTIONS} connections (wrk -t1, ${saturationSeconds} s, median of ${saturated.length} alternating rounds) | ${fmt(singleRps, 0)} | ${fmt(leaderRps, 0)} | ${ratio.toFixed(2)}× | ≥ ${TARGETS.throughput}×: ${verdict(ratio >= TARGETS.throughput)} |`);
    rows.push(`| p99 ms at ${SATURATION_CONNECTIONS} connections (p50), medians | ${fmt(med((r) => r.single.p99Ms), 2)} (${fmt(med((r) => r.single.p50Ms), 2)}) | ${fmt(med((r) => r.leader.p99Ms), 2)} (${fmt(med((r) => r.leader.p50Ms), 2)}) | | (reported) |`);
    const c = { single: med((r) => r.cpu.single), leader: med((r) => r.cpu.leader), pg: med((r) => r.cpu.pg), follower: med((r) => r.cpu.follower) };
    const all = c.leader + c.pg + c.follower;
    rows.push(
      `| CPU µs / request at ${SATURATION_CONNECTIONS} connections: leader + PostgreSQL + follower (per record), medians | ${fmt(c.single)} | ${fmt(c.leader)} + ${fmt(c.pg)} + ${fmt(c.follower)} = ${fmt(all)} | ${(all / c.single).toFixed(2)}× | (reported) |`,
    );
  }
  if (stalls.length > 0) {
    const values = stalls.map((s) => s.stallMs);
    const med = median(values);
    rows.push(`| failover stall, kill -9 of the leader → first 200 through haproxy (${stalls.length} kills, ${failoverNodes} nodes): median / max ms | – | ${fmt(med, 0)} / ${fmt(Math.max(...values), 0)} | | median ≤ lease + 1 s = ${TARGETS.stallMs} ms: ${verdict(med <= TARGETS.stallMs)} |`);
  }
  // The message first (a stack in `err` would push it past the cut), then the line.
  const messageOf = (line: string): string => {
    try {
      return `${String((JSON.parse(line) as { msg?: unknown }).msg)} — `;
    } catch {
      return '';
    }
  };
  const errorLines = nodes.flatMap((node) => node.errorLines.map((line) => `${node.name}: ${messageOf(line)}${line.length > 300 ? `${line.slice(0, 300)}…` : line}`));
  const notes = [
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; load generators, both modes' servers, PostgreSQL 15 (our own, fsync on) and haproxy all on this machine. Command: \`npm run bench:cluster -- ${seconds} ${rounds} ${ratePerSec} ${kills} ${saturationSeconds} ${failoverNodes}\`. Cluster lease: CLUSTER_LEASE_MS = ${LEASE_MS}${process.env.CLUSTER_LEASE_MS === undefined ? ' (default)' : ''}; the leader's commit gap: CLUSTER_COMMIT_GAP_MS = ${process.env.CLUSTER_COMMIT_GAP_MS || `${SETTINGS.find((spec) => spec.key === 'clusterCommitGapMs')!.defaultValue} (default)`}.`,
    `CPU per request: utime + stime of the process (all threads) ÷ requests answered, at ${fmt(ratePerSec, 0)} track events/s from ${RATE_CONNECTIONS} connections for ${seconds} s, median of ${rounds} alternating rounds. PostgreSQL: its whole process tree over the cluster round, the follower's catch-up reads included. Follower: its CPU from the round's start until it has applied what the leader committed in it, ÷ the records it applied.`,
    `Rounds: single node µs/request ${singleCpu.map((v) => fmt(v)).join(', ')} (achieved ${singleRps.map((v) => fmt(v, 0)).join(', ')} req/s); leader µs/request ${cluster.map((r) => fmt(r.leaderUs)).join(', ')} (achieved ${cluster.map((r) => fmt(r.rps, 0)).join(', ')} req/s); PostgreSQL µs/request ${cluster.map((r) => fmt(r.pgUs)).join(', ')}; follower µs/record ${cluster.map((r) => fmt(r.followerUsPerRecord)).join(', ')} (records ${cluster.map((r) => r.records).join(', ')}; caught up ${cluster.map((r) => fmt(r.catchUpMs, 0)).join(', ')} ms after the load ended). Answers other than 200 at the fixed rate: single ${unexpectedSingle}, leader ${cluster.reduce((a, r) => a + r.unexpected, 0)}.`,
    `The idle cluster (during the single-node rounds, which load the machine too): leader ${fmt(median(idle.leader))}, follower ${fmt(median(idle.follower))}, PostgreSQL ${fmt(median(idle.pg))} CPU ms per second (lease renewals, the follower's 250 ms poll, elections); at ${fmt(ratePerSec, 0)} records/s the follower's idle share is ${fmt((median(idle.follower) / ratePerSec) * 1000)} µs per record.`,
    ...(saturated.length === 0
      ? []
      : [
          `Saturated rounds (wrk -t1 -c${SATURATION_CONNECTIONS}, ${saturationSeconds} s each; odd rounds single node first, even rounds leader first): req/s single ${saturated.map((r) => fmt(r.single.requestsPerSec, 0)).join(', ')}; leader ${saturated.map((r) => fmt(r.leader.requestsPerSec, 0)).join(', ')} (ratios ${saturated.map((r) => (r.leader.requestsPerSec / r.single.requestsPerSec).toFixed(2)).join(', ')}); CPU µs / request single ${saturated.map((r) => fmt(r.cpu.single)).join(', ')}, leader ${saturated.map((r) => fmt(r.cpu.leader)).join(', ')}, PostgreSQL ${saturated.map((r) => fmt(r.cpu.pg)).join(', ')}, follower per record ${saturated.map((r) => fmt(r.cpu.follower)).join(', ')}. wrk non-2xx and socket errors: single ${saturated.reduce((a, r) => a + r.single.non2xx + r.single.errors, 0)}, leader ${saturated.reduce((a, r) => a + r.leader.non2xx + r.leader.errors, 0)}.`,
        ]),
    ...(stalls.length === 0
      ? []
      : [
          `Failover: ${failoverNodes} nodes behind haproxy; ${FAILOVER_WRITERS} clients write through it, each in a loop (an Idempotency-Key each, ${RETRY_PAUSE_MS} ms pause after an answer other than 200); the stall is from the SIGKILL to the answer of the first 200 for a request sent after it (any client); the killed node is restarted on its data directory and has caught up before the next kill. Stalls (ms): ${stalls.map((s) => fmt(s.stallMs, 0)).join(', ')}. During the stalls the clients got: ${describe(stalls.reduce<Record<string, number>>((all, s) => { for (const [k, v] of Object.entries(s.seen)) all[k] = (all[k] ?? 0) + v; return all; }, {}))} (a 503 from haproxy: no server up). Rejoin (restart to caught up, ms): ${stalls.map((s) => fmt(s.rejoinMs, 0)).join(', ')}.`,
        ]),
    errorLines.length === 0 ? 'Node logs: no error lines.' : `Node logs: ${errorLines.length} error line(s), the first: ${errorLines.slice(0, 5).map((l) => `\`${l.replace(/`/g, "'")}\``).join('; ')}.`,
  ];
  const title = `# Bench: cluster mode vs single node, ${date.toISOString()}`;
  const headers = ['measure', 'single node', 'cluster (leader + 1 follower + PostgreSQL)', 'ratio', 'target'];
  printTable(title, headers, rows, notes.flatMap((n) => [n, '']));
  const dir = `${ROOT}bench/results`;
  mkdirSync(dir, { recursive: true });
  const file = `${dir}/${date.toISOString().slice(0, 10)}-cluster.md`;
  writeFileSync(file, [title, '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, '', ...notes.flatMap((n) => [n, '']), ''].join('\n'));
  process.stdout.write(`written to ${file.slice(ROOT.length)}\n`);
  rmSync(work, { recursive: true, force: true });
}

runBench(async () => {
  await main();
  process.exit(0);
});
