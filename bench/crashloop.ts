// 20 kill-and-restart cycles under load: each cycle starts the server on the same data directory,
// runs the mixed workload (every kind of write) with snapshots being taken, SIGKILLs the server
// at a random moment, restarts it and checks that every write answered 200 is in the journal.
// At the end the recovered state is compared with the state the journal's writes produce.
//   npm run bench:crashloop -- [cycles] [clients]
import { spawnSync } from 'node:child_process';
import { canonical, modelFromRecords } from '../test/helpers/model.ts';
import { recordToken, runWorkload } from './lib/workload.ts';
import { BENCH_KEY, ROOT, scriptCommand, startIntake } from './lib/servers.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { runBench } from './lib/report.ts';

const cycles = Number(process.argv[2] ?? 20);
const clients = Number(process.argv[3] ?? 32);

function exportAll(dataDir: string, what: string): any[] {
  const out = spawnSync(process.execPath, [...scriptCommand('export'), what], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir },
    encoding: 'utf8',
    maxBuffer: 4 * 1024 * 1024 * 1024,
  });
  if (out.status !== 0) throw new Error(`export ${what} failed: ${out.stderr}`);
  return out.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'intake-crashloop-'));
  const acknowledged = new Set<string>();
  const rows: string[] = [];
  let totalLost = 0;
  try {
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const server = await startIntake({ SNAPSHOT_INTERVAL_MS: '500', SNAPSHOT_SLICE_ENTITIES: '200' }, dataDir);
      const before = acknowledged.size;
      const load = runWorkload({ url: server.url, key: BENCH_KEY }, clients, acknowledged, cycle);
      await new Promise((r) => setTimeout(r, 500 + Math.random() * 2000));
      server.child.kill('SIGKILL');
      await new Promise((r) => server.child.once('exit', r));
      load.stop();
      await load.done;
      const journaled = new Set(exportAll(dataDir, 'events').map(recordToken));
      const lost = [...acknowledged].filter((t) => !journaled.has(t)).length;
      totalLost += lost;
      rows.push(`| ${cycle} | ${acknowledged.size - before} | ${acknowledged.size} | ${acknowledged.size - lost} | ${lost} |`);
      process.stderr.write(`cycle ${cycle}: acknowledged ${acknowledged.size - before} (total ${acknowledged.size}), lost ${lost}\n`);
    }
    // A last start recovers (snapshot + tail); its state must be what the journal's writes produce.
    const server = await startIntake({}, dataDir);
    const records = exportAll(dataDir, 'events');
    const state = canonical({
      devices: exportAll(dataDir, 'devices'),
      customers: exportAll(dataDir, 'customers'),
      products: exportAll(dataDir, 'products'),
      collections: exportAll(dataDir, 'collections'),
    });
    const exact = isDeepStrictEqual(state, canonical(modelFromRecords(records)));
    server.child.kill('SIGTERM');
    await new Promise((r) => server.child.once('exit', r));
    process.stdout.write(
      [
        `crashloop ${new Date().toISOString()}: ${cycles} SIGKILL cycles, ${clients} clients, every kind of write`,
        '',
        '| cycle | acknowledged this cycle | acknowledged so far | found after restart | lost |',
        '|---|---|---|---|---|',
        ...rows,
        '',
        `acknowledged writes: ${acknowledged.size}; journal records: ${records.length}; found after restart: ${acknowledged.size - totalLost}; lost: ${totalLost}`,
        `recovered state equals the journal's writes (independent model): ${exact}`,
        '',
      ].join('\n'),
    );
    if (totalLost > 0 || !exact) process.exitCode = 1;
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runBench(main);
