// Stop signals (src/cli/stop-signals.ts; import, export --follow, cluster:local): the copy of a
// Ctrl-C that `npm run` forwards is not a second Ctrl-C (which quits at once); a later one, or
// another signal, is. cluster:local itself needs HAProxy, which tests do not: checked by hand
// (SIGINT to its process group, as a terminal sends it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DUPLICATE_SIGNAL_MS, StopSignals } from '../src/cli/stop-signals.ts';

test('a repeat of the first stop signal within DUPLICATE_SIGNAL_MS is its copy; later, or another signal, is a second one', () => {
  const copy = new StopSignals();
  assert.equal(copy.seen('SIGINT', 1_000), 'first');
  assert.equal(copy.seen('SIGINT', 1_003), 'copy', "npm's forwarded copy of the terminal's SIGINT");
  assert.equal(copy.seen('SIGINT', 1_000 + DUPLICATE_SIGNAL_MS), 'again', 'a second Ctrl-C a second later');

  const other = new StopSignals();
  assert.equal(other.seen('SIGINT', 0), 'first');
  assert.equal(other.seen('SIGTERM', 5), 'again', 'another signal is never a copy');
});
