// CONTRACT.md §6, rule by rule, observed through the API and the export CLI (which reads the
// state beside the running server). Runs against both journal commit modes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createProducts as createProductsFast, quiet } from '../bench/lib/populate.ts';
import { exportLines, KEY_A, launch, LAUNCH_INFO, startServer, T0, type TestServer } from './helpers/server.ts';

quiet();

type Detail = { type: string; path: string[]; context: Record<string, unknown>; message: string };

function assertOneDetail(res: { status: number; body: { type: string; details: Detail[] } }, type: string, path: string[]): Detail {
  assert.equal(res.status, 422, JSON.stringify(res.body));
  assert.equal(res.body.type, 'ValidationError');
  assert.equal(res.body.details.length, 1, JSON.stringify(res.body.details));
  const [d] = res.body.details;
  assert.equal(d!.type, type);
  assert.deepEqual(d!.path, path);
  return d!;
}

/** Creates `count` products named `${prefix}${i}`, a few requests in flight at a time. */
async function createProducts(server: TestServer, prefix: string, count: number, inFlight = 64): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `${prefix}${i}`);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < ids.length) {
      const id = ids[next++]!;
      const res = await server.post('/product', { id, name: `Product ${id}`, price: 1 });
      assert.equal(res.status, 200, res.text);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return ids;
}

for (const mode of ['group', 'sync'] as const) {
  describe(`semantics, ${mode} commit`, () => {
    let server: TestServer;
    const device = (did: string) => exportLines(server.dataDir, 'devices').find((d) => d.did === did);
    const events = (kind: string) => exportLines(server.dataDir, 'events', '--kind', kind);
    before(async () => {
      server = await startServer({ env: { COMMIT_MODE: mode } });
    });
    after(async () => {
      assert.equal(await server.stop(), 0);
    });

    describe('app launch', () => {
      test('no did, null did, unknown did: a new device each time, every launch a new sid', async () => {
        const a = await launch(server);
        const b = await launch(server, null);
        const c = await launch(server, 'never-issued-did');
        const dids = new Set([a.did, b.did, c.did, 'never-issued-did']);
        assert.equal(dids.size, 4);
        assert.equal(new Set([a.sid, b.sid, c.sid]).size, 3);
      });

      test('a known active did keeps its did, gets a new sid, and the latest launch info is its profile', async () => {
        const first = await launch(server);
        const newer = { ...LAUNCH_INFO, appVersionName: '5.0.0', firstTime: false, referrer: 'ad-campaign', utmInfo: { us: 'news', um: null } };
        const again = await launch(server, first.did, undefined, newer);
        assert.equal(again.did, first.did);
        assert.notEqual(again.sid, first.sid);
        const d = device(first.did);
        assert.equal(d.sid, again.sid);
        assert.deepEqual(d.profile, newer);
      });

      test('a logged-out did gets a new did', async () => {
        const { did } = await launch(server);
        assert.equal((await server.post('/logout', { did })).status, 200);
        const next = await launch(server, did);
        assert.notEqual(next.did, did);
        assert.equal(device(did).loggedOut, true);
        assert.equal(device(next.did).loggedOut, false);
      });
    });

    describe('device writes need a known, active did', () => {
      test('unknown did: device.notFound on track, identify, push token and logout', async () => {
        const bodies: Array<[string, object]> = [
          ['/msv_cevt', { did: 'ghost', name: 'e', timestamp: T0 }],
          ['/msv_cs_id', { did: 'ghost', clientCustomerId: 'x', timestamp: T0 }],
          ['/mpush_token', { did: 'ghost', type: 'fcm', token: 't', timestamp: T0 }],
          ['/logout', { did: 'ghost' }],
        ];
        for (const [path, body] of bodies) {
          const d = assertOneDetail(await server.post(path, body), 'device.notFound', ['did']);
          assert.equal(d.context.value, 'ghost');
          assert.equal(d.message, '"did" is not a known device');
        }
      });

      test('logged-out did: device.loggedOut on track, identify and push token; logout again answers 200', async () => {
        const { did } = await launch(server);
        assert.equal((await server.post('/logout', { did })).status, 200);
        for (const [path, body] of [
          ['/msv_cevt', { did, name: 'e', timestamp: T0 }],
          ['/msv_cs_id', { did, clientCustomerId: 'x', timestamp: T0 }],
          ['/mpush_token', { did, type: 'fcm', token: 't', timestamp: T0 }],
        ] as const) {
          const d = assertOneDetail(await server.post(path, body), 'device.loggedOut', ['did']);
          assert.equal(d.message, '"did" was logged out; call app launch without a did');
        }
        const twice = await server.post('/logout', { did });
        assert.equal(twice.status, 200);
        assert.equal(twice.text, '{"success":true}');
      });
    });

    describe('identify', () => {
      test('links the device to the customer and merges attributes: later value wins, null removes', async () => {
        const { did } = await launch(server);
        const entries = (...list: Array<[string, unknown, string]>) => list.map(([name, value, type]) => ({ name, value, type }));
        await server.post('/msv_cs_id', { did, clientCustomerId: 'cust-merge', timestamp: T0, info: entries(['email', 'a@x.io', 'string'], ['age', 30, 'integer'], ['vip', true, 'boolean']) });
        await server.post('/msv_cs_id', { did, clientCustomerId: 'cust-merge', timestamp: T0, info: entries(['email', 'b@x.io', 'string'], ['vip', null, 'boolean']) });
        const customer = exportLines(server.dataDir, 'customers').find((c) => c.id === 'cust-merge');
        assert.deepEqual(customer.attributes, { email: { type: 'string', value: 'b@x.io' }, age: { type: 'integer', value: 30 } });
        assert.deepEqual(customer.devices, [did]);
        assert.equal(device(did).customer, 'cust-merge');
      });

      test('without clientCustomerId: merges into the current customer, or into an anonymous profile of the device', async () => {
        const linked = await launch(server);
        await server.post('/msv_cs_id', { did: linked.did, clientCustomerId: 'cust-current', timestamp: T0 });
        await server.post('/msv_cs_id', { did: linked.did, timestamp: T0, info: [{ name: 'plan', value: 'pro', type: 'string' }] });
        const customer = exportLines(server.dataDir, 'customers').find((c) => c.id === 'cust-current');
        assert.deepEqual(customer.attributes, { plan: { type: 'string', value: 'pro' } });

        const anonymous = await launch(server);
        await server.post('/msv_cs_id', { did: anonymous.did, timestamp: T0, info: [{ name: 'theme', value: 'dark', type: 'string' }] });
        const d = device(anonymous.did);
        assert.equal(d.customer, null);
        assert.deepEqual(d.anonymousAttributes, { theme: { type: 'string', value: 'dark' } });
      });

      test('two devices can share one customer; a later identify relinks a device', async () => {
        const a = await launch(server);
        const b = await launch(server);
        await server.post('/msv_cs_id', { did: a.did, clientCustomerId: 'shared', timestamp: T0 });
        await server.post('/msv_cs_id', { did: b.did, clientCustomerId: 'shared', timestamp: T0 });
        assert.deepEqual(new Set(exportLines(server.dataDir, 'customers').find((c) => c.id === 'shared').devices), new Set([a.did, b.did]));
        await server.post('/msv_cs_id', { did: b.did, clientCustomerId: 'other', timestamp: T0 });
        assert.equal(device(b.did).customer, 'other');
      });
    });

    test('each accepted event is recorded with the device\'s current sid and customer', async () => {
      const first = await launch(server);
      await server.post('/msv_cevt', { did: first.did, name: 'before-login', timestamp: T0 });
      await server.post('/msv_cs_id', { did: first.did, clientCustomerId: 'cust-events', timestamp: T0 });
      const second = await launch(server, first.did);
      await server.post('/msv_cevt', { did: first.did, name: 'after-login', timestamp: String(T0 + 5), info: [{ name: 'n', value: 1, type: 'long' }] });
      const mine = events('event').filter((e) => e.did === first.did);
      assert.equal(mine.length, 2);
      assert.equal(mine[0].sid, first.sid);
      assert.equal(mine[0].customer, null);
      assert.equal(mine[1].sid, second.sid);
      assert.equal(mine[1].customer, 'cust-events');
      assert.equal(mine[1].data.timestamp, T0 + 5, 'a string timestamp is stored as a number');
      assert.equal(typeof mine[1].at, 'number');
      assert.ok(mine[1].seq > mine[0].seq);
    });

    test('push token: the device keeps the latest token of each type', async () => {
      const { did } = await launch(server);
      for (const [type, token] of [['fcm', 'f1'], ['apns', 'a1'], ['fcm', 'f2']]) {
        assert.equal((await server.post('/mpush_token', { did, type, token, timestamp: T0 })).status, 200);
      }
      assert.deepEqual(device(did).pushTokens, { fcm: 'f2', apns: 'a1' });
    });

    describe('catalog', () => {
      const product = (id: string) => exportLines(server.dataDir, 'products').find((p) => p.id === id);
      const collection = (id: string) => exportLines(server.dataDir, 'collections').find((c) => c.id === id);

      test('product upsert merges: present fields set, null clears, absent kept; create needs name', async () => {
        assertOneDetail(await server.post('/product', { id: 'm1', price: 5 }), 'any.required', ['name']);
        assert.equal(product('m1'), undefined);
        await server.post('/product', { id: 'm1', name: 'Mug', price: 5, originalHigherPrice: 8, description: 'blue', status: 'inStock', vendor: 'Acme' });
        await server.post('/product', { id: 'm1', price: 4.5, originalHigherPrice: null, description: '' });
        assert.deepEqual(product('m1'), { workspace: 'ws-a', id: 'm1', name: 'Mug', price: 4.5, description: '', status: 'inStock', vendor: 'Acme' });
      });

      test('collection upsert merges; create needs name', async () => {
        assertOneDetail(await server.post('/collection', { id: 'k1', url: 'https://x' }), 'any.required', ['name']);
        await server.post('/collection', { id: 'k1', name: 'Kitchen', url: 'https://shop/k', image: 'https://img/k' });
        await server.post('/collection', { id: 'k1', image: null });
        assert.deepEqual(collection('k1'), { workspace: 'ws-a', id: 'k1', name: 'Kitchen', url: 'https://shop/k', products: [] });
      });

      test('mapping add is atomic: one missing product and nothing is added; duplicates and re-adds are no-ops', async () => {
        await createProducts(server, 'atom-', 3);
        await server.post('/collection', { id: 'atom', name: 'Atomic' });
        const res = await server.post('/collection/atom/products/add', { products: ['atom-0', 'missing-1', 'atom-1', 'missing-1', 'missing-2'] });
        assert.equal(res.status, 422);
        assert.deepEqual(
          res.body.details.map((d: Detail) => [d.type, d.path, d.context.value]),
          [
            ['product.notFound', ['products', '1'], 'missing-1'],
            ['product.notFound', ['products', '4'], 'missing-2'],
          ],
        );
        assert.deepEqual(collection('atom').products, []);
        assert.equal((await server.post('/collection/atom/products/add', { products: ['atom-0', 'atom-1', 'atom-0'] })).status, 200);
        assert.equal((await server.post('/collection/atom/products/add', { products: ['atom-1', 'atom-2'] })).status, 200);
        assert.deepEqual(collection('atom').products, ['atom-0', 'atom-1', 'atom-2']);
      });

      test('mapping on a missing collection: only collection.notFound, for add and remove', async () => {
        for (const op of ['add', 'remove']) {
          const d = assertOneDetail(await server.post(`/collection/nowhere/products/${op}`, { products: ['also-missing'] }), 'collection.notFound', ['id']);
          assert.equal(d.context.value, 'nowhere');
        }
      });

      test('mapping remove ignores products that are not members', async () => {
        await createProducts(server, 'rm-', 2);
        await server.post('/collection', { id: 'rm', name: 'Remove' });
        await server.post('/collection/rm/products/add', { products: ['rm-0', 'rm-1'] });
        const res = await server.post('/collection/rm/products/remove', { products: ['rm-0', 'not-a-member', 'never-existed'] });
        assert.equal(res.status, 200);
        assert.deepEqual(collection('rm').products, ['rm-1']);
      });

      test('deleting a product or a collection answers 200 whether or not it existed, and removes its memberships', async () => {
        await createProducts(server, 'del-', 2);
        await server.post('/collection', { id: 'del-a', name: 'A' });
        await server.post('/collection', { id: 'del-b', name: 'B' });
        await server.post('/collection/del-a/products/add', { products: ['del-0', 'del-1'] });
        await server.post('/collection/del-b/products/add', { products: ['del-0'] });
        for (let i = 0; i < 2; i++) assert.equal((await server.del('/product/del-0')).status, 200, 'a retried delete must not fail');
        assert.deepEqual(collection('del-a').products, ['del-1']);
        assert.deepEqual(collection('del-b').products, []);
        assert.equal(product('del-0'), undefined);
        assertOneDetail(await server.post('/collection/del-a/products/add', { products: ['del-0'] }), 'product.notFound', ['products', '0']);

        for (let i = 0; i < 2; i++) assert.equal((await server.del('/collection/del-a')).status, 200);
        assert.equal(collection('del-a'), undefined);
        assertOneDetail(await server.post('/collection/del-a/products/add', { products: ['del-1'] }), 'collection.notFound', ['id']);
        // A product re-created after its collection was deleted starts with no memberships.
        await server.post('/collection', { id: 'del-a', name: 'A again' });
        assert.deepEqual(collection('del-a').products, []);
        assert.equal((await server.del('/product/never-there')).status, 200);
      });

      const bulk = mode === 'group' ? 20_000 : 2_000;
      test(`a ${bulk.toLocaleString('en')}-product mapping add in one request`, async () => {
        // Created by autocannon (fails unless every answer is 200): 20,000 fetch() calls cost the
        // test process about 40 s of CPU, a third of this file's.
        await createProductsFast({ url: server.url, key: KEY_A }, bulk, 'bulk-');
        const ids = Array.from({ length: bulk }, (_, i) => `bulk-${i}`);
        await server.post('/collection', { id: 'bulk', name: 'Bulk' });
        const res = await server.post('/collection/bulk/products/add', { products: [...ids, ...ids.slice(0, 100)] });
        assert.equal(res.status, 200, res.text);
        const members = collection('bulk').products as string[];
        assert.equal(members.length, bulk);
        assert.deepEqual(new Set(members), new Set(ids));
        const [record] = events('collection_products_add').filter((e) => e.data.id === 'bulk');
        assert.equal(record.data.products.length, bulk, 'the journal keeps the de-duplicated list');
        const missing = await server.post('/collection/bulk/products/add', { products: [...ids, 'not-there'] });
        assertOneDetail(missing, 'product.notFound', ['products', String(bulk)]);
      });
    });

    test('read-your-writes: once answered, a write is seen by the next request', async () => {
      const { did } = await launch(server);
      await server.post('/product', { id: 'ryw', name: 'R' });
      await server.post('/collection', { id: 'ryw', name: 'R' });
      assert.equal((await server.post('/collection/ryw/products/add', { products: ['ryw'] })).status, 200);
      assert.equal((await server.post('/logout', { did })).status, 200);
      assertOneDetail(await server.post('/msv_cevt', { did, name: 'e', timestamp: T0 }), 'device.loggedOut', ['did']);
    });
  });
}

describe('concurrent writes to one device and one catalog', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
  });

  test('many in-flight events of one device are each journaled once, with the current sid', async () => {
    const { did, sid } = await launch(server);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => server.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 + i })),
    );
    assert.ok(results.every((r) => r.status === 200));
    const mine = exportLines(server.dataDir, 'events', '--kind', 'event').filter((e) => e.did === did);
    assert.equal(mine.length, 200);
    assert.equal(new Set(mine.map((e) => e.data.name)).size, 200);
    assert.ok(mine.every((e) => e.sid === sid));
  });

  test('an upsert and a mapping add sent together: the add, arriving after, sees the product', async () => {
    await server.post('/collection', { id: 'race', name: 'Race' });
    const [upsert, add] = await Promise.all([
      server.post('/product', { id: 'race-p', name: 'P' }),
      new Promise((r) => setTimeout(r, 5)).then(() => server.post('/collection/race/products/add', { products: ['race-p'] })),
    ]);
    assert.equal(upsert.status, 200);
    assert.equal(add.status, 200);
  });
});
