// Soak (issues 12 and 19): minutes of mixed writes from 32 connections, with both sinks on (our
// own NATS and PostgreSQL), in 10 s windows. The workload's state is bounded (a fixed set of
// devices relaunched with their did, products and collections from a fixed id space,
// Idempotency-Keys from a bounded pool, so most keyed requests are replays): only the journal
// grows. Two things must stay flat after the warm-up:
// - the rate (issue 19): by default the connections go as fast as the server answers, and the
//   late rate (the last minute) must stay within 5% of the early one (the first minute after the
//   warm-up). Because the two cores are shared with the load generator (and maybe other work),
//   each window also records the server's CPU time per request (utime + stime of every thread,
//   from /proc), which does not depend on the wall-clock rate, and the LMDB file's size and
//   B-tree/free-list figures, read from a second (read-only) handle on the environment;
// - memory (issue 12): anonymous RSS and the V8 heap after its last major GC.
// Each window's figures (with the CPU seconds of every server thread) go to stderr as JSON lines;
// the results go to bench/results/<date>-soak.md (SOAK_RESULTS_FILE: elsewhere).
//   npm run bench:soak -- [minutes=10] [ratePerSec=0 (0: as fast as it goes; else steady, paced.ts)] [warmUpSec=60]
// SOAK_SINKS=0: no sinks. SOAK_DATA_DIR=dir: start the server on that data directory (for
// example one whose journal is already big, to compare with a fresh one) and keep it.
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { open } from 'lmdb';
import { LAUNCH_INFO } from './lib/bodies.ts';
import { pacedLoad } from './lib/paced.ts';
import { cpuSeconds } from './lib/cpu.ts';
import { metricValue, rssAnonBytes } from './lib/memory.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { startOwnNats, startOwnPostgres } from './lib/sink-servers.ts';
import { upperMedian as median } from './lib/stats.ts';

const minutes = Number(process.argv[2] ?? 10);
const ratePerSec = Number(process.argv[3] ?? 0);
const warmUpSec = Number(process.argv[4] ?? 60);
const WINDOW_SEC = 10;
/** Early: the first minute after the warm-up; late: the last minute. */
const COMPARE_SEC = 60;
const CONNECTIONS = 32;
const DEVICES = 2_000;
const PRODUCTS = 500;
const COLLECTIONS = 20;
const KEYS = 5_000;
const sinks = process.env.SOAK_SINKS !== '0';
const dataDir = process.env.SOAK_DATA_DIR || undefined;

interface Window {
  atSec: number;
  requests: number;
  rate: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** 5xx answers and connection errors: there must be none. */
  errors5xx: number;
  /** Server CPU time (every thread) per answered request, µs. */
  cpuUs: number;
  /** CPU µs per request of the other processes on the machine that the bench runs. */
  otherCpuUs: { nats: number; postgres: number; loadGenerator: number };
  /** CPU seconds of the window per thread name (main thread, LMDB's, the delivery worker...). */
  threads: Record<string, number>;
  /** Mean journal commit (LMDB write until fsync) in the window, ms, and records per commit. */
  commitMs: number;
  batchRecords: number;
  fileMb: number;
  lmdb: LmdbFigures;
  rssMb: number;
  heapMb: number;
  lagNats: number;
  lagPostgres: number;
  /** 1-minute load average of the machine at the end of the window. */
  load: number;
  /** Cores busy with processes outside this bench (other work on the machine) during the window. */
  foreignCores: number;
}

interface LmdbFigures {
  /** Pages in use up to the last one written (the file may be bigger: it grows ahead). */
  usedMb: number;
  journalDepth: number;
  journalBatches: number;
  journalOverflowPages: number;
  /** The free list (LMDB's own B-tree of freed pages): records and pages it occupies. */
  freeEntries: number;
  freePages: number;
  readers: number;
}

async function post(server: RunningServer, path: string, body: unknown): Promise<any> {
  const res = await fetch(server.url + path, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** The mixed workload: one request description per call, from a bounded state space. */
function workload(dids: readonly string[]): () => { method: 'POST' | 'DELETE'; path: string; body?: string; headers?: Record<string, string> } {
  let n = 0;
  const pick = <T>(list: readonly T[]) => list[Math.floor(Math.random() * list.length)]!;
  const product = () => `p${Math.floor(Math.random() * PRODUCTS)}`;
  return () => {
    n++;
    const r = Math.random();
    const did = pick(dids);
    const keyed = Math.random() < 0.3 ? { 'idempotency-key': `soak-${Math.floor(Math.random() * KEYS)}` } : undefined;
    if (r < 0.5) return { method: 'POST', path: '/msv_cevt', body: JSON.stringify({ did, name: 'product_view', timestamp: 1700000000000, info: [{ name: 'sku', value: product(), type: 'string' }] }), ...(keyed ? { headers: keyed } : {}) };
    if (r < 0.6) return { method: 'POST', path: '/mcrs_appl_v1', body: JSON.stringify({ did, timestamp: 1700000000000, info: LAUNCH_INFO }) };
    if (r < 0.67) return { method: 'POST', path: '/msv_cs_id', body: JSON.stringify({ did, clientCustomerId: `c${n % 500}`, timestamp: 1700000000000, info: [{ name: 'tier', value: `t${n % 7}`, type: 'string' }] }) };
    if (r < 0.72) return { method: 'POST', path: '/mpush_token', body: JSON.stringify({ did, type: 'fcm', token: `token-${n % 1000}`, timestamp: 1700000000000 }) };
    if (r < 0.84) return { method: 'POST', path: '/product', body: JSON.stringify({ id: product(), name: `name ${n % 97}`, price: n % 100, status: 'inStock' }) };
    if (r < 0.87) return { method: 'DELETE', path: `/product/${product()}` };
    if (r < 0.9) return { method: 'POST', path: '/collection', body: JSON.stringify({ id: `c${Math.floor(Math.random() * COLLECTIONS)}`, name: 'sale' }) };
    // Mapping adds may name a deleted product (a 422: also part of real traffic).
    const collection = `c${Math.floor(Math.random() * COLLECTIONS)}`;
    const products = Array.from({ length: 1 + (n % 20) }, product);
    return { method: 'POST', path: `/collection/${collection}/products/${r < 0.96 ? 'add' : 'remove'}`, body: JSON.stringify({ products }) };
  };
}

type Built = { method: 'POST' | 'DELETE'; path: string; body?: string; headers: Record<string, string> };

function window(server: RunningServer, build: () => Built): Promise<{ requests: number; p50: number; p99: number; non2xx: number; errors5xx: number }> {
  if (ratePerSec > 0) {
    // A steady rate (paced.ts): until 2026-11-30 autocannon's overallRate, which sends each
    // second's quota in a burst.
    return pacedLoad({
      url: server.url,
      headers: {},
      connections: CONNECTIONS,
      ratePerSec,
      seconds: WINDOW_SEC,
      perRequest: true,
      request: () => {
        const req = build();
        return { method: req.method, path: req.path, body: Buffer.from(req.body ?? ''), headers: req.headers };
      },
    }).then((r) => {
      let non2xx = 0;
      let errors5xx = r.errors;
      for (const [status, count] of r.statuses) {
        if (status < 200 || status > 299) non2xx += count;
        if (status >= 500) errors5xx += count;
      }
      return { requests: r.requests, p50: r.p50, p99: r.p99, non2xx, errors5xx };
    });
  }
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: server.url,
        connections: CONNECTIONS,
        duration: WINDOW_SEC,
        requests: [{ setupRequest: (req) => ({ ...req, ...build() }) }],
      },
      (error, r) => {
        if (error) return reject(error);
        const stats = (r as unknown as { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats ?? {};
        const errors5xx = Object.entries(stats).filter(([code]) => code.startsWith('5')).reduce((n, [, v]) => n + v.count, 0);
        resolve({ requests: r.requests.total, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors5xx: errors5xx + r.errors });
      },
    );
  });
}

interface Scrape {
  lagNats: number;
  lagPostgres: number;
  commitSeconds: number;
  commits: number;
  records: number;
}

async function scrape(server: RunningServer): Promise<Scrape> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const value = (pattern: string) => Number(new RegExp(`^${pattern} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return {
    lagNats: value('intake_sink_lag_records\\{sink="nats"\\}'),
    lagPostgres: value('intake_sink_lag_records\\{sink="postgres"\\}'),
    commitSeconds: value('intake_journal_commit_duration_seconds_sum'),
    commits: value('intake_journal_commit_duration_seconds_count'),
    records: value('intake_journal_batch_records_sum'),
  };
}

/** utime + stime of a /proc stat line, in seconds (clock ticks of 1/100 s on Linux). */
function statCpuSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[14 - 3]) + Number(fields[15 - 3])) / 100;
}

/** CPU seconds per thread of a process, by name and thread id ("main": the main thread). */
function threadCpu(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let comm: string;
    let seconds: number;
    try {
      comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      seconds = statCpuSeconds(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
    } catch {
      continue; // the thread ended meanwhile
    }
    out[tid === String(pid) ? 'main' : `${comm}:${tid}`] = seconds;
  }
  return out;
}

function lmdbFigures(root: ReturnType<typeof open>, journal: ReturnType<ReturnType<typeof open>['openDB']>): LmdbFigures {
  const stats = root.getStats() as Record<string, any>;
  const journalStats = journal.getStats() as Record<string, any>;
  // getStats() renews this process's read snapshot: give it up at once, so it pins no pages.
  root.resetReadTxn();
  return {
    usedMb: ((stats.lastPageNumber + 1) * stats.pageSize) / 2 ** 20,
    journalDepth: journalStats.treeDepth,
    journalBatches: journalStats.entryCount,
    journalOverflowPages: journalStats.overflowPages,
    freeEntries: stats.free.entryCount,
    freePages: stats.free.treeBranchPageCount + stats.free.treeLeafPageCount + stats.free.overflowPages,
    readers: stats.numReaders,
  };
}

/** CPU seconds the whole machine has been busy (every core, every process), from /proc/stat. */
function machineBusySeconds(): number {
  const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const [user, nice, system, , , irq, softirq, steal] = ticks.map(Number);
  return (user! + nice! + system! + irq! + softirq! + steal!) / 100;
}

const mean = (values: readonly number[]) => values.reduce((a, b) => a + b, 0) / values.length;

async function main(): Promise<void> {
  const nats = sinks ? await startOwnNats() : null;
  const pg = sinks ? await startOwnPostgres({ fsync: true }) : null;
  const sinkEnv = nats !== null && pg !== null ? { SINK_NATS_URL: nats.url, SINK_NATS_STREAM: 'SOAK', SINK_POSTGRES_URL: pg.url, SINK_POSTGRES_TABLE: 'soak_events' } : {};
  const server = await startIntake(sinkEnv, dataDir);
  const pid = server.child.pid!;
  const file = join(dataDir ?? server.dataDir!, 'intake.mdb');
  const root = open({ path: file, readOnly: true });
  const journalDb = root.openDB({ name: 'journal' });
  const windows: Window[] = [];
  const started = performance.now();
  try {
    const dids: string[] = [];
    for (let i = 0; i < DEVICES; i++) dids.push((await post(server, '/mcrs_appl_v1', { timestamp: 1700000000000, info: LAUNCH_INFO })).did);
    for (let c = 0; c < COLLECTIONS; c++) await post(server, '/collection', { id: `c${c}`, name: 'sale' });
    for (let p = 0; p < PRODUCTS; p++) await post(server, '/product', { id: `p${p}`, name: 'n' });
    const next = workload(dids);
    const build = (): Built => {
      const req = next();
      return { method: req.method, path: req.path, ...(req.body === undefined ? {} : { body: req.body }), headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json', ...(req.headers ?? {}) } };
    };
    const windowsTotal = Math.ceil((minutes * 60) / WINDOW_SEC);
    let cpuBefore = cpuSeconds(pid);
    let threadsBefore = threadCpu(pid);
    let scrapeBefore = await scrape(server);
    let othersBefore = { nats: nats?.cpuSeconds() ?? 0, postgres: pg?.cpuSeconds() ?? 0, loadGenerator: process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6 };
    let machineBefore = machineBusySeconds();
    let sampledAt = performance.now();
    for (let w = 0; w < windowsTotal; w++) {
      const result = await window(server, build);
      const cpuAfter = cpuSeconds(pid);
      const threadsAfter = threadCpu(pid);
      const scrapeAfter = await scrape(server);
      const threads: Record<string, number> = {};
      for (const [name, seconds] of Object.entries(threadsAfter)) {
        const used = seconds - (threadsBefore[name] ?? 0);
        if (used >= 0.05) threads[name] = Math.round(used * 100) / 100;
      }
      const others = { nats: nats?.cpuSeconds() ?? 0, postgres: pg?.cpuSeconds() ?? 0, loadGenerator: process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6 };
      const machine = machineBusySeconds();
      const now = performance.now();
      const ours = cpuAfter - cpuBefore + (others.nats - othersBefore.nats) + (others.postgres - othersBefore.postgres) + (others.loadGenerator - othersBefore.loadGenerator);
      const foreignCores = Math.max(0, (machine - machineBefore - ours) / ((now - sampledAt) / 1000));
      machineBefore = machine;
      sampledAt = now;
      const commits = scrapeAfter.commits - scrapeBefore.commits;
      windows.push({
        atSec: Math.round((performance.now() - started) / 1000),
        ...result,
        rate: result.requests / WINDOW_SEC,
        cpuUs: ((cpuAfter - cpuBefore) / result.requests) * 1e6,
        otherCpuUs: {
          nats: Math.round(((others.nats - othersBefore.nats) / result.requests) * 1e6),
          postgres: Math.round(((others.postgres - othersBefore.postgres) / result.requests) * 1e6),
          loadGenerator: Math.round(((others.loadGenerator - othersBefore.loadGenerator) / result.requests) * 1e6),
        },
        threads,
        commitMs: ((scrapeAfter.commitSeconds - scrapeBefore.commitSeconds) / commits) * 1000,
        batchRecords: (scrapeAfter.records - scrapeBefore.records) / commits,
        fileMb: statSync(file).size / 2 ** 20,
        lmdb: lmdbFigures(root, journalDb),
        rssMb: rssAnonBytes(pid) / 2 ** 20,
        heapMb: (await metricValue(server, 'intake_heap_used_after_major_gc_bytes')) / 2 ** 20,
        lagNats: scrapeAfter.lagNats,
        lagPostgres: scrapeAfter.lagPostgres,
        load: Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]),
        foreignCores,
      });
      cpuBefore = cpuAfter;
      othersBefore = others;
      threadsBefore = threadsAfter;
      scrapeBefore = scrapeAfter;
      process.stderr.write(`${JSON.stringify(windows.at(-1))}\n`);
    }
  } finally {
    await root.close();
    await server.stop();
    await nats?.stop();
    await pg?.stop();
  }
  report(windows);
}

function report(windows: Window[]): void {
  const afterWarmUp = windows.filter((w) => w.atSec > warmUpSec);
  const early = afterWarmUp.slice(0, COMPARE_SEC / WINDOW_SEC);
  const late = windows.slice(-COMPARE_SEC / WINDOW_SEC);
  const first = afterWarmUp[0]!;
  const last = windows.at(-1)!;
  const growth = (a: number, b: number) => `${b >= a ? '+' : ''}${(((b - a) / a) * 100).toFixed(1)}%`;
  const rate = (ws: Window[]) => ws.reduce((n, w) => n + w.requests, 0) / (ws.length * WINDOW_SEC);
  const cpu = (ws: Window[]) => mean(ws.map((w) => w.cpuUs));
  const p99 = (ws: Window[]) => median(ws.map((w) => w.p99));
  const commit = (ws: Window[]) => mean(ws.map((w) => w.commitMs));
  const load = (ws: Window[]) => `${Math.min(...ws.map((w) => w.load)).toFixed(1)}–${Math.max(...ws.map((w) => w.load)).toFixed(1)}`;
  const foreign = (ws: Window[]) => mean(ws.map((w) => w.foreignCores)).toFixed(2);
  // The rate per core left to the bench (server, sinks, load generator) by other work.
  const cores = availableParallelism();
  const perCore = (ws: Window[]) => ws.reduce((n, w) => n + w.requests, 0) / ws.reduce((n, w) => n + WINDOW_SEC * Math.max(0.1, cores - w.foreignCores), 0);
  const span = (ws: Window[]) => `${ws[0]!.atSec - WINDOW_SEC}–${ws.at(-1)!.atSec} s`;
  const rows = windows.map(
    (w) =>
      `| ${w.atSec} | ${Math.round(w.rate).toLocaleString('en')} | ${w.p50} | ${w.p99} | ${w.cpuUs.toFixed(0)} | ${w.commitMs.toFixed(2)} / ${w.batchRecords.toFixed(0)} | ${w.fileMb.toFixed(0)} | ${w.lmdb.journalDepth} | ${w.lmdb.freeEntries} / ${w.lmdb.freePages} | ${w.non2xx} (${w.errors5xx}) | ${w.rssMb.toFixed(1)} | ${w.heapMb.toFixed(1)} | ${w.lagNats} / ${w.lagPostgres} | ${w.load.toFixed(2)} / ${w.foreignCores.toFixed(2)} |`,
  );
  const compare = [
    `| early (${span(early)}) | ${Math.round(rate(early)).toLocaleString('en')} | ${p99(early)} | ${cpu(early).toFixed(0)} | ${commit(early).toFixed(2)} | ${early.at(-1)!.fileMb.toFixed(0)} | ${load(early)} | ${foreign(early)} | ${Math.round(perCore(early)).toLocaleString('en')} |`,
    `| late (${span(late)}) | ${Math.round(rate(late)).toLocaleString('en')} | ${p99(late)} | ${cpu(late).toFixed(0)} | ${commit(late).toFixed(2)} | ${late.at(-1)!.fileMb.toFixed(0)} | ${load(late)} | ${foreign(late)} | ${Math.round(perCore(late)).toLocaleString('en')} |`,
    `| late ÷ early | **${(rate(late) / rate(early)).toFixed(3)}** | ${(p99(late) / p99(early)).toFixed(2)} | **${(cpu(late) / cpu(early)).toFixed(3)}** | ${(commit(late) / commit(early)).toFixed(2)} | | | | **${(perCore(late) / perCore(early)).toFixed(3)}** |`,
  ];
  const compareHeaders = ['minute', 'requests/s', 'p99 ms (median of windows)', 'server CPU µs/request', 'commit ms', 'data file MB', 'load average (1 min)', 'cores busy outside the bench', 'requests/s per core left to the bench'];
  const notes = [
    `Rate, late ÷ early: **${growth(rate(early), rate(late))}** (target: within 5%); server CPU per request ${growth(cpu(early), cpu(late))}. Data file ${last.fileMb.toFixed(0)} MB at the end (${last.lmdb.usedMb.toFixed(0)} MB of it written), ${last.lmdb.journalBatches.toLocaleString('en')} journal batches, journal B-tree depth ${first.lmdb.journalDepth} → ${last.lmdb.journalDepth}, free list ${first.lmdb.freeEntries} → ${last.lmdb.freeEntries} records in ${first.lmdb.freePages} → ${last.lmdb.freePages} pages.`,
    `The two cores are shared: "cores busy outside the bench" is the machine's busy CPU time (/proc/stat) less that of the server, NATS, PostgreSQL and the load generator, per second of the window. A rate that falls while it rises measures that other work, not the journal; the server's CPU per request rises with it too (fewer requests per event-loop turn and per commit, contended caches), so compare windows of similar outside load. The last column divides the rate by the ${cores} cores less those busy outside the bench.`,
    `After the ${warmUpSec} s warm-up: anonymous RSS ${first.rssMb.toFixed(1)} → ${last.rssMb.toFixed(1)} MB (**${growth(first.rssMb, last.rssMb)}**), heap after major GC ${first.heapMb.toFixed(1)} → ${last.heapMb.toFixed(1)} MB (**${growth(first.heapMb, last.heapMb)}**); largest RSS ${Math.max(...afterWarmUp.map((w) => w.rssMb)).toFixed(1)} MB.`,
    `p99 per ${WINDOW_SEC} s window after warm-up: min ${Math.min(...afterWarmUp.map((w) => w.p99))} ms, median ${p99(afterWarmUp)} ms, max ${Math.max(...afterWarmUp.map((w) => w.p99))} ms. Answers other than 2xx: ${windows.reduce((n, w) => n + w.non2xx, 0).toLocaleString('en')} of ${windows.reduce((n, w) => n + w.requests, 0).toLocaleString('en')} (422s, part of the mix: keyed track events reuse 5,000 Idempotency-Keys with other bodies, so most retries of a key are idempotency.reused conflicts, and mapping adds may name a deleted product); 5xx and connection errors: **${windows.reduce((n, w) => n + w.errors5xx, 0)}**.`,
  ];
  const title = `bench:soak ${new Date().toISOString()}: ${minutes} min of mixed writes from ${CONNECTIONS} connections ${ratePerSec > 0 ? `at ${ratePerSec.toLocaleString('en')}/s` : 'as fast as they are answered'}, ${sinks ? 'both sinks on' : 'no sinks'}${dataDir ? `, on ${dataDir}` : ''}`;
  const headers = ['s', 'requests/s', 'p50 ms', 'p99 ms', 'CPU µs/request', 'commit ms / records', 'data file MB', 'journal depth', 'free list records / pages', 'non-2xx (5xx)', 'anonymous RSS MB', 'heap after major GC MB', 'sink lag (NATS / PostgreSQL)', 'load average / cores busy outside the bench'];
  const compareTable = [`| ${compareHeaders.join(' | ')} |`, `|${compareHeaders.map(() => '---').join('|')}|`, ...compare];
  printTable(title, compareHeaders, compare, notes);
  mkdirSync(`${ROOT}bench/results`, { recursive: true });
  const out = process.env.SOAK_RESULTS_FILE || `${ROOT}bench/results/${new Date().toISOString().slice(0, 10)}-soak.md`;
  writeFileSync(out, [title, '', ...compareTable, '', ...notes, '', 'Every window:', '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, ''].join('\n'));
  process.stderr.write(`written to ${out}\n`);
}

runBench(main);
