// The 422 path walks a body's schema errors property by property (validators.ts, ObjectErrors)
// instead of TypeBox's Errors() over the whole body, because that walk made a 422 cost more than
// a journaled 200 (issue 11). These properties pin that both list exactly the same errors, in the
// same order, with the same paths, values and schemas, for every body schema: random JSON, and
// valid bodies with one random change anywhere (a value replaced, a key removed or added).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { ValueError } from '@sinclair/typebox/errors';
import { buildValidators, type Validators } from '../src/schemas/validators.ts';
import { toDetails } from '../src/schemas/joi-errors.ts';
import { checkAttributeEntries } from '../src/schemas/attribute-values.ts';
import { MAX_DETAILS, type ValidationDetail } from '../src/schemas/details.ts';
import { LAUNCH_INFO, T0 } from './helpers/server.ts';

const RUNS = Number(process.env.PROPERTY_RUNS ?? 300);
const SEED = Number(process.env.PROPERTY_SEED ?? 1123);
const DID = 'V1StGXR8_Z5jdHi6B-myT';
const ATTRIBUTES = [{ name: 'plan', value: 'pro', type: 'string' }, { name: 'age', value: 3, type: 'integer' }, { name: 'vip', value: true, type: 'boolean' }];

const SAMPLES: Record<keyof Validators, Record<string, unknown>> = {
  appLaunch: { timestamp: T0, info: LAUNCH_INFO },
  trackEvent: { did: DID, name: 'product_view', timestamp: T0, info: ATTRIBUTES },
  identify: { did: DID, clientCustomerId: 'c-1', timestamp: String(T0), info: ATTRIBUTES },
  logout: { did: DID },
  pushToken: { did: DID, type: 'fcm', token: 'token-1', timestamp: T0 },
  product: { id: 'p1', name: 'Shoe', price: 9.99, originalHigherPrice: 12, status: 'inStock', url: 'https://shop.example/p1', description: null },
  collection: { id: 'c1', name: 'Sale' },
  mapping: { products: ['p1', 'p2'] },
  id: { id: 'p1' },
};

const validators = buildValidators({ mappingMaxItems: 5 });
const plain = (e: ValueError) => ({ type: e.type, path: e.path, value: e.value, schema: e.schema });

function assertSameErrors(name: keyof Validators, body: unknown): void {
  const v = validators[name];
  const expected = [...TypeCompiler.Compile(v.schema).Errors(body)];
  const actual = [...v.errors(body)];
  assert.deepStrictEqual(actual.map(plain), expected.map(plain), `${name}: ${JSON.stringify(body)}`);
  // The very schema objects, not copies: the 422 details read marks and limits from them.
  actual.forEach((e, i) => assert.equal(e.schema, expected[i]!.schema));
}

/** Every object and array inside `value`, with the way to reach it. */
function containers(value: unknown, out: Array<Record<string, unknown> | unknown[]> = []): Array<Record<string, unknown> | unknown[]> {
  if (typeof value !== 'object' || value === null) return out;
  out.push(value as Record<string, unknown>);
  for (const child of Object.values(value)) containers(child, out);
  return out;
}

const change = fc.record({ where: fc.nat(), which: fc.nat(), how: fc.constantFrom('replace', 'remove', 'add'), key: fc.constantFrom('x', 'name', 'value', 'type', 'did', 'info', '~/a'), value: fc.jsonValue({ maxDepth: 3 }) });

for (const name of Object.keys(SAMPLES) as Array<keyof Validators>) {
  test(`${name}: the same errors as TypeBox's Errors(), for random JSON and for one change to a valid body`, () => {
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.dictionary(fc.constantFrom(...Object.keys(SAMPLES[name]), 'extra'), fc.jsonValue({ maxDepth: 3 }))), (body) => assertSameErrors(name, body)),
      { numRuns: RUNS, seed: SEED },
    );
    fc.assert(
      fc.property(change, ({ where, which, how, key, value }) => {
        const body = structuredClone(SAMPLES[name]);
        const all = containers(body);
        const target = all[where % all.length]!;
        const keys = Object.keys(target);
        if (how === 'add' || keys.length === 0) (target as Record<string, unknown>)[key] = value;
        else if (how === 'remove') delete (target as Record<string, unknown>)[keys[which % keys.length]!];
        else (target as Record<string, unknown>)[keys[which % keys.length]!] = value;
        assertSameErrors(name, body);
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });
}

test('a body that is not an object, and a valid body, are judged the same way too', () => {
  for (const name of Object.keys(SAMPLES) as Array<keyof Validators>) {
    for (const body of [null, 1, 'x', [], [1], true, SAMPLES[name]]) assertSameErrors(name, body);
  }
});

test('big bodies: nested objects and arrays are walked only as far as the answer needs, and the details are those of the whole walk', () => {
  // Until 2026-11-30 a nested object's unknown keys and an array's failing elements were all
  // listed by TypeBox's Errors() (20,000 unknown keys in a launch's info: 100 to 230 ms of a held
  // event loop for the 422; 2,000 attribute entries with 10 unknown keys each: 60 to 180 ms).
  const info: Record<string, unknown> = { ...LAUNCH_INFO, deviceModel: 5 };
  for (let i = 0; i < 20_000; i++) info[`k${i}`] = 0;
  const entries = Array.from({ length: 2_000 }, (_, i) => ({ name: i === 3 ? 7 : `n${i}`, value: i === 5 ? 'x' : 1, type: 'integer', ...Object.fromEntries(Array.from({ length: 10 }, (_, j) => [`x${j}`, j])) }));
  const cases: Array<[keyof Validators, Record<string, unknown>, number]> = [
    ['appLaunch', { timestamp: T0, info }, 300],
    ['trackEvent', { did: DID, name: 'e', timestamp: T0, info: entries }, 100 * 12],
    ['identify', { did: DID, clientCustomerId: 'c', timestamp: T0, info: entries }, 100 * 12],
    ['mapping', { products: Array.from({ length: 5_000 }, (_, i) => i) }, 200],
  ];
  for (const [name, body, most] of cases) {
    const v = validators[name];
    const walked = [...v.errors(body)].length;
    assert.ok(walked <= most, `${name}: ${walked} errors walked`);
    const extra: ValidationDetail[] = [];
    if (name === 'trackEvent' || name === 'identify') checkAttributeEntries(body.info, 'info', extra);
    const whole = toDetails(v.schema, body, TypeCompiler.Compile(v.schema).Errors(body), extra, MAX_DETAILS);
    assert.deepStrictEqual(v.validate(body), whole, name);
  }
});
