// The progress of `npm run import` on stderr (src/cli/import-progress.ts; issue 20: items done and
// failed, rate, ETA; plain lines when stderr is not a TTY): what it writes to a terminal and to a
// log, under mocked timers and clock.
import { afterEach, beforeEach, mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { Progress, type Counts } from '../src/cli/import-progress.ts';

class Stream {
  readonly writes: string[] = [];
  constructor(readonly isTTY: boolean) {}
  write(text: string): boolean {
    this.writes.push(text);
    return true;
  }
}

function progress(isTTY: boolean, counts: Counts, total = 1_000): { out: Stream; p: Progress } {
  const out = new Stream(isTTY);
  const p = new Progress('import products', total, () => counts, out as unknown as NodeJS.WriteStream);
  return { out, p };
}

beforeEach(() => mock.timers.enable({ apis: ['setInterval', 'Date'], now: 1_000_000 }));
afterEach(() => mock.timers.reset());

test('not a TTY (a log, CI): a plain line every 2 s with items done and failed, the rate and the ETA; no carriage returns', () => {
  const counts = { done: 0, failed: 0 };
  const { out, p } = progress(false, counts);
  mock.timers.tick(1_999);
  assert.deepEqual(out.writes, [], 'nothing before the first 2 s');
  counts.done = 250;
  counts.failed = 3;
  mock.timers.tick(1);
  assert.deepEqual(out.writes, ['import products: 250/1,000 (25%) done, 3 failed, 125/s, ETA 6 s\n']);
  counts.done = 1_000;
  mock.timers.tick(2_000);
  assert.equal(out.writes[1], 'import products: 1,000/1,000 (100%) done, 3 failed, 250/s, ETA 0 s\n');
  p.note('a note');
  p.finish('the summary');
  assert.deepEqual(out.writes.slice(2), ['a note\n', 'the summary\n']);
  assert.equal(out.writes.join('').includes('\r'), false);
  mock.timers.tick(10_000);
  assert.equal(out.writes.length, 4, 'nothing after finish()');
});

test('a TTY: one line redrawn in place every 200 ms; a note or the summary clears it first; a retry in progress is shown', () => {
  const counts = { done: 0, failed: 0 };
  const { out, p } = progress(true, counts, 100_000);
  mock.timers.tick(200);
  assert.deepEqual(out.writes, ['\rimport products: 0/100,000 (0%) done, 0 failed, 0/s, ETA ?\x1b[K']);
  counts.done = 6_000;
  p.retrying = 'retrying a batch (503), attempt 2';
  mock.timers.tick(120_000 - 200);
  assert.equal(out.writes.at(-1), '\rimport products: 6,000/100,000 (6%) done, 0 failed, 50/s, ETA 31 min 20 s; retrying a batch (503), attempt 2\x1b[K');
  const before = out.writes.length;
  p.note('line 7 failed: 422');
  assert.deepEqual(out.writes.slice(before), ['\r\x1b[K', 'line 7 failed: 422\n']);
  p.finish('done');
  assert.deepEqual(out.writes.slice(before + 2), ['done\n'], 'nothing to clear: nothing was drawn since the note');
});
