// A snapshot installed from elsewhere (cluster mode, joining: PostgreSQL's newest snapshot stored
// as the node's own, SnapshotWriter.install) counts as covered, the seq retention may trim up to,
// only once the state has been rebuilt from it. Found by a review (2026-11-29): it counted from
// the moment it was stored, so a retention trim during the join's copy of the records before it
// took its seq as the limit with the old state's key table (empty on an empty directory) and
// could drop copied records that remembered keys name. Real LMDB, real journal and writer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Workspaces } from '../src/actors/workspace.ts';
import { Journal } from '../src/journal/journal.ts';
import { SnapshotWriter } from '../src/journal/snapshot-writer.ts';
import { openStore, type SnapshotMeta } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

function openRig() {
  const store = openStore(tempDataDir());
  let writer: SnapshotWriter | null = null;
  const workspaces = new Workspaces((name) => writer!.trackerFor(name));
  const journal = new Journal(store.journal, 'group', 8192);
  writer = new SnapshotWriter(store, journal, () => workspaces, pino({ level: 'silent' }), { sliceEntities: 100 });
  return { store, writer };
}

/** Stores a complete (empty) snapshot meta covering `seq` under the id install() hands out. */
const storedAt = (store: ReturnType<typeof openStore>, seq: number) => async (id: number): Promise<SnapshotMeta> => {
  const meta: SnapshotMeta = { id, seq, startedAt: Date.now(), completedAt: Date.now(), chunks: 0, bytes: 0, entities: { devices: 0, customers: 0, products: 0, collections: 0, profiles: 0, idempotencyKeys: 0 } };
  await store.snapshots.put(id, meta);
  return meta;
};

test('an installed snapshot is covered (the retention limit) only after the state was rebuilt from it, and not at all if the rebuild failed', async () => {
  const { store, writer } = openRig();
  try {
    assert.equal(writer.lastCoveredSeq, 0);
    const seenWhileRebuilding: number[] = [];
    await writer.install(storedAt(store, 500), async () => {
      // Here the caller copies the records before the snapshot and rebuilds the state; a
      // retention trim may run meanwhile (its timer does not wait).
      await new Promise((resolve) => setTimeout(resolve, 10));
      seenWhileRebuilding.push(writer.lastCoveredSeq);
    });
    assert.deepEqual(seenWhileRebuilding, [0], 'while the state is the old one, the old covered seq');
    assert.equal(writer.lastCoveredSeq, 500, 'once rebuilt, the installed snapshot\'s');

    await assert.rejects(
      writer.install(storedAt(store, 900), async () => {
        throw new Error('rebuild failed');
      }),
      /rebuild failed/,
    );
    assert.equal(writer.lastCoveredSeq, 500, 'a failed rebuild leaves the covered seq where the state is');
  } finally {
    await store.close();
  }
});
