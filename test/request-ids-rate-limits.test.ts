// CONTRACT.md §9, as an operator meets it: x-request-id on every response (the client's own when
// usable, else a fresh one) and in the log lines about the request; per-key rate limits with
// 429 RateLimitError and Retry-After, checked right after authentication, off by default.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KEY_A, KEY_B, launch, parseResponses, rawExchange, startServer, T0, type TestServer } from './helpers/server.ts';
import { metric } from './helpers/wait.ts';

const servers: TestServer[] = [];
after(async () => {
  for (const server of servers) await server.kill();
});

async function start(env: Record<string, string> = {}, serviceKeys?: string): Promise<TestServer> {
  const server = await startServer({ env, ...(serviceKeys === undefined ? {} : { serviceKeys }) });
  servers.push(server);
  return server;
}

describe('x-request-id', () => {
  test('every response carries one: the client\'s when usable, else a fresh one', async () => {
    const server = await start({ LOG_LEVEL: 'debug' });
    const { did } = await launch(server);
    const answers = [
      await server.post('/msv_cevt', { did, name: 'e', timestamp: T0 }),
      await server.post('/msv_cevt', { did, timestamp: T0 }),
      await server.post('/msv_cevt', { did, name: 'e', timestamp: T0 }, 'wrong-key'),
      await server.request('/nope', undefined, { key: null }),
      await server.request('/product', undefined, { method: 'GET' }),
      await server.request('/product', undefined, { raw: '{}', headers: { 'content-type': 'text/html' } }),
      await server.request('/product', undefined, { raw: 'not json', headers: { 'content-type': 'application/json' } }),
      await server.request('/healthz', undefined, { key: null }),
      await server.request('/readyz', undefined, { key: null }),
      await server.request('/metrics', undefined, { key: null }),
      await server.request('/openapi.json', undefined, { key: null }),
    ];
    const ids = answers.map((a) => a.headers.get('x-request-id'));
    assert.deepEqual(answers.map((a) => a.status), [200, 422, 401, 404, 405, 415, 400, 200, 200, 200, 200]);
    assert.ok(ids.every((id) => typeof id === 'string' && id.length > 0), JSON.stringify(ids));
    assert.equal(new Set(ids).size, ids.length, 'fresh ids are unique');

    const mine = 'trace-7f3a:2026-11-23/req#42 (retry 1)';
    const echoed = await server.request('/product', { id: 'p', name: 'n' }, { headers: { 'x-request-id': mine } });
    assert.equal(echoed.headers.get('x-request-id'), mine);
    // A 413 decided from the head alone, answered after the drain, carries it too.
    const { data } = await rawExchange(server.port, [`POST /product HTTP/1.1\r\nhost: x\r\nx-service-key: ${KEY_A}\r\nx-request-id: big-one\r\ncontent-type: application/json\r\ncontent-length: ${2 * 1024 * 1024}\r\n\r\n${' '.repeat(1024)}`], 6500);
    const [tooLarge] = parseResponses(data);
    assert.equal(tooLarge?.status, 413);
    assert.equal(tooLarge?.headers['x-request-id'], 'big-one');
    for (const unusable of ['x'.repeat(129)]) {
      const fresh = await server.request('/healthz', undefined, { key: null, headers: { 'x-request-id': unusable } });
      assert.notEqual(fresh.headers.get('x-request-id'), unusable);
      assert.ok(fresh.headers.get('x-request-id')!.length <= 128);
    }
    const { data: raw } = await rawExchange(server.port, ['GET /healthz HTTP/1.1\r\nhost: x\r\nx-request-id: a\x01b\r\n\r\n'], 300);
    const [withControl] = parseResponses(raw);
    assert.ok(withControl === undefined || withControl.headers['x-request-id'] !== 'a\x01b', 'a control character is never echoed');

    // Debug level: one line per request, with its id, route and status.
    const line = await server.waitForLog((l) => l.includes(`"reqId":"${mine}"`));
    const entry = JSON.parse(line);
    assert.equal(entry.route, 'product_upsert');
    assert.equal(entry.status, 200);
    assert.equal(entry.msg, 'request');
  });

  test('the log line about a failed request names its request id', async () => {
    // A write whose commit fails: the server runs under a file-size limit that the journal hits.
    const server = await startServer({ wrap: ['prlimit', '--fsize=600000'] });
    servers.push(server);
    const { did } = await launch(server);
    let failedId: string | null = null;
    for (let i = 0; i < 400 && failedId === null; i++) {
      const id = `fill-${i}`;
      const res = await server.request('/msv_cevt', { did, name: 'x'.repeat(100), timestamp: T0, info: Array.from({ length: 20 }, (_, j) => ({ name: `n${j}`, value: 'v'.repeat(90), type: 'string' })) }, { headers: { 'x-request-id': id } });
      if (res.status === 503) failedId = id;
    }
    assert.ok(failedId !== null, 'the journal failed');
    const line = await server.waitForLog((l) => l.includes('journal commit failed; answering 503') && l.includes(`"reqId":"${failedId}"`));
    assert.ok(line);
  });
});

describe('rate limits', () => {
  test('off by default: a burst of 200 writes from one key is all 200', async () => {
    const server = await start();
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => server.post('/product', { id: `p${i}`, name: 'n' })));
    assert.ok(answers.every((a) => a.status === 200));
  });

  test('per key: over the burst, 429 RateLimitError with Retry-After, nothing applied; other keys go on; tokens come back', async () => {
    const KEY_A2 = 'test-key-workspace-a-second-key-0123';
    const server = await start({ RATE_LIMIT_PER_SECOND: '2', RATE_LIMIT_BURST: '5' }, `ws-a:${KEY_A},ws-b:${KEY_B},ws-a:${KEY_A2}`);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await server.post('/product', { id: `burst-${i}`, name: 'n' })).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 200]);
    const before = await metric(server, 'intake_journal_batch_records_sum');
    const limited = await server.post('/product', { id: 'limited', name: 'n' });
    assert.equal(limited.status, 429);
    assert.deepEqual(Object.keys(limited.body as object), ['type', 'message']);
    assert.equal((limited.body as any).type, 'RateLimitError');
    const retryAfter = limited.headers.get('retry-after');
    assert.match(retryAfter ?? '', /^[1-9][0-9]*$/, 'whole seconds, at least 1');
    assert.equal(await metric(server, 'intake_journal_batch_records_sum'), before, 'nothing applied');
    // Checked right after authentication: before the body is even looked at...
    assert.equal((await server.request('/product', undefined, { raw: 'not json', headers: { 'content-type': 'application/json' } })).status, 429);
    // ...but after it: an unknown key is 401, not 429.
    assert.equal((await server.post('/product', { id: 'x', name: 'n' }, 'unknown-key')).status, 401);
    // Per key: another key, of this workspace or another, has its own bucket.
    assert.equal((await server.post('/product', { id: 'other-key', name: 'n' }, KEY_A2)).status, 200);
    assert.equal((await server.post('/product', { id: 'other-ws', name: 'n' }, KEY_B)).status, 200);
    assert.equal(await metric(server, 'intake_rate_limited_total'), 2);
    // /metrics needs no key, so it names no workspace (CONTRACT.md §3): no label, no name.
    const text = (await server.request('/metrics', undefined, { key: null })).text;
    assert.ok(!text.includes('workspace='), 'no series is labelled by workspace');
    assert.ok(!/ws-a|ws-b/.test(text), 'no workspace name appears in /metrics');
    // After Retry-After seconds there is a token again.
    await new Promise((resolve) => setTimeout(resolve, Number(retryAfter) * 1000));
    assert.equal((await server.post('/product', { id: 'later', name: 'n' })).status, 200);
  });
});
