// Restart: the state after a restart is exactly the state the acknowledged writes produced
// (CONTRACT.md §7). Once with a clean stop (SIGTERM), once with SIGKILL right after the last 200.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, KEY_B, launch, LAUNCH_INFO, runCli, startServer, T0, tempDataDir, type TestServer } from './helpers/server.ts';

interface Written {
  active: string;
  activeSid: string;
  loggedOut: string;
  linked: string;
  otherWorkspaceDid: string;
}

/** A mix of every kind of write, in two workspaces; every one must be answered 200. */
async function writeMix(server: TestServer): Promise<Written> {
  const ok = async (p: Promise<{ status: number; text: string }>): Promise<void> => {
    const res = await p;
    assert.equal(res.status, 200, res.text);
  };
  const active = await launch(server);
  const relaunched = await launch(server, active.did, KEY_A, { ...LAUNCH_INFO, appVersionName: '9.9.9', firstTime: false });
  const loggedOut = await launch(server);
  const linked = await launch(server);
  await ok(server.post('/msv_cevt', { did: active.did, name: 'view', timestamp: T0, info: [{ name: 'price', value: 9.99, type: 'double' }] }));
  await ok(server.post('/mpush_token', { did: active.did, type: 'fcm', token: 'fcm-1', timestamp: T0 }));
  await ok(server.post('/mpush_token', { did: active.did, type: 'apns', token: 'apns-1', timestamp: T0 }));
  await ok(server.post('/mpush_token', { did: active.did, type: 'fcm', token: 'fcm-2', timestamp: T0 }));
  await ok(server.post('/msv_cs_id', { did: linked.did, clientCustomerId: 'alice', timestamp: T0, info: [{ name: 'email', value: 'a@x.io', type: 'string' }, { name: 'born', value: '1990-05-01 00:00:00', type: 'date' }] }));
  await ok(server.post('/msv_cs_id', { did: linked.did, timestamp: T0, info: [{ name: 'born', value: null, type: 'date' }] }));
  await ok(server.post('/msv_cs_id', { did: active.did, timestamp: T0, info: [{ name: 'theme', value: 'dark', type: 'string' }] }));
  await ok(server.post('/logout', { did: loggedOut.did }));
  for (const id of ['p1', 'p2', 'p3', 'gone']) await ok(server.post('/product', { id, name: `Product ${id}`, price: 10, originalHigherPrice: 12 }));
  await ok(server.post('/product', { id: 'p2', price: 8, originalHigherPrice: null, status: 'outOfStock' }));
  await ok(server.post('/collection', { id: 'c1', name: 'One', url: 'https://shop/c1' }));
  await ok(server.post('/collection', { id: 'c2', name: 'Two' }));
  await ok(server.post('/collection', { id: 'c-gone', name: 'Gone' }));
  await ok(server.post('/collection/c1/products/add', { products: ['p1', 'p2', 'p3', 'gone'] }));
  await ok(server.post('/collection/c2/products/add', { products: ['p1', 'p3'] }));
  await ok(server.post('/collection/c-gone/products/add', { products: ['p1'] }));
  await ok(server.post('/collection/c1/products/remove', { products: ['p3'] }));
  await ok(server.del('/product/gone'));
  await ok(server.del('/collection/c-gone'));
  // The same ids in another workspace must come back separately.
  const other = await launch(server, undefined, KEY_B);
  await ok(server.post('/product', { id: 'p1', name: 'B product' }, KEY_B));
  return { active: active.did, activeSid: relaunched.sid, loggedOut: loggedOut.did, linked: linked.did, otherWorkspaceDid: other.did };
}

/** The exports as printed: their order is part of what must come back (sorted by id, README "Export"). */
function state(dataDir: string) {
  return {
    devices: exportLines(dataDir, 'devices'),
    customers: exportLines(dataDir, 'customers'),
    products: exportLines(dataDir, 'products'),
    collections: exportLines(dataDir, 'collections'),
    events: exportLines(dataDir, 'events'),
  };
}

/** What the restarted server must still know, checked through the API. */
async function checkBehaviour(server: TestServer, w: Written): Promise<void> {
  const track = await server.post('/msv_cevt', { did: w.active, name: 'after-restart', timestamp: T0 });
  assert.equal(track.status, 200, 'an active device is still known');
  const again = await server.post('/msv_cevt', { did: w.loggedOut, name: 'x', timestamp: T0 });
  assert.equal(again.status, 422);
  assert.equal(again.body.details[0].type, 'device.loggedOut', 'a logged-out device stays logged out');
  const relaunch = await launch(server, w.loggedOut);
  assert.notEqual(relaunch.did, w.loggedOut);
  assert.equal((await server.post('/msv_cevt', { did: w.otherWorkspaceDid, name: 'x', timestamp: T0 })).body.details[0].type, 'device.notFound', 'workspace B devices are not in A');
  assert.equal((await server.post('/msv_cevt', { did: w.otherWorkspaceDid, name: 'x', timestamp: T0 }, KEY_B)).status, 200);
  await server.post('/msv_cevt', { did: w.linked, name: 'linked-event', timestamp: T0 });
  const gone = await server.post('/collection/c1/products/add', { products: ['gone'] });
  assert.equal(gone.body.details[0].type, 'product.notFound', 'a deleted product stays deleted');
  const goneCollection = await server.post('/collection/c-gone/products/add', { products: ['p1'] });
  assert.equal(goneCollection.body.details[0].type, 'collection.notFound', 'a deleted collection stays deleted');
  assert.equal((await server.post('/collection/c2/products/add', { products: ['p2'] })).status, 200);

  const events = exportLines(server.dataDir, 'events', '--kind', 'event');
  const linkedEvent = events.find((e) => e.data.name === 'linked-event');
  assert.equal(linkedEvent.customer, 'alice', "the customer link survived");
  const activeEvent = events.find((e) => e.data.name === 'after-restart');
  assert.equal(activeEvent.sid, w.activeSid, 'the latest session survived');
}

function checkState(after: ReturnType<typeof state>, expected: ReturnType<typeof state>, w: Written): void {
  assert.deepEqual(after, expected);
  // And the expected state is what the writes say, not just "whatever was there before".
  const device = (did: string) => after.devices.find((d) => d.did === did);
  assert.deepEqual(device(w.active).pushTokens, { fcm: 'fcm-2', apns: 'apns-1' });
  assert.equal(device(w.active).profile.appVersionName, '9.9.9');
  assert.deepEqual(device(w.active).anonymousAttributes, { theme: { type: 'string', value: 'dark' } });
  assert.equal(device(w.loggedOut).loggedOut, true);
  assert.equal(device(w.linked).customer, 'alice');
  assert.deepEqual(after.customers, [{ workspace: 'ws-a', id: 'alice', attributes: { email: { type: 'string', value: 'a@x.io' } }, devices: [w.linked] }]);
  assert.deepEqual(
    after.products.map((p) => [p.workspace, p.id, p.price, p.originalHigherPrice, p.status]),
    [
      ['ws-a', 'p1', 10, 12, undefined],
      ['ws-a', 'p2', 8, undefined, 'outOfStock'],
      ['ws-a', 'p3', 10, 12, undefined],
      ['ws-b', 'p1', undefined, undefined, undefined],
    ],
  );
  assert.deepEqual(
    after.collections.map((c) => [c.id, c.products]),
    [
      ['c1', ['p1', 'p2']],
      ['c2', ['p1', 'p3']],
    ],
  );
}

describe('restart on the same data directory', () => {
  test('the state exports print the same bytes after a restart, sorted by id (workspace, then id)', async (t) => {
    // Customers created in the reverse order of their devices, products out of id order: a
    // snapshot (the one a stop takes) loaded customers as devices linked to them, so before
    // 2026-11-29 `export customers` printed another order after a restart (found by a review).
    const dataDir = tempDataDir();
    const first = await startServer({ dataDir });
    t.after(() => first.kill().catch(() => {}));
    const dids: string[] = [];
    for (let i = 0; i < 12; i++) dids.push((await launch(first)).did);
    for (let i = dids.length - 1; i >= 0; i--) {
      const res = await first.post('/msv_cs_id', { did: dids[i], clientCustomerId: `c${dids.length - 1 - i}`, timestamp: T0 });
      assert.equal(res.status, 200, res.text);
    }
    for (const id of ['p9', 'p10', 'p1', 'a']) assert.equal((await first.post('/product', { id, name: id }, KEY_B)).status, 200);
    assert.equal((await first.post('/product', { id: 'z', name: 'z' })).status, 200);
    const exported = () => Object.fromEntries(['devices', 'customers', 'products', 'collections'].map((what) => [what, runCli('export', [what], dataDir).stdout]));
    const before = exported();
    assert.equal(await first.stop(), 0);
    const second = await startServer({ dataDir });
    try {
      assert.deepEqual(exported(), before);
      const ids = (what: string, field: string) => before[what]!.trim().split('\n').map((line: string) => { const o = JSON.parse(line); return `${o.workspace}/${o[field]}`; });
      assert.deepEqual(ids('customers', 'id'), ['c0', 'c1', 'c10', 'c11', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9'].map((c) => `ws-a/${c}`));
      assert.deepEqual(ids('products', 'id'), ['ws-a/z', 'ws-b/a', 'ws-b/p1', 'ws-b/p10', 'ws-b/p9']);
      assert.deepEqual(ids('devices', 'did'), dids.map((d) => `ws-a/${d}`).sort());
    } finally {
      await second.stop();
    }
  });

  test('after a clean stop (SIGTERM, exit 0), every device, customer link, product, collection and membership is back', async () => {
    const dataDir = tempDataDir();
    const first = await startServer({ dataDir });
    const written = await writeMix(first);
    const expected = state(dataDir);
    assert.equal(await first.stop(), 0);
    const second = await startServer({ dataDir });
    try {
      checkState(state(dataDir), expected, written);
      await checkBehaviour(second, written);
    } finally {
      await second.stop();
    }
  });

  test('after SIGKILL right after the last 200, nothing acknowledged is lost', async () => {
    const dataDir = tempDataDir();
    const first = await startServer({ dataDir });
    const written = await writeMix(first);
    await first.kill();
    // The expected state is computed from the journal only after the kill: it must hold every write.
    const afterKill = state(dataDir);
    assert.equal(afterKill.events.length, 28, 'every acknowledged write is in the journal');
    const second = await startServer({ dataDir });
    try {
      checkState(state(dataDir), afterKill, written);
      await checkBehaviour(second, written);
    } finally {
      await second.stop();
    }
  });

  test('SIGKILL during a burst of concurrent writes: every write answered 200 is in the journal after restart', async () => {
    const dataDir = tempDataDir();
    const first = await startServer({ dataDir });
    const { did } = await launch(first);
    const acknowledged = new Set<string>();
    let stop = false;
    const writer = async (n: number): Promise<void> => {
      for (let i = 0; !stop; i++) {
        const name = `w${n}-${i}`;
        try {
          const res = await first.post('/msv_cevt', { did, name, timestamp: T0 });
          if (res.status === 200) acknowledged.add(name);
        } catch {
          return; // the connection died with the server
        }
      }
    };
    const writers = Array.from({ length: 32 }, (_, n) => writer(n));
    await new Promise((r) => setTimeout(r, 700));
    await first.kill();
    stop = true;
    await Promise.all(writers);
    assert.ok(acknowledged.size > 50, `enough writes were acknowledged before the kill (${acknowledged.size})`);
    const second = await startServer({ dataDir });
    try {
      const journaled = new Set(exportLines(dataDir, 'events', '--kind', 'event').map((e) => e.data.name as string));
      const lost = [...acknowledged].filter((name) => !journaled.has(name));
      assert.deepEqual(lost, [], 'no acknowledged write is lost');
      assert.equal((await second.post('/msv_cevt', { did, name: 'after', timestamp: T0 })).status, 200);
    } finally {
      await second.stop();
    }
  });
  test('strings with an unpaired UTF-16 surrogate (a JSON escape such as \\ud800) hold in memory what the journal holds: U+FFFD, before and after a restart', async () => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir });
    const ok = async (p: Promise<{ status: number; text: string }>): Promise<void> => {
      const res = await p;
      assert.equal(res.status, 200, res.text);
    };
    // Two ids that differ only in an unpaired surrogate: UTF-8 cannot hold either, so both are
    // one product, "a\ufffd", from the first write on (it used to be two in memory and one
    // after a restart, under the last write's name).
    let before: Array<Record<string, unknown>>;
    try {
      await ok(server.post('/product', { id: 'a\ud800', name: 'first' }));
      await ok(server.post('/product', { id: 'a\ud801', name: 'second' }));
      await ok(server.post('/collection', { id: 'c\udc00', name: 'C' }));
      await ok(server.post('/collection/c\ufffd/products/add', { products: ['a\ufffd'] }));
      before = exportLines(dataDir, 'products').filter((p) => String(p.id).startsWith('a'));
    } finally {
      await server.kill();
    }
    const again = await startServer({ dataDir });
    try {
      const after = exportLines(dataDir, 'products').filter((p) => String(p.id).startsWith('a'));
      assert.deepEqual(after, before);
      assert.deepEqual(after.map((p) => [p.id, p.name]), [['a\ufffd', 'second']]);
      // The restarted server knows the same ids, whichever way a client writes them.
      assert.equal((await again.post('/collection/c\ud801/products/add', { products: ['a\ud800'] })).status, 200);
      assert.equal((await again.post('/collection/c\ufffd/products/add', { products: ['a\ufffe'] })).status, 422);
      assert.deepEqual(exportLines(dataDir, 'collections').map((c) => [c.id, c.products]), [['c\ufffd', ['a\ufffd']]]);
    } finally {
      await again.kill();
    }
  });
});
