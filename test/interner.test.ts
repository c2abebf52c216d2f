// The profile interner's caches are bounded by the characters they hold, not only by count: a
// launch with a unique 2,048-character referrer each kept up to about 400 MB of strings that no
// device used any more (found by a review, 2026-11-29). Sharing is unchanged for repeated profiles.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_CACHED_CHARS, ProfileInterner } from '../src/actors/interner.ts';
import type { LaunchInfoValue } from '../src/schemas/endpoints.ts';
import { LAUNCH_INFO } from './helpers/server.ts';

test('unique long referrers: the caches hold at most MAX_CACHED_CHARS characters each, and equal profiles are still one object', () => {
  const interner = new ProfileInterner();
  const shared = interner.intern({ ...LAUNCH_INFO } as LaunchInfoValue);
  assert.equal(interner.intern({ ...LAUNCH_INFO } as LaunchInfoValue), shared, 'the same values: the same profile');
  let most = 0;
  for (let i = 0; i < 12_000; i++) {
    const referrer = `${i.toString(36).padStart(8, '0')}${'r'.repeat(2_040)}`;
    interner.intern({ ...LAUNCH_INFO, referrer } as LaunchInfoValue);
    most = Math.max(most, interner.cachedChars);
  }
  // Before: 12,000 profiles and their strings, about 49 million characters.
  assert.ok(most <= 2 * (MAX_CACHED_CHARS + 4_096), `the caches held up to ${most} characters`);
  const again = interner.intern({ ...LAUNCH_INFO } as LaunchInfoValue);
  assert.deepEqual(again, shared, 'a profile after the caches started over has the same values');
  assert.equal(interner.intern({ ...LAUNCH_INFO } as LaunchInfoValue), again, 'and is shared again');
});
