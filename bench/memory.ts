// Memory per device: 1,000,000 app launches through the API, then heap and anonymous RSS growth
// per device; then one identify (with its own customer and an attribute) and one push token per
// device, and the same again. Target: ≤ 250 bytes of anonymous RSS per launched device.
// Snapshots are off during the run so that their transient buffers do not count.
//   npm run bench:memory -- [devices]
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { settledMemory as settled } from './lib/memory.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, startIntake, type RunningServer } from './lib/servers.ts';

const devices = Number(process.argv[2] ?? 1_000_000);

/** Sends `count` requests built by `body(i)`; `onBody` sees each response body. */
function send(server: RunningServer, title: string, count: number, path: string, body: (i: number) => string, onBody?: (body: string) => void): Promise<void> {
  let i = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections: 128,
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

async function main(): Promise<void> {
  const server = await startIntake({ SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' });
  const rows: string[] = [];
  try {
    await send(server, 'warm-up launches', 10_000, '/mcrs_appl_v1', () => LAUNCH_BODY);
    const base = await settled(server);
    const dids: string[] = [];
    await send(server, `${devices} app launches`, devices, '/mcrs_appl_v1', () => LAUNCH_BODY, (body) => dids.push((JSON.parse(body) as { did: string }).did));
    const launched = await settled(server);
    rows.push(`| ${devices.toLocaleString('en')} app launches | ${Math.round((launched.heap - base.heap) / devices)} | ${Math.round((launched.rss - base.rss) / devices)} | ${(launched.heap / 2 ** 20).toFixed(0)} MB | ${(launched.rss / 2 ** 20).toFixed(0)} MB |`);
    process.stderr.write(`${rows.at(-1)}\n`);

    await send(server, `${dids.length} identifies`, dids.length, '/msv_cs_id', (i) =>
      JSON.stringify({ did: dids[i], clientCustomerId: `customer-${i}`, timestamp: 1_700_000_000_000, info: [{ name: 'email', value: `user${i}@example.com`, type: 'string' }] }),
    );
    await send(server, `${dids.length} push tokens`, dids.length, '/mpush_token', (i) =>
      JSON.stringify({ did: dids[i], type: 'fcm', token: `fcm-token-${i}-${'t'.repeat(120)}`, timestamp: 1_700_000_000_000 }),
    );
    const enriched = await settled(server);
    rows.push(`| + 1 identify (own customer, 1 attribute) and 1 push token each | ${Math.round((enriched.heap - base.heap) / devices)} | ${Math.round((enriched.rss - base.rss) / devices)} | ${(enriched.heap / 2 ** 20).toFixed(0)} MB | ${(enriched.rss / 2 ** 20).toFixed(0)} MB |`);
    process.stderr.write(`${rows.at(-1)}\n`);
  } finally {
    await server.stop();
  }
  printTable(
    `memory ${new Date().toISOString()}: ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Node ${process.version}; growth from a warm server (10,000 launches) to after the step, divided by ${devices.toLocaleString('en')} devices`,
    ['after', 'heap bytes / device (after major GC)', 'anonymous RSS bytes / device', 'heap', 'anonymous RSS'],
    rows,
    ['Target: ≤ 250 bytes of anonymous RSS per launched device.'],
  );
}

runBench(main);
