// npm run bench: every write scenario at 50 and 256 connections against intake (as `npm start`
// runs it, fresh data directory), and track events against two yardsticks started by this same
// run: a bare uWebSockets.js server that only parses JSON, and that server plus group-committed
// LMDB writes (one commit in flight). Prints one table and writes it to bench/results/<date>.md.
// Track events, the figure the targets are about, are measured in interleaved rounds (bare,
// bare + LMDB, intake, bare, ...) with all three servers up, and the medians reported: on a
// small shared machine, back-to-back runs of one server drift by ±15%.
//   npm run bench -- [seconds per run] [rounds]
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { createProducts, quiet, someDevices } from './lib/populate.ts';
import { runBench } from './lib/report.ts';
import { BENCH_KEY, ROOT, startBareUws, startBareUwsLmdb, startIntake, type RunningServer } from './lib/servers.ts';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
const CONNECTIONS = [50, 256] as const;
const PRODUCTS = 100_000;
const COLLECTIONS = 1_000;

interface Scenario {
  name: string;
  /** Path and body of request number i. */
  request: (i: number) => { path: string; body: string };
}

/**
 * Requests built before the run and sent round robin: building each body in autocannon's
 * setupRequest made the load generator (which shares the two cores) the bottleneck.
 */
const POOL_SIZE = 4096;

function prebuilt(scenario: Scenario): (i: number) => { path: string; body: Buffer } {
  const pool = Array.from({ length: POOL_SIZE }, (_, i) => {
    const { path, body } = scenario.request(i);
    return { path, body: Buffer.from(body) };
  });
  return (i) => pool[i % POOL_SIZE]!;
}

interface Measured {
  scenario: string;
  server: string;
  connections: number;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  /** How many interleaved runs this row is the median of. */
  runs: number;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** One row from several runs of the same thing: median req/s and latencies, summed errors. */
function medianOf(runs: Measured[]): Measured {
  return {
    ...runs[0]!,
    rps: median(runs.map((r) => r.rps)),
    p50: median(runs.map((r) => r.p50)),
    p99: median(runs.map((r) => r.p99)),
    non2xx: runs.reduce((n, r) => n + r.non2xx, 0),
    errors: runs.reduce((n, r) => n + r.errors, 0),
    runs: runs.length,
  };
}

function measure(server: RunningServer, serverName: string, scenario: Scenario, connections: number, durationSec = seconds): Promise<Measured> {
  let i = 0;
  const next = prebuilt(scenario);
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections,
        duration: durationSec,
        title: `${serverName}: ${scenario.name} @ ${connections}`,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
        requests: [
          {
            method: 'POST',
            setupRequest: (req) => {
              const { path, body } = next(i++);
              return { ...req, path, body };
            },
          },
        ],
      },
      (error, r) =>
        error
          ? reject(error)
          : resolve({ scenario: scenario.name, server: serverName, connections, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors, runs: 1 }),
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

function scenarios(dids: readonly string[]): Scenario[] {
  const did = (i: number) => dids[i % dids.length]!;
  return [
    {
      name: 'track event',
      request: (i) => ({
        path: '/msv_cevt',
        body: JSON.stringify({ did: did(i), name: 'product_view', timestamp: 1_700_000_000_000 + i, info: [{ name: 'sku', value: `p${i % PRODUCTS}`, type: 'string' }, { name: 'qty', value: 1 + (i % 3), type: 'integer' }] }),
      }),
    },
    { name: 'app launch (new device)', request: () => ({ path: '/mcrs_appl_v1', body: LAUNCH_BODY }) },
    {
      name: 'identify',
      request: (i) => ({
        path: '/msv_cs_id',
        body: JSON.stringify({ did: did(i), clientCustomerId: `customer-${i % 10_000}`, timestamp: 1_700_000_000_000, info: [{ name: 'email', value: `user${i % 10_000}@example.com`, type: 'string' }, { name: 'plan', value: i % 2 === 0 ? 'pro' : 'free', type: 'string' }] }),
      }),
    },
    {
      name: 'push token',
      request: (i) => ({ path: '/mpush_token', body: JSON.stringify({ did: did(i), type: i % 2 === 0 ? 'fcm' : 'apns', token: `token-${i}-${'x'.repeat(100)}`, timestamp: 1_700_000_000_000 }) }),
    },
    {
      name: 'product upsert',
      request: (i) => ({
        path: '/product',
        body: JSON.stringify({ id: `p${i % PRODUCTS}`, name: `Product ${i}`, price: (i % 500) + 0.99, originalHigherPrice: (i % 500) + 5, status: i % 7 === 0 ? 'outOfStock' : 'inStock', url: `https://shop.example/p/${i}` }),
      }),
    },
    {
      name: 'mapping add (100 ids)',
      request: (i) => {
        const from = (i * 100) % PRODUCTS;
        return { path: `/collection/c${i % COLLECTIONS}/products/add`, body: JSON.stringify({ products: Array.from({ length: 100 }, (_, k) => `p${(from + k) % PRODUCTS}`) }) };
      },
    },
  ];
}

function ratio(a: number, b: number | undefined): string {
  return b === undefined || b === 0 ? '' : (a / b).toFixed(2);
}

async function main(): Promise<void> {
  quiet();
  const date = new Date();
  const results: Measured[] = [];
  const bare = await startBareUws();
  const lmdb = await startBareUwsLmdb();
  const intake = await startIntake();
  try {
    const target = { url: intake.url, key: BENCH_KEY };
    const dids = await someDevices(target, 1000);
    await createProducts(target, PRODUCTS);
    for (let c = 0; c < COLLECTIONS; c++) {
      await fetch(`${intake.url}/collection`, { method: 'POST', headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' }, body: JSON.stringify({ id: `c${c}`, name: `Collection ${c}` }) });
    }
    const all = scenarios(dids);
    const track = all[0]!;
    const servers = [
      { name: 'bare uWS', server: bare, scenario: scenarios(['yardstick-device-id-0001'])[0]! },
      { name: 'bare uWS + LMDB', server: lmdb, scenario: scenarios(['yardstick-device-id-0001'])[0]! },
      { name: 'intake', server: intake, scenario: track },
    ];
    for (const s of servers) await measure(s.server, s.name, s.scenario, 50, 2); // warm up
    const runs: Measured[] = [];
    for (let round = 0; round < rounds; round++) {
      for (const c of CONNECTIONS) for (const s of servers) runs.push(await measure(s.server, s.name, s.scenario, c));
    }
    for (const s of servers) for (const c of CONNECTIONS) results.push(medianOf(runs.filter((r) => r.server === s.name && r.connections === c)));
    for (const scenario of all.slice(1)) for (const c of CONNECTIONS) results.push(await measure(intake, 'intake', scenario, c));
  } finally {
    await Promise.all([bare.stop(), lmdb.stop(), intake.stop()]);
  }

  const find = (server: string, scenario: string, c: number) => results.find((r) => r.server === server && r.scenario === scenario && r.connections === c);
  const rows = results.map((r) => {
    const bare = find('bare uWS', 'track event', r.connections)?.rps;
    const lmdb = find('bare uWS + LMDB', 'track event', r.connections)?.rps;
    const compare = r.server === 'intake';
    return `| ${r.server} | ${r.scenario}${r.runs > 1 ? ` (median of ${r.runs})` : ''} | ${r.connections} | ${Math.round(r.rps).toLocaleString('en')} | ${r.p50} | ${r.p99} | ${r.non2xx + r.errors} | ${compare ? ratio(r.rps, bare) : ''} | ${compare ? ratio(r.rps, lmdb) : ''} |`;
  });
  const yard = (c: number) => find('bare uWS + LMDB', 'track event', c)?.rps ?? 0;
  const target = (label: string, ok: boolean, detail: string) => `- ${ok ? 'met' : 'MISSED'}: ${label} (${detail})`;
  const track = (c: number) => find('intake', 'track event', c)?.rps ?? 0;
  const launch = (c: number) => find('intake', 'app launch (new device)', c)?.rps ?? 0;
  const worstP99 = results.filter((r) => r.server === 'intake' && r.connections === 256).sort((a, b) => b.p99 - a.p99)[0]!;
  const errors = results.filter((r) => r.non2xx + r.errors > 0);
  const targets = [
    target('track event at 256 connections ≥ 90% of bare uWS + LMDB', track(256) >= 0.9 * yard(256), `${ratio(track(256), yard(256))}`),
    target('track event at 50 connections ≥ 100% of bare uWS + LMDB', track(50) >= yard(50), `${ratio(track(50), yard(50))}`),
    target('app launch ≥ 80% of bare uWS + LMDB', launch(50) >= 0.8 * yard(50) && launch(256) >= 0.8 * yard(256), `${ratio(launch(50), yard(50))} at 50, ${ratio(launch(256), yard(256))} at 256`),
    target('p99 ≤ 10 ms at 256 connections, every scenario', worstP99.p99 <= 10, `worst: ${worstP99.scenario} ${worstP99.p99} ms`),
    target('no non-2xx answers and no errors', errors.length === 0, errors.length === 0 ? 'none' : errors.map((e) => `${e.server} ${e.scenario} @${e.connections}: ${e.non2xx + e.errors}`).join('; ')),
  ];
  const markdown = [
    `# Bench ${date.toISOString()}`,
    '',
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}; load generator (autocannon) on the same machine. ${seconds} s per run after a 2 s warm-up; track events in ${rounds} interleaved rounds (medians), the other scenarios once. Command: \`npm run bench -- ${seconds} ${rounds}\`.`,
    '',
    '| server | scenario | connections | req/s | p50 ms | p99 ms | non-2xx + errors | vs bare uWS | vs bare uWS + LMDB |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    'Targets:',
    '',
    ...targets,
    '',
  ].join('\n');
  const dir = `${ROOT}bench/results`;
  mkdirSync(dir, { recursive: true });
  const file = `${dir}/${date.toISOString().slice(0, 10)}.md`;
  writeFileSync(file, markdown);
  process.stdout.write(`${markdown}\nwritten to ${file.slice(ROOT.length)}\n`);
}

runBench(main);
