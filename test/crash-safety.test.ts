// Crash safety (CONTRACT.md §7): concurrent writes of every kind, snapshots being taken all the
// time, SIGKILL mid-load, restart. Every write answered 200 must be in the journal, and the
// recovered state (snapshot + journal tail) must equal what the journal's writes produce, as
// computed by an independent model of §6.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { recordToken, runWorkload } from '../bench/lib/workload.ts';
import { canonical, modelFromRecords } from './helpers/model.ts';
import { exportLines, KEY_A, startServer, tempDataDir } from './helpers/server.ts';

const SNAPSHOTS_OFTEN = { SNAPSHOT_INTERVAL_MS: '150', SNAPSHOT_SLICE_ENTITIES: '50' };

function exportedState(dataDir: string) {
  return canonical({
    devices: exportLines(dataDir, 'devices'),
    customers: exportLines(dataDir, 'customers'),
    products: exportLines(dataDir, 'products'),
    collections: exportLines(dataDir, 'collections'),
  });
}

describe('crash safety', () => {
  test('SIGKILL under mixed load, three times over: nothing acknowledged is lost, the state is exact', async (t) => {
    const dataDir = tempDataDir();
    const acknowledged = new Set<string>();
    let snapshotsWritten = 0;
    for (let round = 1; round <= 3; round++) {
      const server = await startServer({ dataDir, env: SNAPSHOTS_OFTEN });
      const load = runWorkload({ url: server.url, key: KEY_A }, 24, acknowledged, round);
      await new Promise((r) => setTimeout(r, 1200 + round * 300));
      await server.kill();
      load.stop();
      await load.done;
      snapshotsWritten += server.logs().filter((l) => l.includes('"snapshot written"')).length;
    }
    assert.ok(acknowledged.size > 500, `enough writes were acknowledged (${acknowledged.size})`);
    assert.ok(snapshotsWritten > 2, `snapshots were written during the load (${snapshotsWritten})`);

    const server = await startServer({ dataDir, env: SNAPSHOTS_OFTEN });
    try {
      const records = exportLines(dataDir, 'events');
      const journaled = new Set(records.map(recordToken));
      const lost = [...acknowledged].filter((token) => !journaled.has(token));
      assert.deepEqual(lost, [], 'every acknowledged write is in the journal');
      assert.deepEqual(
        records.map((r) => r.seq),
        records.map((_, i) => i + 1),
        'seq grows by one per record, with no gap and no repeat across restarts',
      );
      assert.ok(server.logs().some((l) => l.includes('"recovered state') && !l.includes('"snapshotId":null')), 'recovery used a snapshot');
      const state = exportedState(dataDir);
      t.diagnostic(`acknowledged ${acknowledged.size}, records ${records.length}, snapshots ${snapshotsWritten}, devices ${state.devices.length}, customers ${state.customers.length}, products ${state.products.length}, collections ${state.collections.length}, memberships ${state.collections.reduce((n, c) => n + c.products.length, 0)}`);
      assert.deepEqual(state, canonical(modelFromRecords(records)), 'recovered state = the journal\'s writes');
    } finally {
      await server.stop();
    }
  });
});
