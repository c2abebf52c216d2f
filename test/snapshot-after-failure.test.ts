// A snapshot asked for right after one failed (the shutdown's, after an abort()) is taken: the
// failed one's clean-up runs after it was detached, and abort() returned at once then, so the
// next snapshot() got the failed one's result (null) and none was written (found by a review,
// 2026-11-29). Real LMDB, real journal and writer; the disk failure is a put that rejects.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { applyRecord } from '../src/actors/apply.ts';
import { ProfileInterner } from '../src/actors/interner.ts';
import { Workspaces } from '../src/actors/workspace.ts';
import { Journal } from '../src/journal/journal.ts';
import { newestCompleteSnapshot, SnapshotWriter } from '../src/journal/snapshot-writer.ts';
import { openStore } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

test('after a failed snapshot, abort() then snapshot() (as a graceful stop does) writes a snapshot', async () => {
  const store = openStore(tempDataDir());
  try {
    let writer: SnapshotWriter | null = null;
    const workspaces = new Workspaces((name) => writer!.trackerFor(name));
    const journal = new Journal(store.journal, 'group', 8192);
    // One chunk's worth of entities: a slice of 10, and 25 products.
    writer = new SnapshotWriter(store, journal, () => workspaces, pino({ level: 'silent' }), { sliceEntities: 10 });
    const interner = new ProfileInterner();
    for (let i = 0; i < 25; i++) applyRecord(workspaces, interner, { kind: 'product_upsert', workspace: 'ws-a', at: Date.now(), data: { id: `p${i}`, name: 'P' } } as never);
    journal.reset(25);
    // The first snapshot's chunk write fails (a failing disk: the chunk is there, its commit
    // reported failed), and removing it, the failed snapshot's clean-up, waits for the test.
    const put = store.snapshotChunks.put.bind(store.snapshotChunks);
    const remove = store.snapshotChunks.remove.bind(store.snapshotChunks);
    let failing = true;
    let letRemove!: () => void;
    const removing = new Promise<void>((resolve) => (letRemove = resolve));
    store.snapshotChunks.put = ((...args: Parameters<typeof put>) =>
      failing ? put(...args).then(() => Promise.reject(new Error('test: the disk failed'))) : put(...args)) as typeof put;
    store.snapshotChunks.remove = ((...args: Parameters<typeof remove>) => removing.then(() => remove(...args))) as typeof remove;
    const first = writer.snapshot('first', { paced: false });
    // Failed and detached; its clean-up waits.
    for (let i = 0; writer.isRunning; i++) {
      assert.ok(i < 5_000, 'the first snapshot failed');
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    failing = false;
    setTimeout(letRemove, 100);
    await writer.abort();
    const shutdown = await writer.snapshot('shutdown', { paced: false });
    assert.equal(await first, null, 'the first failed');
    assert.notEqual(shutdown, null, 'the shutdown snapshot was taken, not the failed one\'s result returned');
    assert.equal(newestCompleteSnapshot(store)?.seq, 25);
    assert.equal(writer.lastCoveredSeq, 25);
  } finally {
    await store.close();
  }
});
