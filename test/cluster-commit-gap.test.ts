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

/** Sends product upserts `ids` at once; resolves with each one's status and answer time, and the time all took (ms). */
async function upserts(node: TestNode, ids: string[]): Promise<{ statuses: number[]; ms: number; answeredMs: number[] }> {
  const startedAt = performance.now();
  const answeredMs: number[] = [];
  const answers = await Promise.all(
    ids.map(async (id, i) => {
      const res = await node.post('/product', { id, name: 'P' });
      answeredMs[i] = performance.now() - startedAt;
      return res;
    }),
  );
  return { statuses: answers.map((r) => r.status), ms: performance.now() - startedAt, answeredMs };
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
  const next = await upserts(leader, ['a', 'b', 'c', 'd', 'e']);
  assert.deepEqual(next.statuses, [200, 200, 200, 200, 200]);
  // The first commit started after `first` was sent and before it was answered, so the gap ends
  // at least GAP_MS - first.ms after sentAt; the timer may fire a little early.
  assert.ok(next.ms >= GAP_MS - first.ms - 50, `writes within the gap wait for it (${Math.round(next.ms)} ms; the first took ${Math.round(first.ms)})`);
  assert.equal((await commits(leader)) - before, 2, 'one commit for the first write, one for the five after it');
});

test('a full batch does not wait for the commit gap, even with an open batch behind it', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: String(GAP_MS), JOURNAL_MAX_BATCH_RECORDS: '4' });
  await c.add();
  const leader = await c.leader();
  await sleep(GAP_MS + 200);
  const first = await upserts(leader, ['first']);
  assert.deepEqual(first.statuses, [200]);
  // Ten writes at once: two full batches of 4, each sent as soon as the commit before it ends
  // (the second while the last 2 wait in the open batch behind it), then those 2, held for the
  // gap after the second full batch's commit started.
  const ten = await upserts(leader, ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j']);
  assert.deepEqual(ten.statuses, Array(10).fill(200));
  const times = [...ten.answeredMs].sort((x, y) => x - y);
  assert.ok(times[7]! < GAP_MS - 500, `the 8 writes of full batches are not held (${times.map(Math.round).join(', ')} ms)`);
  assert.ok(times[8]! >= GAP_MS - 100, `the last 2 wait for the gap (${times.map(Math.round).join(', ')} ms)`);
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

test('a graceful stop sends a batch held for the commit gap at once, and answers it 200', async () => {
  const c = cluster({ CLUSTER_COMMIT_GAP_MS: String(GAP_MS) });
  const leader = await c.add();
  await c.leader();
  await sleep(GAP_MS + 200);
  assert.deepEqual((await upserts(leader, ['first'])).statuses, [200]);
  // Held for the gap; the SIGTERM comes while it waits.
  const held = upserts(leader, ['held']);
  await sleep(100);
  const stopped = leader.stop();
  const answer = await held;
  assert.deepEqual(answer.statuses, [200]);
  assert.ok(answer.ms < GAP_MS - 300, `the stop did not wait for the gap (${Math.round(answer.ms)} ms)`);
  assert.equal(await stopped, 0, 'a clean stop');
});
