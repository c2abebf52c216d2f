// Found by review: a duplicate of a keyed write must never be answered 200 when the first
// write's commit failed. Here the duplicate is dispatched before the failure and runs after it,
// queued in the catalog's mailbox behind a mapping whose body is still in a worker (the HTTP
// layer's own journal-failure check has passed by then). The journal is the real one on a real
// LMDB; only its put is made to fail, since a file-size limit cannot fail one chosen commit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Intake, type Reply } from '../src/actors/intake.ts';
import { Workspaces } from '../src/actors/workspace.ts';
import { bodyFingerprint, IdempotencyClaim } from '../src/idempotency/claim.ts';
import { KeyTable } from '../src/idempotency/key-table.ts';
import { Journal } from '../src/journal/journal.ts';
import { openStore } from '../src/journal/store.ts';
import { tempDataDir } from './helpers/server.ts';

interface Answer {
  status: number;
  replayed: boolean;
}

function reply(claim: IdempotencyClaim | null, answers: Answer[]): Reply {
  let replay: (() => string) | null = null;
  let status = 0;
  return {
    idempotency: claim,
    succeed: () => void (status = 200),
    reject: () => void (status = 422),
    replay: (answer) => void (replay = answer),
    committed: () => void answers.push({ status: replay !== null ? 200 : status, replayed: replay !== null }),
    failed: () => void answers.push({ status: 503, replayed: false }),
    crashed: () => void answers.push({ status: 500, replayed: false }),
  };
}

test('a duplicate queued before a failed commit and run after it gets 503, never a 200 replay', async () => {
  const store = openStore(tempDataDir());
  let failing = false;
  const db = Object.create(store.journal) as typeof store.journal;
  db.put = (key, value) => (failing ? Promise.reject(new Error('EIO: injected')) : store.journal.put(key, value));
  const journal = new Journal(db, 'group', 8192);
  const keys = new KeyTable(1000, 86_400);
  const workspaces = new Workspaces();
  const intake = new Intake(workspaces, journal, keys);
  const ws = workspaces.get('a');
  const body = { id: 'p1', name: 'n' };
  const claim = () => {
    const c = new IdempotencyClaim('a', 'POST', '/product', 'K');
    c.fingerprint(bodyFingerprint(Buffer.from(JSON.stringify(body))));
    return c;
  };
  const first: Answer[] = [];
  const duplicate: Answer[] = [];
  failing = true;
  intake.catalog.productUpsert(ws, body as never, Date.now(), reply(claim(), first));
  // A big mapping takes its place in line (its body is in a worker)...
  const fill = intake.catalog.reserve(ws, reply(null, []));
  // ...and the duplicate queues behind it, while the journal has not failed yet.
  assert.equal(journal.failed, null);
  intake.catalog.productUpsert(ws, body as never, Date.now(), reply(claim(), duplicate));
  await journal.drain();
  assert.ok(journal.failed !== null, 'the first write\'s commit failed');
  assert.deepEqual(first, [{ status: 503, replayed: false }]);
  // The worker's result is refused (nothing appended); the duplicate's turn comes.
  fill(() => undefined);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(duplicate, [{ status: 503, replayed: false }]);
  await store.close();
});
