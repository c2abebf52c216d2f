// A batch item's Idempotency-Key fingerprint comes from the scan of the batch's bytes
// (batch-slices.ts): a body with no whitespace between its tokens is hashed by the plain loop
// (compactFingerprintInto), any other by bodyFingerprint(). Both must give bodyFingerprint()'s
// words for the body's bytes, whatever the spacing, or a retry alone of a batched item (or the
// other way round) would be a conflict instead of a replay (CONTRACT.md §13).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { itemBodySlices, SLICE_SLOTS } from '../src/http/batch-slices.ts';
import { batchBodyFingerprint, bodyFingerprint, compactFingerprintInto } from '../src/idempotency/claim.ts';

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
      const scan = itemBodySlices(raw, texts.length);
      assert.notEqual(scan, null);
      const slices = scan!.items;
      assert.equal(scan!.compact, texts.every((text) => text === JSON.stringify(JSON.parse(text))) || !texts.some((text) => /[ \t\r\n]/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, '""'))));
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

test('a batch body\'s own fingerprint: the same for the batch spaced anywhere (envelope or items) as compact, another for another batch', () => {
  const item = fc.record({ method: fc.constant('POST'), path: fc.constant('/product'), body: fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }) });
  const spacing = fc.array(fc.constantFrom(' ', '\n  ', '\t', '\r\n'), { minLength: 1, maxLength: 3 });
  fc.assert(
    fc.property(fc.array(item, { minLength: 1, maxLength: 4 }), spacing, fc.constantFrom('', ' ', '\n'), (items, spaces, around) => {
      const batch = { requests: items };
      const compact = Buffer.from(JSON.stringify(batch));
      const loose = Buffer.from(around + spaced(batch, spaces) + around);
      const print = (raw: Buffer, count = items.length) => {
        const scan = itemBodySlices(raw, count);
        assert.notEqual(scan, null, raw.toString());
        return batchBodyFingerprint(raw, scan!.compact);
      };
      assert.equal(itemBodySlices(compact, items.length)!.compact, true);
      assert.equal(itemBodySlices(loose, items.length)!.compact, false, loose.toString());
      assert.deepEqual(print(loose), print(compact));
      // Whatever the scan says, the same words (null: it could not tell).
      assert.deepEqual(batchBodyFingerprint(loose, null), print(compact));
      const other = Buffer.from(JSON.stringify({ requests: [...items, { method: 'DELETE', path: '/product/x' }] }));
      assert.notDeepEqual(print(other, items.length + 1), print(compact));
    }),
    { seed: SEED, numRuns: 200 },
  );
});
