// A batch item is the request sent alone (CONTRACT.md §13), checked with fast-check over HTTP:
// random sequences of items of every endpoint kind (valid bodies, broken ones, wrong methods,
// odd paths, good, bad, repeated and empty Idempotency-Keys, bodies over the endpoint's limit,
// deep nesting) go as one POST /batch to workspace A, and the same requests one at a time, in
// the same order, to workspace B of the same server. Both workspaces start equal and see the
// same writes, so each item's {status, body} must equal, byte for byte, what its twin got alone
// (device and session ids, which are random, are mapped to their order of appearance), with
// `replayed` exactly where the twin got `idempotent-replayed: true`. The journals must then hold
// the same records. Mapping requests sent alone go through a mapping worker here
// (MAPPING_WORKER_THRESHOLD_BYTES=16), so big mapping items are compared with the worker path.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { exportLines, KEY_A, KEY_B, LAUNCH_INFO, startServer, T0, type TestServer } from './helpers/server.ts';

const RUNS = Number(process.env.PROPERTY_RUNS ?? 60);
const SEED = Number(process.env.PROPERTY_SEED ?? 2020);
const BODY_LIMIT_BYTES = 2048;
const DID = '$DID';

interface Item {
  method: 'POST' | 'DELETE';
  path: string;
  body?: unknown;
  idempotencyKey?: string;
}

let server: TestServer;
before(async () => {
  server = await startServer({ env: { MAPPING_WORKER_THRESHOLD_BYTES: '16', BODY_LIMIT_BYTES: String(BODY_LIMIT_BYTES) } });
});
after(async () => {
  await server.kill();
});

// ---- items

const PRODUCTS = ['p0', 'p1', 'p2', 'p3'];
const COLLECTIONS = ['c0', 'c1'];
const short = fc.string({ minLength: 1, maxLength: 8 });
const did = fc.constantFrom(DID, DID, DID, 'unknown-did');
const timestamp = fc.oneof(fc.constant(T0), fc.constant(String(T0)));
const attributes = fc.array(
  fc.oneof(
    fc.record({ name: short, value: fc.option(short, { nil: null }), type: fc.constant('string') }),
    fc.record({ name: short, value: fc.integer(), type: fc.constant('integer') }),
    fc.record({ name: short, value: fc.boolean(), type: fc.constant('boolean') }),
  ),
  { maxLength: 3 },
);
const optional = <T,>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
/** A record whose undefined fields are left out. */
const body = (fields: Record<string, fc.Arbitrary<unknown>>) =>
  fc.record(fields).map((o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)));
const id = (pool: string[]) => fc.oneof(fc.constantFrom(...pool), fc.constantFrom('a/b', 'é ü', '50%', 'x'.repeat(51), ''));

/** Valid-looking items of every endpoint kind (some still refused: unknown did, missing name, ...). */
const wellFormed: fc.Arbitrary<Item> = fc.oneof(
  body({ timestamp, info: fc.constant(LAUNCH_INFO), did: optional(fc.constantFrom(DID, null, 'unknown-did')) }).map((b): Item => ({ method: 'POST', path: '/mcrs_appl_v1', body: b })),
  body({ did, name: short, timestamp, info: optional(attributes) }).map((b): Item => ({ method: 'POST', path: '/msv_cevt', body: b })),
  body({ did, clientCustomerId: optional(fc.constantFrom('cust1', 'cust2')), timestamp, info: optional(attributes) }).map((b): Item => ({ method: 'POST', path: '/msv_cs_id', body: b })),
  body({ did }).map((b): Item => ({ method: 'POST', path: '/logout', body: b })),
  body({ did, type: fc.constantFrom('fcm', 'apns'), token: short, timestamp }).map((b): Item => ({ method: 'POST', path: '/mpush_token', body: b })),
  body({ id: fc.constantFrom(...PRODUCTS), name: optional(short), price: optional(fc.option(fc.double({ min: 0, max: 1e6, noNaN: true }), { nil: null })), status: optional(fc.constantFrom('inStock', 'outOfStock', null)) }).map((b): Item => ({ method: 'POST', path: '/product', body: b })),
  body({ id: fc.constantFrom(...COLLECTIONS), name: optional(short) }).map((b): Item => ({ method: 'POST', path: '/collection', body: b })),
  fc.tuple(id(PRODUCTS)).map(([p]): Item => ({ method: 'DELETE', path: `/product/${encodeURIComponent(p)}` })),
  fc.tuple(id(COLLECTIONS)).map(([c]): Item => ({ method: 'DELETE', path: `/collection/${encodeURIComponent(c)}` })),
  fc.tuple(id(COLLECTIONS), fc.constantFrom('add', 'remove'), fc.subarray([...PRODUCTS, 'px', 'p0'], { minLength: 1 })).map(([c, op, products]): Item => ({
    method: 'POST',
    path: `/collection/${encodeURIComponent(c)}/products/${op}`,
    body: { products },
  })),
);

/** Deep JSON: nested 70 levels, past the 64 any body may nest. */
const deep = (): unknown => {
  let value: unknown = 1;
  for (let i = 0; i < 70; i++) value = [value];
  return value;
};

/** One way to break an item, or none. */
const breakage = fc.oneof(
  { weight: 6, arbitrary: fc.constant((item: Item) => item) },
  { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 })).map(([key, value]) => (item: Item) => (isObject(item.body) ? { ...item, body: { ...item.body, [key]: value } } : item)) },
  { weight: 1, arbitrary: fc.nat().map((n) => (item: Item) => (isObject(item.body) ? { ...item, body: Object.fromEntries(Object.entries(item.body).filter((_, i, all) => i !== n % all.length)) } : item)) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }).map((value) => (item: Item) => ({ ...item, body: value })) },
  { weight: 1, arbitrary: fc.constant((item: Item) => ({ method: item.method, path: item.path })) },
  { weight: 1, arbitrary: fc.constant((item: Item) => ({ ...item, method: item.method === 'POST' ? 'DELETE' : 'POST' }) as Item) },
  { weight: 1, arbitrary: fc.constant((item: Item) => (isObject(item.body) ? { ...item, body: { ...item.body, pad: 'y'.repeat(BODY_LIMIT_BYTES) } } : item)) },
  { weight: 1, arbitrary: fc.constant((item: Item) => (isObject(item.body) ? { ...item, body: { ...item.body, deep: deep() } } : item)) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom('/nope', '/product/', '/product/a/b', '/product/%zz', '/collection/%E0%A4%A/products/add', '/healthz', '/readyz', '/metrics', '/openapi.json', '/cluster', '/batch', '/product?x=1', '/PRODUCT', '/collection//products/add')
      .map((path) => (item: Item) => ({ ...item, path })),
  },
);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An item with its Idempotency-Key: none, one of a few (so some repeat, some conflict), a malformed one, or empty. */
const item = (sample: number) =>
  fc
    .tuple(wellFormed, breakage, fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 3, arbitrary: fc.constantFrom('k0', 'k1', 'k2').map((k) => `s${sample}-${k}`) }, { weight: 1, arbitrary: fc.constantFrom('bad key', '', 'x'.repeat(256)) }))
    .map(([base, breakIt, key]): Item => {
      const broken = breakIt(base);
      // POST /batch alone would be a batch: a batch item there is refused (see batch.test.ts).
      if (broken.path === '/batch' && broken.method === 'POST') broken.method = 'DELETE';
      return key === undefined ? broken : { ...broken, idempotencyKey: key };
    });

/** Another body that is still valid if this one was (so that a reused key is a conflict, not a schema 422). */
function changedBody(body: unknown): unknown {
  if (!isObject(body)) return { id: 'p0', name: 'changed' };
  if ('timestamp' in body) return { ...body, timestamp: T0 + 1 };
  if ('products' in body && Array.isArray(body.products)) return { ...body, products: [...body.products, 'p0'] };
  return { ...body, name: 'changed' };
}

/**
 * A batch's items, some sent again later in it under the same key: the same request (a replay) or
 * with another body (idempotency.reused).
 */
const items = (sample: number) =>
  fc.tuple(fc.array(item(sample), { minLength: 1, maxLength: 10 }), fc.array(fc.record({ from: fc.nat(), changed: fc.boolean() }), { maxLength: 3 })).map(([list, repeats]) => {
    for (const { from, changed } of repeats) {
      const original = list[from % list.length]!;
      if (original.idempotencyKey === undefined || original.idempotencyKey === '') original.idempotencyKey = `s${sample}-r${from % list.length}`;
      const copy = structuredClone(original);
      if (changed) copy.body = changedBody(copy.body);
      list.push(copy);
    }
    return list;
  });

// ---- sending and comparing

/** Replaces every DID placeholder with the workspace's device. */
function withDid(value: unknown, didValue: string): unknown {
  if (value === DID) return didValue;
  if (Array.isArray(value)) return value.map((v) => withDid(v, didValue));
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withDid(v, didValue)]));
  return value;
}

/** Device and session ids of one workspace, named by order of appearance (the twin's match). */
class Names {
  private readonly names = new Map<string, string>();
  name(value: string, kind: string): string {
    let name = this.names.get(value);
    if (name === undefined) this.names.set(value, (name = `<${kind}${this.names.size}>`));
    return name;
  }
  /** The answer's text with ids replaced: a launch's did and sid are named first. */
  normalize(status: number, body: any): string {
    if (status === 200 && typeof body?.did === 'string') {
      this.name(body.did, 'did');
      this.name(body.sid, 'sid');
    }
    return JSON.stringify(body, (_key, value) => (typeof value === 'string' && this.names.has(value) ? this.names.get(value) : value));
  }
}

async function launchDevice(key: string, names: Names): Promise<string> {
  const res = await server.request<{ did: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }, { key });
  assert.equal(res.status, 200);
  names.normalize(200, res.body);
  return res.body.did;
}

async function alone(it: Item, key: string): Promise<{ status: number; text: string; body: unknown; replayed: boolean }> {
  const headers: Record<string, string> = {};
  if (it.idempotencyKey !== undefined) headers['idempotency-key'] = it.idempotencyKey;
  const hasBody = it.method === 'POST' && it.body !== undefined;
  if (it.method === 'POST') headers['content-type'] = 'application/json';
  const res = await server.request(it.path, undefined, { key, method: it.method, headers, ...(hasBody ? { raw: JSON.stringify(it.body) } : it.method === 'POST' ? { raw: '' } : {}) });
  return { status: res.status, text: res.text, body: res.body, replayed: res.headers.get('idempotent-replayed') === 'true' };
}

test('every item of a batch gets exactly what the same request gets alone, valid and broken items mixed', async (t) => {
  const namesA = new Names();
  const namesB = new Names();
  let sample = 0;
  let compared = 0;
  let replays = 0;
  let conflicts = 0;
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(
      fc.integer().chain(() => items(++sample)),
      async (items) => {
        const didA = await launchDevice(KEY_A, namesA);
        const didB = await launchDevice(KEY_B, namesB);
        const batch = await server.request<{ results: Array<{ status: number; body: unknown; replayed?: true }> }>(
          '/batch',
          { requests: items.map((it) => withDid(it, didA)) },
          { key: KEY_A },
        );
        assert.equal(batch.status, 200, batch.text.slice(0, 500));
        assert.equal(batch.body.results.length, items.length);
        for (let i = 0; i < items.length; i++) {
          const single = await alone(withDid(items[i], didB) as Item, KEY_B);
          const result = batch.body.results[i]!;
          const context = `item ${i} of ${JSON.stringify(items).slice(0, 600)}`;
          assert.equal(result.status, single.status, `${context}: alone ${single.text.slice(0, 300)}, batched ${JSON.stringify(result.body).slice(0, 300)}`);
          // Byte for byte: the server writes every body with JSON.stringify, so the parsed bodies
          // written again are the texts it sent; ids are then named on both sides alike.
          assert.equal(JSON.stringify(single.body), single.text, context);
          assert.equal(namesA.normalize(result.status, result.body), namesB.normalize(single.status, single.body), context);
          assert.equal(result.replayed === true, single.replayed, `${context}: replayed`);
          assert.deepEqual(Object.keys(result), result.replayed ? ['status', 'body', 'replayed'] : ['status', 'body'], context);
          statuses.set(result.status, (statuses.get(result.status) ?? 0) + 1);
          if (result.replayed) replays++;
          if ((result.body as any)?.details?.[0]?.type === 'idempotency.reused') conflicts++;
          compared++;
        }
      },
    ),
    { numRuns: RUNS, seed: SEED, endOnFailure: true },
  );
  // Every kind of answer came up.
  for (const status of [200, 400, 404, 405, 413, 422]) assert.ok((statuses.get(status) ?? 0) > 0, `some item got ${status}: ${JSON.stringify([...statuses])}`);
  assert.ok(compared > RUNS);
  assert.ok(replays > 0 && conflicts > 0, `keys replayed (${replays}) and conflicted (${conflicts})`);
  t.diagnostic(`${compared} items compared (${replays} replayed, ${conflicts} idempotency.reused); statuses ${JSON.stringify([...statuses].sort((x, y) => x[0] - y[0]))}`);

  // Both workspaces journaled the same writes, in the same order.
  const records = (workspace: string, names: Names) =>
    exportLines(server.dataDir, 'events', '--workspace', workspace).map((r) => {
      const { seq: _seq, at: _at, workspace: _ws, ...rest } = r;
      return names.normalize(200, rest);
    });
  const a = records('ws-a', namesA);
  const b = records('ws-b', namesB);
  assert.ok(a.length > RUNS);
  assert.deepEqual(a, b);
  t.diagnostic(`${a.length} records journaled in each workspace`);
});
