// Big mappings applied in slices (catalog-writes.ts, StagedMembership): the result and the
// products' back-links are the same as the one-turn apply of replay, for adds and removes, whole
// and partial, from a worker's packed ids or a main-thread list; a refused add and an aborted
// change leave members and back-links as they were.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Acceptor, Reply } from '../src/actors/acceptor.ts';
import { CatalogActor } from '../src/actors/catalog-actor.ts';
import { NO_TRACKING } from '../src/actors/change-tracker.ts';
import { CatalogWrites } from '../src/actors/catalog-writes.ts';
import { MappingIds } from '../src/actors/mapping-ids.ts';
import type { Workspace } from '../src/actors/workspace.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import type { ValidationDetail } from '../src/schemas/details.ts';

const N = 5_000;
const ids = (from: number, to: number, prefix = 'p') => Array.from({ length: to - from }, (_, i) => `${prefix}${from + i}`);

interface Outcome {
  journaled: JournalRecord | null;
  refused: ValidationDetail[] | null;
  failed: Error | null;
}

function setup(products = N) {
  const catalog = new CatalogActor(NO_TRACKING);
  for (const id of ids(0, products)) catalog.applyProductUpsert({ id, name: id });
  for (const id of ['c', 'other']) catalog.applyCollectionUpsert({ id, name: id });
  const ws = { name: 'w', catalog } as unknown as Workspace;
  const journal = { failed: null as Error | null };
  let outcome: Outcome;
  let done: () => void = () => undefined;
  const acceptor = {
    journal,
    refuse(details: ValidationDetail[]) {
      outcome.refused = details;
      done();
    },
    accept(record: JournalRecord) {
      outcome.journaled = record;
      done();
    },
    journalApplied(record: JournalRecord) {
      outcome.journaled = record;
      done();
    },
  } as unknown as Acceptor;
  const writes = new CatalogWrites(acceptor);
  const reply = { failed: (error: Error) => ((outcome.failed = error), done()) } as unknown as Reply;
  const apply = (add: boolean, mapping: MappingIds, collection = 'c'): Promise<Outcome> => {
    outcome = { journaled: null, refused: null, failed: null };
    return new Promise((resolve) => {
      done = () => resolve(outcome);
      void writes.applyMapping(ws, collection, add, mapping, 0, reply);
    });
  };
  return { catalog, journal, apply };
}

/** A mapping as a worker returns it: every id in one text. */
function packed(list: string[]): MappingIds {
  const d = MappingIds.distinct(list);
  const distinct = d.list();
  return MappingIds.packedIds(distinct.join(''), Uint16Array.from(distinct, (s) => s.length), Uint32Array.from(d.firstIndex), new Uint8Array(1));
}

/** Members of each collection, and the collections each product links back to, checked against each other. */
function state(catalog: CatalogActor) {
  const members = Object.fromEntries([...catalog.collections.values()].map((c) => [c.id, [...c.members]]));
  for (const product of catalog.products.values()) {
    for (const c of product.collectionIds()) assert.ok(catalog.collections.get(c)!.members.has(product.id), `${product.id} links to ${c} but is not a member`);
  }
  for (const c of catalog.collections.values()) {
    for (const id of c.members) assert.ok([...catalog.products.get(id)!.collectionIds()].includes(c.id), `${id} is in ${c.id} without a back-link`);
  }
  return members;
}

for (const [name, make] of [['packed (worker)', packed], ['list (main thread)', MappingIds.distinct]] as const) {
  test(`sliced mappings, ${name}: adds and removes, whole and partial, match the one-turn apply`, async () => {
    const { catalog, apply } = setup();
    const reference = setup().catalog;
    const steps: Array<[boolean, string[], string]> = [
      [true, [...ids(0, 3000), 'p5', 'p7'], 'c'],
      [true, ids(1000, 2500), 'other'],
      [true, ids(2000, 4000), 'c'],
      [false, [...ids(500, 1800), 'p1', 'p4999'], 'c'],
      [false, ids(0, 4000), 'c'],
      [true, ids(0, 2000).reverse(), 'c'],
      [false, ids(1000, 2500), 'other'],
    ];
    for (const [add, list, collection] of steps) {
      const outcome = await apply(add, make(list), collection);
      assert.ok(outcome.journaled !== null, JSON.stringify(outcome.refused));
      const distinct = MappingIds.distinct(list).list();
      if (add) reference.applyMappingAdd(collection, distinct);
      else reference.applyMappingRemove(collection, distinct);
      assert.deepEqual(state(catalog), state(reference));
    }
  });
}

test('a refused add changes neither members nor back-links, and names each missing id once', async () => {
  const { catalog, apply } = setup();
  assert.ok((await apply(true, packed(ids(0, 2000)))).journaled);
  const before = state(catalog);
  const list = [...ids(1500, 4000), 'ghost-1', ...ids(4000, 4500), 'ghost-2', 'ghost-1'];
  const outcome = await apply(true, packed(list));
  assert.deepEqual(
    outcome.refused?.map((d) => d.context?.value),
    ['ghost-1', 'ghost-2'],
  );
  assert.deepEqual(state(catalog), before);
  for (const id of ids(2000, 4500)) assert.deepEqual([...catalog.products.get(id)!.collectionIds()], [], `${id} still links to c`);
});

test('a change aborted because the journal failed is undone: members and back-links as they were', async () => {
  const { catalog, journal, apply } = setup();
  assert.ok((await apply(true, packed(ids(0, 3000)))).journaled);
  const before = state(catalog);
  journal.failed = new Error('disk full');
  assert.ok((await apply(false, packed(ids(1000, 2500)))).failed);
  assert.deepEqual(state(catalog), before);
  assert.ok((await apply(true, packed(ids(2500, 4000)))).failed);
  assert.deepEqual(state(catalog), before);
});

test('a state rebuilt between two slices (a cluster leader stepping down): the mapping is not applied, and the rebuilt state is left as the rebuild made it', async () => {
  for (const [add, resumeLeading] of [[true, false], [true, true], [false, false], [false, true]] as const) {
    const { catalog, journal, apply } = setup();
    assert.ok((await apply(true, packed(ids(0, 100)))).journaled);
    /** What the rebuild recovers: every product, c with p0 to p99 and p4000 (a write the journal had that this node's memory lacked). */
    const rebuild = (): void => {
      catalog.clear();
      for (const id of ids(0, N)) catalog.applyProductUpsert({ id, name: id });
      for (const id of ['c', 'other']) catalog.applyCollectionUpsert({ id, name: id });
      catalog.applyMappingAdd('c', [...ids(0, 100), 'p4000']);
      // Stepped down, the journal refuses appends; having led again, it takes them.
      journal.failed = resumeLeading ? null : new Error('not leading');
    };
    const rebuilt = state((() => {
      const reference = setup().catalog;
      for (const id of ['c', 'other']) reference.applyCollectionUpsert({ id, name: id });
      reference.applyMappingAdd('c', [...ids(0, 100), 'p4000']);
      return reference;
    })());
    const running = apply(add, packed(add ? ids(3000, 4500) : ids(0, 4500)));
    // The first slice is done (a turn went by); the rebuild comes before the second.
    await new Promise((resolve) => setImmediate(resolve));
    rebuild();
    const outcome = await running;
    assert.equal(outcome.journaled, null, `add ${add}, leading again ${resumeLeading}: not journaled`);
    assert.ok(outcome.failed !== null, 'answered as failed');
    assert.deepEqual(state(catalog), rebuilt, 'the rebuilt members and back-links, untouched');
    assert.deepEqual([...catalog.products.get('p4000')!.collectionIds()], ['c'], 'p4000 still links back to c');
  }
});
