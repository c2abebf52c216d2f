// Memory per device, two ways.
//
// 1. From outside, as an operator sees it (issue 19): a fresh server per size, anonymous RSS
//    (/proc/<pid>/status RssAnon) right after start, then N app launches over 128 keep-alive
//    connections, RssAnon 1 s after the last answer; (after − before) / N. Nothing waits for a
//    GC, so this counts what V8 and malloc hold at that moment: the grown young generation,
//    garbage not collected yet, malloc arenas. Also: the same after 30 s idle, and how much of
//    the growth is malloc ([heap] and the 64 MB glibc thread arenas in /proc/<pid>/smaps; the
//    rest is V8's heap pages and other mappings). Targets: ≤ 250 bytes at 200,000 devices and
//    ≤ 220 at 1,000,000.
// 2. Settled: 10,000 warm-up launches, then 1,000,000 launches; heap and anonymous RSS growth
//    once the server's memory reducer ran a major GC (what the state itself needs); then one
//    identify (with its own customer and an attribute) and one push token per device.
// Snapshots are off during both so that their transient buffers do not count.
//   npm run bench:memory -- [devices=1000000] [outside sizes=200000,1000000] [idle seconds=30]
//   (devices 0: only the outside measurement; sizes "": only the settled one)
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { rssAnonBytes, settledMemory as settled } from './lib/memory.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, serverCommand, startIntake, type RunningServer } from './lib/servers.ts';

const devices = Number(process.argv[2] ?? 1_000_000);
const outsideSizes = (process.argv[3] ?? '200000,1000000').split(',').filter((s) => s !== '').map(Number);
const idleSeconds = Number(process.argv[4] ?? 30);
const CONNECTIONS = 128;
const NO_SNAPSHOTS = { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' };

/** Sends `count` requests built by `body(i)`; `onBody` sees each response body. */
function send(server: RunningServer, title: string, count: number, path: string, body: (i: number) => string, onBody?: (body: string) => void): Promise<void> {
  let i = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections: CONNECTIONS,
        amount: count,
        title,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
        requests: [
          {
            method: 'POST',
            path,
            setupRequest: (req) => ({ ...req, body: body(i++) }),
            ...(onBody ? { onResponse: (_status: number, responseBody: string) => onBody(responseBody) } : {}),
          },
        ],
      },
      (error, r) => (error ? reject(error) : r.non2xx > 0 || r.errors > 0 ? reject(new Error(`${title}: ${r.non2xx} non-2xx, ${r.errors} errors`)) : resolve()),
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

/**
 * `count` launches with the same body, nothing built per request (the load generator stays
 * light). Resolves with the seconds to the last answer and when it came (performance.now()):
 * autocannon calls back on its next one-second tick, up to a second after the last answer, which
 * made the rate low and "1 s after the last answer" up to 2 s (until 2026-11-30).
 */
function launches(server: RunningServer, count: number): Promise<{ seconds: number; lastAnswerAtMs: number }> {
  const started = performance.now();
  let lastAnswerAtMs = started;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: `${server.url}/mcrs_appl_v1`,
        method: 'POST',
        connections: CONNECTIONS,
        amount: count,
        title: `${count} app launches`,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
        body: LAUNCH_BODY,
      },
      (error, r) =>
        error ? reject(error) : r.non2xx > 0 || r.errors > 0 ? reject(new Error(`launches: ${r.non2xx} non-2xx, ${r.errors} errors`)) : resolve({ seconds: (lastAnswerAtMs - started) / 1000, lastAnswerAtMs }),
    );
    instance.on('response', () => {
      lastAnswerAtMs = performance.now();
    });
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

/** Anonymous memory held by glibc malloc: the main arena ([heap]) and the 64 MB thread arenas. */
function mallocBytes(pid: number): number {
  const regions: Array<{ start: bigint; end: bigint; perms: string; name: string; anon: number }> = [];
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head !== null) regions.push({ start: BigInt(`0x${head[1]}`), end: BigInt(`0x${head[2]}`), perms: head[3]!, name: head[4]!, anon: 0 });
    const anon = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (anon !== null && regions.length > 0) regions.at(-1)!.anon = Number(anon[1]) * 1024;
  }
  const ARENA = 1n << 26n;
  let total = 0;
  regions.forEach((r, i) => {
    const next = regions[i + 1];
    const arena = r.name === '' && r.start % ARENA === 0n && next !== undefined && next.perms === '---p' && next.start === r.end && next.end - r.start === ARENA;
    if (r.name === '[heap]' || arena) total += r.anon;
  });
  return total;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const perDevice = (bytes: number, n: number) => Math.round(bytes / n);
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;

/** The measurement: a fresh server, N launches, RssAnon after − before. */
async function outside(n: number): Promise<string> {
  const server = await startIntake(NO_SNAPSHOTS);
  try {
    const pid = server.child.pid!;
    await sleep(1000);
    const before = rssAnonBytes(pid);
    const mallocBefore = mallocBytes(pid);
    const { seconds, lastAnswerAtMs } = await launches(server, n);
    await sleep(Math.max(0, lastAnswerAtMs + 1000 - performance.now()));
    const after = rssAnonBytes(pid);
    const mallocAfter = mallocBytes(pid);
    await sleep(idleSeconds * 1000);
    const idle = rssAnonBytes(pid);
    const target = n <= 200_000 ? 250 : 220;
    const row = `| ${n.toLocaleString('en')} | ${Math.round(n / seconds)}/s | ${mb(before)} | ${mb(after)} | **${perDevice(after - before, n)}** (target ≤ ${target}) | ${perDevice(mallocAfter - mallocBefore, n)} | ${perDevice(idle - before, n)} |`;
    process.stderr.write(`${row}\n`);
    return row;
  } finally {
    await server.stop();
  }
}

async function settledRows(): Promise<string[]> {
  const server = await startIntake(NO_SNAPSHOTS);
  const rows: string[] = [];
  try {
    await send(server, 'warm-up launches', 10_000, '/mcrs_appl_v1', () => LAUNCH_BODY);
    const base = await settled(server);
    const dids: string[] = [];
    await send(server, `${devices} app launches`, devices, '/mcrs_appl_v1', () => LAUNCH_BODY, (body) => dids.push((JSON.parse(body) as { did: string }).did));
    const launched = await settled(server);
    rows.push(`| ${devices.toLocaleString('en')} app launches | ${perDevice(launched.heap - base.heap, devices)} | ${perDevice(launched.rss - base.rss, devices)} | ${mb(launched.heap)} | ${mb(launched.rss)} |`);
    process.stderr.write(`${rows.at(-1)}\n`);

    await send(server, `${dids.length} identifies`, dids.length, '/msv_cs_id', (i) =>
      JSON.stringify({ did: dids[i], clientCustomerId: `customer-${i}`, timestamp: 1_700_000_000_000, info: [{ name: 'email', value: `user${i}@example.com`, type: 'string' }] }),
    );
    await send(server, `${dids.length} push tokens`, dids.length, '/mpush_token', (i) =>
      JSON.stringify({ did: dids[i], type: 'fcm', token: `fcm-token-${i}-${'t'.repeat(120)}`, timestamp: 1_700_000_000_000 }),
    );
    const enriched = await settled(server);
    rows.push(`| + 1 identify (own customer, 1 attribute) and 1 push token each | ${perDevice(enriched.heap - base.heap, devices)} | ${perDevice(enriched.rss - base.rss, devices)} | ${mb(enriched.heap)} | ${mb(enriched.rss)} |`);
    process.stderr.write(`${rows.at(-1)}\n`);
  } finally {
    await server.stop();
  }
  return rows;
}

async function main(): Promise<void> {
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Node ${process.version}, server: node ${serverCommand().join(' ')}`;
  const outsideRows: string[] = [];
  for (const n of outsideSizes) outsideRows.push(await outside(n));
  const rows = devices > 0 ? await settledRows() : [];
  if (outsideRows.length > 0) {
    printTable(
      `memory from outside ${new Date().toISOString()}: ${machine}; a fresh server per row, N app launches over ${CONNECTIONS} keep-alive connections`,
      ['devices', 'rate', 'RssAnon before', 'RssAnon after', 'anonymous RSS bytes / device, 1 s after the last answer', 'of which malloc', `bytes / device after ${idleSeconds} s idle`],
      outsideRows,
      ['Targets: ≤ 250 bytes at 200,000 devices, ≤ 220 at 1,000,000 (issue 19).'],
    );
  }
  if (rows.length > 0) {
    printTable(
      `memory settled ${new Date().toISOString()}: ${machine}; growth from a warm server (10,000 launches) to after the step, once a major GC ran, divided by ${devices.toLocaleString('en')} devices`,
      ['after', 'heap bytes / device (after major GC)', 'anonymous RSS bytes / device', 'heap', 'anonymous RSS'],
      rows,
      ['Target: ≤ 250 bytes of anonymous RSS per launched device.'],
    );
  }
}

runBench(main);
