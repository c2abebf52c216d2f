// Recovery time: build 1,000,000 devices, 100,000 products in 1,000 collections and 5,000,000
// events through the API (default settings: snapshots on their normal schedule), SIGKILL the
// server, then time a restart from spawn until /readyz answers 200. Target: under 5 s.
//   npm run bench:recovery -- [devices] [events]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { launchDevices, productsInCollections, someDevices, trackEvents } from './lib/populate.ts';
import { BENCH_KEY, ROOT, serverCommand, startIntake } from './lib/servers.ts';
import { runBench } from './lib/report.ts';

const devices = Number(process.argv[2] ?? 1_000_000);
const events = Number(process.argv[3] ?? 5_000_000);
const PRODUCTS = 100_000;
/**
 * The longest journal tail a restart should meet with default settings: SNAPSHOT_EVERY_RECORDS
 * (500,000) journaled since the last complete snapshot, plus what arrives while the next one is
 * written (a paced 1M-device snapshot takes up to ~10 s; at 20,000 writes/s, 200,000 records).
 */
const WORST_CASE_TAIL = 700_000;

function recoveryLog(logs: string[]): Record<string, unknown> {
  return logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => String(l.msg).startsWith('recovered state'))!;
}
const COLLECTIONS = 1_000;

/** Spawns the server and resolves with the ms from spawn until /readyz is 200, and its logs. */
async function timedStart(dataDir: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<{ ms: number; url: string; logs: string[]; kill(): Promise<void> }> {
  const started = performance.now();
  const child = spawn(process.execPath, serverCommand(), {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, SERVICE_KEYS: BENCH_KEY, HOST: '127.0.0.1', PORT: '0', ...extraEnv },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const logs: string[] = [];
  const port = await new Promise<number>((resolve) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      logs.push(line);
      const entry = JSON.parse(line) as { msg: string; port?: number };
      if (entry.msg === 'listening') resolve(entry.port!);
    });
  });
  for (;;) {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null);
    if (res?.status === 200) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  return {
    ms: performance.now() - started,
    url: `http://127.0.0.1:${port}`,
    logs,
    async kill() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    },
  };
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
    server.child.kill('SIGKILL');
    await new Promise((r) => server.child.once('exit', r));
    const fileBytes = statSync(join(dataDir, 'intake.mdb')).size;

    const first = await timedStart(dataDir);
    const firstReport = recoveryLog(first.logs);
    await first.kill();
    // Worst case: the tail grown to WORST_CASE_TAIL on a server that takes no snapshot, so the
    // restart (with default settings) replays exactly that many records.
    const filler = await timedStart(dataDir, { SNAPSHOT_EVERY_RECORDS: '0', SNAPSHOT_INTERVAL_MS: '0' });
    const fillerReport = recoveryLog(filler.logs);
    const behind = Number(fillerReport.lastSeq) - Number(fillerReport.snapshotSeq);
    if (behind < WORST_CASE_TAIL) await trackEvents({ url: filler.url, key: BENCH_KEY }, WORST_CASE_TAIL - behind, dids);
    await filler.kill();
    const worst = await timedStart(dataDir);
    const worstReport = recoveryLog(worst.logs);
    await worst.kill();
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
