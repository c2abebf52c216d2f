// The leader's table of forwarded commands (src/cluster/forward-dedup.ts): a retried command is
// answered with its first answer, never run twice, and one too old to be remembered gets 503
// rather than a second run. The table itself, no server (test/cluster-forwarding.test.ts runs it
// between real nodes).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ForwardDedup } from '../src/cluster/forward-dedup.ts';
import type { Answer } from '../src/handoff/frames.ts';

const answer = (id: number, body = '{"success":true}'): Answer => ({ id, status: 200, body, header: '', headerValue: '', close: false });

test('a retry while the command runs gets its answer when it comes; a retry after gets it at once; neither runs it again', () => {
  const dedup = new ForwardDedup();
  const got: Answer[] = [];
  const run = dedup.take('f1/x', 7, (a) => got.push(a), 0);
  assert.notEqual(run, null, 'new: the caller runs it');
  assert.equal(dedup.take('f1/x', 7, (a) => got.push(a), 1), null, 'a retry while it runs is not run');
  assert.equal(got.length, 0);
  run!(answer(7));
  assert.deepEqual(got, [answer(7), answer(7)], 'the first and the waiting retry get the one answer');
  assert.equal(dedup.take('f1/x', 7, (a) => got.push(a), 2), null);
  assert.equal(got.length, 3);
  assert.deepEqual(got[2], answer(7));
  // Another origin's id 7 is another command.
  assert.notEqual(dedup.take('f2/y', 7, () => undefined, 3), null);
});

test('bounded by count, bytes and age, oldest answered first; a forgotten command retried gets 503, a new one runs; a running one is never forgotten', () => {
  const dedup = new ForwardDedup({ maxEntries: 2, maxBytes: 1_000_000, maxAgeMs: 1_000_000 });
  const running = dedup.take('o', 1, () => undefined, 0)!;
  for (const id of [2, 3, 4]) dedup.take('o', id, () => undefined, 0)!(answer(id));
  dedup.take('o', 5, () => undefined, 0);
  // Over the count: 2 and 3 are forgotten (1 still runs and is kept).
  const got: Answer[] = [];
  assert.equal(dedup.take('o', 2, (a) => got.push(a), 0), null, 'a forgotten command is not run again');
  assert.equal(got[0]?.status, 503);
  assert.equal(got[0]?.header, 'retry-after');
  assert.equal(dedup.take('o', 1, (a) => got.push(a), 0), null, 'the running one is still known');
  running(answer(1));
  assert.deepEqual(got[1], answer(1));
  assert.notEqual(dedup.take('o', 6, () => undefined, 0), null, 'a new (higher) id runs');

  const aged = new ForwardDedup({ maxEntries: 100, maxBytes: 1_000_000, maxAgeMs: 10 });
  aged.take('o', 1, () => undefined, performance.now())!(answer(1));
  const later = performance.now() + 50;
  aged.take('o', 2, () => undefined, later);
  const seen: Answer[] = [];
  aged.take('o', 1, (a) => seen.push(a), later);
  assert.equal(seen[0]?.status, 503, 'past maxAgeMs the answer is forgotten: 503, not a second run');

  const small = new ForwardDedup({ maxEntries: 100, maxBytes: 2_000, maxAgeMs: 1_000_000 });
  for (let id = 1; id <= 10; id++) small.take('o', id, () => undefined, 0)!(answer(id, 'x'.repeat(500)));
  assert.ok(small.size <= 4, `bytes bound the table (${small.size} entries of ~650 bytes in 2,000)`);
});

test('commands running at the table\'s front do not stop it forgetting answered ones (it gave up after 64 running ones, and grew past every limit while they ran)', () => {
  const dedup = new ForwardDedup({ maxEntries: 1_000, maxBytes: 1_000_000_000, maxAgeMs: 1_000_000 });
  const running: Array<(a: Answer) => void> = [];
  for (let id = 1; id <= 200; id++) running.push(dedup.take('slow', id, () => undefined, 0)!);
  for (let id = 1; id <= 5_000; id++) dedup.take('o', id, () => undefined, 0)!(answer(id));
  assert.ok(dedup.size <= 1_001, `the 200 running and the answered ones last, up to the limit (and the one just taken): ${dedup.size}`);
  // The running ones are all still known, and answered once they end.
  const got: Answer[] = [];
  for (let id = 1; id <= 200; id++) assert.equal(dedup.take('slow', id, (a) => got.push(a), 0), null);
  running.forEach((done, i) => done(answer(i + 1)));
  assert.equal(got.length, 200);
});
