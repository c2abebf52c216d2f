// Workspaces share nothing (CONTRACT.md §3): a did or a product id means something only in the
// workspace whose key issued or wrote it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, KEY_B, launch, startServer, T0, type TestServer } from './helpers/server.ts';

describe('workspace isolation', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
  });

  test('a did issued in workspace A is unknown in workspace B', async () => {
    const { did } = await launch(server, undefined, KEY_A);
    const res = await server.post('/msv_cevt', { did, name: 'e', timestamp: T0 }, KEY_B);
    assert.equal(res.status, 422);
    assert.equal(res.body.details[0].type, 'device.notFound');
    assert.equal((await server.post('/logout', { did }, KEY_B)).body.details[0].type, 'device.notFound');
    const inB = await launch(server, did, KEY_B);
    assert.notEqual(inB.did, did, 'launching in B with A\'s did creates a new device in B');
    assert.equal((await server.post('/msv_cevt', { did, name: 'e', timestamp: T0 }, KEY_A)).status, 200, 'A still has it');
  });

  test('the same product and collection ids are separate records in each workspace', async () => {
    await server.post('/product', { id: 'same', name: 'A product', price: 1 }, KEY_A);
    await server.post('/product', { id: 'same', name: 'B product', price: 2 }, KEY_B);
    await server.post('/collection', { id: 'col', name: 'A collection' }, KEY_A);
    const onlyInA = await server.post('/collection/col/products/add', { products: ['same'] }, KEY_B);
    assert.equal(onlyInA.body.details[0].type, 'collection.notFound', 'B cannot see A\'s collection');
    await server.post('/product', { id: 'a-only', name: 'A' }, KEY_A);
    await server.post('/collection', { id: 'col', name: 'B collection' }, KEY_B);
    const crossProduct = await server.post('/collection/col/products/add', { products: ['same', 'a-only'] }, KEY_B);
    assert.equal(crossProduct.status, 422);
    assert.deepEqual(crossProduct.body.details.map((d: { path: string[] }) => d.path), [['products', '1']]);
    assert.equal((await server.post('/collection/col/products/add', { products: ['same'] }, KEY_A)).status, 200);
    assert.equal((await server.del('/product/same', KEY_B)).status, 200);

    const products = exportLines(server.dataDir, 'products');
    assert.deepEqual(products.filter((p) => p.id === 'same'), [{ workspace: 'ws-a', id: 'same', name: 'A product', price: 1 }]);
    const collections = exportLines(server.dataDir, 'collections').filter((c) => c.id === 'col');
    assert.deepEqual(
      collections.map((c) => [c.workspace, c.name, c.products]).sort(),
      [
        ['ws-a', 'A collection', ['same']],
        ['ws-b', 'B collection', []],
      ],
    );
  });

  test('customers are per workspace', async () => {
    const a = await launch(server, undefined, KEY_A);
    const b = await launch(server, undefined, KEY_B);
    await server.post('/msv_cs_id', { did: a.did, clientCustomerId: 'alice', timestamp: T0, info: [{ name: 'tier', value: 'gold', type: 'string' }] }, KEY_A);
    await server.post('/msv_cs_id', { did: b.did, clientCustomerId: 'alice', timestamp: T0 }, KEY_B);
    const alices = exportLines(server.dataDir, 'customers').filter((c) => c.id === 'alice');
    assert.deepEqual(
      alices.map((c) => [c.workspace, c.attributes, c.devices]).sort(),
      [
        ['ws-a', { tier: { type: 'string', value: 'gold' } }, [a.did]],
        ['ws-b', {}, [b.did]],
      ],
    );
    const onlyB = exportLines(server.dataDir, 'customers', '--workspace', 'ws-b');
    assert.ok(onlyB.length > 0 && onlyB.every((c) => c.workspace === 'ws-b'));
  });
});
