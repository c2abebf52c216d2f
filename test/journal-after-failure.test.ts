// Issue 17: after a failed commit the journal stores nothing more and acknowledges nothing more.
// A later, smaller commit could succeed (EFBIG, ENOSPC on a bigger transaction), and a write
// checked against the lost batch would be replayed without it after a restart. The journal is
// the real one on a real LMDB; only its put (or putSync) is made to fail, once, since a file-size
// limit cannot fail one chosen commit at a chosen moment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Journal, type CommitWaiter } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore, type Store } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

const record = (id: string): JournalRecord => ({ kind: 'product_delete', workspace: 'a', at: Date.now(), data: { id } });
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** A journal database whose put fails (after `delayMs`, without writing) on the calls `failing` names. */
function failingDb(store: Store, failing: (call: number) => boolean, delayMs = 20) {
  const db = Object.create(store.journal) as typeof store.journal;
  const calls = { put: 0 };
  db.put = function (this: typeof db, key: number, value: JournalRecord[]) {
    const call = ++calls.put;
    if (failing(call)) return new Promise<boolean>((_, reject) => setTimeout(() => reject(new Error('EFBIG: injected')), delayMs));
    return (store.journal.put as Put).call(this, key, value);
  } as typeof db.put;
  return { db, calls };
}

function listener(heard: string[]) {
  return (name: string): CommitWaiter => ({ committed: () => void heard.push(`${name}:committed`), failed: () => void heard.push(`${name}:failed`) });
}

const stored = (store: Store): number[] => [...store.journal.getKeys()];

type Put = (key: number, value: JournalRecord[]) => Promise<boolean>;
type PutSync = (key: number, value: JournalRecord[]) => boolean;

for (const maxInFlight of [1, 2]) {
  test(`${maxInFlight} commit(s) in flight: after a failed commit, append() fails its waiter at once and never calls put again`, async () => {
    const store = openStore(tempDataDir());
    const { db, calls } = failingDb(store, (call) => call === 1);
    const journal = new Journal(db, 'group', 8192, {}, maxInFlight);
    const heard: string[] = [];
    const waiter = listener(heard);
    journal.append(record('first'), waiter('first'));
    await journal.drain();
    assert.ok(journal.failed !== null);
    assert.deepEqual(heard, ['first:failed']);
    const putsBefore = calls.put;
    // A write that was queued (a catalog job behind a mapping, say) and runs now.
    const seq = journal.append(record('late'), waiter('late'));
    assert.deepEqual(heard, ['first:failed', 'late:failed'], 'the waiter hears the failure at once');
    assert.equal(seq, 0, 'no seq: nothing was stored');
    for (let i = 0; i < 5; i++) await nextTurn();
    await journal.drain();
    assert.equal(calls.put, putsBefore, 'put is never called after the failure');
    assert.deepEqual(stored(store), [], 'nothing is in LMDB');
    assert.equal(journal.afterPending(waiter('after-pending')), true, 'afterPending() answers too');
    assert.equal(heard.at(-1), 'after-pending:failed');
    await store.close();
  });
}

test('sync mode: after a failed putSync, append() fails its waiter and never calls putSync again', async () => {
  const store = openStore(tempDataDir());
  const db = Object.create(store.journal) as typeof store.journal;
  let calls = 0;
  db.putSync = function (this: typeof db, key: number, value: JournalRecord[]) {
    if (++calls === 1) throw new Error('EIO: injected');
    return (store.journal.putSync as PutSync).call(this, key, value);
  } as typeof db.putSync;
  const journal = new Journal(db, 'sync', 8192);
  const heard: string[] = [];
  const waiter = listener(heard);
  journal.append(record('first'), waiter('first'));
  assert.equal(journal.append(record('late'), waiter('late')), 0);
  assert.deepEqual(heard, ['first:failed', 'late:failed']);
  assert.equal(calls, 1);
  assert.deepEqual(stored(store), []);
  await store.close();
});

test('2 commits in flight: a batch handed to LMDB behind one that fails is not written, and not acknowledged', async () => {
  const store = openStore(tempDataDir());
  // The first batch's put fails after 20 ms; the second one's, handed over meanwhile, is real
  // (and would be committed in a few ms, before the first failure is known).
  const { db } = failingDb(store, (call) => call === 1);
  const journal = new Journal(db, 'group', 8192, {}, 2);
  const heard: string[] = [];
  const waiter = listener(heard);
  journal.append(record('first'), waiter('first'));
  await nextTurn();
  journal.append(record('second'), waiter('second'));
  await nextTurn();
  journal.append(record('third'), waiter('third'));
  await journal.drain();
  // Let LMDB finish whatever it was handed (its promises resolve after the fsync).
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.deepEqual(heard.sort(), ['first:failed', 'second:failed', 'third:failed']);
  assert.deepEqual(stored(store), [], 'no batch after the failed one is in LMDB: the journal has no hole');
  assert.match(journal.failed!.message, /EFBIG: injected/, 'the failure reported is the first batch\'s own');
  await store.close();
});

test('2 commits in flight: a batch LMDB commits first is acknowledged only after the batch before it', async () => {
  const store = openStore(tempDataDir());
  const db = Object.create(store.journal) as typeof store.journal;
  let calls = 0;
  db.put = function (this: typeof db, key: number, value: JournalRecord[]) {
    const write = (store.journal.put as Put).call(this, key, value);
    // The first batch's commit is reported late (its fsync is slow, say).
    return ++calls === 1 ? write.then((done) => new Promise<boolean>((resolve) => setTimeout(() => resolve(done), 50))) : write;
  } as typeof db.put;
  const journal = new Journal(db, 'group', 8192, {}, 2);
  const heard: string[] = [];
  const waiter = listener(heard);
  journal.append(record('first'), waiter('first'));
  await nextTurn();
  const second = journal.append(record('second'), waiter('second'));
  await journal.drain();
  assert.deepEqual(heard, ['first:committed', 'second:committed'], 'answered in order');
  assert.equal(journal.durableSeq, second);
  assert.deepEqual(stored(store), [1, 2]);
  await store.close();
});
