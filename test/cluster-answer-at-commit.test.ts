// A cluster leader answers a write once PostgreSQL has committed it (CONTRACT.md §12), with its
// own LMDB copy written behind (src/journal/journal.ts, remoteCommitted()). Here that copy stalls
// (the test fault point `journal-local-copy`, an fsync that hangs after the commit): the write is
// still answered 200 at once, GET /cluster shows it committed, a retry with its Idempotency-Key
// replays it, and a leader killed before its copy was written finds the write again after a
// restart (from PostgreSQL). A real leader on the machine's PostgreSQL, over HTTP.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { clustersOfThisFile } from './helpers/cluster.ts';
import { exportLines, tempDataDir } from './helpers/server.ts';

const cluster = clustersOfThisFile();
const STALL_MS = 5_000;

/** A leader whose next LMDB copy, once `arm()` is called, stalls STALL_MS (and every copy after it with it). */
async function stallingLeader(c: ReturnType<typeof cluster>, dataDir: string) {
  // The marker exists, so the point does not fire while the node starts (its own first writes);
  // removed, it fires at the next copy.
  const marker = join(tempDataDir(), 'stall-marker');
  writeFileSync(marker, '');
  const node = await c.add({ dataDir, env: { INTAKE_TEST_STALL_ONCE: `journal-local-copy:${STALL_MS}:${marker}` } });
  assert.equal(await c.leader(), node);
  return { node, arm: () => unlinkSync(marker) };
}

test('the leader answers at the PostgreSQL commit, its LMDB copy stalled: 200 at once, appliedSeq shows it, a keyed retry replays it', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: '0' });
  const { node, arm } = await stallingLeader(c, tempDataDir());
  const before = (await node.status()).appliedSeq;
  arm();
  const startedAt = performance.now();
  const first = await node.request('/product', { id: 'p1', name: 'P' }, { headers: { 'idempotency-key': 'k1' } });
  const answeredMs = performance.now() - startedAt;
  assert.equal(first.status, 200, first.text);
  assert.ok(answeredMs < STALL_MS - 2_000, `answered at the PostgreSQL commit, not after the stalled copy (${Math.round(answeredMs)} ms)`);
  // "on the leader, the last committed" (CONTRACT §12): committed in PostgreSQL, not yet in its copy.
  assert.equal((await node.status()).appliedSeq, before + 1);
  // A second write while the first's copy stalls: answered at once too (its copy waits its turn).
  const second = await node.post('/product', { id: 'p2', name: 'P' });
  assert.equal(second.status, 200, second.text);
  assert.ok(performance.now() - startedAt < STALL_MS - 1_000, 'the second write was answered before the stall ended');
  assert.equal((await node.status()).appliedSeq, before + 2);
  // The retry is answered from the journal's record once the copy is written: the same answer.
  const again = await node.request('/product', { id: 'p1', name: 'P' }, { headers: { 'idempotency-key': 'k1' } });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(again.body, first.body);
  // Both copies land, in order, after the stall: a graceful stop waits for them and exits 0.
  assert.equal(await node.stop(), 0);
  const products = exportLines<{ id: string }>(node.dataDir, 'products').map((p) => p.id);
  assert.ok(products.includes('p1') && products.includes('p2'), `both in the stopped leader's own copy: ${products.join(', ')}`);
});

test('a leader killed after the PostgreSQL commit but before its own copy: the write answered 200 is there after a restart (read back from PostgreSQL)', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: '0' });
  const dataDir = tempDataDir();
  const { node, arm } = await stallingLeader(c, dataDir);
  const before = (await node.status()).appliedSeq;
  arm();
  const res = await node.request('/product', { id: 'killed-before-copy', name: 'K' }, { headers: { 'idempotency-key': 'k-kill' } });
  assert.equal(res.status, 200, res.text);
  await node.kill();
  // The killed leader's own journal ends before the write (its copy never came).
  const localSeqs = exportLines<{ seq: number }>(dataDir, 'events').map((e) => e.seq);
  assert.ok(!localSeqs.includes(before + 1), `the local copy does not hold seq ${before + 1}`);
  // Restarted on the same directory, it catches up from PostgreSQL and leads again.
  const restarted = await c.add({ dataDir, nodeName: node.nodeName });
  assert.equal(await c.leader(), restarted);
  assert.equal((await restarted.status()).appliedSeq, before + 1);
  const retry = await restarted.request('/product', { id: 'killed-before-copy', name: 'K' }, { headers: { 'idempotency-key': 'k-kill' } });
  assert.equal(retry.status, 200, retry.text);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true', 'the first answer, from the record PostgreSQL kept');
  assert.equal(await restarted.stop(), 0);
  const products = exportLines<{ id: string }>(dataDir, 'products').map((p) => p.id);
  assert.ok(products.includes('killed-before-copy'), 'in the restarted node\'s own copy now');
});
