// The answers kept for keyed POST /batch requests (src/idempotency/batch-answers.ts): their
// limits (count, bytes, window), and batches that wait for a running one under their key; and the
// packed form a journal record carries one in (src/idempotency/batch-answer-record.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BatchAnswers } from '../src/idempotency/batch-answers.ts';
import { IdempotencyClaim } from '../src/idempotency/claim.ts';
import fc from 'fast-check';
import { packResults, unpackAnswer } from '../src/idempotency/batch-answer-record.ts';

const claim = (key: string, print = 1): IdempotencyClaim => IdempotencyClaim.fromParts(key, [key.length, key.charCodeAt(0), Number(key.slice(1)) || 0], [print, print]);

test('kept answers: replay for the same fingerprint, reused for another; the window, the count and the bytes bound them; running batches are never dropped', () => {
  const answers = new BatchAnswers(1_000);
  const first = answers.begin(claim('k1'), 0);
  assert.equal(answers.lookup(claim('k1'), 0)?.kind, 'wait');
  assert.equal(answers.lookup(claim('k1', 2), 0)?.kind, 'reused', 'another batch under a running key: 422 at once');
  answers.finish(first, '{"results":[]}', 0);
  assert.deepEqual(answers.lookup(claim('k1'), 500), { kind: 'replay', text: '{"results":[]}' });
  assert.equal(answers.lookup(claim('k1'), 1_001), null, 'past the window');
  assert.equal(answers.size, 0);

  // Count: past 10,000 answered, the oldest go; a running one stays.
  const running = answers.begin(claim('r0'), 0);
  for (let i = 1; i <= 10_001; i++) answers.finish(answers.begin(claim(`c${i}`), 10), `{"n":${i}}`, 10);
  assert.equal(answers.size, 10_000);
  assert.equal(answers.lookup(claim('c1'), 10), null, 'the oldest answer went');
  assert.equal(answers.lookup(claim('c10001'), 10)?.kind, 'replay');
  assert.equal(answers.lookup(claim('r0'), 10)?.kind, 'wait', 'the running batch is still known');
  answers.finish(running, null, 10);
  assert.equal(answers.lookup(claim('r0'), 10), null, 'not kept (a 5xx item): its key is free again');

  // Bytes: answers of 40 MB each, at most 64 MB held.
  const big = new BatchAnswers(1_000_000);
  const text = 'x'.repeat(40 * 1024 * 1024);
  big.finish(big.begin(claim('b1'), 0), text, 0);
  big.finish(big.begin(claim('b2'), 0), text, 0);
  assert.equal(big.lookup(claim('b1'), 0), null);
  assert.equal(big.lookup(claim('b2'), 0)?.kind, 'replay');
});

test('batches waiting for a running one get its kept answer, or run themselves when it is not kept', () => {
  const answers = new BatchAnswers(60_000);
  const entry = answers.begin(claim('w1'), 0);
  const got: Array<string | null> = [];
  for (let i = 0; i < 3; i++) {
    const found = answers.lookup(claim('w1'), 0);
    assert.equal(found?.kind, 'wait');
    if (found?.kind === 'wait') found.then((text) => got.push(text));
  }
  answers.finish(entry, '{"results":[1]}', 0);
  assert.deepEqual(got, ['{"results":[1]}', '{"results":[1]}', '{"results":[1]}']);

  const failing = answers.begin(claim('w2'), 0);
  const after: Array<string | null> = [];
  const found = answers.lookup(claim('w2'), 0);
  if (found?.kind === 'wait') found.then((text) => after.push(text));
  answers.finish(failing, null, 0);
  assert.deepEqual(after, [null], 'told to run itself');
});

test('a batch answer as a journal record carries it: packed without its plain successes, unpacked word for word; anything else unpacks to null (the batch then runs again)', () => {
  const success = '{"status":200,"body":{"success":true}}';
  fc.assert(
    fc.property(
      fc.array(fc.oneof(fc.constant(success), fc.constant('{"status":422,"body":{"type":"ValidationError","details":[{"message":"\\"x\\" \\u2028 é"}]}}'), fc.string().map((s) => JSON.stringify({ status: 200, body: { did: s, sid: 'x' } }))), { minLength: 1, maxLength: 50 }),
      (results) => {
        const packed = packResults(results, success);
        assert.equal(unpackAnswer(packed, success), `{"results":[${results.join(',')}]}`);
        if (results.every((r) => r === success)) assert.equal(packed, `[${results.length}]`, 'a batch of plain successes adds its count alone');
      },
    ),
  );
  for (const bad of ['', 'x', '{}', '[]', '[0]', '[2,1]', '[2,2,"x"]', '[2,-1,"x"]', '[2,0,3]', '[1.5]', '[2,"0","x"]', '[2000000]']) assert.equal(unpackAnswer(bad, success), null, bad);
});
