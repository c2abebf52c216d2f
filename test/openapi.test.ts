// /openapi.json as a code generator meets it (issue 12): a valid OpenAPI 3.1 document by a real
// validator (@seriousme/openapi-schema-validator), allowed values as `enum` arrays that are the
// very values validation enforces, every route with its error answers and the headers a client
// sends and gets (x-service-key, Idempotency-Key, x-request-id, Retry-After).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Validator } from '@seriousme/openapi-schema-validator';
import { ERRORS } from '../src/http/errors.ts';
import { launch, startServer, T0, WRITE_OPERATIONS, type TestServer } from './helpers/server.ts';

let server: TestServer;
let doc: any;
before(async () => {
  server = await startServer();
  doc = (await server.request('/openapi.json', undefined, { key: null })).body;
});
after(async () => {
  await server.kill();
});


test('the document is valid OpenAPI 3.1 according to a real validator', async () => {
  const result = await new Validator().validate(doc);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
  assert.equal(doc.openapi.startsWith('3.1'), true);
});

test('allowed values are enum arrays, and they are what validation enforces', async () => {
  const body = (path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;
  const platform = body('/mcrs_appl_v1').properties.info.properties.platform;
  const pushType = body('/mpush_token').properties.type;
  const status = body('/product').properties.status;
  const attributeType = body('/msv_cevt').properties.info.items.properties.type;
  assert.deepEqual(platform.enum, ['ANDROID', 'IOS']);
  assert.deepEqual(pushType.enum, ['fcm', 'apns']);
  assert.deepEqual(status.anyOf?.[0]?.enum ?? status.enum, ['inStock', 'outOfStock']);
  assert.deepEqual(attributeType.enum, ['integer', 'float', 'double', 'long', 'boolean', 'date', 'string']);
  // No list of allowed strings is left as a union of constants anywhere.
  const unionsOfConstants: string[] = [];
  JSON.stringify(doc, (key, value) => {
    if (key === 'anyOf' && Array.isArray(value) && value.every((branch) => typeof branch?.const === 'string')) unionsOfConstants.push(JSON.stringify(value));
    return value;
  });
  assert.deepEqual(unionsOfConstants, []);
  // The documented lists are the enforced ones.
  const { did } = await launch(server);
  for (const type of pushType.enum) assert.equal((await server.post('/mpush_token', { did, type, token: 't', timestamp: T0 })).status, 200);
  const refused = await server.post('/mpush_token', { did, type: 'sms', token: 't', timestamp: T0 });
  assert.equal(refused.status, 422);
  assert.deepEqual(refused.body.details[0].context.valids, pushType.enum);
  const productStatus = await server.post('/product', { id: 'p', name: 'n', status: 'gone' });
  assert.deepEqual(productStatus.body.details[0].context.valids, ['inStock', 'outOfStock']);
});

test('identify states that it needs clientCustomerId or info, as the server checks (object.missing)', () => {
  const body = doc.paths['/msv_cs_id'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(body.anyOf, [{ required: ['clientCustomerId'] }, { required: ['info'] }]);
  assert.equal(body['x-at-least-one-of'], undefined, 'the annotation is turned into anyOf, not left beside it');
});

test('every write route documents its headers and its answers, errors with their body', () => {
  assert.deepEqual(doc.components.securitySchemes.serviceKey, { type: 'apiKey', in: 'header', name: 'x-service-key', description: doc.components.securitySchemes.serviceKey.description });
  const errorTypes = doc.components.schemas.Error.properties.type.enum;
  assert.deepEqual([...errorTypes].sort(), Object.values(ERRORS).map((e) => e.type).sort());
  for (const [path, method] of WRITE_OPERATIONS) {
    const operation = doc.paths[path][method];
    const headers = operation.parameters.filter((p: any) => p.in === 'header').map((p: any) => p.name);
    assert.deepEqual(headers.sort(), ['Idempotency-Key', 'x-request-id'], `${path}`);
    for (const status of ['200', '400', '401', '422', '429', '500', '503']) {
      const answer = operation.responses[status];
      assert.ok(answer !== undefined, `${method} ${path} documents ${status}`);
      assert.ok(answer.headers?.['x-request-id'], `${method} ${path} ${status} carries x-request-id`);
      assert.ok(answer.content?.['application/json']?.schema, `${method} ${path} ${status} has a body schema`);
    }
    assert.ok(operation.responses['429'].headers['retry-after']);
    assert.ok(operation.responses['200'].headers['idempotent-replayed']);
    if (method === 'post') for (const status of ['413', '415']) assert.ok(operation.responses[status], `${path} documents ${status}`);
  }
  for (const path of ['/healthz', '/readyz', '/metrics', '/openapi.json']) {
    assert.deepEqual(doc.paths[path].get.security, []);
    assert.ok(doc.paths[path].get.responses['200'].headers['x-request-id']);
  }
});

test('POST /batch documents its answers and headers, and its maxItems is the BATCH_MAX_ITEMS the server enforces', async () => {
  // WRITE_OPERATIONS lists the 11 endpoints only, so the batch's entry was checked by no test (a review, 2026-11-29).
  const operation = doc.paths['/batch'].post;
  assert.deepEqual(operation.parameters.map((p: any) => p.name).sort(), ['Idempotency-Key', 'x-request-id']);
  for (const status of ['200', '400', '401', '413', '415', '422', '429', '503']) {
    assert.ok(operation.responses[status]?.headers?.['x-request-id'], `POST /batch documents ${status} with x-request-id`);
  }
  assert.ok(operation.responses['429'].headers['retry-after']);
  assert.ok(operation.responses['503'].headers['retry-after']);
  const small = await startServer({ env: { BATCH_MAX_ITEMS: '3' } });
  try {
    const smallDoc = (await small.request('/openapi.json', undefined, { key: null })).body;
    assert.equal(smallDoc.paths['/batch'].post.requestBody.content['application/json'].schema.properties.requests.maxItems, 3);
    const item = { method: 'POST', path: '/product', body: { id: 'p', name: 'n' } };
    assert.equal((await small.post('/batch', { requests: [item, item, item] })).status, 200);
    const over = await small.post('/batch', { requests: [item, item, item, item] });
    assert.equal(over.status, 422, over.text);
    assert.equal(over.body.details[0].type, 'array.max');
  } finally {
    await small.stop();
  }
});
