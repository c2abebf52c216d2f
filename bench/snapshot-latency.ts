// Track-event latency while a snapshot of 1,000,000 devices is written: the snapshot runs in
// slices between requests, so requests should barely notice. Fills the server with devices,
// measures track events without a snapshot, then again for exactly the time a snapshot runs
// (started with SIGUSR2, ended by its "snapshot written" log). Target: p99 during < 20 ms.
//   npm run bench:snapshot -- [devices] [connections...]
import { launchDevices, someDevices } from './lib/populate.ts';
import { trackEventLoad } from './lib/load.ts';
import { printTable, runBench } from './lib/report.ts';
import { BENCH_KEY, startIntake, type RunningServer } from './lib/servers.ts';

const load = (server: RunningServer, dids: string[], connections: number, until: number | Promise<unknown>) => trackEventLoad(server.url, BENCH_KEY, dids, connections, until);

const devices = Number(process.argv[2] ?? 1_000_000);
const connectionCounts = process.argv.length > 3 ? process.argv.slice(3).map(Number) : [64, 256];

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
  printTable(
    `snapshot latency ${new Date().toISOString()}: ${devices.toLocaleString('en')} devices in memory, track events`,
    ['connections', 'without snapshot p50 / p99 / max ms', 'during snapshot p50 / p99 / max ms', 'requests during', 'snapshot', 'non-2xx'],
    rows,
  );
}

runBench(main);
