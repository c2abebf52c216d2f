// Journal records as bytes (src/journal/record-bytes.ts): what the store writes reads back as the
// same records, with every value a record can hold; and journals written before by lmdb-js's own
// msgpack encoder (msgpackr record structures) read the same, packed id lists of big mappings
// included, so an upgraded node keeps its data.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { open } from 'lmdb';
import { Packr, Unpackr } from 'msgpackr';
import { journalProducts, packIds } from '../src/journal/packed-ids.ts';
import { decodeRecords, encodeRecords, RecordWriter } from '../src/journal/record-bytes.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { encodeChunk } from '../src/journal/snapshot-writer.ts';
import { openStore, STORE_FILE } from '../src/journal/store.ts';

const RECORDS: JournalRecord[] = [
  { kind: 'product_upsert', workspace: 'ws', at: 1_764_000_000_000, data: { id: 'p-1', name: 'Shirt', price: 19.99, stock: -3, big: 2 ** 40, tags: [] } as never, idem: new Uint8Array([1, 2, 3, 250]) },
  { kind: 'event', workspace: 'ws', at: 1_764_000_000_001, did: 'd'.repeat(21), sid: 's'.repeat(21), customer: null, data: { did: 'd'.repeat(21), name: 'view', timestamp: 1_764_000_000_000, info: [{ name: 'sku', value: 'é-中-😀', type: 'string' }, { name: 'ok', value: true, type: 'boolean' }] } as never },
  { kind: 'collection_products_add', workspace: 'ws', at: 1_764_000_000_002, data: { id: 'c-1', products: journalProducts(packIds(['p-1', 'p-2'])) } },
];
const DECODED = [RECORDS[0], RECORDS[1], { ...RECORDS[2]!, data: { id: 'c-1', products: ['p-1', 'p-2'] } }];

/** Bytes as plain arrays (a Uint8Array is written, a Buffer read back). */
function plain(records: unknown): unknown {
  return JSON.parse(
    JSON.stringify(records, (_key, value: unknown) => {
      if (value instanceof Uint8Array) return [...value];
      const json = value as { type?: unknown; data?: unknown } | null;
      return json !== null && typeof json === 'object' && json.type === 'Buffer' && Array.isArray(json.data) ? json.data : value;
    }),
  );
}

test('the store reads back the records it writes', async () => {
  const store = openStore(mkdtempSync(join(tmpdir(), 'journal-format-')));
  try {
    await store.journal.put(1, RECORDS);
    assert.deepEqual(plain(store.journal.get(1)), plain(DECODED));
  } finally {
    await store.close();
  }
});

test('a journal written by lmdb-js default encoder reads the same through the store', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'journal-format-'));
  const before = open({ path: join(dir, STORE_FILE), maxDbs: 8 });
  await before.openDB<JournalRecord[], number>({ name: 'journal' }).put(1, RECORDS);
  await before.close();
  const store = openStore(dir);
  try {
    assert.deepEqual(plain(store.journal.get(1)), plain(DECODED));
  } finally {
    await store.close();
  }
});

test('any JSON value, any string, any bytes: msgpack that msgpackr reads back the same', () => {
  const other = new Unpackr({ mapsAsObjects: true } as ConstructorParameters<typeof Unpackr>[0]);
  // Strings of well-formed UTF-16 (a lone surrogate is not: UTF-8 cannot hold it).
  const text = fc.string({ unit: 'grapheme', maxLength: 300 });
  const value = fc.letrec((tie) => ({
    any: fc.oneof({ depthSize: 'small' }, text, fc.double({ noNaN: true }), fc.integer(), fc.maxSafeInteger(), fc.boolean(), fc.constant(null), fc.uint8Array({ maxLength: 300 }), tie('array'), tie('object')),
    array: fc.array(tie('any'), { maxLength: 20 }),
    // Not "__proto__": msgpackr's reader renames that key (to "__proto_", against prototype
    // pollution), whoever wrote it. No record holds one: every request body with named fields
    // has a closed schema, which refuses it.
    object: fc.dictionary(text.filter((key) => key !== '__proto__'), tie('any'), { maxKeys: 20 }),
  })).any;
  fc.assert(
    fc.property(value, (v) => {
      const bytes = encodeRecords(v);
      const expected = plain(v);
      assert.deepEqual(plain(decodeRecords(bytes)), expected);
      assert.deepEqual(plain(other.unpack(bytes)), expected);
    }),
    { numRuns: 500 },
  );
});

test('past 64 shapes, the same batch again gives the same bytes: a shape that held a record id in an earlier batch is not written out again', () => {
  // 90 shapes of data and the record's own, 300 records: the ids go round several times.
  const records = Array.from({ length: 300 }, (_, i) => ({ kind: 'event', at: i, data: { [`x${i % 90}`]: i, s: 'é'.repeat(i % 40) } }));
  const writer = new RecordWriter();
  const first = writer.encode(records);
  assert.deepEqual(decodeRecords(first), records);
  // Compared as bytes (the reader above hung a DataView on `first`).
  for (let again = 0; again < 3; again++) assert.ok(writer.encode(records).equals(first), `batch ${again + 2}: the same bytes as the first`);
});

test('objects whose keys differ only late, or only in order, keep their own shapes (the recent-shapes check)', () => {
  const objects = [
    { a: 1, b: 2, c: 3 },
    { a: 4, b: 5, d: 6 },
    { b: 7, a: 8, c: 9 },
    { a: 10, b: 11, c: 12 },
    { a: 13, b: 14 },
    { a: 15, b: 16, c: 17, d: 18 },
    ...Array.from({ length: 20 }, (_, i) => ({ a: i, b: i, [`k${i % 11}`]: i })),
    { b: 19, a: 20, c: 21 },
  ];
  // One batch, and each object alone in a batch of its own (shapes remembered across batches).
  assert.deepEqual(decodeRecords(encodeRecords(objects)), objects);
  const keysOf = (value: unknown) => Object.keys(value as object);
  for (const object of objects) {
    const decoded = decodeRecords(encodeRecords(object));
    assert.deepEqual(decoded, object);
    assert.deepEqual(keysOf(decoded), keysOf(object), 'key order kept');
  }
});

test('snapshot chunks written by msgpackr before (useRecords: false) read the same as the chunks written now', () => {
  const tokens = { fcm: 'token-1' };
  const entries = [
    [0, 0, 'default'],
    // 100: msgpackr wrote 64-127 as one byte 0x40-0x7f, which the journal's reader also takes for a record id.
    [1, 0, { appVersionCode: 100, sdkVersion: 127, build: 64, appVersionName: '4.2.0', platform: 'ANDROID', language: 'en-GB' }],
    [2, 0, 'd'.repeat(21), 's'.repeat(21), 0, 'customer-1', 0, tokens, [['plan', 'string', 'gold'], ['age', 'number', 41]]],
    [2, 0, 'e'.repeat(21), 't'.repeat(21), 0, null, 1, null, null],
    [3, 0, 'customer-1', [['vip', 'boolean', true]]],
    [4, 0, 'p-1', { id: 'p-1', name: 'Shirt', price: 19.99, tags: ['a', 'é-中-😀'] }],
    [5, 0, 'c-1', { id: 'c-1', name: 'Summer' }, ['p-1', 'p-2']],
    [6, new Uint8Array([1, 2, 3, 250, 0, 7])],
  ];
  const before = new Packr({ useRecords: false }).pack(entries);
  assert.deepEqual(plain(decodeRecords(before)), plain(entries));
  assert.deepEqual(plain(decodeRecords(encodeChunk(entries))), plain(entries));
  // And what the loader read them with before reads the chunks written now.
  assert.deepEqual(plain(new Unpackr({ useRecords: false }).unpack(encodeChunk(entries))), plain(entries));
});

test('more shapes in one batch than record ids (64), and more keys than the shape tree keeps: objects, for every reader', () => {
  // Readers of the previous release: PostgreSQL's batches were read with useRecords and no
  // mapsAsObjects, LMDB's by lmdb-js's default decoder; either reads a msgpack map as a Map.
  const before = [new Unpackr({ useRecords: true } as ConstructorParameters<typeof Unpackr>[0]), new Unpackr()];
  const readAll = (bytes: Buffer, expected: unknown): void => {
    assert.deepEqual(decodeRecords(bytes), expected);
    for (const reader of before) assert.deepEqual(reader.unpack(bytes), expected);
  };
  const shapes = Array.from({ length: 150 }, (_, i) => ({ [`only-${i}`]: i, shared: 64 + (i % 64), nested: { [`n${i % 70}`]: [i, { x: i }] }, empty: {} }));
  const twice = [...shapes, ...shapes];
  readAll(encodeRecords(twice), twice);
  // Free-form keys, batch after batch: past the shape tree's bound their key lists are written
  // out each time, still as records.
  for (let batch = 0; batch < 10; batch++) {
    const objects = Array.from({ length: 600 }, (_, i) => ({ [`free-${batch}-${i}`]: i, id: `${batch}-${i}`, inner: { [`k${i}`]: { a: batch } } }));
    readAll(encodeRecords(objects), objects);
  }
});

test('long strings, big arrays and maps take the wider headers', () => {
  for (const n of [31, 32, 255, 256, 65535, 65536, 70000]) {
    const ascii = 'a'.repeat(n);
    const wide = 'é'.repeat(n);
    assert.equal(decodeRecords(encodeRecords(ascii)), ascii);
    assert.equal(decodeRecords(encodeRecords(wide)), wide);
  }
  const big = Array.from({ length: 70_000 }, (_, i) => i);
  assert.deepEqual(decodeRecords(encodeRecords(big)), big);
  // Byte strings (bin 8/16/32): an Idempotency-Key's hashes are 20 bytes, but any length reads back.
  for (const n of [0, 255, 256, 65535, 65536]) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => i % 251);
    assert.deepEqual([...(decodeRecords(encodeRecords(bytes)) as Uint8Array)], [...bytes]);
  }
  for (const n of [15, 16, 65535, 65536]) {
    const map = Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));
    assert.deepEqual(decodeRecords(encodeRecords(map)), map);
    const array = Array.from({ length: n }, (_, i) => `v${i}`);
    assert.deepEqual(decodeRecords(encodeRecords(array)), array);
  }
  for (const n of [127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, -32, -33, -128, -129, -32768, -32769, -(2 ** 31), -(2 ** 31) - 1, 0.5, -0.5]) {
    assert.equal(decodeRecords(encodeRecords(n)), n);
  }
  // Past the scratch buffer's kept size (4 MiB), then small values again.
  const huge = 'h'.repeat(5 * 1024 * 1024);
  assert.equal((decodeRecords(encodeRecords([huge])) as string[])[0], huge);
  assert.deepEqual(plain(decodeRecords(encodeRecords(RECORDS))), plain(DECODED));
  const bytes = new Uint8Array(70_000).fill(7);
  assert.deepEqual([...(decodeRecords(encodeRecords(bytes)) as Uint8Array)], [...bytes]);
});

test('the writer\'s short paths write msgpack\'s own bytes: ASCII strings of 31, 32, 96 and 97 units, a non-ASCII one, byte strings of 20, 32 and 33 bytes, and an object of a recent shape', () => {
  const ascii = (n: number) => Buffer.from('a'.repeat(n));
  const cases: Array<[unknown, Buffer]> = [
    ['a'.repeat(31), Buffer.concat([Buffer.from([0xbf]), ascii(31)])],
    ['a'.repeat(32), Buffer.concat([Buffer.from([0xd9, 32]), ascii(32)])],
    ['a'.repeat(96), Buffer.concat([Buffer.from([0xd9, 96]), ascii(96)])],
    ['a'.repeat(97), Buffer.concat([Buffer.from([0xd9, 97]), ascii(97)])],
    [`é${'a'.repeat(40)}`, Buffer.concat([Buffer.from([0xd9, 42, 0xc3, 0xa9]), ascii(40)])],
    [new Uint8Array(20).fill(7), Buffer.concat([Buffer.from([0xc4, 20]), Buffer.alloc(20, 7)])],
    [new Uint8Array(32).fill(7), Buffer.concat([Buffer.from([0xc4, 32]), Buffer.alloc(32, 7)])],
    [new Uint8Array(33).fill(7), Buffer.concat([Buffer.from([0xc4, 33]), Buffer.alloc(33, 7)])],
    // The shape defined once (record id 0x40, then its keys), then the second object by its id
    // alone; a null-prototype object of that shape is written the same way.
    [
      [{ kz: 1, bz: 'x' }, { kz: 2, bz: 'y' }, Object.assign(Object.create(null) as object, { kz: 3, bz: 'z' })],
      Buffer.from([0x93, 0xd4, 0x72, 0x40, 0x92, 0xa2, 0x6b, 0x7a, 0xa2, 0x62, 0x7a, 0x01, 0xa1, 0x78, 0x40, 0x02, 0xa1, 0x79, 0x40, 0x03, 0xa1, 0x7a]),
    ],
  ];
  // A writer of its own: the module's has seen other tests' shapes (past its tree's limit, an
  // object of a new shape has its keys written out each time).
  const writer = new RecordWriter();
  for (const [value, bytes] of cases) {
    assert.deepEqual(writer.encode(value), bytes, JSON.stringify(value, (_k, v: unknown) => (v instanceof Uint8Array ? `bytes(${v.length})` : v)));
    assert.deepEqual(decodeRecords(bytes), value instanceof Uint8Array ? Buffer.from(value) : Array.isArray(value) ? value.map((o) => ({ ...o })) : value);
  }
  // A class instance (its prototype is not a plain object's) takes Object.keys: its own fields only.
  class Point {
    constructor(readonly x: number, readonly y: number) {}
    get sum(): number {
      return this.x + this.y;
    }
  }
  assert.deepEqual(decodeRecords(encodeRecords([new Point(1, 2), { x: 3, y: 4 }])), [{ x: 1, y: 2 }, { x: 3, y: 4 }]);
});
