// Issue 17: writes that were dispatched before a journal failure and run after it. The HTTP
// layer checks the journal when it dispatches a request, but a catalog write queued behind a
// mapping whose body is in a worker runs later, in its turn; it must then get 503: not applied
// to memory, not journaled (a later, smaller commit could succeed), not answered 200, and no 422
// or replay either (the state it would be judged against may hold writes that were lost).
// The Acceptor is the one gate. The journal is the real one on a real LMDB; only its first put
// is made to fail.
import { gzipSync } from 'node:zlib';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Intake, type Reply } from '../src/actors/intake.ts';
import { Workspaces } from '../src/actors/workspace.ts';
import { Journal } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { KeyTable } from '../src/idempotency/key-table.ts';
import { openStore } from '../src/journal/store.ts';
import { exportLines, KEY_B, startServer, tempDataDir, type Response } from './helpers/server.ts';

/** Room for the setup and a small write, not for a 4.7 MB mapping record. */
const FILE_LIMIT_BYTES = 1_000_000;
const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

type Put = (key: number, value: JournalRecord[]) => Promise<boolean>;

function reply(answers: number[]): Reply {
  let status = 0;
  return {
    idempotency: null,
    succeed: () => void (status = 200),
    reject: () => void (status = 422),
    replay: () => undefined,
    committed: () => void answers.push(status),
    failed: () => void answers.push(503),
    crashed: () => void answers.push(500),
  };
}

test('catalog and device writes that run after a failed commit get 503: nothing applied, nothing journaled, no 422', async () => {
  const store = openStore(tempDataDir());
  const db = Object.create(store.journal) as typeof store.journal;
  let puts = 0;
  db.put = function (this: typeof db, key: number, value: JournalRecord[]) {
    // The first commit fails (a big batch over a file-size limit); a later, smaller one would not.
    if (++puts === 1) return Promise.reject(new Error('EFBIG: injected'));
    return (store.journal.put as Put).call(this, key, value);
  } as typeof db.put;
  const journal = new Journal(db, 'group', 8192);
  const workspaces = new Workspaces();
  const intake = new Intake(workspaces, journal, new KeyTable(1000, 86_400));
  const ws = workspaces.get('a');
  const at = Date.now();

  const first: number[] = [];
  intake.catalog.productUpsert(ws, { id: 'lost', name: 'n' } as never, at, reply(first));
  // A big mapping takes its place in line (its body is in a worker)...
  const fill = intake.catalog.reserve(ws, reply([]));
  // ...and these queue behind it, dispatched while the journal has not failed yet.
  assert.equal(journal.failed, null);
  const upsert: number[] = [];
  const refused: number[] = [];
  const removal: number[] = [];
  intake.catalog.productUpsert(ws, { id: 'queued', name: 'n' } as never, at, reply(upsert));
  intake.catalog.mapping(ws, 'no-such-collection', true, ['lost'], at, reply(refused));
  intake.catalog.collectionDelete(ws, 'c', at, reply(removal));
  await journal.drain();
  assert.ok(journal.failed !== null, 'the first commit failed');
  assert.deepEqual(first, [503]);
  const putsAtFailure = puts;

  // The worker's result is in: the queued writes run now.
  fill(() => undefined);
  await new Promise((resolve) => setImmediate(resolve));
  await journal.drain();
  assert.deepEqual(upsert, [503], 'the queued upsert: 503, not 200');
  assert.deepEqual(refused, [503], 'a 422 judged against a state that may hold lost writes: 503');
  assert.deepEqual(removal, [503]);
  assert.equal(ws.catalog.products.has('queued'), false, 'not applied to memory');

  // Device writes reaching the actors after the failure (the HTTP check passed before it).
  const launch: number[] = [];
  const unknownDevice: number[] = [];
  intake.devices.appLaunch(ws, { timestamp: at, info: {} } as never, at, reply(launch));
  intake.devices.logout(ws, { did: 'nobody' } as never, at, reply(unknownDevice));
  assert.deepEqual(launch, [503]);
  assert.deepEqual(unknownDevice, [503], 'no 422 after the failure');
  assert.equal(ws.devices.size, 0, 'no device created');

  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(puts, putsAtFailure, 'nothing was handed to LMDB after the failure');
  assert.deepEqual([...store.journal.getKeys()], [], 'the journal holds nothing');
  await store.close();
});

test('for real (prlimit --fsize): a catalog write queued behind a mapping in a worker when the journal fails gets 503 and is not committed', async () => {
  const dataDir = tempDataDir();
  const server = await startServer({
    dataDir,
    wrap: ['prlimit', `--fsize=${FILE_LIMIT_BYTES}`],
    env: {
      MAPPING_WORKERS: '1',
      // Only gzip bodies go to the worker: the big mapping that fails the journal is parsed on
      // the main thread while the worker is busy with the slow one.
      MAPPING_WORKER_THRESHOLD_BYTES: String(64 * 1024 * 1024),
      MAPPING_WORKER_TIMEOUT_MS: '120000',
      MAPPING_MAX_ITEMS: '3000000',
      MAPPING_BODY_LIMIT_BYTES: String(128 * 1024 * 1024),
    },
  });
  try {
    assert.equal((await server.post('/collection', { id: 'c', name: 'C' })).status, 200);
    assert.equal((await server.post('/collection', { id: 'x', name: 'X' }, KEY_B)).status, 200);
    const order: string[] = [];
    const answered = (name: string) => (res: Response<any>) => {
      order.push(name);
      return res;
    };
    // 1. A slow gzip mapping: its body goes to the worker (seconds of work) and takes its place
    //    in workspace A's catalog line.
    const slow = gzipSync(JSON.stringify({ products: ids('an-id-that-takes-a-while-', 1_200_000) }));
    const mapping = server
      .request('/collection/c/products/remove', undefined, { raw: slow, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } })
      .then(answered('mapping'));
    await new Promise((resolve) => setTimeout(resolve, 300));
    // 2. A small catalog write queues behind it (the HTTP layer's journal check passes now).
    const queued = server.post('/product', { id: 'queued', name: 'Q' }).then(answered('queued'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    // 3. Another workspace's big write (about 4.7 MB, over the file-size limit) fails the journal.
    const big = JSON.stringify({ products: ids('an-id-long-enough-to-make-the-record-big-', 100_000) });
    const failing = server.request('/collection/x/products/remove', undefined, { key: KEY_B, raw: big, headers: { 'content-type': 'application/json' } }).then(answered('failing'));
    const [m, q, f] = await Promise.all([mapping, queued, failing]);
    assert.equal(f.status, 503, f.text);
    assert.deepEqual(order[0], 'failing', `the journal failed while the mapping was in the worker (answers in order: ${order.join(', ')})`);
    assert.equal(m.status, 503, m.text);
    assert.equal(q.status, 503, q.text);
    assert.equal(q.body.type, 'ServiceUnavailableError');
    assert.equal((await server.request('/readyz')).status, 503);
    assert.equal(server.child.exitCode, null, 'the process is still running');
    assert.equal(await server.stop(), 1);

    // Nothing was committed after the failed batch: the journal has no hole, the server starts,
    // and the queued write is not there.
    const restarted = await startServer({ dataDir });
    try {
      const seqs = exportLines(dataDir, 'events').map((r) => r.seq as number);
      assert.deepEqual(seqs, seqs.map((_, i) => i + 1), 'seqs follow each other: nothing was stored after the failed commit');
      assert.ok(!exportLines(dataDir, 'products').some((p) => p.id === 'queued'), 'the queued write (answered 503) was not committed');
      assert.equal((await restarted.post('/product', { id: 'after', name: 'A' })).status, 200);
    } finally {
      await restarted.stop();
    }
  } finally {
    await server.kill();
  }
});
