// A snapshot cut short by a crash leaves its chunks behind (no meta: recovery never reads them).
// They must not pile up when crashes keep coming before any snapshot completes (a server
// OOM-killed during each snapshot, say): each such crash left a partial copy of the state in the
// data file, for good, until a snapshot finally completed. The real server, SIGKILLed mid-snapshot.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openStore } from '../src/journal/store.ts';
import { newestCompleteSnapshot } from '../src/journal/snapshot-writer.ts';
import { startServer, tempDataDir, type TestServer } from './helpers/server.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Snapshots only on SIGUSR2 (and at a graceful stop, which these tests never make), slowly: a turn per entity. */
const ENV = { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0', SNAPSHOT_SLICE_ENTITIES: '1' };
const PRODUCTS = 60_000;
const BATCH_ITEMS = 1000;

/** The snapshot ids with chunks in the store, and the newest complete snapshot's id (server stopped). */
function stored(dataDir: string): { chunkIds: number[]; complete: number | null } {
  const store = openStore(dataDir);
  try {
    const chunkIds = [...new Set([...store.snapshotChunks.getKeys()].map((key) => key[0] as number))];
    return { chunkIds, complete: newestCompleteSnapshot(store)?.id ?? null };
  } finally {
    void store.close();
  }
}

async function snapshot(server: TestServer, seen: number): Promise<void> {
  server.child.kill('SIGUSR2');
  const deadline = Date.now() + 10_000;
  while (server.logs().filter((line) => line.includes('"snapshot written"')).length <= seen) {
    if (Date.now() > deadline) throw new Error('no snapshot written');
    await sleep(20);
  }
}

describe('snapshot chunks left by a crash', () => {
  test('go at the next start, even when no snapshot completes before the next crash', async () => {
    const dataDir = tempDataDir();
    let server = await startServer({ dataDir, env: ENV });
    for (let from = 0; from < PRODUCTS; from += BATCH_ITEMS) {
      const requests = Array.from({ length: BATCH_ITEMS }, (_, i) => ({ method: 'POST', path: '/product', body: { id: `p${from + i}`, name: 'n' } }));
      const res = await server.request('/batch', { requests });
      assert.equal(res.status, 200, res.text);
    }
    await snapshot(server, 0);
    for (let crash = 1; crash <= 2; crash++) {
      // Something new to snapshot, then a snapshot (paced: it takes a while) killed half-way.
      assert.equal((await server.post('/product', { id: `after-crash-${crash}`, name: 'n' })).status, 200);
      server.child.kill('SIGUSR2');
      await server.waitForLog((line) => line.includes('"snapshot started"'), 5000);
      await sleep(100);
      await server.kill();
      const { chunkIds, complete } = stored(dataDir);
      assert.ok(complete !== null);
      assert.ok(chunkIds.some((id) => id > complete), `the killed snapshot had written chunks (${chunkIds.join(', ')}; complete: ${complete})`);
      server = await startServer({ dataDir, env: ENV });
      // The leftovers go in the background, after recovery: give that a moment.
      await sleep(500);
    }
    await server.kill();
    const { chunkIds, complete } = stored(dataDir);
    assert.deepEqual(chunkIds, [complete], 'only the chunks of the newest complete snapshot are left');
  });
});
