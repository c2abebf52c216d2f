// Writes accepted and waiting for their journal commit are bounded (JOURNAL_MAX_PENDING_RECORDS):
// past the limit a write gets 503 with Retry-After: 1 and changes nothing, and /readyz is 503,
// until commits catch up. Until 2026-11-30 nothing bounded them with HTTP_THREADS=1: a stalled
// fsync and clients retrying after their timeouts grew the server by 17 MB a second, /readyz 200
// throughout (a review). The stall is a fault point: the first commit waits 3 s, its event loop free.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { exportLines, startServer, tempDataDir } from './helpers/server.ts';
import { clustersOfThisFile } from './helpers/cluster.ts';

const cluster = clustersOfThisFile();

for (const threads of ['1', '2']) {
  test(`a stalled commit: past JOURNAL_MAX_PENDING_RECORDS writes get 503 with Retry-After: 1 and change nothing, /readyz 503; afterwards every 200 is journaled and writes are taken again (HTTP_THREADS=${threads})`, async () => {
    const dataDir = tempDataDir();
    const marker = join(dataDir, '..', `stall-${process.pid}-${threads}-${Date.now()}`);
    const server = await startServer({ dataDir, env: { HTTP_THREADS: threads, JOURNAL_MAX_PENDING_RECORDS: '20', INTAKE_TEST_STALL_ONCE: `journal-commit:3000:${marker}` } });
    try {
      // The first write's commit stalls; the others pile up behind it.
      const first = server.post('/product', { id: 'p-first', name: 'n' });
      await new Promise((resolve) => setTimeout(resolve, 200));
      const answers = await Promise.all(
        Array.from({ length: 60 }, async (_, i) => {
          const res = await server.request('/product', { id: `p${i}`, name: 'n' }, { timeoutMs: 20_000 });
          return { id: `p${i}`, status: res.status, retryAfter: res.headers.get('retry-after'), text: res.text };
        }),
      ).then((all) => all);
      // (Those refused are answered at once; those accepted only after the stall: Promise.all waited for both.)
      const refused = answers.filter((a) => a.status === 503);
      const accepted = answers.filter((a) => a.status === 200);
      assert.equal(refused.length + accepted.length, 60, JSON.stringify(answers.filter((a) => a.status !== 200 && a.status !== 503)));
      assert.ok(refused.length >= 30, `${refused.length} refused`);
      assert.ok(accepted.length >= 15, `${accepted.length} accepted`);
      for (const r of refused) {
        assert.equal(r.retryAfter, '1');
        assert.match(r.text, /20 accepted writes are waiting for their journal commit \(JOURNAL_MAX_PENDING_RECORDS\)/);
      }
      assert.equal((await first).status, 200);
      assert.equal((await server.request('/readyz', undefined, { key: null })).status, 200);
      assert.equal((await server.post('/product', { id: 'p-after', name: 'n' })).status, 200);
      const ids = new Set(exportLines(dataDir, 'products').map((p) => p.id as string));
      for (const a of accepted) assert.ok(ids.has(a.id), `${a.id} answered 200 is journaled`);
      for (const r of refused) assert.equal(ids.has(r.id), false, `${r.id} answered 503 changed nothing`);
      assert.ok(ids.has('p-first') && ids.has('p-after'));
    } finally {
      await server.stop();
    }
  });
}

test('/readyz is 503 while the journal holds JOURNAL_MAX_PENDING_RECORDS writes waiting for their commit', async () => {
  const dataDir = tempDataDir();
  const marker = join(dataDir, '..', `stall-ready-${process.pid}-${Date.now()}`);
  const server = await startServer({ dataDir, env: { JOURNAL_MAX_PENDING_RECORDS: '3', INTAKE_TEST_STALL_ONCE: `journal-commit:3000:${marker}` } });
  try {
    const writes = Array.from({ length: 4 }, (_, i) => server.post('/product', { id: `r${i}`, name: 'n' }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    const ready = await server.request('/readyz', undefined, { key: null });
    assert.equal(ready.status, 503, ready.text);
    assert.match(ready.text, /waiting for their journal commit/);
    assert.deepEqual((await Promise.all(writes)).map((r) => r.status).sort(), [200, 200, 200, 503]);
    assert.equal((await server.request('/readyz', undefined, { key: null })).status, 200);
  } finally {
    await server.stop();
  }
});

test('cluster mode: the leader\'s own requests are held to JOURNAL_MAX_PENDING_RECORDS too (a stalled commit to PostgreSQL): 503 with Retry-After: 1, /readyz 503, and every 200 is in the cluster', async () => {
  // Until 2026-11-30 the leader's requests passed a gate that looked at its lease alone: the
  // limit reached only batch items and forwarded writes (found by a review).
  const c = cluster();
  const marker = join(tempDataDir(), '..', `stall-leader-${process.pid}-${Date.now()}`);
  const a = await c.add({ env: { JOURNAL_MAX_PENDING_RECORDS: '20', INTAKE_TEST_STALL_ONCE: `journal-commit:3000:${marker}` } });
  assert.equal(await c.leader(), a);
  const first = a.post('/product', { id: 'p-first', name: 'n' });
  await new Promise((resolve) => setTimeout(resolve, 200));
  const answers = await Promise.all(Array.from({ length: 60 }, async (_, i) => {
    const res = await a.request('/product', { id: `p${i}`, name: 'n' }, { timeoutMs: 20_000 });
    return { id: `p${i}`, status: res.status, retryAfter: res.headers.get('retry-after') };
  }));
  const refused = answers.filter((x) => x.status === 503);
  assert.ok(refused.length >= 30, `${refused.length} refused`);
  assert.ok(refused.every((x) => x.retryAfter === '1'));
  assert.equal((await first).status, 200);
  assert.equal((await a.request('/readyz', undefined, { key: null })).status, 200);
  const ids = new Set(exportLines(a.dataDir, 'products').map((p) => p.id as string));
  for (const x of answers) assert.equal(ids.has(x.id), x.status === 200, `${x.id}: ${x.status}`);
});
