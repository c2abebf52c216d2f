// Property-based tests (fast-check) for every endpoint, over HTTP against the real server
// (issue 12): random JSON and random bytes always get 200 or a documented 4xx of the documented
// shape, never 5xx; a valid body always gets 200; a valid body with one mutation gets exactly one
// detail, naming the mutated field, with the Joi type CONTRACT §4 gives for that mutation; and a
// refused request never changes state (the journal grows by exactly the number of 200s).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LAUNCH_INFO, launch, startServer, T0, type TestServer } from './helpers/server.ts';
import { metric } from './helpers/wait.ts';

const RUNS = Number(process.env.PROPERTY_RUNS ?? 60);
const SEED = Number(process.env.PROPERTY_SEED ?? 1123);

// ---- a description of each body, enough to make valid values and single-field mutations

/** `optional`: the schema lets it be absent (no any.required mutation); `sent`: always generated anyway. */
type Field =
  | { kind: 'string'; max: number; nonEmpty?: boolean; nullable?: boolean; optional?: boolean; sent?: boolean }
  | { kind: 'number'; min?: number; nullable?: boolean; optional?: boolean }
  | { kind: 'boolean' }
  | { kind: 'enum'; values: readonly string[]; nullable?: boolean; optional?: boolean }
  | { kind: 'timestamp' }
  | { kind: 'did' }
  | { kind: 'object'; fields: Record<string, Field>; optional?: boolean }
  | { kind: 'attributes'; optional?: boolean }
  | { kind: 'ids'; from: readonly string[] };

const str = (max: number, extra: Partial<Extract<Field, { kind: 'string' }>> = {}): Field => ({ kind: 'string', max, ...extra });
const launchInfo: Field = {
  kind: 'object',
  fields: {
    appVersionCode: { kind: 'number' },
    appVersionName: str(256),
    sdkVersion: { kind: 'number' },
    firstTime: { kind: 'boolean' },
    deviceType: str(256),
    deviceManufacturer: str(256),
    deviceModel: str(256),
    deviceCarrier: str(256),
    osName: str(256),
    osVersion: str(256),
    platform: { kind: 'enum', values: ['ANDROID', 'IOS'] },
    language: str(256),
    referrer: str(2048, { optional: true }),
    utmInfo: { kind: 'object', optional: true, fields: { us: str(256, { nullable: true, optional: true }), um: str(256, { nullable: true, optional: true }), uc: str(256, { nullable: true, optional: true }) } },
  },
};
const PRODUCTS = ['p0', 'p1', 'p2', 'p3', 'p4'];

interface Endpoint {
  name: string;
  method: 'POST' | 'DELETE';
  path: string;
  body: Record<string, Field> | null;
}

const ENDPOINTS: Endpoint[] = [
  { name: 'app launch', method: 'POST', path: '/mcrs_appl_v1', body: { timestamp: { kind: 'timestamp' }, info: launchInfo } },
  { name: 'track event', method: 'POST', path: '/msv_cevt', body: { did: { kind: 'did' }, name: str(120, { nonEmpty: true }), timestamp: { kind: 'timestamp' }, info: { kind: 'attributes', optional: true } } },
  // clientCustomerId always sent: without it and without info the detail is object.missing.
  { name: 'identify', method: 'POST', path: '/msv_cs_id', body: { did: { kind: 'did' }, clientCustomerId: str(256, { nonEmpty: true, optional: true, sent: true }), timestamp: { kind: 'timestamp' }, info: { kind: 'attributes', optional: true } } },
  { name: 'push token', method: 'POST', path: '/mpush_token', body: { did: { kind: 'did' }, type: { kind: 'enum', values: ['fcm', 'apns'] }, token: str(4096, { nonEmpty: true }), timestamp: { kind: 'timestamp' } } },
  {
    name: 'product',
    method: 'POST',
    path: '/product',
    body: {
      id: str(50, { nonEmpty: true }),
      // Optional on update, required on create (a reference check): always sent.
      name: str(2000, { nonEmpty: true, optional: true, sent: true }),
      image: str(1000, { nullable: true, optional: true }),
      description: str(2000, { nullable: true, optional: true }),
      url: str(1000, { nullable: true, optional: true }),
      price: { kind: 'number', min: 0, nullable: true, optional: true },
      originalHigherPrice: { kind: 'number', min: 0, nullable: true, optional: true },
      vendor: str(1000, { nullable: true, optional: true }),
      status: { kind: 'enum', values: ['inStock', 'outOfStock'], nullable: true, optional: true },
    },
  },
  { name: 'collection', method: 'POST', path: '/collection', body: { id: str(50, { nonEmpty: true }), name: str(2000, { nonEmpty: true, optional: true, sent: true }), image: str(1000, { nullable: true, optional: true }), url: str(1000, { nullable: true, optional: true }) } },
  { name: 'mapping add', method: 'POST', path: '/collection/c0/products/add', body: { products: { kind: 'ids', from: PRODUCTS } } },
  { name: 'mapping remove', method: 'POST', path: '/collection/c0/products/remove', body: { products: { kind: 'ids', from: PRODUCTS } } },
  { name: 'product delete', method: 'DELETE', path: '/product/:id', body: null },
  { name: 'collection delete', method: 'DELETE', path: '/collection/:id', body: null },
  // Logout last: it ends the device the others use (it gets its own below).
  { name: 'logout', method: 'POST', path: '/logout', body: { did: { kind: 'did' } } },
];

const printable = (max: number, min = 0) => fc.string({ minLength: min, maxLength: Math.min(max, 24) });
const attributeEntry = fc.oneof(
  fc.record({ name: printable(120, 1), value: fc.option(printable(100), { nil: null }), type: fc.constant('string') }),
  fc.record({ name: printable(120, 1), value: fc.option(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { nil: null }), type: fc.constant('integer') }),
  fc.record({ name: printable(120, 1), value: fc.option(fc.double({ noNaN: true, noDefaultInfinity: true }), { nil: null }), type: fc.constantFrom('float', 'double') }),
  fc.record({ name: printable(120, 1), value: fc.option(fc.boolean(), { nil: null }), type: fc.constant('boolean') }),
  fc.record({ name: printable(120, 1), value: fc.constant('2024-02-29 23:59:59'), type: fc.constant('date') }),
);

function valueOf(field: Field, did: string): fc.Arbitrary<unknown> {
  switch (field.kind) {
    case 'string': {
      const s = printable(field.max, field.nonEmpty ? 1 : 0);
      return field.nullable ? fc.option(s, { nil: null }) : s;
    }
    case 'number': {
      const n = fc.double({ min: field.min ?? -1e9, max: 1e9, noNaN: true, noDefaultInfinity: true });
      return field.nullable ? fc.option(n, { nil: null }) : n;
    }
    case 'boolean':
      return fc.boolean();
    case 'enum':
      return field.nullable ? fc.option(fc.constantFrom(...field.values), { nil: null }) : fc.constantFrom(...field.values);
    case 'timestamp':
      return fc.oneof(fc.integer({ min: 1e12, max: 9_999_999_999_999 }), fc.integer({ min: 1e12, max: 9_999_999_999_999 }).map(String));
    case 'did':
      return fc.constant(did);
    case 'object':
      return bodyOf(field.fields, did);
    case 'attributes':
      return fc.array(attributeEntry, { maxLength: 4 });
    case 'ids':
      return fc.subarray([...field.from], { minLength: 1 });
  }
}

function bodyOf(fields: Record<string, Field>, did: string): fc.Arbitrary<Record<string, unknown>> {
  const required: Record<string, fc.Arbitrary<unknown>> = {};
  const keys: string[] = [];
  for (const [name, field] of Object.entries(fields)) {
    required[name] = valueOf(field, did);
    if (!('optional' in field && field.optional) || ('sent' in field && field.sent)) keys.push(name);
  }
  return fc.record(required, { requiredKeys: keys });
}

/** One mutation of a valid body: where, what it does, and the detail it must produce. */
interface Mutation {
  path: string[];
  type: string;
  apply(body: Record<string, unknown>): void;
}

function at(body: Record<string, unknown>, path: readonly string[]): Record<string, unknown> {
  let node: any = body;
  for (const key of path.slice(0, -1)) node = node[key];
  return node;
}

function mutationsOf(fields: Record<string, Field>, body: Record<string, unknown>, base: string[] = []): Mutation[] {
  const out: Mutation[] = [];
  const set = (path: string[], value: unknown, type: string) => out.push({ path, type, apply: (b) => void (at(b, path)[path.at(-1)!] = value) });
  out.push({ path: [...base, 'zzUnknown'], type: 'object.allowUnknown', apply: (b) => void ((base.length === 0 ? b : (at(b, [...base, 'x'])))['zzUnknown'] = 1) });
  for (const [name, field] of Object.entries(fields)) {
    const path = [...base, name];
    const present = Object.hasOwn(body, name);
    const optional = 'optional' in field && field.optional === true;
    if (!optional) out.push({ path, type: 'any.required', apply: (b) => void delete at(b, path)[name] });
    if (!present && optional) continue;
    switch (field.kind) {
      case 'string':
      case 'did': {
        const max = field.kind === 'did' ? 64 : field.max;
        set(path, 'x'.repeat(max + 1), 'string.max');
        set(path, 7, 'string.base');
        if (field.kind === 'did' || field.nonEmpty) set(path, '', 'any.empty');
        break;
      }
      case 'number':
        set(path, '7', 'number.base');
        if (field.min !== undefined) set(path, field.min - 1, 'number.min');
        break;
      case 'boolean':
        set(path, 'true', 'boolean.base');
        break;
      case 'enum':
        set(path, 'zz', 'any.allowOnly');
        set(path, 3, 'any.allowOnly');
        break;
      case 'timestamp':
        set(path, true, 'number.base');
        set(path, '017', 'string.regex.base');
        set(path, 999, 'number.min');
        set(path, 1.5e12 + 0.5, 'number.integer');
        break;
      case 'object':
        set(path, 'x', 'object.base');
        out.push(...mutationsOf(field.fields, body[name] as Record<string, unknown>, path));
        break;
      case 'attributes': {
        set(path, {}, 'array.base');
        const entries = body[name] as Array<{ type: string }>;
        if (entries.length > 0) {
          set([...path, '0', 'name'], 'x'.repeat(121), 'string.max');
          set([...path, '0', 'name'], '', 'any.empty');
          set([...path, '0', 'type'], 'text', 'any.allowOnly');
          // A value is judged against its entry's type: too long is string.max for a string.
          if (entries[0]!.type === 'string') set([...path, '0', 'value'], 'x'.repeat(101), 'string.max');
        }
        break;
      }
      case 'ids':
        set(path, [], 'array.min');
        set(path, 'p0', 'array.base');
        set([...path, '0'], 'x'.repeat(51), 'string.max');
        set([...path, '0'], '', 'any.empty');
        set([...path, '0'], 5, 'string.base');
        break;
    }
  }
  return out;
}

// ---- the server and the checks

let server: TestServer;
let did: string;

before(async () => {
  server = await startServer();
  did = (await launch(server)).did;
  for (const id of PRODUCTS) assert.equal((await server.post('/product', { id, name: id })).status, 200);
  assert.equal((await server.post('/collection', { id: 'c0', name: 'c0' })).status, 200);
});
after(async () => {
  await server.kill();
});

async function send(endpoint: Endpoint, body: string | null, id = 'x'): Promise<{ status: number; body: any; text: string }> {
  const path = endpoint.path.replace(':id', encodeURIComponent(id));
  const res = await server.request(path, undefined, { method: endpoint.method, ...(body === null ? {} : { raw: body, headers: { 'content-type': 'application/json' } }) });
  return { status: res.status, body: res.body, text: res.text };
}

/** The documented shape of a refusal (README "Errors", CONTRACT §2 and §4). */
function assertDocumentedRefusal(res: { status: number; body: any; text: string }, context: string): void {
  assert.ok([400, 404, 413, 415, 422].includes(res.status), `${context}: status ${res.status}: ${res.text.slice(0, 300)}`);
  if (res.status === 422) {
    assert.equal(res.body.type, 'ValidationError', context);
    assert.ok(Array.isArray(res.body.details) && res.body.details.length >= 1 && res.body.details.length <= 100, context);
    for (const d of res.body.details) {
      assert.equal(typeof d.message, 'string', context);
      assert.equal(typeof d.type, 'string', context);
      assert.ok(Array.isArray(d.path) && d.path.every((p: unknown) => typeof p === 'string'), context);
      assert.equal(d.context.key, d.path.length === 0 ? 'value' : d.path.at(-1), context);
      assert.equal(d.context.label, d.context.key, context);
    }
  } else {
    assert.deepEqual(Object.keys(res.body), ['type', 'message'], context);
    assert.match(res.body.type, /Error$/, context);
  }
}

const journaled = async () => (await metric(server, 'intake_journal_batch_records_sum'))!;

/**
 * Runs `check` for RUNS samples; each returns how many records its requests journaled (a 200
 * write: one; a refusal: none). The journal must have grown by exactly that: nothing refused is
 * applied.
 */
async function property<T>(arbitrary: fc.Arbitrary<T>, check: (sample: T) => Promise<number>): Promise<void> {
  const before = await journaled();
  let accepted = 0;
  await fc.assert(
    fc.asyncProperty(arbitrary, async (sample) => {
      accepted += await check(sample);
    }),
    { numRuns: RUNS, seed: SEED, endOnFailure: true },
  );
  assert.equal((await journaled()) - before, accepted, 'refused requests journal nothing; each 200 journals one record');
}

for (const endpoint of ENDPOINTS) {
  describe(`${endpoint.name} (${endpoint.method} ${endpoint.path})`, () => {
    if (endpoint.body !== null) {
      const fields = endpoint.body;
      test('random JSON and random bytes: 200 or a documented 4xx, never 5xx', async () => {
        const anyBody = fc.oneof(
          fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 4 })).map((o) => JSON.stringify(o)),
          fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
          fc.string({ maxLength: 64 }),
          bodyOf(fields, did).map((b) => JSON.stringify(b).slice(0, -1)),
        );
        await property(anyBody, async (body) => {
          const res = await send(endpoint, body);
          if (res.status === 200) return 1;
          assertDocumentedRefusal(res, `${endpoint.name} ${body.slice(0, 200)}`);
          return 0;
        });
      });

      test('a valid body always gets 200', async () => {
        await property(bodyOf(fields, did), async (body) => {
          // Logout ends the device it names: each sample logs out a device of its own.
          const sent = endpoint.name === 'logout' ? { did: (await launch(server)).did } : body;
          const res = await send(endpoint, JSON.stringify(sent));
          assert.equal(res.status, 200, `${endpoint.name} ${JSON.stringify(sent)}: ${res.text.slice(0, 300)}`);
          return endpoint.name === 'logout' ? 2 : 1;
        });
      });

      test('one mutation of a valid body: exactly one detail, naming that field, nothing applied', async () => {
        const mutated = bodyOf(fields, did).chain((body) => fc.record({ body: fc.constant(body), mutation: fc.constantFrom(...mutationsOf(fields, body)) }));
        await property(mutated, async ({ body, mutation }) => {
          const copy = structuredClone(body);
          mutation.apply(copy);
          const res = await send(endpoint, JSON.stringify(copy));
          const context = `${endpoint.name}: ${mutation.type} at ${mutation.path.join('.')} in ${JSON.stringify(copy).slice(0, 300)}`;
          assert.equal(res.status, 422, `${context}: ${res.text.slice(0, 300)}`);
          assert.deepEqual(res.body.details.map((d: any) => [d.type, d.path]), [[mutation.type, mutation.path]], context);
          return 0;
        });
      });
    } else {
      test('any :id of 1 to 50 characters gets 200; 51 gets exactly one string.max detail at ["id"]', async () => {
        await property(fc.oneof(fc.string({ minLength: 1, maxLength: 50 }).map((id) => ({ id, ok: true })), fc.string({ minLength: 51, maxLength: 80 }).map((id) => ({ id, ok: false }))), async ({ id, ok }) => {
          const res = await send(endpoint, null, id);
          if (ok) {
            assert.equal(res.status, 200, `${JSON.stringify(id)}: ${res.text}`);
            return 1;
          }
          assert.equal(res.status, 422);
          assert.deepEqual(res.body.details.map((d: any) => [d.type, d.path]), [['string.max', ['id']]]);
          return 0;
        });
      });
    }
  });
}
