// Bodies the server must still judge (issue 12): JSON nested deeper than 64 levels anywhere gets
// 400, never 500, on every endpoint and on the worker path; a body over the limit is drained
// before the 413 so that a client sending it in one go reads the 413 instead of a reset.
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KEY_A, launch, parseResponses, startServer, T0, type TestServer } from './helpers/server.ts';
import { metric } from './helpers/wait.ts';

let server: TestServer;
let did: string;
before(async () => {
  server = await startServer();
  did = (await launch(server)).did;
});
after(async () => {
  await server.kill();
});

/** A value that makes `{"x": value}` nest exactly `depth` levels (the body object is level 1). */
const nested = (depth: number, leaf = '1') => '['.repeat(depth - 1) + leaf + ']'.repeat(depth - 1);

describe('JSON nested deeper than 64 levels', () => {
  const bodies = (deep: string): Array<[string, string]> => [
    ['/mcrs_appl_v1', `{"timestamp":${T0},"info":${deep}}`],
    ['/mcrs_appl_v1', `{"timestamp":${T0},"info":{"appVersionCode":1,"utmInfo":${deep}}}`],
    ['/msv_cevt', `{"did":"${did}","name":"e","timestamp":${T0},"info":${deep}}`],
    ['/msv_cevt', `{"did":"${did}","name":"e","timestamp":${T0},"info":[{"name":"n","type":"string","value":${deep}}]}`],
    ['/msv_cevt', `{"did":"${did}","name":"e","timestamp":${T0},"unknown":${deep}}`],
    ['/msv_cs_id', `{"did":"${did}","timestamp":${T0},"info":${deep}}`],
    ['/logout', `{"did":${deep}}`],
    ['/mpush_token', `{"did":"${did}","type":"fcm","token":${deep},"timestamp":${T0}}`],
    ['/product', `{"id":"p","name":"n","description":${deep}}`],
    ['/collection', `{"id":"c","name":${deep}}`],
    ['/collection/c/products/add', `{"products":${deep}}`],
    ['/collection/c/products/remove', `{"products":[${deep}]}`],
  ];

  for (const depth of [65, 10_000, 100_000]) {
    test(`${depth} levels, anywhere in any body: 400 MalformedJsonError, nothing applied`, async () => {
      const before = await metric(server, 'intake_journal_batch_records_sum');
      for (const [path, body] of bodies(nested(depth))) {
        const res = await server.request(path, undefined, { raw: body, headers: { 'content-type': 'application/json' } });
        assert.equal(res.status, 400, `${path}: ${res.text.slice(0, 200)}`);
        assert.deepEqual(res.body, { type: 'MalformedJsonError', message: 'request body nests deeper than 64 levels' });
      }
      assert.equal(await metric(server, 'intake_journal_batch_records_sum'), before);
    });
  }

  test('with a \\uD800 escape in the body (made well-formed as it is parsed): 400 as too deep, not "not valid JSON"', async () => {
    const res = await server.request('/product', undefined, { raw: `{"id":"p","name":"\\ud800","description":${nested(10_000)}}`, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 400, res.text.slice(0, 200));
    assert.deepEqual(res.body, { type: 'MalformedJsonError', message: 'request body nests deeper than 64 levels' });
  });

  test('64 levels is still judged: the usual 422', async () => {
    const res = await server.request('/product', undefined, { raw: `{"id":"p","name":"n","description":${nested(64)}}`, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 422);
    assert.equal((res.body as any).details[0].path.join('.'), 'description');
  });

  test('a deep mapping body on the worker path (gzip): 400 as well', async () => {
    const body = gzipSync(`{"products":${nested(1_000_000, '"p"')}}`);
    const res = await server.request('/collection/c/products/add', undefined, { raw: body, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } });
    assert.equal(res.status, 400, res.text);
    assert.equal((res.body as any).type, 'MalformedJsonError');
  });
});

describe('413 drain', () => {
  test('16 MiB + 1 bytes sent in one go to a mapping endpoint: the write completes, the client reads the 413', async () => {
    const size = 16 * 1024 * 1024 + 1;
    const result = await new Promise<{ writeError: string | null; data: string; closed: boolean }>((resolve) => {
      const socket = connect(server.port, '127.0.0.1');
      let data = '';
      let writeError: string | null = null;
      socket.on('data', (d) => (data += d.toString('latin1')));
      socket.on('error', (error) => (writeError ??= error.message));
      socket.on('close', () => resolve({ writeError, data, closed: true }));
      socket.on('connect', () => {
        socket.write(`POST /collection/c/products/add HTTP/1.1\r\nhost: x\r\nx-service-key: ${KEY_A}\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n`);
        socket.write(Buffer.alloc(size, 0x20), (error) => {
          if (error) writeError ??= error.message;
        });
      });
    });
    assert.equal(result.writeError, null, 'no EPIPE or reset while sending');
    const [res] = parseResponses(result.data);
    assert.equal(res?.status, 413, result.data.slice(0, 200));
    assert.equal(JSON.parse(res!.body).type, 'PayloadTooLargeError');
    assert.equal(result.closed, true, 'and then the connection is closed');
    assert.equal((await server.request('/healthz')).status, 200);
  });

  test('a body without a declared length growing past the limit: also drained, then 413', async () => {
    // 1 MiB limit, 3 MiB sent chunked in one go.
    const piece = Buffer.alloc(1024 * 1024, 0x20);
    const chunk = Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]);
    const result = await new Promise<{ writeError: string | null; data: string }>((resolve) => {
      const socket = connect(server.port, '127.0.0.1');
      let data = '';
      let writeError: string | null = null;
      socket.on('data', (d) => (data += d.toString('latin1')));
      socket.on('error', (error) => (writeError ??= error.message));
      socket.on('close', () => resolve({ writeError, data }));
      socket.on('connect', () => {
        socket.write(`POST /product HTTP/1.1\r\nhost: x\r\nx-service-key: ${KEY_A}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`);
        socket.write(Buffer.concat([chunk, chunk, chunk, Buffer.from('0\r\n\r\n')]));
      });
    });
    assert.equal(result.writeError, null);
    assert.equal(parseResponses(result.data)[0]?.status, 413);
  });
});
