// A big batch body is parsed item by item (body.ts, parseJsonBytes), without one string of the
// whole body. Its result must be what JSON.parse of the whole gives (with the same well-formed
// strings), and a body JSON.parse refuses must be refused the same way, whatever the bytes: the
// scan that finds the items runs on bytes nothing has checked yet. Checked with fast-check on
// batches over the size where the item-by-item parse starts, valid and corrupted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { itemBodySlices, SLICE_SLOTS } from '../src/http/batch-slices.ts';
import { parseJson, parseJsonBytes, parseJsonObject } from '../src/http/body.ts';

const SEED = Number(process.env.PROPERTY_SEED ?? 1128);
/** Over body.ts's PARSE_BY_ITEM_FROM_BYTES (64 KiB), so that the item-by-item parse runs. */
const PAD = 'x'.repeat(70 * 1024);

/** Whether JSON `text` has whitespace between its tokens. */
function spacedOutsideStrings(text: string): boolean {
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (' \n\r\t'.includes(c)) return true;
  }
  return false;
}

/** What parsing `raw` gives: the value, or that it threw (and the error's type). */
function outcome(parse: () => unknown): { value?: unknown; threw?: string } {
  try {
    return { value: parse() };
  } catch (error) {
    return { threw: (error as Error).constructor.name };
  }
}

const item = fc.record(
  {
    method: fc.constantFrom('POST', 'DELETE'),
    path: fc.constantFrom('/product', '/collection/c1/products', '/mcrs_trck_v1'),
    body: fc.jsonValue({ maxDepth: 3 }),
    idempotencyKey: fc.string({ maxLength: 8 }),
  },
  { requiredKeys: ['method', 'path'] },
);
/** A string with the escapes that make parseJson rewrite strings (lone surrogates) and multi-byte characters. */
const awkward = fc.constantFrom('\\ud800', '\\udfff x', 'é', '😀', '\\"', '\\\\', '"', '}', ']', ',');
/** Bytes to insert: JSON's own characters, whitespace JSON takes and whitespace it does not, a BOM, and lone bytes that are not UTF-8. */
const mutation = fc.record({
  at: fc.nat(),
  bytes: fc.constantFrom(...['', '"', '\\', '{', '}', '[', ']', ',', ':', '0', ' ', '\t', '\r', '\f', 'null', '\\ud83d', '"body":', '"requests":'].map((text) => Buffer.from(text)), Buffer.from('é'), Buffer.from('\ufeff'), Buffer.from([0x80]), Buffer.from([0xc3])),
  remove: fc.nat({ max: 3 }),
});
/** Items written by hand: a key spelled with escapes, a "body" given twice (the last counts), spaced bodies. */
const handWritten = fc.constantFrom(
  '{"method":"POST","path":"/product","b\\u006fdy":{"id":"a"}}',
  '{"method":"POST","path":"/product","body":{"id":"first"},"body":{"id":"last"}}',
  '{"method":"POST","path":"/product","body":{"id":"x"},"b\\u006fdy":{ "id" : "escaped last" }}',
  '{"body":[1, 2],"method":"DELETE","path":"/product/x"}',
  '{"__proto__":{"id":"p"},"body":{"__proto__":1}}',
);

/** Where the padding goes, once the mutations (which land among the items, not in 70 KiB of x) are made. */
const PAD_MARK = '\u0001PAD\u0001';

/** A batch body: items, with the padding in a member before or after "requests", spaced or not. */
const batchText = fc
  .record({
    items: fc.array(fc.oneof(item.map((value) => JSON.stringify(value)), fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value)), handWritten), { minLength: 1, maxLength: 12 }),
    padFirst: fc.boolean(),
    space: fc.constantFrom('', ' ', '\n'),
    strings: fc.array(awkward, { maxLength: 4 }),
    twice: fc.boolean(),
    requestsKey: fc.constantFrom('"requests"', '"requests"', '"req\\u0075ests"'),
  })
  .map(({ items, padFirst, space, strings, twice, requestsKey }) => {
    const texts = items.map((text, i) => {
      // Awkward strings inside some items, in raw form (escapes as written).
      return i < strings.length ? `{"s":"${strings[i]}","v":${text}}` : text;
    });
    const requests = `${requestsKey}:[${space}${texts.join(`,${space}`)}${space}]`;
    const pad = `"pad":"${PAD_MARK}"`;
    const again = twice ? `,"requests":[1]` : '';
    return padFirst ? `{${pad},${space}${requests}${again}}` : `{${space}${requests},${pad}${again}}`;
  });

test('a big batch parsed item by item gives what JSON.parse of the whole body gives, valid or corrupted', () => {
  const seen = { byItem: 0, refused: 0 };
  fc.assert(
    fc.property(batchText, fc.array(mutation, { maxLength: 3 }), (text, mutations) => {
      let small = Buffer.from(text);
      for (const m of mutations) {
        const at = m.at % (small.length + 1);
        small = Buffer.concat([small.subarray(0, at), m.bytes, small.subarray(Math.min(small.length, at + m.remove))]);
      }
      const raw = Buffer.from(small.toString('latin1').replace(PAD_MARK, PAD), 'latin1');
      const whole = outcome(() => parseJson(raw.toString('utf8'), 3));
      const byItem = outcome(() => parseJsonBytes(raw, 3).value);
      assert.deepStrictEqual(byItem, whole);
      // The route's entry point too: same body, or the same refusal.
      const decoded = parseJsonObject(raw, 3);
      if (whole.threw !== undefined) assert.equal(decoded.ok, false);
      else if (decoded.ok) assert.deepStrictEqual(decoded.body, whole.value);
      if (decoded.ok && decoded.text === null) {
        seen.byItem++;
        // The same scan's slices: each item's body bytes, as the batch's fingerprints need them.
        const plain = JSON.parse(raw.toString('utf8')) as { requests: unknown[] };
        const items = decoded.slices!.items;
        // What the scan of a body already parsed finds (itemBodySlices), and the body's compactness.
        assert.deepStrictEqual(itemBodySlices(raw, plain.requests.length), decoded.slices);
        assert.equal(decoded.slices!.compact, !spacedOutsideStrings(raw.toString('utf8')));
        assert.equal(items.length, plain.requests.length * SLICE_SLOTS);
        plain.requests.forEach((element, i) => {
          const [start, end, compact] = [items[i * SLICE_SLOTS]!, items[i * SLICE_SLOTS + 1]!, items[i * SLICE_SLOTS + 2]!];
          const hasBody = typeof element === 'object' && element !== null && !Array.isArray(element) && Object.hasOwn(element, 'body');
          if (!hasBody) return assert.equal(start, -1);
          const bytes = raw.toString('utf8', start, end);
          assert.deepStrictEqual(JSON.parse(bytes), (element as { body: unknown }).body);
          if (compact === 1) assert.ok(!spacedOutsideStrings(bytes), bytes);
        });
      }
      if (whole.threw !== undefined) seen.refused++;
    }),
    { seed: SEED, numRuns: 300 },
  );
  // Both sides were exercised: bodies taken item by item, and bodies refused.
  assert.ok(seen.byItem >= 30 && seen.refused >= 30, JSON.stringify(seen));
});

test('the item-by-item parse is taken for a big batch (so the property above tests it), and not for other bodies', () => {
  const items = Array.from({ length: 400 }, (_, i) => JSON.stringify({ method: 'POST', path: '/product', body: { id: `p${i}`, name: 'x'.repeat(200) } }));
  const raw = Buffer.from(`{"requests":[${items.join(',')}]}`);
  const decoded = parseJsonObject(raw, 3);
  assert.ok(decoded.ok);
  // null: parsed item by item, no string of the whole body made.
  assert.equal(decoded.text, null);
  assert.deepStrictEqual(decoded.body, JSON.parse(raw.toString()));
  // A body that does not carry batch items, or a small batch: the whole text, as before.
  assert.equal(parseJsonObject(raw, 0).ok && typeof (parseJsonObject(raw, 0) as { text: unknown }).text, 'string');
  const small = Buffer.from(`{"requests":[${items.slice(0, 3).join(',')}]}`);
  const smallDecoded = parseJsonObject(small, 3);
  assert.ok(smallDecoded.ok);
  assert.equal(smallDecoded.text, small.toString());
});

test('a big batch with a lone surrogate escape in an item: the item is made well-formed as in the whole parse', () => {
  const items = Array.from({ length: 400 }, (_, i) => `{"method":"POST","path":"/product","body":{"id":"p${i}\\ud800","name":"${'y'.repeat(200)}"}}`);
  const raw = Buffer.from(`{"requests":[${items.join(',')}]}`);
  const value = parseJsonBytes(raw, 3).value as { requests: Array<{ body: { id: string } }> };
  assert.equal(value.requests[7]!.body.id, 'p7\ufffd');
  assert.deepStrictEqual(value, parseJson(raw.toString(), 3));
});

test('a big batch: strings are made well-formed down to the same depth as in the whole parse, and not below it', () => {
  // An item's body nested `depth` levels, a lone surrogate escape in its deepest string.
  const nested = (depth: number) => '{"a":'.repeat(depth - 1) + '"\\udc00"' + '}'.repeat(depth - 1);
  for (const depth of [60, 61, 62, 63, 64, 65, 66]) {
    const items = Array.from({ length: 300 }, (_, i) => `{"method":"POST","path":"/product","body":${i === 5 ? nested(depth) : `{"id":"p${i}","name":"${'z'.repeat(200)}"}`}}`);
    const raw = Buffer.from(`{"requests":[${items.join(',')}]}`);
    assert.equal((parseJsonObject(raw, 3) as { text: unknown }).text, null);
    assert.deepStrictEqual(parseJsonBytes(raw, 3).value, parseJson(raw.toString(), 3), `depth ${depth}`);
  }
});

test('a body past the limits of the scan is parsed whole, as before: no element or key count makes the scan costly', () => {
  // 150,000 elements (BATCH_MAX_ITEMS is at most 100,000): whole, then refused by the schema.
  const many = Buffer.from(`{"requests":[${'0,'.repeat(150_000)}0]}`);
  const started = performance.now();
  const decoded = parseJsonObject(many, 3);
  assert.ok(decoded.ok);
  assert.equal(typeof decoded.text, 'string');
  // "requests" given 100,000 times: whole (the last counts), with nothing scanned past the second.
  const keys = Buffer.from(`{${'"requests":[],'.repeat(100_000)}"requests":[{"method":"POST","path":"/product","body":{"id":"x${'y'.repeat(200)}"}}]}`);
  const again = parseJsonObject(keys, 3);
  assert.ok(again.ok);
  assert.equal(typeof again.text, 'string');
  assert.deepStrictEqual(again.body, JSON.parse(keys.toString()));
  // Generous: a few ms each here; item by item they took about a second and megabytes of arrays.
  assert.ok(performance.now() - started < 500, `${performance.now() - started} ms`);
});
