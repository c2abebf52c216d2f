// Found by review: when a commit fails, the records appended while it was in flight (the open
// batch) must hear the failure too, and drain() must resolve. With one commit in flight (the
// default) a write arriving during a failing commit's fsync is the usual case under load. The
// journal is the real one on a real LMDB; only its put is made to fail, after a delay, since a
// file-size limit cannot fail one chosen commit at a chosen moment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Journal, type CommitWaiter } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

const record = (id: string): JournalRecord => ({ kind: 'product_delete', workspace: 'a', at: Date.now(), data: { id } });

for (const maxInFlight of [1, 2]) {
  test(`${maxInFlight} commit(s) in flight: a failed commit fails the open batch too, and drain() resolves`, async () => {
    const store = openStore(tempDataDir());
    const db = Object.create(store.journal) as typeof store.journal;
    db.put = () => new Promise((_, reject) => setTimeout(() => reject(new Error('EIO: injected')), 20));
    const journal = new Journal(db, 'group', 8192, {}, maxInFlight);
    const heard: string[] = [];
    const waiter = (name: string): CommitWaiter => ({ committed: () => void heard.push(`${name}:committed`), failed: () => void heard.push(`${name}:failed`) });
    journal.append(record('first'), waiter('first'));
    // Next turn: the first batch is being committed; these wait in the open batch (or a second commit).
    await new Promise((resolve) => setImmediate(resolve));
    journal.append(record('second'), waiter('second'));
    await new Promise((resolve) => setImmediate(resolve));
    journal.append(record('third'), waiter('third'));
    const drained = await Promise.race([journal.drain().then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 2_000))]);
    assert.equal(drained, true, 'drain() resolves after the failure');
    assert.deepEqual(heard.sort(), ['first:failed', 'second:failed', 'third:failed']);
    assert.ok(journal.failed !== null);
    await assert.rejects(journal.whenDurable());
    await store.close();
  });
}
