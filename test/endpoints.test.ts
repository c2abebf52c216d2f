// Every endpoint's success answer (exact body), and 401 on every endpoint without a key or with a
// wrong one, with nothing applied. Runs against both journal commit modes (one suite, two
// implementations, as hono does with its routers).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, launch, LAUNCH_INFO, startServer, T0, type TestServer } from './helpers/server.ts';

const SUCCESS = '{"success":true}';
const ID_FORM = /^[A-Za-z0-9_-]{21}$/;

for (const mode of ['group', 'sync'] as const) {
  describe(`endpoints, ${mode} commit`, () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({ env: { COMMIT_MODE: mode } });
    });
    after(async () => {
      assert.equal(await server.stop(), 0);
    });

    test('app launch answers exactly {did, sid}: 21-character URL-safe ids', async () => {
      const res = await server.post('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'application/json');
      assert.deepEqual(Object.keys(res.body), ['did', 'sid']);
      assert.match(res.body.did, ID_FORM);
      assert.match(res.body.sid, ID_FORM);
    });

    test('track event, identify, push token, logout answer exactly {"success":true}', async () => {
      const { did } = await launch(server);
      const track = await server.post('/msv_cevt', { did, name: 'view', timestamp: T0, info: [{ name: 'sku', value: 'A', type: 'string' }] });
      assert.equal(track.status, 200);
      assert.equal(track.text, SUCCESS);
      const identify = await server.post('/msv_cs_id', { did, clientCustomerId: 'c-1', timestamp: String(T0) });
      assert.equal(identify.status, 200);
      assert.equal(identify.text, SUCCESS);
      const push = await server.post('/mpush_token', { did, type: 'fcm', token: 'tok', timestamp: T0 });
      assert.equal(push.status, 200);
      assert.equal(push.text, SUCCESS);
      const logout = await server.post('/logout', { did });
      assert.equal(logout.status, 200);
      assert.equal(logout.text, SUCCESS);
    });

    test('catalog endpoints answer exactly {"success":true}', async () => {
      const calls = [
        () => server.post('/product', { id: 'e-p1', name: 'P1', price: 9.5, originalHigherPrice: 12, status: 'inStock' }),
        () => server.post('/collection', { id: 'e-c1', name: 'C1' }),
        () => server.post('/collection/e-c1/products/add', { products: ['e-p1'] }),
        () => server.post('/collection/e-c1/products/remove', { products: ['e-p1'] }),
        () => server.del('/product/e-p1'),
        () => server.del('/collection/e-c1'),
      ];
      for (const call of calls) {
        const res = await call();
        assert.equal(res.status, 200, res.text);
        assert.equal(res.text, SUCCESS);
        assert.equal(res.headers.get('content-type'), 'application/json');
      }
    });
  });
}

describe('authentication on all 11 endpoints', () => {
  let server: TestServer;
  let did: string;
  before(async () => {
    server = await startServer();
    ({ did } = await launch(server));
    for (const [path, body] of [
      ['/product', { id: 'p1', name: 'P1', price: 1 }],
      ['/collection', { id: 'c1', name: 'C1' }],
      ['/collection/c1/products/add', { products: ['p1'] }],
    ] as const) {
      assert.equal((await server.post(path, body)).status, 200);
    }
  });
  after(async () => {
    await server.stop();
  });

  const writes = (d: () => string): Array<[string, string, unknown]> => [
    ['POST', '/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }],
    ['POST', '/msv_cevt', { did: d(), name: 'view', timestamp: T0 }],
    ['POST', '/msv_cs_id', { did: d(), clientCustomerId: 'intruder', timestamp: T0 }],
    ['POST', '/logout', { did: d() }],
    ['POST', '/mpush_token', { did: d(), type: 'apns', token: 't', timestamp: T0 }],
    ['POST', '/product', { id: 'p1', name: 'changed' }],
    ['DELETE', '/product/p1', undefined],
    ['POST', '/collection', { id: 'c1', name: 'changed' }],
    ['DELETE', '/collection/c1', undefined],
    ['POST', '/collection/c1/products/add', { products: ['p1'] }],
    ['POST', '/collection/c1/products/remove', { products: ['p1'] }],
  ];

  test('no key, a wrong key, a revoked-looking key: 401 AuthenticationError, nothing applied', async () => {
    const before = exportLines(server.dataDir, 'events').length;
    for (const key of [null, 'wrong-key', KEY_A + 'x', '']) {
      for (const [method, path, body] of writes(() => did)) {
        const res = await server.request(path, body, { key, method });
        assert.equal(res.status, 401, `${method} ${path} with key ${key}`);
        assert.equal(res.body.type, 'AuthenticationError');
        assert.equal(typeof res.body.message, 'string');
        assert.doesNotMatch(res.body.message, /exist|unknown|revoked/i, 'the message must not say whether a key exists');
      }
    }
    assert.equal(exportLines(server.dataDir, 'events').length, before, 'no journal record was added');
    const [device] = exportLines(server.dataDir, 'devices');
    assert.equal(device.loggedOut, false);
    assert.equal(device.customer, null);
    assert.deepEqual(device.pushTokens, {});
    assert.deepEqual(exportLines(server.dataDir, 'products'), [{ workspace: 'ws-a', id: 'p1', name: 'P1', price: 1 }]);
    assert.deepEqual(exportLines(server.dataDir, 'collections'), [{ workspace: 'ws-a', id: 'c1', name: 'C1', products: ['p1'] }]);
    assert.deepEqual(exportLines(server.dataDir, 'customers'), []);
  });
});
