// The journal's bound on commits in flight (JOURNAL_MAX_COMMITS_IN_FLIGHT) holds for batches
// that fill (JOURNAL_MAX_BATCH_RECORDS) within one turn too: they wait, closed and in order, for
// a commit to settle. Before, a full batch went to lmdb-js at once whatever was in flight, so a
// stalled disk let any number of them queue there. The real journal on a real LMDB; its put is
// only watched (how many are unanswered at once), or made to fail once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Journal, type CommitWaiter } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore, type Store } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

const record = (id: string): JournalRecord => ({ kind: 'product_delete', workspace: 'a', at: 1, data: { id } });
type Put = (key: number, value: JournalRecord[]) => Promise<boolean>;

/** The journal database, its put watched: the most puts unanswered at once, and the calls. */
function watchedDb(store: Store, failFirst = false) {
  const db = Object.create(store.journal) as typeof store.journal;
  const watch = { open: 0, most: 0, calls: 0 };
  db.put = function (this: typeof db, key: number, value: JournalRecord[]) {
    watch.calls++;
    if (failFirst && watch.calls === 1) return new Promise<boolean>((_, reject) => setTimeout(() => reject(new Error('EIO: injected')), 20));
    watch.open++;
    watch.most = Math.max(watch.most, watch.open);
    return (store.journal.put as Put).call(this, key, value).finally(() => watch.open--);
  } as typeof db.put;
  return { db, watch };
}

for (const maxInFlight of [1, 2]) {
  test(`${maxInFlight} commit(s) in flight at most, when 20 records fill 10 batches of 2 in one turn; every record durable, in order`, async () => {
    const store = openStore(tempDataDir());
    const { db, watch } = watchedDb(store);
    const journal = new Journal(db, 'group', 2, {}, maxInFlight);
    const heard: number[] = [];
    for (let i = 0; i < 20; i++) {
      const waiter: CommitWaiter = { committed: () => void heard.push(i), failed: (e) => assert.fail(e) };
      assert.equal(journal.append(record(`r${i}`), waiter), i + 1);
    }
    await journal.drain();
    assert.ok(watch.most <= maxInFlight, `${watch.most} puts unanswered at once`);
    assert.deepEqual(heard, Array.from({ length: 20 }, (_, i) => i), 'answered in order');
    assert.deepEqual([...store.journal.getKeys()], [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]);
    assert.deepEqual([...store.journal.getRange()].flatMap((e) => e.value.map((r) => (r.data as { id: string }).id)), Array.from({ length: 20 }, (_, i) => `r${i}`));
    await store.close();
  });
}

test('a failed commit fails the full batches waiting behind it too, and none of them is handed to LMDB', async () => {
  const store = openStore(tempDataDir());
  const { db, watch } = watchedDb(store, true);
  const journal = new Journal(db, 'group', 2, {}, 1);
  const heard: string[] = [];
  for (let i = 0; i < 10; i++) journal.append(record(`r${i}`), { committed: () => void heard.push('committed'), failed: () => void heard.push('failed') });
  await journal.drain();
  assert.equal(watch.calls, 1, 'only the first batch reached LMDB');
  assert.deepEqual(heard, Array.from({ length: 10 }, () => 'failed'));
  assert.deepEqual([...store.journal.getKeys()], []);
  await store.close();
});
