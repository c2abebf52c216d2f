// Soak (issue 12): minutes of mixed load at a fixed rate well below saturation, with both sinks
// on (our own NATS and PostgreSQL), in 10 s windows: anonymous RSS and V8 heap (after its last
// major GC) sampled each window, p99 and non-2xx per window. The workload's state is bounded
// (a fixed set of devices relaunched with their did, products and collections from a fixed id
// space, Idempotency-Keys from a bounded pool, so most keyed requests are replays), so memory
// that keeps growing after the warm-up is a leak. Target: flat within 5% after warm-up.
//   npm run bench:soak -- [minutes=10] [ratePerSec=2000] [warmUpSec=60]
import { mkdirSync, writeFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { LAUNCH_INFO } from './lib/bodies.ts';
import { metricValue, rssAnonBytes } from './lib/memory.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startIntake, type RunningServer } from './lib/servers.ts';
import { startOwnNats, startOwnPostgres } from './lib/sink-servers.ts';

const minutes = Number(process.argv[2] ?? 10);
const ratePerSec = Number(process.argv[3] ?? 2000);
const warmUpSec = Number(process.argv[4] ?? 60);
const WINDOW_SEC = 10;
const DEVICES = 2_000;
const PRODUCTS = 500;
const COLLECTIONS = 20;
const KEYS = 5_000;

interface Window {
  atSec: number;
  requests: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** 5xx answers and connection errors: there must be none. */
  errors5xx: number;
  rssMb: number;
  heapMb: number;
  lagNats: number;
  lagPostgres: number;
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
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: server.url,
        connections: 32,
        duration: WINDOW_SEC,
        overallRate: ratePerSec,
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

async function lags(server: RunningServer): Promise<[number, number]> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const lag = (sink: string) => Number(new RegExp(`^intake_sink_lag_records\\{sink="${sink}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return [lag('nats'), lag('postgres')];
}

async function main(): Promise<void> {
  const nats = await startOwnNats();
  const pg = await startOwnPostgres({ fsync: true });
  const server = await startIntake({ SINK_NATS_URL: nats.url, SINK_NATS_STREAM: 'SOAK', SINK_POSTGRES_URL: pg.url, SINK_POSTGRES_TABLE: 'soak_events' });
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
    for (let w = 0; w < windowsTotal; w++) {
      const result = await window(server, build);
      const [lagNats, lagPostgres] = await lags(server);
      windows.push({
        atSec: Math.round((performance.now() - started) / 1000),
        ...result,
        rssMb: rssAnonBytes(server.child.pid!) / 2 ** 20,
        heapMb: (await metricValue(server, 'intake_heap_used_after_major_gc_bytes')) / 2 ** 20,
        lagNats,
        lagPostgres,
      });
      process.stderr.write(`${JSON.stringify(windows.at(-1))}\n`);
    }
  } finally {
    await server.stop();
    await nats.stop();
    await pg.stop();
  }
  const afterWarmUp = windows.filter((w) => w.atSec > warmUpSec);
  const first = afterWarmUp[0]!;
  const last = windows.at(-1)!;
  const growth = (a: number, b: number) => `${(((b - a) / a) * 100).toFixed(1)}%`;
  const p99s = afterWarmUp.map((w) => w.p99).sort((a, b) => a - b);
  const rows = windows
    .filter((w, i) => i % 6 === 5 || i === windows.length - 1)
    .map((w) => `| ${w.atSec} | ${w.requests.toLocaleString('en')} | ${w.p50} | ${w.p99} | ${w.non2xx} (${w.errors5xx}) | ${w.rssMb.toFixed(1)} | ${w.heapMb.toFixed(1)} | ${w.lagNats} / ${w.lagPostgres} |`);
  const notes = [
    `After the ${warmUpSec} s warm-up: anonymous RSS ${first.rssMb.toFixed(1)} → ${last.rssMb.toFixed(1)} MB (**${growth(first.rssMb, last.rssMb)}**), heap after major GC ${first.heapMb.toFixed(1)} → ${last.heapMb.toFixed(1)} MB (**${growth(first.heapMb, last.heapMb)}**); largest RSS ${Math.max(...afterWarmUp.map((w) => w.rssMb)).toFixed(1)} MB.`,
    `p99 per ${WINDOW_SEC} s window after warm-up: min ${p99s[0]} ms, median ${p99s[Math.floor(p99s.length / 2)]} ms, max ${p99s.at(-1)} ms. Answers other than 2xx: ${windows.reduce((n, w) => n + w.non2xx, 0).toLocaleString('en')} of ${windows.reduce((n, w) => n + w.requests, 0).toLocaleString('en')} (422s, part of the mix: keyed track events reuse 5,000 Idempotency-Keys with other bodies, so most retries of a key are idempotency.reused conflicts, and mapping adds may name a deleted product); 5xx and connection errors: **${windows.reduce((n, w) => n + w.errors5xx, 0)}**.`,
  ];
  const title = `bench:soak ${new Date().toISOString()}: ${minutes} min of mixed writes at ${ratePerSec.toLocaleString('en')}/s, both sinks on`;
  const headers = ['s', 'requests in the window', 'p50 ms', 'p99 ms', 'non-2xx (5xx)', 'anonymous RSS MB', 'heap after major GC MB', 'sink lag (NATS / PostgreSQL)'];
  printTable(title, headers, rows, notes);
  mkdirSync(`${ROOT}bench/results`, { recursive: true });
  writeFileSync(`${ROOT}bench/results/${new Date().toISOString().slice(0, 10)}-soak.md`, [title, '', `| ${headers.join(' | ')} |`, `|${headers.map(() => '---').join('|')}|`, ...rows, '', ...notes, ''].join('\n'));
}

runBench(main);
