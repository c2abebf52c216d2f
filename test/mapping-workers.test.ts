// Big mapping requests (issue: heavy batch mapping on worker threads): 100,000 ids parsed,
// validated and de-duplicated in a worker, applied in slices, exactly as the main thread would;
// ordering against concurrent catalog writes while the body is in the worker; a worker that
// crashes or times out fails only its request (500) and is replaced.
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createProducts as createProductsFast, quiet } from '../bench/lib/populate.ts';
import { exportLines, KEY_A, startServer, type TestServer } from './helpers/server.ts';
import { metric } from './helpers/wait.ts';

const N = 100_000;
const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

quiet();

/** Products p0..p{n-1}, sent by autocannon (fails unless every answer is 200). */
async function createProducts(server: TestServer, n: number): Promise<void> {
  await createProductsFast({ url: server.url, key: KEY_A }, n, 'p');
}

function members(server: TestServer, collection: string): string[] {
  return exportLines(server.dataDir, 'collections').find((c) => c.id === collection)?.products ?? [];
}

function postRaw(server: TestServer, path: string, body: Buffer | string, headers: Record<string, string> = {}) {
  return server.request(path, undefined, { raw: body, headers: { 'content-type': 'application/json', ...headers } });
}

describe('big mappings through the worker pool', () => {
  let server: TestServer;
  /** Mapping worker threads running, from /metrics. */
  const workersRunning = () => metric(server, 'intake_mapping_workers');
  let workersBefore: number | null = null;
  before(async () => {
    server = await startServer({ env: { MAPPING_WORKERS: '1' } });
    workersBefore = await workersRunning();
    await createProducts(server, N);
    for (const c of ['big', 'gz', 'order', 'order2', 'atomic']) assert.equal((await server.post('/collection', { id: c, name: c })).status, 200);
  });
  after(async () => {
    await server.stop();
  });

  test('the worker pool starts with the first big mapping body, not with the server', async () => {
    assert.ok(server.logs().some((l) => l.includes('"mappingWorkers":1')));
    assert.equal(workersBefore, 0, 'no worker thread at start (nor after 100,000 small writes)');
    assert.equal(await workersRunning(), 0);
    assert.equal((await server.post('/collection', { id: 'first', name: 'first' })).status, 200);
    const res = await postRaw(server, '/collection/first/products/add', JSON.stringify({ products: ids('p', 20_000) }));
    assert.equal(res.status, 200, res.text);
    assert.equal(await workersRunning(), 1);
    assert.deepEqual(members(server, 'first'), ids('p', 20_000));
  });

  test('100,000 ids with duplicates, in one request: 200, every id a member once, in order', async () => {
    const list = ids('p', N - 500);
    const body = JSON.stringify({ products: [...list.slice(0, 250), ...list, ...list.slice(0, 250)] });
    assert.ok(body.length > 64 * 1024, 'over the worker threshold');
    const res = await postRaw(server, '/collection/big/products/add', body);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, '{"success":true}');
    assert.deepEqual(members(server, 'big'), list);
    const [record] = exportLines(server.dataDir, 'events', '--kind', 'collection_products_add').filter((r) => r.data.id === 'big');
    assert.equal(record.data.products.length, N - 500, 'the journal keeps the de-duplicated list');
    // And removing 100,000 (half of them not members) in one request.
    const remove = await postRaw(server, '/collection/big/products/remove', JSON.stringify({ products: [...ids('p', N / 2), ...ids('nope', N / 2)] }));
    assert.equal(remove.status, 200, remove.text);
    assert.deepEqual(members(server, 'big'), list.slice(N / 2));
  });

  test('a gzip body is inflated in the worker', async () => {
    const body = gzipSync(JSON.stringify({ products: ids('p', 50_000) }));
    const res = await postRaw(server, '/collection/gz/products/add', body, { 'content-encoding': 'gzip' });
    assert.equal(res.status, 200, res.text);
    assert.equal(members(server, 'gz').length, 50_000);
  });

  test('missing ids: 422 with one detail per distinct missing id at its first index (at most 100), nothing added', async () => {
    const list = ids('p', N - 200);
    list[10] = 'ghost-a';
    list[20] = 'ghost-b';
    list[30] = 'ghost-a';
    list.push(...ids('ghost-x', 200));
    const res = await postRaw(server, '/collection/atomic/products/add', JSON.stringify({ products: list }));
    assert.equal(res.status, 422);
    const details = res.body.details as Array<{ type: string; path: string[]; context: { value: string } }>;
    assert.equal(details.length, 100);
    assert.deepEqual(details.slice(0, 3).map((d) => [d.type, d.path, d.context.value]), [
      ['product.notFound', ['products', '10'], 'ghost-a'],
      ['product.notFound', ['products', '20'], 'ghost-b'],
      ['product.notFound', ['products', String(N - 200)], 'ghost-x0'],
    ]);
    assert.deepEqual(members(server, 'atomic'), [], 'all or nothing');
  });

  test('a schema violation found in the worker is the same 422 as on the main thread', async () => {
    const list: unknown[] = ids('p', N);
    list[5] = 7;
    list[6] = '';
    list[7] = 'x'.repeat(51);
    const big = await postRaw(server, '/collection/atomic/products/add', JSON.stringify({ products: list, extra: true }));
    const small = await postRaw(server, '/collection/atomic/products/add', JSON.stringify({ products: ['p0', 'p1', 'p2', 'p3', 'p4', 7, '', 'x'.repeat(51)], extra: true }));
    assert.equal(big.status, 422);
    assert.deepEqual(big.body, small.body);
    assert.deepEqual(big.body.details.map((d: { type: string }) => d.type), ['string.base', 'any.empty', 'string.max', 'object.allowUnknown']);
    const tooMany = await postRaw(server, '/collection/atomic/products/add', JSON.stringify({ products: ids('p', N + 1) }));
    assert.equal(tooMany.status, 422);
    assert.equal(tooMany.body.details[0].type, 'array.max');
    const longId = await postRaw(server, `/collection/${'c'.repeat(51)}/products/add`, JSON.stringify({ products: ids('p', N), extra: 1 }));
    assert.deepEqual(longId.body.details.map((d: { path: string[] }) => d.path), [['id'], ['extra']], 'the :id detail joins the body details');
  });

  test('malformed and oversized bodies found in the worker: 400, and 413 with the connection closed', async () => {
    const notJson = await postRaw(server, '/collection/atomic/products/add', `{"products": [${'"p1",'.repeat(20_000)}`);
    assert.equal(notJson.status, 400);
    assert.equal(notJson.body.type, 'MalformedJsonError');
    const notGzip = await postRaw(server, '/collection/atomic/products/add', Buffer.from('definitely not gzip'), { 'content-encoding': 'gzip' });
    assert.equal(notGzip.status, 400);
    const bomb = gzipSync(Buffer.from(`{"products": ["${'a'.repeat(17 * 1024 * 1024)}"]}`));
    assert.ok(bomb.length < 100_000);
    const tooLarge = await postRaw(server, '/collection/atomic/products/add', bomb, { 'content-encoding': 'gzip' });
    assert.equal(tooLarge.status, 413);
    assert.equal(tooLarge.headers.get('connection'), 'close');
    assert.equal((await server.request('/healthz')).status, 200);
  });

  test('order: a delete sent while the mapping is in the worker is applied after it', async () => {
    const list = ids('p', N);
    const mapping = postRaw(server, '/collection/order/products/add', JSON.stringify({ products: list }));
    await new Promise((r) => setTimeout(r, 20)); // the mapping's body is in; the delete comes after
    const deletion = server.del('/product/p99999');
    const [m, d] = await Promise.all([mapping, deletion]);
    assert.equal(m.status, 200, 'the mapping, arriving first, saw p99999');
    assert.equal(d.status, 200);
    const order = members(server, 'order');
    assert.equal(order.length, N - 1, 'the delete then removed its membership');
    assert.ok(!order.includes('p99999'));
    const records = exportLines(server.dataDir, 'events').filter((r) => (r.kind === 'collection_products_add' && r.data.id === 'order') || (r.kind === 'product_delete' && r.data.id === 'p99999'));
    assert.deepEqual(records.map((r) => r.kind), ['collection_products_add', 'product_delete'], 'journaled in arrival order');
  });

  test('order: a product created after the mapping arrived is not seen by it', async () => {
    const list = [...ids('p', 50_000), 'late-product'];
    const mapping = postRaw(server, '/collection/order2/products/add', JSON.stringify({ products: list }));
    await new Promise((r) => setTimeout(r, 20));
    const create = server.post('/product', { id: 'late-product', name: 'late' });
    const [m, c] = await Promise.all([mapping, create]);
    assert.equal(c.status, 200);
    assert.equal(m.status, 422);
    assert.deepEqual(m.body.details.map((d: { context: { value: string } }) => d.context.value), ['late-product']);
    assert.deepEqual(members(server, 'order2'), []);
  });

  test('other clients are served while a big mapping is applied', async () => {
    const start = Date.now();
    await server.post('/collection', { id: 'busy', name: 'busy' });
    const mapping = postRaw(server, '/collection/busy/products/add', JSON.stringify({ products: ids('p', 90_000) }));
    let served = 0;
    let done = false;
    void mapping.then(() => (done = true));
    while (!done) {
      assert.equal((await server.request('/healthz')).status, 200);
      served++;
    }
    assert.equal((await mapping).status, 200);
    assert.ok(served > 5, `${served} requests answered during the ${Date.now() - start} ms of the mapping`);
  });
});

describe('worker failures', () => {
  test('a body the worker has no heap room for gets 413 (500 until 2026-11-29); nothing crashes, the server goes on', async () => {
    // V8 cannot interrupt JSON.parse: a worker reaching its heap limit there would abort the
    // whole process, so the worker refuses a body that might not fit before parsing it.
    const server = await startServer({ env: { MAPPING_WORKERS: '1', MAPPING_WORKER_MAX_MEMORY_MB: '32', MAPPING_WORKER_THRESHOLD_BYTES: '0', MAPPING_MAX_ITEMS: '2000000' } });
    try {
      await server.post('/collection', { id: 'c', name: 'C' });
      await server.post('/product', { id: 'p0', name: 'P' });
      const big = JSON.stringify({ products: ids('a-long-product-identifier-', 400_000) });
      assert.ok(big.length > 10 * 1024 * 1024);
      const res = await postRaw(server, '/collection/c/products/add', big);
      assert.equal(res.status, 413, res.text);
      assert.equal(res.body.type, 'PayloadTooLargeError');
      assert.match(res.body.message, /needs about \d+ MB to parse, more than a mapping worker's heap allows \(MAPPING_WORKER_MAX_MEMORY_MB\)/);
      assert.equal(server.child.exitCode, null, 'the server is alive');
      const next = await postRaw(server, '/collection/c/products/add', JSON.stringify({ products: ['p0'] }));
      assert.equal(next.status, 200, next.text);
      assert.deepEqual(members(server, 'c'), ['p0']);
    } finally {
      await server.stop();
    }
  });

  test('16 MiB of tiny objects in a mapping (millions of {}): 413 at once, not a worker killed by its heap or its timeout (500)', async () => {
    // Estimated by its bytes alone (10 a byte: 160 MB), such a body passed, then took over 1 GB
    // to parse: the worker died (ERR_WORKER_OUT_OF_MEMORY) or timed out, and the answer was 500
    // (found by a review, 2026-11-29). Objects, arrays and keys now count for their heap too.
    const server = await startServer();
    try {
      await server.post('/collection', { id: 'c', name: 'C' });
      const items = Math.floor((16 * 1024 * 1024 - 20) / 3);
      const body = `{"products":[${'{},'.repeat(items - 1)}{}]}`;
      const startedAt = performance.now();
      const res = await postRaw(server, '/collection/c/products/add', body);
      assert.equal(res.status, 413, res.text);
      assert.ok(performance.now() - startedAt < 5_000, `answered in ${Math.round(performance.now() - startedAt)} ms`);
      assert.equal((await server.post('/product', { id: 'p0', name: 'P' })).status, 200, 'the server goes on');
    } finally {
      await server.stop();
    }
  });

  test('a task over the timeout: its worker is terminated and replaced, the request gets 500, the server goes on', async () => {
    const server = await startServer({ env: { MAPPING_WORKERS: '1', MAPPING_WORKER_TIMEOUT_MS: '300', MAPPING_MAX_ITEMS: '3000000', MAPPING_BODY_LIMIT_BYTES: String(128 * 1024 * 1024) } });
    try {
      await server.post('/collection', { id: 'c', name: 'C' });
      await server.post('/product', { id: 'p0', name: 'P' });
      // Big enough to take well over 300 ms, small enough for the worker's heap (see above).
      const slow = JSON.stringify({ products: ids('an-id-that-takes-a-while-', 1_200_000) });
      const res = await postRaw(server, '/collection/c/products/add', slow);
      assert.equal(res.status, 500);
      await server.waitForLog((l) => l.includes('"request failed"') && l.includes('abort'));
      assert.equal((await server.post('/collection/c/products/add', { products: ['p0'] })).status, 200, 'small bodies stay on the main thread');
      await new Promise((r) => setTimeout(r, 1500)); // the replacement worker starts
      const gz = await postRaw(server, '/collection/c/products/remove', gzipSync(JSON.stringify({ products: ['p0'] })), { 'content-encoding': 'gzip' });
      assert.equal(gz.status, 200, 'the replaced worker takes tasks again');
      assert.deepEqual(members(server, 'c'), []);
    } finally {
      await server.stop();
    }
  });
});

describe('worker pool off (MAPPING_WORKERS=0)', () => {
  test('100,000 ids are parsed and applied on the main thread, with the same result', async () => {
    const server = await startServer({ env: { MAPPING_WORKERS: '0' } });
    try {
      await createProducts(server, N);
      await server.post('/collection', { id: 'main', name: 'M' });
      const res = await postRaw(server, '/collection/main/products/add', JSON.stringify({ products: [...ids('p', N - 1), 'p5'] }));
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(members(server, 'main'), ids('p', N - 1));
      const gz = await postRaw(server, '/collection/main/products/remove', gzipSync(JSON.stringify({ products: ids('p', 10) })), { 'content-encoding': 'gzip' });
      assert.equal(gz.status, 200);
      assert.equal(members(server, 'main').length, N - 11);
    } finally {
      await server.stop();
    }
  });
});

