// The profile interner's caches are bounded by the characters they hold, not only by count: a
// launch with a unique 2,048-character referrer each kept up to about 400 MB of strings that no
// device used any more (found by a review, 2026-11-29). Sharing is unchanged for repeated profiles.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_CACHED_CHARS, ProfileInterner } from '../src/actors/interner.ts';
import { LaunchInfo as LAUNCH_INFO_SCHEMA, type LaunchInfoValue } from '../src/schemas/endpoints.ts';
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

test("a profile keeps LaunchInfo's key order, whatever order a launch sent its keys in", () => {
  // A shared profile is one object: had it kept the first launch's key order, a device's exported
  // profile would show another device's order, and which one depended on the cache's history (a
  // restart, loading the snapshot's profiles, changed it: found by a review, 2026-11-29).
  const schemaOrder = Object.keys(LAUNCH_INFO_SCHEMA.properties);
  const full = { ...LAUNCH_INFO, referrer: 'r', utmInfo: { uc: 'c', us: 's', um: null } };
  const reversed = Object.fromEntries(Object.entries(full).reverse()) as LaunchInfoValue;
  const interner = new ProfileInterner();
  const profile = interner.intern(reversed);
  assert.deepEqual(Object.keys(profile), schemaOrder.filter((k) => k in full));
  assert.deepEqual(Object.keys(profile.utmInfo!), ['us', 'um', 'uc']);
  assert.equal(interner.intern(full as LaunchInfoValue), profile, 'the other order shares it');
  assert.deepEqual(Object.keys(new ProfileInterner().intern(full as LaunchInfoValue)), Object.keys(profile), 'and a fresh cache makes the same');
});
