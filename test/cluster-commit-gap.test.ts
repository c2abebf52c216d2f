// The leader's commit gap (CLUSTER_COMMIT_GAP_MS, src/journal/journal.ts): writes that come within
// the gap after a commit started wait and go together in one commit; the first write after a
// quiet spell, a full batch and a batch of 64 records go at once. A real leader on the machine's
// PostgreSQL, over HTTP; the gap is made long (1 s) so that timing on a busy machine cannot blur
// what is asserted. Each assertion fails when its rule is taken out of journal.ts (checked).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clustersOfThisFile, type TestNode } from './helpers/cluster.ts';
import { metric } from './helpers/wait.ts';

const cluster = clustersOfThisFile();
const GAP_MS = 1_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function commits(node: TestNode): Promise<number> {
  return (await metric(node, 'intake_cluster_commit_duration_seconds_count')) ?? 0;
}

/** Sends product upserts `ids` at once; resolves with each one's status and the time all took. */
async function upserts(node: TestNode, ids: string[]): Promise<{ statuses: number[]; ms: number }> {
  const startedAt = performance.now();
  const answers = await Promise.all(ids.map((id) => node.post('/product', { id, name: 'P' })));
  return { statuses: answers.map((r) => r.status), ms: performance.now() - startedAt };
}

test('writes within the commit gap wait for it and go in one commit; the first after a quiet spell goes at once', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: String(GAP_MS) });
  await c.add();
  const leader = await c.leader();
  // A quiet spell longer than the gap: whatever the leader committed while it started is behind it.
  await sleep(GAP_MS + 200);
  const before = await commits(leader);

  const first = await upserts(leader, ['first']);
  assert.deepEqual(first.statuses, [200]);
  assert.ok(first.ms < GAP_MS - 500, `the first write after a quiet spell is not held (${Math.round(first.ms)} ms)`);

  // Sent as soon as the first is answered: within the gap of its commit's start.
  const sentAt = performance.now();
  const next = await upserts(leader, ['a', 'b', 'c', 'd', 'e']);
  assert.deepEqual(next.statuses, [200, 200, 200, 200, 200]);
  // The first commit started before `first` was sent, so the gap ends at most GAP_MS after sentAt
  // minus first.ms; the timer may fire a little early.
  assert.ok(next.ms >= GAP_MS - first.ms - 50, `writes within the gap wait for it (${Math.round(next.ms)} ms after ${Math.round(performance.now() - sentAt)})`);
  assert.equal((await commits(leader)) - before, 2, 'one commit for the first write, one for the five after it');
});

test('a full batch does not wait for the commit gap', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: String(GAP_MS), JOURNAL_MAX_BATCH_RECORDS: '4' });
  await c.add();
  const leader = await c.leader();
  await sleep(GAP_MS + 200);
  const first = await upserts(leader, ['first']);
  assert.deepEqual(first.statuses, [200]);
  // Eight writes at once fill two batches of 4: both go as soon as the commit before each ends.
  const full = await upserts(leader, ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h']);
  assert.deepEqual(full.statuses, Array(8).fill(200));
  assert.ok(full.ms < GAP_MS - 500, `full batches are not held (${Math.round(full.ms)} ms)`);
});

test('a batch of 64 records is not held for the commit gap', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: String(GAP_MS) });
  await c.add();
  const leader = await c.leader();
  await sleep(GAP_MS + 200);
  assert.deepEqual((await upserts(leader, ['first'])).statuses, [200]);
  // 64 writes at once (GAP_HOLDS_BELOW_RECORDS in journal.ts): the batch goes when it has them all.
  const many = await upserts(leader, Array.from({ length: 64 }, (_, i) => `m${i}`));
  assert.deepEqual(many.statuses, Array(64).fill(200));
  assert.ok(many.ms < GAP_MS - 500, `a batch of 64 is not held (${Math.round(many.ms)} ms)`);
});

test('CLUSTER_COMMIT_GAP_MS=0 commits as soon as the commit before has ended', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: '0' });
  await c.add();
  const leader = await c.leader();
  const first = await upserts(leader, ['first']);
  assert.deepEqual(first.statuses, [200]);
  const next = await upserts(leader, ['a', 'b', 'c']);
  assert.deepEqual(next.statuses, [200, 200, 200]);
  assert.ok(next.ms < 1_000, `no gap (${Math.round(next.ms)} ms)`);
});
