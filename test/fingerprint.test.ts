// A batch item's Idempotency-Key fingerprint comes from the scan of the batch's bytes
// (batch-slices.ts): a body with no whitespace between its tokens is hashed by the plain loop
// (compactFingerprintInto), any other by bodyFingerprint(). Both must give bodyFingerprint()'s
// words for the body's bytes, whatever the spacing, or a retry alone of a batched item (or the
// other way round) would be a conflict instead of a replay (CONTRACT.md §13).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { itemBodySlices, SLICE_SLOTS } from '../src/http/batch-slices.ts';
import { bodyFingerprint, compactFingerprintInto } from '../src/idempotency/claim.ts';

const SEED = Number(process.env.PROPERTY_SEED ?? 1125);

/** JSON text of `value` with whitespace from `spaces` between some tokens (none when it is empty). */
function spaced(value: unknown, spaces: string[]): string {
  const compact = JSON.stringify(value);
  if (spaces.length === 0) return compact;
  let out = '';
  let inString = false;
  let n = 0;
  for (let i = 0; i < compact.length; i++) {
    const c = compact[i]!;
    out += c;
    if (inString) {
      if (c === '\\') out += compact[++i]!;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    if (!inString && ',:{['.includes(c)) out += spaces[n++ % spaces.length]!;
  }
  return out;
}

test('a batch item body fingerprinted from the scan equals bodyFingerprint() of its bytes, compact or spaced', () => {
  const body = fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 });
  const spacing = fc.array(fc.constantFrom('', ' ', '\n  ', '\t', '\r\n'), { maxLength: 3 });
  fc.assert(
    fc.property(fc.array(fc.tuple(body, spacing), { minLength: 1, maxLength: 5 }), (items) => {
      const texts = items.map(([value, spaces]) => spaced(value, spaces));
      const raw = Buffer.from(`{"requests":[${texts.map((text) => `{"method":"POST","path":"/product","body":${text}}`).join(',')}]}`);
      const slices = itemBodySlices(raw, texts.length);
      assert.notEqual(slices, null);
      for (let i = 0; i < texts.length; i++) {
        const start = slices![i * SLICE_SLOTS]!;
        const end = slices![i * SLICE_SLOTS + 1]!;
        const bytes = Buffer.from(texts[i]!);
        assert.deepEqual(raw.subarray(start, end), bytes);
        const expected = bodyFingerprint(bytes);
        const hasSpace = /[ \t\r\n]/.test(texts[i]!.replace(/"(?:[^"\\]|\\.)*"/g, '""'));
        assert.equal(slices![i * SLICE_SLOTS + 2], hasSpace ? 0 : 1, texts[i]);
        if (!hasSpace) {
          const out = new Uint32Array(4);
          compactFingerprintInto(raw, start, end, out, 2);
          assert.deepEqual([out[2], out[3]], [...expected], texts[i]);
        }
      }
    }),
    { seed: SEED, numRuns: 300 },
  );
});
