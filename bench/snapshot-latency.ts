// Track-event latency while a snapshot of 1,000,000 devices is written: the snapshot runs in
// slices between requests, so requests should barely notice. Fills the server with devices,
// measures track events without a snapshot, then again for exactly the time a snapshot runs
// (started with SIGUSR2, ended by its "snapshot written" log). Target: p99 during < 20 ms.
//   npm run bench:snapshot -- [devices] [connections...]
import autocannon from 'autocannon';
import { launchDevices, someDevices } from './lib/populate.ts';
import { BENCH_KEY, startIntake, type RunningServer } from './lib/servers.ts';

const devices = Number(process.argv[2] ?? 1_000_000);
const connectionCounts = process.argv.length > 3 ? process.argv.slice(3).map(Number) : [64, 256];

interface Measured {
  requests: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
  seconds: number;
}

function eventBody(dids: string[], i: number): string {
  return JSON.stringify({ did: dids[i % dids.length], name: 'product_view', timestamp: 1_700_000_000_000, info: [{ name: 'sku', value: `p${i % 1000}`, type: 'string' }] });
}

/** Runs track events until `until` resolves (or for `seconds`). */
function load(server: RunningServer, dids: string[], connections: number, until: Promise<unknown> | number): Promise<Measured> {
  let i = 0;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: server.url,
        connections,
        duration: typeof until === 'number' ? until : 600,
        headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
        requests: [{ method: 'POST', path: '/msv_cevt', setupRequest: (req) => ({ ...req, body: eventBody(dids, i++) }) }],
      },
      (error, r) =>
        error
          ? reject(error)
          : resolve({ requests: r.requests.total, p50: r.latency.p50, p99: r.latency.p99, max: r.latency.max, non2xx: r.non2xx, seconds: (performance.now() - started) / 1000 }),
    );
    if (typeof until !== 'number') void until.then(() => instance.stop());
  });
}

async function main(): Promise<void> {
  const server = await startIntake({ SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' });
  const written: Array<(entry: Record<string, unknown>) => void> = [];
  server.onLog((entry) => {
    if (entry.msg === 'snapshot written') for (const w of written.splice(0)) w(entry);
  });
  const rows: string[] = [];
  try {
    const target = { url: server.url, key: BENCH_KEY };
    await launchDevices(target, devices);
    const dids = await someDevices(target, 1000);
    await load(server, dids, 64, 3); // warm up
    for (const connections of connectionCounts) {
      const baseline = await load(server, dids, connections, 8);
      // Each snapshot must have something new to cover: the load above journaled events.
      const snapshotDone = new Promise<Record<string, unknown>>((resolve) => written.push(resolve));
      server.child.kill('SIGUSR2');
      const during = await load(server, dids, connections, snapshotDone);
      const snapshot = await snapshotDone;
      rows.push(
        `| ${connections} | ${baseline.p50} / ${baseline.p99} / ${baseline.max} | ${during.p50} / ${during.p99} / ${during.max} | ${during.requests} in ${during.seconds.toFixed(1)} s | ${snapshot.durationMs} ms, ${(Number(snapshot.bytes) / 1e6).toFixed(1)} MB, ${snapshot.devices} devices | ${baseline.non2xx + during.non2xx} |`,
      );
      process.stderr.write(`${rows[rows.length - 1]}\n`);
    }
  } finally {
    await server.stop();
  }
  process.stdout.write(
    [
      `snapshot latency ${new Date().toISOString()}: ${devices.toLocaleString('en')} devices in memory, track events`,
      '',
      '| connections | without snapshot p50 / p99 / max ms | during snapshot p50 / p99 / max ms | requests during | snapshot | non-2xx |',
      '|---|---|---|---|---|---|',
      ...rows,
      '',
    ].join('\n'),
  );
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
