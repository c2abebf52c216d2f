// The client's batch body (src/client/item-json.ts): written straight into a Buffer around each
// write's body JSON, it must be byte for byte what JSON.stringify of the envelope gives, and each
// write's `bytes` its item's UTF-8 length (the batch and queue limits count them). A property
// test over mixed writes: bodies of any JSON value and of every kind of string (non-ASCII, lone
// surrogates, escapes), keys with `"` and `\`, DELETEs without a body, paths with encoded ids.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { batchBodyBytes, itemBodyJson, itemJson } from '../src/client/item-json.ts';
import type { WriteMethod } from '../src/client/types.ts';

const printableKey = fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 255 });
const anyString = fc.oneof(fc.string({ unit: 'binary', maxLength: 20 }), fc.string({ unit: 'grapheme', maxLength: 20 }), fc.constantFrom('\ud800x', 'a"b\\c\n', 'é😀', ''));
const body = fc.oneof(
  fc.jsonValue(),
  fc.dictionary(anyString, fc.oneof(anyString, fc.double(), fc.integer(), fc.boolean(), fc.constant(null))),
  // A body JSON.stringify leaves out altogether: the item then has no "body", as it would there.
  fc.constant(() => 1),
);
const write = fc.oneof(
  fc.record({ method: fc.constant<WriteMethod>('POST'), path: fc.constantFrom('/product', '/msv_cevt', '/collection/a%2Fb/products/add'), body, idempotencyKey: printableKey }),
  fc.record({ method: fc.constant<WriteMethod>('DELETE'), path: anyString.map((id) => `/product/${encodeURIComponent(id.replace(/\p{Surrogate}/gu, '\ufffd'))}`), body: fc.constant(undefined), idempotencyKey: printableKey }),
);

test('batchBodyBytes is JSON.stringify of the envelope, byte for byte; each write\'s bytes is its item\'s UTF-8 length', () => {
  fc.assert(
    fc.property(fc.array(write, { minLength: 1, maxLength: 12 }), (writes) => {
      const queued = writes.map((w) => ({ ...w, ...itemJson(w.method, w.path, w.body, w.idempotencyKey) }));
      const items = writes.map(({ method, path, body, idempotencyKey }) => ({ method, path, body, idempotencyKey }));
      assert.deepEqual(batchBodyBytes(queued), Buffer.from(JSON.stringify({ requests: items })));
      queued.forEach((q, i) => {
        assert.equal(q.bytes, Buffer.byteLength(JSON.stringify(items[i])));
        // What the write sends alone: its body's JSON, or none.
        assert.equal(itemBodyJson(q), (JSON.stringify(items[i]!.body) as string | undefined) ?? null);
      });
    }),
    { numRuns: 500 },
  );
});
