// Unit tests of the pure validation parts (no server): the Joi-style detail builders, the date and
// attribute-value checks, JSON Pointer paths, and the compiled validators with their detail mapping.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Value } from '@sinclair/typebox/value';
import { checkAttributeEntries, checkAttributeValue, isDateTime } from '../src/schemas/attribute-values.ts';
import { detail, MAX_DETAILS, TIMESTAMP_PATTERN, validationBody, type ValidationDetail } from '../src/schemas/details.ts';
import { TrackEventBody } from '../src/schemas/endpoints.ts';
import { ATTRIBUTE_TYPES } from '../src/schemas/fields.ts';
import { pointerToPath, toDetails } from '../src/schemas/joi-errors.ts';
import { buildValidators, validateIdParam, type Validators } from '../src/schemas/validators.ts';
import { LAUNCH_INFO, T0 } from './helpers/server.ts';

const v: Validators = buildValidators({ mappingMaxItems: 3 });

const keyOf = (path: readonly string[]): string => (path.length === 0 ? 'value' : path[path.length - 1]!);

/** The detail the contract prescribes; key and label come from the path. */
function expected(type: string, path: string[], message: string, extra: Record<string, unknown> = {}): ValidationDetail {
  const key = keyOf(path);
  return { message, path, type, context: { key, label: key, ...extra } };
}

/** `found` is exactly one detail: of `type` at `path` with this message and these extra context fields. */
function expectOne(found: ValidationDetail[] | null, type: string, path: string[], message: string, extra: Record<string, unknown> = {}): void {
  assert.deepEqual(found, [expected(type, path, message, extra)]);
}

const event = (extra: Record<string, unknown> = {}) => ({ did: 'd1', name: 'view', timestamp: T0, ...extra });
const attr = (type: string, value: unknown, name = 'a') => ({ name, value, type });

// ---------------------------------------------------------------- detail builders

describe('detail builders: exact Joi wording', () => {
  const x = ['info', 'x'];

  test('any.required', () => {
    assert.deepEqual(detail.required(x), expected('any.required', x, '"x" is required'));
  });

  test('any.allowOnly lists the valids comma-separated, and carries value and valids', () => {
    assert.deepEqual(
      detail.allowOnly(x, 'WIN', ['ANDROID', 'IOS']),
      expected('any.allowOnly', x, '"x" must be one of [ANDROID, IOS]', { value: 'WIN', valids: ['ANDROID', 'IOS'] }),
    );
    assert.equal(detail.allowOnly(['t'], '', ['fcm', 'apns']).message, '"t" must be one of [fcm, apns]');
  });

  test('any.empty', () => {
    assert.deepEqual(detail.empty(x, ''), expected('any.empty', x, '"x" is not allowed to be empty', { value: '' }));
  });

  test('object.allowUnknown', () => {
    assert.deepEqual(detail.unknownKey(x, 1), expected('object.allowUnknown', x, '"x" is not allowed', { value: 1 }));
  });

  test('*.base with the right article', () => {
    assert.deepEqual(detail.base('string', x, 5), expected('string.base', x, '"x" must be a string', { value: 5 }));
    assert.deepEqual(detail.base('number', x, '7'), expected('number.base', x, '"x" must be a number', { value: '7' }));
    assert.deepEqual(detail.base('boolean', x, 'true'), expected('boolean.base', x, '"x" must be a boolean', { value: 'true' }));
    assert.deepEqual(detail.base('object', x, 5), expected('object.base', x, '"x" must be an object', { value: 5 }));
    assert.deepEqual(detail.base('array', x, {}), expected('array.base', x, '"x" must be an array', { value: {} }));
  });

  test('string.max', () => {
    assert.deepEqual(
      detail.stringMax(x, 'abcdef', 5),
      expected('string.max', x, '"x" length must be less than or equal to 5 characters long', { value: 'abcdef', limit: 5 }),
    );
  });

  test('number.integer and number.unsafe', () => {
    assert.deepEqual(detail.integer(x, 1.5), expected('number.integer', x, '"x" must be an integer', { value: 1.5 }));
    assert.deepEqual(detail.unsafe(x, 2 ** 60), expected('number.unsafe', x, '"x" must be a safe number', { value: 2 ** 60 }));
  });

  test('number.min and number.max, negative limits included', () => {
    assert.deepEqual(
      detail.min(x, 123, 1000000000000),
      expected('number.min', x, '"x" must be larger than or equal to 1000000000000', { value: 123, limit: 1000000000000 }),
    );
    assert.deepEqual(
      detail.min(x, -2147483649, -2147483648),
      expected('number.min', x, '"x" must be larger than or equal to -2147483648', { value: -2147483649, limit: -2147483648 }),
    );
    assert.deepEqual(
      detail.max(x, 2147483648, 2147483647),
      expected('number.max', x, '"x" must be less than or equal to 2147483647', { value: 2147483648, limit: 2147483647 }),
    );
  });

  test('array.min and array.max carry the limit and no value', () => {
    assert.deepEqual(detail.arrayMin(x, 1), expected('array.min', x, '"x" must contain at least 1 items', { limit: 1 }));
    assert.deepEqual(detail.arrayMax(x, 256), expected('array.max', x, '"x" must contain less than or equal to 256 items', { limit: 256 }));
    assert.equal(Object.hasOwn(detail.arrayMax(x, 256).context, 'value'), false);
  });

  test('string.regex.base', () => {
    assert.deepEqual(
      detail.regex(['timestamp'], '0123', '/^[1-9][0-9]{12}$/'),
      expected('string.regex.base', ['timestamp'], '"timestamp" with value "0123" fails to match the required pattern: /^[1-9][0-9]{12}$/', {
        value: '0123',
        pattern: '/^[1-9][0-9]{12}$/',
      }),
    );
    assert.equal(String(TIMESTAMP_PATTERN), '/^[1-9][0-9]{12}$/');
  });

  test('date.format', () => {
    const path = ['info', '0', 'value'];
    assert.deepEqual(
      detail.dateFormat(path, '2020-02-30 00:00:00'),
      expected('date.format', path, '"value" must be a date in the form YYYY-MM-DD HH:MM:SS', { value: '2020-02-30 00:00:00' }),
    );
  });

  test('object.missing is at the root: path [], key and label "value"', () => {
    assert.deepEqual(detail.missingPeers(['clientCustomerId', 'info']), {
      message: '"value" must contain at least one of [clientCustomerId, info]',
      path: [],
      type: 'object.missing',
      context: { key: 'value', label: 'value', peers: ['clientCustomerId', 'info'] },
    });
  });

  test('the root of any builder is "value"', () => {
    assert.deepEqual(detail.base('object', [], null), expected('object.base', [], '"value" must be an object', { value: null }));
  });

  test('device.notFound and device.loggedOut at ["did"]', () => {
    assert.deepEqual(detail.deviceNotFound('abc'), expected('device.notFound', ['did'], '"did" is not a known device', { value: 'abc' }));
    assert.deepEqual(
      detail.deviceLoggedOut('abc'),
      expected('device.loggedOut', ['did'], '"did" was logged out; call app launch without a did', { value: 'abc' }),
    );
  });

  test('collection.notFound at ["id"]', () => {
    assert.deepEqual(detail.collectionNotFound('c1'), expected('collection.notFound', ['id'], '"id" is not a known collection', { value: 'c1' }));
  });

  test('product.notFound at ["products", index], key and label the index', () => {
    assert.deepEqual(detail.productNotFound(3, 'p9'), {
      message: 'product "p9" is not known',
      path: ['products', '3'],
      type: 'product.notFound',
      context: { key: '3', label: '3', value: 'p9' },
    });
  });

  test('builders copy their inputs', () => {
    const path = ['a', 'b'];
    const valids = ['x', 'y'];
    const d = detail.allowOnly(path, 'z', valids);
    path.push('c');
    valids.push('w');
    assert.deepEqual(d.path, ['a', 'b']);
    assert.deepEqual(d.context.valids, ['x', 'y']);
  });

  test('validationBody and the details cap', () => {
    assert.equal(MAX_DETAILS, 100);
    const d = detail.required(['name']);
    assert.deepEqual(JSON.parse(validationBody([d])), { type: 'ValidationError', details: [d] });
  });
});

// ---------------------------------------------------------------- dates and attribute values

describe('isDateTime', () => {
  const good = [
    '2024-02-29 23:59:59',
    '2000-02-29 00:00:00',
    '2023-02-28 12:00:00',
    '2023-12-31 23:59:59',
    '2023-04-30 00:00:00',
    '2023-01-31 00:00:00',
    '0001-01-01 00:00:00',
  ];
  const bad = [
    '2023-02-29 00:00:00', // not a leap year
    '1900-02-29 00:00:00', // divisible by 100, not by 400
    '2100-02-29 00:00:00',
    '2020-02-30 00:00:00',
    '2023-04-31 00:00:00',
    '2023-13-01 00:00:00',
    '2023-00-10 00:00:00',
    '2023-01-00 00:00:00',
    '2023-01-32 00:00:00',
    '2020-01-01 24:00:00',
    '2020-01-01 23:60:00',
    '2020-01-01 23:59:60',
    '0000-01-01 00:00:00',
    '2020-01-01T00:00:00',
    '2020-01-01',
    '2020-01-01 00:00',
    '2020-1-01 00:00:00',
    '20200-01-01 00:00:00',
    ' 2020-01-01 00:00:00',
    '2020-01-01 00:00:00 ',
    '2020-01-01 00:00:00Z',
    '',
  ];
  for (const value of good) test(`ok: ${JSON.stringify(value)}`, () => assert.equal(isDateTime(value), true));
  for (const value of bad) test(`bad: ${JSON.stringify(value)}`, () => assert.equal(isDateTime(value), false));
});

describe('checkAttributeValue', () => {
  const path = ['info', '0', 'value'];
  const check = (type: (typeof ATTRIBUTE_TYPES)[number], value: unknown) => checkAttributeValue(type, value, path);

  test('null is fine for every type', () => {
    for (const type of ATTRIBUTE_TYPES) assert.equal(check(type, null), null, type);
  });

  test('integer: a 32-bit signed integer', () => {
    for (const ok of [0, 5, -5, 2147483647, -2147483648]) assert.equal(check('integer', ok), null, String(ok));
    assert.deepEqual(check('integer', '5'), detail.base('number', path, '5'));
    assert.deepEqual(check('integer', true), detail.base('number', path, true));
    assert.deepEqual(check('integer', Infinity), detail.base('number', path, Infinity));
    assert.deepEqual(check('integer', 1.5), expected('number.integer', path, '"value" must be an integer', { value: 1.5 }));
    assert.deepEqual(check('integer', 2147483648), expected('number.max', path, '"value" must be less than or equal to 2147483647', { value: 2147483648, limit: 2147483647 }));
    assert.deepEqual(
      check('integer', -2147483649),
      expected('number.min', path, '"value" must be larger than or equal to -2147483648', { value: -2147483649, limit: -2147483648 }),
    );
  });

  test('long: a safe integer', () => {
    for (const ok of [0, 2 ** 40, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER]) assert.equal(check('long', ok), null, String(ok));
    assert.deepEqual(check('long', 2 ** 60), expected('number.unsafe', path, '"value" must be a safe number', { value: 2 ** 60 }));
    assert.deepEqual(check('long', -(2 ** 53)), expected('number.unsafe', path, '"value" must be a safe number', { value: -(2 ** 53) }));
    assert.deepEqual(check('long', 2.5), expected('number.integer', path, '"value" must be an integer', { value: 2.5 }));
    assert.deepEqual(check('long', '5'), expected('number.base', path, '"value" must be a number', { value: '5' }));
  });

  test('float and double: a finite number', () => {
    for (const type of ['float', 'double'] as const) {
      assert.equal(check(type, 1.5), null);
      assert.equal(check(type, 3), null);
      assert.equal(check(type, -0.25), null);
      assert.deepEqual(check(type, '1.5'), expected('number.base', path, '"value" must be a number', { value: '1.5' }));
      assert.deepEqual(check(type, NaN), expected('number.base', path, '"value" must be a number', { value: NaN }));
      assert.deepEqual(check(type, Infinity), expected('number.base', path, '"value" must be a number', { value: Infinity }));
    }
  });

  test('boolean: a boolean', () => {
    assert.equal(check('boolean', true), null);
    assert.equal(check('boolean', false), null);
    assert.deepEqual(check('boolean', 'true'), expected('boolean.base', path, '"value" must be a boolean', { value: 'true' }));
    assert.deepEqual(check('boolean', 0), expected('boolean.base', path, '"value" must be a boolean', { value: 0 }));
  });

  test('date: a real YYYY-MM-DD HH:MM:SS string', () => {
    assert.equal(check('date', '2024-02-29 23:59:59'), null);
    assert.deepEqual(
      check('date', '2023-02-29 23:59:59'),
      expected('date.format', path, '"value" must be a date in the form YYYY-MM-DD HH:MM:SS', { value: '2023-02-29 23:59:59' }),
    );
    assert.deepEqual(check('date', 20240229), expected('string.base', path, '"value" must be a string', { value: 20240229 }));
  });

  test('string: at most 100 characters, empty allowed', () => {
    assert.equal(check('string', ''), null);
    assert.equal(check('string', 'x'.repeat(100)), null);
    const long = 'x'.repeat(101);
    assert.deepEqual(check('string', long), expected('string.max', path, '"value" length must be less than or equal to 100 characters long', { value: long, limit: 100 }));
    assert.deepEqual(check('string', 5), expected('string.base', path, '"value" must be a string', { value: 5 }));
  });
});

describe('checkAttributeEntries', () => {
  test('checks each entry of a known type with a value key, at its index', () => {
    const out: ValidationDetail[] = [];
    checkAttributeEntries([attr('integer', 1), attr('integer', 'x'), 5, { name: 'n', type: 'integer' }, attr('bogus', 'x'), attr('boolean', 1)], 'info', out);
    assert.deepEqual(out, [detail.base('number', ['info', '1', 'value'], 'x'), detail.base('boolean', ['info', '5', 'value'], 1)]);
  });

  test('ignores a non-array', () => {
    const out: ValidationDetail[] = [];
    checkAttributeEntries({ 0: attr('integer', 'x') }, 'info', out);
    assert.deepEqual(out, []);
  });
});

// ---------------------------------------------------------------- paths

describe('pointerToPath', () => {
  test('the root is []', () => assert.deepEqual(pointerToPath(''), []));
  test('segments, array indices as strings', () => assert.deepEqual(pointerToPath('/info/0/value'), ['info', '0', 'value']));
  test('JSON Pointer unescaping: ~1 is "/", ~0 is "~"', () => {
    assert.deepEqual(pointerToPath('/a~1b/c~0d'), ['a/b', 'c~d']);
    assert.deepEqual(pointerToPath('/~01'), ['~1']);
  });
  test('an empty key', () => assert.deepEqual(pointerToPath('/'), ['']));
  test('keys with "/" and "~" come back unescaped through a validator', () => {
    expectOne(v.trackEvent.validate(event({ 'a~b/c': 1 })), 'object.allowUnknown', ['a~b/c'], '"a~b/c" is not allowed', { value: 1 });
  });
});

// ---------------------------------------------------------------- validators

describe('buildValidators: valid bodies', () => {
  test('every validator accepts a valid body', () => {
    assert.equal(v.appLaunch.validate({ timestamp: T0, info: LAUNCH_INFO }), null);
    assert.equal(v.appLaunch.validate({ timestamp: String(T0), info: { ...LAUNCH_INFO, referrer: '', utmInfo: { us: 'a', um: null } }, did: null }), null);
    assert.equal(v.trackEvent.validate(event()), null);
    assert.equal(v.trackEvent.validate(event({ info: ATTRIBUTE_TYPES.map((t) => attr(t, null, t)) })), null);
    assert.equal(v.identify.validate({ did: 'd', timestamp: String(T0), clientCustomerId: 'c' }), null);
    assert.equal(v.identify.validate({ did: 'd', timestamp: T0, info: [] }), null);
    assert.equal(v.logout.validate({ did: 'd' }), null);
    assert.equal(v.pushToken.validate({ did: 'd', type: 'apns', token: 't', timestamp: T0 }), null);
    assert.equal(v.product.validate({ id: 'p' }), null);
    assert.equal(v.product.validate({ id: 'p', name: 'n', description: null, price: 0, originalHigherPrice: 1.5, status: 'outOfStock' }), null);
    assert.equal(v.collection.validate({ id: 'c', name: 'n', image: null, url: '' }), null);
    assert.equal(v.mapping.validate({ products: ['a', 'b', 'a'] }), null);
    assert.equal(validateIdParam(v, 'x'.repeat(50)), null);
  });
});

describe('buildValidators: the configured mapping limit', () => {
  test('array.max with the configured mappingMaxItems', () => {
    assert.equal(v.mapping.validate({ products: ['a', 'b', 'c'] }), null);
    expectOne(v.mapping.validate({ products: ['a', 'b', 'c', 'd'] }), 'array.max', ['products'], '"products" must contain less than or equal to 3 items', { limit: 3 });
  });

  test('each instance has its own limit', () => {
    const one = buildValidators({ mappingMaxItems: 1 });
    expectOne(one.mapping.validate({ products: ['a', 'b'] }), 'array.max', ['products'], '"products" must contain less than or equal to 1 items', { limit: 1 });
    const big = buildValidators({ mappingMaxItems: 100_000 });
    assert.equal(big.mapping.validate({ products: Array.from({ length: 100_000 }, (_, i) => `p${i}`) }), null);
    expectOne(
      big.mapping.validate({ products: Array.from({ length: 100_001 }, (_, i) => `p${i}`) }),
      'array.max',
      ['products'],
      '"products" must contain less than or equal to 100000 items',
      { limit: 100000 },
    );
  });

  test('array.min and item problems', () => {
    expectOne(v.mapping.validate({ products: [] }), 'array.min', ['products'], '"products" must contain at least 1 items', { limit: 1 });
    assert.deepEqual(v.mapping.validate({ products: ['', 5] }), [
      expected('any.empty', ['products', '0'], '"0" is not allowed to be empty', { value: '' }),
      expected('string.base', ['products', '1'], '"1" must be a string', { value: 5 }),
    ]);
  });
});

describe('buildValidators: the mapping of schema errors', () => {
  test('timestamps: number range, integer, string pattern, other kinds', () => {
    expectOne(v.trackEvent.validate(event({ timestamp: 123 })), 'number.min', ['timestamp'], '"timestamp" must be larger than or equal to 1000000000000', {
      value: 123,
      limit: 1000000000000,
    });
    expectOne(v.trackEvent.validate(event({ timestamp: 99999999999999 })), 'number.max', ['timestamp'], '"timestamp" must be less than or equal to 9999999999999', {
      value: 99999999999999,
      limit: 9999999999999,
    });
    expectOne(v.trackEvent.validate(event({ timestamp: 1500000000000.5 })), 'number.integer', ['timestamp'], '"timestamp" must be an integer', {
      value: 1500000000000.5,
    });
    expectOne(
      v.trackEvent.validate(event({ timestamp: '0123' })),
      'string.regex.base',
      ['timestamp'],
      '"timestamp" with value "0123" fails to match the required pattern: /^[1-9][0-9]{12}$/',
      { value: '0123', pattern: '/^[1-9][0-9]{12}$/' },
    );
    for (const value of [true, null, {}, []]) {
      expectOne(v.trackEvent.validate(event({ timestamp: value })), 'number.base', ['timestamp'], '"timestamp" must be a number', { value });
    }
  });

  test('enums, nullable enums and nullable numbers', () => {
    expectOne(v.pushToken.validate({ did: 'd', type: '', token: 't', timestamp: T0 }), 'any.allowOnly', ['type'], '"type" must be one of [fcm, apns]', {
      value: '',
      valids: ['fcm', 'apns'],
    });
    expectOne(v.product.validate({ id: 'p', status: 'sold' }), 'any.allowOnly', ['status'], '"status" must be one of [inStock, outOfStock]', {
      value: 'sold',
      valids: ['inStock', 'outOfStock'],
    });
    assert.equal(v.product.validate({ id: 'p', status: null, price: null }), null);
    expectOne(v.product.validate({ id: 'p', price: -1 }), 'number.min', ['price'], '"price" must be larger than or equal to 0', { value: -1, limit: 0 });
    expectOne(v.product.validate({ id: 'p', price: '7' }), 'number.base', ['price'], '"price" must be a number', { value: '7' });
    expectOne(v.product.validate({ id: 'p', description: 'x'.repeat(2001) }), 'string.max', ['description'], '"description" length must be less than or equal to 2000 characters long', {
      value: 'x'.repeat(2001),
      limit: 2000,
    });
  });

  test('launch info: nested object, unknown keys, utmInfo', () => {
    expectOne(v.appLaunch.validate({ timestamp: T0, info: 5 }), 'object.base', ['info'], '"info" must be an object', { value: 5 });
    expectOne(
      v.appLaunch.validate({ timestamp: T0, info: { ...LAUNCH_INFO, utmInfo: { zz: 1 } } }),
      'object.allowUnknown',
      ['info', 'utmInfo', 'zz'],
      '"zz" is not allowed',
      { value: 1 },
    );
    expectOne(v.appLaunch.validate({ timestamp: T0, info: { ...LAUNCH_INFO, platform: 'WIN' } }), 'any.allowOnly', ['info', 'platform'], '"platform" must be one of [ANDROID, IOS]', {
      value: 'WIN',
      valids: ['ANDROID', 'IOS'],
    });
    expectOne(v.appLaunch.validate({ timestamp: T0, info: { ...LAUNCH_INFO, firstTime: 'true' } }), 'boolean.base', ['info', 'firstTime'], '"firstTime" must be a boolean', {
      value: 'true',
    });
    expectOne(v.appLaunch.validate({ timestamp: T0, info: LAUNCH_INFO, did: 'x'.repeat(65) }), 'string.max', ['did'], '"did" length must be less than or equal to 64 characters long', {
      value: 'x'.repeat(65),
      limit: 64,
    });
  });

  test('a body that is not an object is object.base at the root', () => {
    expectOne(v.logout.validate(null), 'object.base', [], '"value" must be an object', { value: null });
    expectOne(v.logout.validate([]), 'object.base', [], '"value" must be an object', { value: [] });
  });

  test('identify: object.missing at the root, first in order', () => {
    assert.deepEqual(v.identify.validate({ did: '', timestamp: T0 }), [
      {
        message: '"value" must contain at least one of [clientCustomerId, info]',
        path: [],
        type: 'object.missing',
        context: { key: 'value', label: 'value', peers: ['clientCustomerId', 'info'] },
      },
      expected('any.empty', ['did'], '"did" is not allowed to be empty', { value: '' }),
    ]);
    // Key presence is what counts: an empty info list satisfies "at least one of".
    assert.equal(v.identify.validate({ did: 'd', timestamp: T0, info: [] }), null);
  });

  test('an attribute value is judged by its declared type, not by the schema union', () => {
    // The schema alone would accept "5" (string) and reject {} as "must be a string"; the type decides.
    expectOne(v.trackEvent.validate(event({ info: [attr('integer', '5')] })), 'number.base', ['info', '0', 'value'], '"value" must be a number', { value: '5' });
    expectOne(v.trackEvent.validate(event({ info: [attr('integer', {})] })), 'number.base', ['info', '0', 'value'], '"value" must be a number', { value: {} });
    expectOne(v.identify.validate({ did: 'd', timestamp: T0, info: [attr('boolean', 'true')] }), 'boolean.base', ['info', '0', 'value'], '"value" must be a boolean', {
      value: 'true',
    });
    expectOne(v.trackEvent.validate(event({ info: [{ name: 'a', type: 'string' }] })), 'any.required', ['info', '0', 'value'], '"value" is required');
  });

  test('one detail per problem field', () => {
    const found = v.trackEvent.validate(event({ name: '', did: '' }));
    assert.deepEqual(found, [
      expected('any.empty', ['did'], '"did" is not allowed to be empty', { value: '' }),
      expected('any.empty', ['name'], '"name" is not allowed to be empty', { value: '' }),
    ]);
  });

  test('order: declared keys in schema order, unknown keys after them in body order, items by index', () => {
    const found = v.trackEvent.validate({
      zz: 1,
      info: [attr('integer', 'x', 'b'), { name: '', value: 1, type: 'integer' }],
      timestamp: 'soon',
      aa: 2,
      name: 7,
    });
    assert.deepEqual(
      found?.map((d) => d.path.join('.')),
      ['did', 'name', 'timestamp', 'info.0.value', 'info.1.name', 'zz', 'aa'],
    );
    assert.deepEqual(
      v.trackEvent.validate({})?.map((d) => [d.type, d.path]),
      [
        ['any.required', ['did']],
        ['any.required', ['name']],
        ['any.required', ['timestamp']],
      ],
    );
  });

  test('at most 100 details: the first 100 in order', () => {
    const info = Array.from({ length: 256 }, (_, i) => attr('integer', `v${i}`, `n${i}`));
    const found = v.trackEvent.validate(event({ info, zz: 1 }));
    assert.equal(found?.length, 100);
    assert.deepEqual(
      found?.map((d) => d.path),
      info.slice(0, 100).map((_, i) => ['info', String(i), 'value']),
    );
    const products = Array.from({ length: 150 }, (_, i) => i);
    const mapping = buildValidators({ mappingMaxItems: 1000 }).mapping.validate({ products });
    assert.equal(mapping?.length, 100);
    assert.deepEqual(mapping?.at(-1), expected('string.base', ['products', '99'], '"99" must be a string', { value: 99 }));
  });
});

describe('toDetails', () => {
  test('sorts by schema order and honours max', () => {
    const body = { name: 5, zz: 1, timestamp: 'x' };
    const all = toDetails(TrackEventBody, body, Value.Errors(TrackEventBody, body), [], 100);
    assert.deepEqual(
      all.map((d) => d.path),
      [['did'], ['name'], ['timestamp'], ['zz']],
    );
    const two = toDetails(TrackEventBody, body, Value.Errors(TrackEventBody, body), [], 2);
    assert.deepEqual(two, all.slice(0, 2));
  });

  test('an extra detail takes the place of the schema error at the same path', () => {
    const body = { did: 'd', name: 'n', timestamp: T0, info: [attr('integer', {})] };
    const extra = [detail.base('number', ['info', '0', 'value'], {})];
    const found = toDetails(TrackEventBody, body, Value.Errors(TrackEventBody, body), extra, 100);
    assert.deepEqual(found, extra);
  });
});

describe('validateIdParam', () => {
  test('a valid id gives null', () => {
    assert.equal(validateIdParam(v, 'p-1'), null);
    assert.equal(validateIdParam(v, 'x'.repeat(50)), null);
  });

  test('51 characters: string.max at ["id"], key and label "id"', () => {
    const id = 'x'.repeat(51);
    assert.deepEqual(validateIdParam(v, id), [
      expected('string.max', ['id'], '"id" length must be less than or equal to 50 characters long', { value: id, limit: 50 }),
    ]);
  });

  test('empty: any.empty at ["id"]', () => {
    assert.deepEqual(validateIdParam(v, ''), [expected('any.empty', ['id'], '"id" is not allowed to be empty', { value: '' })]);
  });
});
