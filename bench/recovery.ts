// Recovery time: build 1,000,000 devices, 100,000 products in 1,000 collections and 5,000,000
// events through the API (default settings: snapshots on their normal schedule), SIGKILL the
// server, then time a restart from spawn until /readyz answers 200. Target: under 5 s.
//   npm run bench:recovery -- [devices] [events]
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchDevices, productsInCollections, someDevices, trackEvents } from './lib/populate.ts';
import { BENCH_KEY, startIntake, type RunningServer } from './lib/servers.ts';
import { runBench } from './lib/report.ts';
import { RECORDS_PER_ENTITY_WRITTEN } from '../src/journal/snapshot-schedule.ts';

const devices = Number(process.argv[2] ?? 1_000_000);
const events = Number(process.argv[3] ?? 5_000_000);
const PRODUCTS = 100_000;
const COLLECTIONS = 1_000;
/**
 * The longest journal tail a restart should meet with default settings: SNAPSHOT_EVERY_RECORDS
 * (500,000) or, if more, twice as many records as the last snapshot wrote entities (the devices,
 * products and collections here), journaled since the last complete snapshot, plus what arrives
 * while the next one is written (a paced 1M-device snapshot takes up to ~10 s; at 20,000
 * writes/s, 200,000 records).
 */
const WORST_CASE_TAIL = Math.max(500_000, RECORDS_PER_ENTITY_WRITTEN * (devices + PRODUCTS + COLLECTIONS)) + 200_000;

function recoveryLog(server: RunningServer): Record<string, unknown> {
  return server.startupLogs.find((l) => String(l.msg).startsWith('recovered state'))!;
}

/** Starts the server on `dataDir` and resolves with the ms from spawn until /readyz is 200. */
async function timedStart(dataDir: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<{ ms: number; server: RunningServer }> {
  const started = performance.now();
  const server = await startIntake(extraEnv, dataDir);
  for (;;) {
    const res = await fetch(`${server.url}/readyz`).catch(() => null);
    if (res?.status === 200) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  return { ms: performance.now() - started, server };
}

async function kill(server: RunningServer): Promise<void> {
  const exited = new Promise((r) => server.child.once('exit', r));
  server.child.kill('SIGKILL');
  await exited;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'intake-recovery-'));
  try {
    const server = await startIntake({}, dataDir);
    const target = { url: server.url, key: BENCH_KEY };
    await launchDevices(target, devices);
    await productsInCollections(target, PRODUCTS, COLLECTIONS);
    const dids = await someDevices(target, 1000);
    await trackEvents(target, events, dids);
    await kill(server);
    const fileBytes = statSync(join(dataDir, 'intake.mdb')).size;

    const first = await timedStart(dataDir);
    const firstReport = recoveryLog(first.server);
    await kill(first.server);
    // Worst case: the tail grown to WORST_CASE_TAIL on a server that takes no snapshot, so the
    // restart (with default settings) replays exactly that many records.
    const filler = await timedStart(dataDir, { SNAPSHOT_EVERY_RECORDS: '0', SNAPSHOT_INTERVAL_MS: '0' });
    const fillerReport = recoveryLog(filler.server);
    const behind = Number(fillerReport.lastSeq) - Number(fillerReport.snapshotSeq);
    if (behind < WORST_CASE_TAIL) await trackEvents({ url: filler.server.url, key: BENCH_KEY }, WORST_CASE_TAIL - behind, dids);
    await kill(filler.server);
    const worst = await timedStart(dataDir);
    const worstReport = recoveryLog(worst.server);
    await kill(worst.server);
    const line = (label: string, ms: number, r: Record<string, unknown>) => [
      `${label}: restart until /readyz 200 in ${(ms / 1000).toFixed(2)} s (target < 5 s)`,
      `  snapshot ${r.snapshotId} loaded in ${r.snapshotMs} ms (covers seq ${r.snapshotSeq}, ${(Number(r.snapshotBytes) / 1e6).toFixed(1)} MB)`,
      `  journal tail replayed: ${r.records} records in ${r.replayMs} ms`,
    ];
    process.stdout.write(
      [
        `recovery ${new Date().toISOString()}: ${devices.toLocaleString('en')} devices, ${PRODUCTS.toLocaleString('en')} products in ${COLLECTIONS} collections, ${events.toLocaleString('en')} events, then SIGKILL`,
        '',
        ...line('as it fell', first.ms, firstReport),
        ...line(`worst case (tail ~${WORST_CASE_TAIL.toLocaleString('en')} records)`, worst.ms, worstReport),
        `data file (journal + snapshot + keys): ${(fileBytes / 1e6).toFixed(1)} MB`,
        '',
      ].join('\n'),
    );
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runBench(main);
