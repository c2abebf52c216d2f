// Transport-level behaviour of CONTRACT.md §2 (HTTP/1.1, content types, encodings, size limits,
// malformed bodies, routes), the check order of §4, and the ops endpoints of §9. Everything is
// checked against a real server process, over fetch and over raw sockets.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import {
  exportLines,
  KEY_A,
  launch,
  parseResponses,
  rawExchange,
  startServer,
  T0,
  WRITE_OPERATIONS,
  type Response,
  type TestServer,
} from './helpers/server.ts';

const BODY_LIMIT = 4096;
const MAPPING_LIMIT = 8192;
const MAPPING_MAX_ITEMS = 1000;
const LIMIT_ENV = {
  BODY_LIMIT_BYTES: String(BODY_LIMIT),
  MAPPING_BODY_LIMIT_BYTES: String(MAPPING_LIMIT),
  MAPPING_MAX_ITEMS: String(MAPPING_MAX_ITEMS),
};

type RawResponse = { status: number; headers: Record<string, string>; body: string };

// ---------------------------------------------------------------------------------------------
// Assertions

const JSON_CONTENT_TYPE = /^application\/json(\s*;.*)?$/i;

function assertJsonContentType(contentType: string | null | undefined, context: string): void {
  assert.ok(contentType !== null && contentType !== undefined, `${context}: no content-type`);
  assert.match(contentType, JSON_CONTENT_TYPE, `${context}: content-type ${contentType}`);
}

/** `{"type": "<kind>Error", "message": <non-empty string>}` and nothing else. */
function assertErrorBody(text: string, kind: string, context: string): void {
  let body: unknown;
  assert.doesNotThrow(() => (body = JSON.parse(text)), `${context}: body is not JSON: ${text}`);
  assert.ok(typeof body === 'object' && body !== null && !Array.isArray(body), `${context}: body is not an object: ${text}`);
  const record = body as Record<string, unknown>;
  assert.deepEqual(Object.keys(record).sort(), ['message', 'type'], `${context}: ${text}`);
  assert.equal(record.type, `${kind}Error`, `${context}: ${text}`);
  assert.equal(typeof record.message, 'string', `${context}: ${text}`);
  assert.notEqual(record.message, '', `${context}: empty message`);
}

function assertError(res: Response, status: number, kind: string, context = ''): void {
  assert.equal(res.status, status, `${context}: expected ${status}, got ${res.status} ${res.text}`);
  assertJsonContentType(res.headers.get('content-type'), context);
  assertErrorBody(res.text, kind, context);
}

function assertRawError(res: RawResponse | undefined, status: number, kind: string, context = ''): void {
  assert.ok(res !== undefined, `${context}: no response`);
  assert.equal(res.status, status, `${context}: expected ${status}, got ${res.status} ${res.body}`);
  assertJsonContentType(res.headers['content-type'], context);
  assertErrorBody(res.body, kind, context);
}

function assertSuccess(res: Response, context = ''): void {
  assert.equal(res.status, 200, `${context}: expected 200, got ${res.status} ${res.text}`);
  assertJsonContentType(res.headers.get('content-type'), context);
  assert.deepEqual(res.body, { success: true }, context);
}

function assertRawSuccess(res: RawResponse | undefined, context = ''): void {
  assert.ok(res !== undefined, `${context}: no response`);
  assert.equal(res.status, 200, `${context}: expected 200, got ${res.status} ${res.body}`);
  assertJsonContentType(res.headers['content-type'], context);
  assert.deepEqual(JSON.parse(res.body), { success: true }, context);
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP

function rawRequest(method: string, path: string, options: { key?: string | null; headers?: Record<string, string>; body?: string | Buffer; contentLength?: boolean } = {}): Buffer {
  const lines = [`${method} ${path} HTTP/1.1`, 'host: 127.0.0.1'];
  const key = options.key === undefined ? KEY_A : options.key;
  if (key !== null) lines.push(`x-service-key: ${key}`);
  for (const [name, value] of Object.entries(options.headers ?? {})) lines.push(`${name}: ${value}`);
  const body = options.body === undefined ? Buffer.alloc(0) : Buffer.from(options.body);
  if (options.body !== undefined && options.contentLength !== false) lines.push(`content-length: ${body.length}`);
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n'), body]);
}

function jsonPost(path: string, body: unknown, key: string | null = KEY_A): Buffer {
  return rawRequest('POST', path, { key, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** Complete responses in `data` (the last one only when its whole body has arrived). */
function completeResponses(data: string): RawResponse[] {
  const parsed = parseResponses(data);
  const last = parsed[parsed.length - 1];
  if (last !== undefined && Buffer.byteLength(last.body) < Number(last.headers['content-length'] ?? 0)) parsed.pop();
  return parsed;
}

/** One raw keep-alive connection: write bytes, wait for a number of complete responses. */
class RawConnection {
  private data = '';
  closed = false;
  private waiters: Array<() => void> = [];

  private constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.data += chunk;
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {
      // A reset shows up as 'close' right after.
    });
  }

  static open(port: number): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => resolve(new RawConnection(socket)));
      socket.once('error', reject);
    });
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  write(bytes: string | Buffer): void {
    this.socket.write(bytes);
  }

  responses(): RawResponse[] {
    return completeResponses(this.data);
  }

  /** Resolves with every complete response so far once there are `count`, or on close or timeout. */
  async waitFor(count: number, timeoutMs = 5000): Promise<RawResponse[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.responses().length < count && !this.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.responses();
  }

  /** Resolves once the server closed the connection (true) or after `timeoutMs` (false). */
  async waitClosed(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.closed;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// Fixtures

let seq = 0;
const unique = (prefix: string) => `${prefix}-${process.pid}-${++seq}`;

/** `text` followed by spaces up to exactly `bytes` bytes (JSON allows trailing whitespace). */
function padTo(text: string, bytes: number): string {
  const length = Buffer.byteLength(text);
  assert.ok(length <= bytes, `${text} is already longer than ${bytes}`);
  return text + ' '.repeat(bytes - length);
}

describe('transport (group commit, small limits)', () => {
  let server: TestServer;
  /** A collection that exists, used to probe whether a product exists (mapping add). */
  let probeCollection: string;

  before(async () => {
    server = await startServer({ env: LIMIT_ENV });
    probeCollection = unique('probe-coll');
    assertSuccess(await server.post('/collection', { id: probeCollection, name: 'probe' }), 'create probe collection');
  });

  after(async () => {
    assert.equal(await server.stop(), 0, 'server exits 0 on SIGTERM');
  });

  async function createProduct(id: string): Promise<void> {
    assertSuccess(await server.post('/product', { id, name: 'a product' }), `create product ${id}`);
  }

  /** The product exists: adding it to a collection is accepted. */
  async function assertProductExists(id: string, context: string): Promise<void> {
    assertSuccess(await server.post(`/collection/${encodeURIComponent(probeCollection)}/products/add`, { products: [id] }), `${context}: ${id} exists`);
  }

  /** The product does not exist: adding it is 422 product.notFound. */
  async function assertProductMissing(id: string, context: string): Promise<void> {
    const res = await server.post(`/collection/${encodeURIComponent(probeCollection)}/products/add`, { products: [id] });
    assert.equal(res.status, 422, `${context}: ${res.text}`);
    assertJsonContentType(res.headers.get('content-type'), context);
    assert.equal(res.body.type, 'ValidationError');
    assert.deepEqual(
      res.body.details.map((d: { type: string; path: string[] }) => [d.type, d.path]),
      [['product.notFound', ['products', '0']]],
      `${context}: ${res.text}`,
    );
  }

  /** The server still serves: a fresh write on a fresh connection gets 200 and takes effect. */
  async function assertStillServes(context: string): Promise<void> {
    const id = unique('alive');
    const conn = await RawConnection.open(server.port);
    try {
      conn.write(jsonPost('/product', { id, name: 'alive' }));
      const [res] = await conn.waitFor(1);
      assertRawSuccess(res, `${context}: a new request after it`);
    } finally {
      conn.destroy();
    }
    await assertProductExists(id, context);
    const health = await server.request('/healthz', undefined, { key: null });
    assert.equal(health.status, 200, `${context}: /healthz`);
  }

  // -------------------------------------------------------------------------------------------
  describe('400 MalformedJsonError', () => {
    const cases: Array<[string, string]> = [
      ['empty body', ''],
      ['invalid JSON', '{"id": "p", "name": '],
      ['not JSON at all', 'hello'],
      ['top-level array', '[{"id":"p","name":"n"}]'],
      ['top-level null', 'null'],
      ['top-level number', '42'],
      ['top-level string', '"a string"'],
      ['top-level boolean', 'true'],
    ];
    for (const [name, raw] of cases) {
      test(name, async () => {
        const res = await server.request('/product', undefined, { raw, headers: { 'content-type': 'application/json' } });
        assertError(res, 400, 'MalformedJson', name);
      });
    }

    test('the same on every body endpoint (empty body)', async () => {
      for (const path of ['/mcrs_appl_v1', '/msv_cevt', '/msv_cs_id', '/logout', '/mpush_token', '/product', '/collection', '/collection/c/products/add', '/collection/c/products/remove']) {
        const res = await server.request(path, undefined, { raw: '', headers: { 'content-type': 'application/json' } });
        assertError(res, 400, 'MalformedJson', path);
      }
    });

    test('a POST with no body at all (content-length 0, or none) is an empty body', async () => {
      const conn = await RawConnection.open(server.port);
      try {
        conn.write(rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'content-length': '0' } }));
        const [first] = await conn.waitFor(1);
        assertRawError(first, 400, 'MalformedJson', 'content-length 0');
        conn.write(rawRequest('POST', '/product', { headers: { 'content-type': 'application/json' } }));
        const [, second] = await conn.waitFor(2);
        assertRawError(second, 400, 'MalformedJson', 'no content-length, no body');
        assert.equal(conn.closed, false);
      } finally {
        conn.destroy();
      }
    });

    test('content-encoding gzip with a body that is not gzip', async () => {
      const res = await server.request('/product', undefined, {
        raw: JSON.stringify({ id: unique('p'), name: 'n' }),
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      });
      assertError(res, 400, 'MalformedJson', 'gzip header, plain body');
    });

    test('a gzip body that inflates to something that is not an object', async () => {
      const res = await server.request('/product', undefined, {
        raw: gzipSync(Buffer.from('[1,2,3]')),
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      });
      assertError(res, 400, 'MalformedJson', 'gzip of an array');
    });

    test('nothing is applied by a malformed body', async () => {
      const id = unique('malformed');
      const res = await server.request('/product', undefined, { raw: `{"id":"${id}","name":"n"} trailing`, headers: { 'content-type': 'application/json' } });
      assertError(res, 400, 'MalformedJson', 'trailing garbage');
      await assertProductMissing(id, 'after a malformed body');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('413 PayloadTooLargeError', () => {
    test('(a) a declared content-length over the limit, and no body: 413 once the drain gives up (5 s), connection closed', async () => {
      const head = rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'content-length': String(BODY_LIMIT + 1) } });
      const started = Date.now();
      const { data, closed } = await rawExchange(server.port, [head], 7000);
      assert.ok(Date.now() - started >= 4500, 'the server waited for the body it was told about');
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 413, 'PayloadTooLarge', 'declared length');
      assert.equal(closed, true, 'the connection is closed after a 413');
      await assertStillServes('(a)');
    });

    test('(a) a declared content-length over the limit with the whole body sent: 413, closed', async () => {
      const body = padTo(JSON.stringify({ id: unique('p'), name: 'n' }), BODY_LIMIT + 1000);
      const { data, closed } = await rawExchange(server.port, [rawRequest('POST', '/product', { headers: { 'content-type': 'application/json' }, body })], 2000);
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 413, 'PayloadTooLarge', 'declared length, body sent');
      assert.equal(closed, true, 'the connection is closed after a 413');
      await assertStillServes('(a) with body');
    });

    test('(b) a chunked body (no content-length) growing past the limit: 413, closed', async () => {
      const head = rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } });
      const piece = '{"id":"x","name":"n"}' + ' '.repeat(1500 - 21);
      const chunk = `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;
      // 3 × 1500 = 4500 > 4096; the terminating 0-chunk is never sent: the server drains for at
      // most 5 s (CONTRACT §2), then answers and closes.
      const { data, closed } = await rawExchange(server.port, [head, chunk, chunk, chunk], 7000, 50);
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 413, 'PayloadTooLarge', 'chunked');
      assert.equal(closed, true, 'the connection is closed after a 413');
      await assertStillServes('(b)');
    });

    test('(b) a chunked body within the limit is accepted', async () => {
      const id = unique('chunked');
      const head = rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } });
      const json = JSON.stringify({ id, name: 'n' });
      const half = Math.floor(json.length / 2);
      const chunks = [json.slice(0, half), json.slice(half)].map((part) => `${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`);
      const conn = await RawConnection.open(server.port);
      try {
        conn.write(head);
        for (const chunk of chunks) {
          conn.write(chunk);
          await sleep(30);
        }
        conn.write('0\r\n\r\n');
        const [res] = await conn.waitFor(1);
        assertRawSuccess(res, 'chunked within the limit');
      } finally {
        conn.destroy();
      }
      await assertProductExists(id, 'chunked write');
    });

    test('(c) a gzip body small on the wire whose inflated size exceeds the limit: 413, closed', async () => {
      const inflated = padTo(JSON.stringify({ id: unique('p'), name: 'n' }), BODY_LIMIT * 4);
      const gz = gzipSync(Buffer.from(inflated));
      assert.ok(gz.length < 200, `gzip is small on the wire (${gz.length} bytes)`);
      const request = rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: gz });
      const { data, closed } = await rawExchange(server.port, [request], 2000);
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 413, 'PayloadTooLarge', 'inflated gzip');
      assert.equal(closed, true, 'the connection is closed after a 413');
      await assertStillServes('(c)');
    });

    test('(c) gzip: inflated exactly the limit is accepted, one byte more is 413', async () => {
      const id = unique('gz-exact');
      const exact = padTo(JSON.stringify({ id, name: 'n' }), BODY_LIMIT);
      const headers = { 'content-type': 'application/json', 'content-encoding': 'gzip' };
      assertSuccess(await server.request('/product', undefined, { raw: gzipSync(Buffer.from(exact)), headers }), 'inflated == limit');
      await assertProductExists(id, 'inflated == limit');
      const over = padTo(JSON.stringify({ id: unique('gz-over'), name: 'n' }), BODY_LIMIT + 1);
      assertError(await server.request('/product', undefined, { raw: gzipSync(Buffer.from(over)), headers }), 413, 'PayloadTooLarge', 'inflated == limit + 1');
      await assertStillServes('(c) exact');
    });

    test('(d) a body of exactly the limit is accepted; limit + 1 is 413', async () => {
      const id = unique('exact');
      const exact = padTo(JSON.stringify({ id, name: 'n' }), BODY_LIMIT);
      assert.equal(Buffer.byteLength(exact), BODY_LIMIT);
      assertSuccess(await server.request('/product', undefined, { raw: exact, headers: { 'content-type': 'application/json' } }), 'body == limit');
      await assertProductExists(id, 'body == limit');

      const overId = unique('over');
      const over = padTo(JSON.stringify({ id: overId, name: 'n' }), BODY_LIMIT + 1);
      const { data, closed } = await rawExchange(server.port, [rawRequest('POST', '/product', { headers: { 'content-type': 'application/json' }, body: over })], 2000);
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 413, 'PayloadTooLarge', 'body == limit + 1');
      assert.equal(closed, true, 'the connection is closed after a 413');
      await assertProductMissing(overId, 'a 413 applies nothing');
      await assertStillServes('(d)');
    });

    test('(d) exactly the limit in a chunked body is accepted too', async () => {
      const id = unique('exact-chunked');
      const exact = padTo(JSON.stringify({ id, name: 'n' }), BODY_LIMIT);
      const parts = [exact.slice(0, 2000), exact.slice(2000)];
      const conn = await RawConnection.open(server.port);
      try {
        conn.write(rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }));
        for (const part of parts) {
          conn.write(`${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`);
          await sleep(30);
        }
        conn.write('0\r\n\r\n');
        const [res] = await conn.waitFor(1);
        assertRawSuccess(res, 'chunked body == limit');
      } finally {
        conn.destroy();
      }
      await assertProductExists(id, 'chunked body == limit');
    });

    test('(e) the mapping endpoints use the mapping limit', async () => {
      const collection = unique('coll-limit');
      const product = unique('prod-limit');
      assertSuccess(await server.post('/collection', { id: collection, name: 'c' }), 'collection');
      await createProduct(product);
      const path = `/collection/${collection}/products`;
      const between = padTo(JSON.stringify({ products: [product] }), BODY_LIMIT + 2000);
      const json = { 'content-type': 'application/json' };

      assertSuccess(await server.request(`${path}/add`, undefined, { raw: between, headers: json }), 'add, between the limits');
      assertSuccess(await server.request(`${path}/remove`, undefined, { raw: between, headers: json }), 'remove, between the limits');
      const exact = padTo(JSON.stringify({ products: [product] }), MAPPING_LIMIT);
      assertSuccess(await server.request(`${path}/add`, undefined, { raw: exact, headers: json }), 'add, exactly the mapping limit');

      // The same size on /product is over its limit.
      const productBetween = padTo(JSON.stringify({ id: unique('p'), name: 'n' }), BODY_LIMIT + 2000);
      assertError(await server.request('/product', undefined, { raw: productBetween, headers: json }), 413, 'PayloadTooLarge', '/product between the limits');
      await assertStillServes('(e) /product');

      // Over the mapping limit: 413 and closed, on both mapping endpoints.
      for (const op of ['add', 'remove']) {
        const over = padTo(JSON.stringify({ products: [product] }), MAPPING_LIMIT + 1);
        const { data, closed } = await rawExchange(server.port, [rawRequest('POST', `${path}/${op}`, { headers: json, body: over })], 2000);
        const responses = parseResponses(data);
        assert.equal(responses.length, 1, data);
        assertRawError(responses[0], 413, 'PayloadTooLarge', `${op} over the mapping limit`);
        assert.equal(closed, true, 'the connection is closed after a 413');
        await assertStillServes(`(e) ${op}`);
      }

      // A gzip mapping body inflating to between the limits is accepted too.
      const gz = gzipSync(Buffer.from(between));
      assertSuccess(await server.request(`${path}/add`, undefined, { raw: gz, headers: { ...json, 'content-encoding': 'gzip' } }), 'gzip add, between the limits');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('415 UnsupportedMediaTypeError and accepted content types', () => {
    for (const contentType of ['application/x-www-form-urlencoded', 'text/xml', 'multipart/form-data; boundary=x', 'application/xml']) {
      test(`content-type ${contentType}`, async () => {
        const id = unique('ct');
        const res = await server.request('/product', undefined, { raw: JSON.stringify({ id, name: 'n' }), headers: { 'content-type': contentType } });
        assertError(res, 415, 'UnsupportedMediaType', contentType);
        await assertProductMissing(id, `${contentType} applies nothing`);
      });
    }

    const encodings: Array<[string, (b: Buffer) => Buffer]> = [
      ['br', (b) => brotliCompressSync(b)],
      ['deflate', (b) => deflateSync(b)],
    ];
    for (const [encoding, encode] of encodings) {
      test(`content-encoding ${encoding}`, async () => {
        const id = unique('ce');
        const res = await server.request('/product', undefined, {
          raw: encode(Buffer.from(JSON.stringify({ id, name: 'n' }))),
          headers: { 'content-type': 'application/json', 'content-encoding': encoding },
        });
        assertError(res, 415, 'UnsupportedMediaType', encoding);
        await assertProductMissing(id, `${encoding} applies nothing`);
      });
    }

    for (const contentType of ['application/json', 'application/json; charset=utf-8', 'text/plain', 'text/plain; charset=utf-8']) {
      test(`content-type ${contentType} is accepted`, async () => {
        const id = unique('ok-ct');
        const res = await server.request('/product', undefined, { raw: JSON.stringify({ id, name: 'n' }), headers: { 'content-type': contentType } });
        assertSuccess(res, contentType);
        await assertProductExists(id, contentType);
      });
    }

    test('no content-type at all is accepted', async () => {
      const id = unique('no-ct');
      const conn = await RawConnection.open(server.port);
      try {
        conn.write(rawRequest('POST', '/product', { body: JSON.stringify({ id, name: 'n' }) }));
        const [res] = await conn.waitFor(1);
        assertRawSuccess(res, 'no content-type');
      } finally {
        conn.destroy();
      }
      await assertProductExists(id, 'no content-type');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('404 and 405', () => {
    test('unknown paths are 404 NotFoundError', async () => {
      for (const [method, path] of [['GET', '/nope'], ['POST', '/nope'], ['GET', '/'], ['POST', '/products'], ['POST', '/msv_cevt/extra'], ['DELETE', '/collection/x/products']]) {
        const res = await server.request(path!, undefined, { method: method!, raw: method === 'GET' ? undefined : '{}', headers: { 'content-type': 'application/json' } });
        assertError(res, 404, 'NotFound', `${method} ${path}`);
      }
    });

    test('an empty :id does not match the route: 404', async () => {
      assertError(await server.request('/product/', undefined, { method: 'DELETE' }), 404, 'NotFound', 'DELETE /product/');
      assertError(await server.request('/collection/', undefined, { method: 'DELETE' }), 404, 'NotFound', 'DELETE /collection/');
    });

    const cases: Array<[string, string, string]> = [
      ['GET', '/msv_cevt', 'POST'],
      ['POST', '/product/x', 'DELETE'],
      ['DELETE', '/product', 'POST'],
      ['POST', '/healthz', 'GET'],
      ['PUT', '/collection', 'POST'],
      ['GET', '/collection/x/products/add', 'POST'],
      ['DELETE', '/metrics', 'GET'],
    ];
    for (const [method, path, allow] of cases) {
      test(`${method} ${path} is 405 with allow: ${allow}`, async () => {
        const res = await server.request(path, undefined, { method, raw: method === 'GET' ? undefined : '{}', headers: { 'content-type': 'application/json' } });
        assertError(res, 405, 'MethodNotAllowed', `${method} ${path}`);
        assert.equal(res.headers.get('allow'), allow);
      });
    }
  });

  // -------------------------------------------------------------------------------------------
  describe('check order (CONTRACT §4)', () => {
    test('route before authentication: 404 and 405 without a key', async () => {
      assertError(await server.request('/nope', { id: 'p' }, { key: null }), 404, 'NotFound', 'unknown path, no key');
      const res = await server.request('/msv_cevt', undefined, { key: null });
      assertError(res, 405, 'MethodNotAllowed', 'GET /msv_cevt, no key');
      assert.equal(res.headers.get('allow'), 'POST');
    });

    test('no key + bad content-type: 401 (authentication before 415)', async () => {
      const res = await server.request('/product', undefined, { key: null, raw: JSON.stringify({ id: 'p', name: 'n' }), headers: { 'content-type': 'text/xml' } });
      assertError(res, 401, 'Authentication', 'no key, text/xml');
      const br = await server.request('/product', undefined, { key: null, raw: '{}', headers: { 'content-type': 'application/json', 'content-encoding': 'br' } });
      assertError(br, 401, 'Authentication', 'no key, br');
    });

    test('wrong content-type + invalid JSON: 415 (content type before JSON)', async () => {
      const res = await server.request('/product', undefined, { raw: '{not json', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      assertError(res, 415, 'UnsupportedMediaType', 'form + invalid JSON');
    });

    test('wrong content-type + oversized: 415 (content type before size)', async () => {
      const res = await server.request('/product', undefined, { raw: 'x'.repeat(BODY_LIMIT * 2), headers: { 'content-type': 'text/xml' } });
      assertError(res, 415, 'UnsupportedMediaType', 'text/xml + oversized');
    });

    test('oversized + no key: 401 (authentication before size)', async () => {
      const res = await server.request('/product', undefined, { key: null, raw: padTo('{"id":"p","name":"n"}', BODY_LIMIT + 100), headers: { 'content-type': 'application/json' } });
      assertError(res, 401, 'Authentication', 'oversized, no key');
      // From the head alone too (a declared length over the limit, no body sent).
      const head = rawRequest('POST', '/product', { key: null, headers: { 'content-type': 'application/json', 'content-length': String(BODY_LIMIT * 10) } });
      const { data } = await rawExchange(server.port, [head], 500);
      const responses = parseResponses(data);
      assert.equal(responses.length, 1, data);
      assertRawError(responses[0], 401, 'Authentication', 'declared oversized, no key');
    });

    test('oversized + invalid JSON: 413 (size before JSON)', async () => {
      const res = await server.request('/product', undefined, { raw: '{'.repeat(BODY_LIMIT + 1), headers: { 'content-type': 'application/json' } });
      assertError(res, 413, 'PayloadTooLarge', 'oversized invalid JSON');
      await assertStillServes('oversized invalid JSON');
    });

    test('wrong key + bad content-type: 401', async () => {
      const res = await server.request('/product', undefined, { key: 'not-a-key', raw: 'a=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      assertError(res, 401, 'Authentication', 'unknown key');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('gzip request bodies', () => {
    test('a gzip-compressed product upsert is accepted and takes effect', async () => {
      const id = unique('gz');
      const body = gzipSync(Buffer.from(JSON.stringify({ id, name: 'gzipped', description: 'd'.repeat(500) })));
      const res = await server.request('/product', undefined, { raw: body, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } });
      assertSuccess(res, 'gzip upsert');
      await assertProductExists(id, 'gzip upsert');
      const [record] = exportLines(server.dataDir, 'products').filter((p: { id: string }) => p.id === id);
      assert.ok(record !== undefined, 'the product is in the state export');
      assert.equal(record.name, 'gzipped');
      assert.equal(record.description, 'd'.repeat(500));
    });

    test('a gzip-compressed mapping add is accepted', async () => {
      const collection = unique('gz-coll');
      const product = unique('gz-prod');
      assertSuccess(await server.post('/collection', { id: collection, name: 'c' }));
      await createProduct(product);
      const body = gzipSync(Buffer.from(JSON.stringify({ products: [product] })));
      const res = await server.request(`/collection/${collection}/products/add`, undefined, { raw: body, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } });
      assertSuccess(res, 'gzip mapping add');
      const [state] = exportLines(server.dataDir, 'collections').filter((c: { id: string }) => c.id === collection);
      assert.ok(state !== undefined);
      assert.deepEqual(state.products, [product]);
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('URL-encoded :id', () => {
    test('DELETE /product/a%2Fb deletes the product "a/b"', async () => {
      const id = `a/b-${process.pid}`;
      await createProduct(id);
      await assertProductExists(id, 'before the delete');
      const res = await server.request(`/product/${encodeURIComponent(id)}`, undefined, { method: 'DELETE' });
      assert.ok(encodeURIComponent(id).includes('%2F'));
      assertSuccess(res, 'DELETE a%2Fb');
      await assertProductMissing(id, 'after the delete');
    });

    test('DELETE /product/a%2Fb answers 200 even when it does not exist', async () => {
      assertSuccess(await server.request('/product/a%2Fb', undefined, { method: 'DELETE' }), 'DELETE /product/a%2Fb');
    });

    test('a malformed escape sequence is 404', async () => {
      assertError(await server.request('/product/%E0%A4%A', undefined, { method: 'DELETE' }), 404, 'NotFound', 'DELETE /product/%E0%A4%A');
      assertError(await server.request('/collection/%E0%A4%A', undefined, { method: 'DELETE' }), 404, 'NotFound', 'DELETE /collection/%E0%A4%A');
      assertError(await server.post('/collection/%E0%A4%A/products/add', { products: ['p'] }), 404, 'NotFound', 'add on /collection/%E0%A4%A');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('keep-alive and pipelining', () => {
    test('sequential requests on one connection are all answered', async () => {
      const id = unique('ka');
      const conn = await RawConnection.open(server.port);
      try {
        const steps: Array<[Buffer, (res: RawResponse | undefined) => void]> = [
          [rawRequest('GET', '/healthz', { key: null }), (res) => assert.deepEqual([res?.status, res?.body], [200, '{"status":"ok"}'])],
          [jsonPost('/product', { id, name: 'n' }), (res) => assertRawSuccess(res, 'upsert')],
          [jsonPost('/product', { id: '' }), (res) => assert.equal(res?.status, 422)],
          [rawRequest('GET', '/nope'), (res) => assertRawError(res, 404, 'NotFound')],
          [jsonPost('/product', { id, name: 'n' }, null), (res) => assertRawError(res, 401, 'Authentication')],
          [rawRequest('DELETE', `/product/${id}`), (res) => assertRawSuccess(res, 'delete')],
          [jsonPost('/product', { id, name: 'again' }), (res) => assertRawSuccess(res, 'upsert again')],
        ];
        for (let i = 0; i < steps.length; i++) {
          const [request, check] = steps[i]!;
          conn.write(request);
          const responses = await conn.waitFor(i + 1);
          assert.equal(responses.length, i + 1, `response ${i + 1} on the same connection`);
          check(responses[i]);
          assert.equal(conn.closed, false, `still open after request ${i + 1}`);
        }
      } finally {
        conn.destroy();
      }
      await assertProductExists(id, 'keep-alive writes');
    });

    test('(1) requests answered without the journal, pipelined in one write, are answered in order', async () => {
      const pipelined = Buffer.concat([
        rawRequest('GET', '/healthz', { key: null }),
        rawRequest('GET', '/nope'),
        jsonPost('/msv_cevt', { did: 'x', name: 'e', timestamp: T0 }, null),
        jsonPost('/msv_cevt', {}),
        rawRequest('POST', '/healthz', { key: null }),
        rawRequest('GET', '/healthz', { key: null }),
      ]);
      const conn = await RawConnection.open(server.port);
      try {
        conn.write(pipelined);
        const responses = await conn.waitFor(6);
        assert.deepEqual(responses.map((r) => r.status), [200, 404, 401, 422, 405, 200]);
        assert.deepEqual(JSON.parse(responses[0]!.body), { status: 'ok' });
        assertRawError(responses[1], 404, 'NotFound');
        assertRawError(responses[2], 401, 'Authentication');
        const invalid = JSON.parse(responses[3]!.body) as { type: string; details: Array<{ type: string; path: string[] }> };
        assert.equal(invalid.type, 'ValidationError');
        assert.deepEqual(invalid.details.map((d) => [d.type, d.path.join('.')]).sort(), [['any.required', 'did'], ['any.required', 'name'], ['any.required', 'timestamp']]);
        assertRawError(responses[4], 405, 'MethodNotAllowed');
        assert.equal(responses[4]!.headers.allow, 'GET');
        assert.deepEqual(JSON.parse(responses[5]!.body), { status: 'ok' });
        for (const res of responses) assertJsonContentType(res.headers['content-type'], `pipelined ${res.status}`);
        assert.equal(conn.closed, false, 'the connection stays open');
      } finally {
        conn.destroy();
      }
    });

    // With edge threads such a 422 comes from the state thread after the handler returned, and
    // uWS closes a connection pipelined behind it (README, Edge threads): one thread only.
    const edgeThreads = Number(process.env.HTTP_THREADS ?? '1') > 1;
    test('(2) a 422 judged against the state (unknown did, missing name on create, reused key), pipelined while other writes are in their commit, is answered at once and in order', { skip: edgeThreads && 'HTTP_THREADS > 1: answered from the state thread' }, async () => {
      const keyed = unique('reused');
      assertSuccess(await server.request('/product', { id: keyed, name: 'first' }, { headers: { 'idempotency-key': keyed } }), 'the first keyed write');
      const pipelined = Buffer.concat([
        jsonPost('/logout', { did: 'no-such-device' }),
        jsonPost('/product', { id: unique('never-created') }),
        rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'idempotency-key': keyed }, body: JSON.stringify({ id: keyed, name: 'other' }) }),
        rawRequest('GET', '/healthz', { key: null }),
      ]);
      // Twenty rounds, each beside writes from other connections that are in their commit while
      // the 422s are judged (a 422 that waited for them closed the connection, unanswered).
      for (let round = 0; round < 20; round++) {
        const busy = Array.from({ length: 4 }, (_, i) => server.post('/product', { id: unique(`busy-${round}-${i}`), name: 'n' }));
        const conn = await RawConnection.open(server.port);
        try {
          conn.write(pipelined);
          const responses = await conn.waitFor(4);
          assert.deepEqual(responses.map((r) => r.status), [422, 422, 422, 200], `round ${round}`);
          const detailTypes = responses.slice(0, 3).map((r) => (JSON.parse(r.body) as { details: Array<{ type: string }> }).details.map((d) => d.type).join());
          assert.deepEqual(detailTypes, ['device.notFound', 'any.required', 'idempotency.reused']);
          assert.equal(conn.closed, false, 'the connection stays open');
        } finally {
          conn.destroy();
        }
        for (const res of await Promise.all(busy)) assertSuccess(res, 'a write beside the pipeline');
      }
    });

    test('(3) group commit: a request pipelined behind a write waiting for its fsync closes the connection; nothing is half-applied', async () => {
      const { did } = await launch(server);
      const bodies = [
        { did, name: 'piped-0', timestamp: T0 - 1 },
        { did, name: 'piped-1', timestamp: T0, info: [{ name: 'n', type: 'string', value: 'one' }] },
        { did, name: 'piped-2', timestamp: T0 + 1, info: [{ name: 'n', type: 'integer', value: 2 }] },
        { did, name: 'piped-3', timestamp: T0 + 2 },
      ];
      // piped-0 alone first, answered before the rest is pipelined on the same connection (so the
      // check below of what was answered 200 has something to check); then the pipeline.
      const [first, ...piped] = bodies.map((b) => jsonPost('/msv_cevt', b));
      const { data, closed } = await rawExchange(server.port, [first!, Buffer.concat([...piped, rawRequest('GET', '/healthz', { key: null })])], 2000, 500);
      assert.equal(closed, true, 'uWS closes a connection that pipelines behind a pending response');
      const answered = parseResponses(data);
      assert.ok(answered.length < bodies.length + 1, `not everything was answered: ${data}`);
      assert.equal(answered[0]?.status, 200, `piped-0, sent alone, was answered before the pipeline: ${data}`);

      // The server still serves, on a new connection; this write also orders after the others.
      const later = { did, name: 'after-pipeline', timestamp: T0 + 3 };
      assertSuccess(await server.post('/msv_cevt', later), 'a write after the closed connection');
      assert.equal((await server.request('/healthz', undefined, { key: null })).status, 200);

      const events = exportLines<{ did: string; data: Record<string, unknown> }>(server.dataDir, 'events', '--kind', 'event').filter((e) => e.did === did);
      const names = events.map((e) => e.data.name);
      assert.equal(new Set(names).size, names.length, `no write is journaled twice: ${names.join(', ')}`);
      for (const event of events) {
        const sent = [...bodies, later].find((b) => b.name === event.data.name);
        assert.ok(sent !== undefined, `unexpected event ${String(event.data.name)}`);
        assert.deepEqual(event.data, sent, 'a journaled write is whole');
      }
      assert.ok(names.includes('after-pipeline'), 'the later write is journaled');
      // Whatever was answered 200 on the closed connection is durable (responses are in request
      // order), and applied before the write sent after it (read-your-writes).
      answered.forEach((res, i) => {
        if (i < bodies.length && res.status === 200) {
          assert.ok(names.includes(bodies[i]!.name), `${bodies[i]!.name} was answered 200 but is not journaled`);
          assert.ok(names.indexOf(bodies[i]!.name) < names.indexOf('after-pipeline'), `${bodies[i]!.name} was answered 200 and journaled after a write sent later`);
        }
      });
      // One thread handles a connection's writes before it reads past them, so even the writes
      // never answered are applied before the later one. With edge threads an unanswered write can
      // come after it (README, Pipelining): its edge hands it to the state thread after uWS has
      // closed its connection, and another edge's hand-off can overtake it on a busy machine.
      if (!edgeThreads) assert.equal(names[names.length - 1], 'after-pipeline');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('aborted requests', () => {
    test('clients that go away mid-body or right after a write do not hurt the server', async () => {
      const partialIds: string[] = [];
      for (let i = 0; i < 10; i++) {
        // Headers announcing 100 bytes, then only part of the body, then gone.
        const id = unique('partial');
        partialIds.push(id);
        const body = padTo(JSON.stringify({ id, name: 'n' }), 100);
        const head = rawRequest('POST', '/product', { headers: { 'content-type': 'application/json', 'content-length': '100' } });
        const conn = await RawConnection.open(server.port);
        conn.write(Buffer.concat([head, Buffer.from(body.slice(0, 40))]));
        await sleep(20);
        conn.destroy();

        // A whole write, and gone before the answer.
        const full = await RawConnection.open(server.port);
        full.write(jsonPost('/product', { id: unique('gone'), name: 'n' }));
        full.destroy();

        // Only the head of a write (a body announced, none sent), gone at once.
        const half = await RawConnection.open(server.port);
        half.write(rawRequest('POST', '/collection', { headers: { 'content-type': 'application/json', 'content-length': '100' } }));
        half.destroy();
      }
      await sleep(200);
      assert.equal(server.child.exitCode, null, 'the server is still running');
      assert.equal(server.child.signalCode, null, 'the server is still running');
      const health = await server.request('/healthz', undefined, { key: null });
      assert.equal(health.status, 200);
      assert.deepEqual(health.body, { status: 'ok' });
      assert.equal((await server.request('/readyz', undefined, { key: null })).status, 200);
      await assertStillServes('after aborted requests');
      for (const id of partialIds) await assertProductMissing(id, 'a body that never arrived applies nothing');
    });
  });

  // -------------------------------------------------------------------------------------------
  describe('ops endpoints (no key)', () => {
    test('GET /healthz', async () => {
      const res = await server.request('/healthz', undefined, { key: null });
      assert.equal(res.status, 200);
      assertJsonContentType(res.headers.get('content-type'), '/healthz');
      assert.deepEqual(res.body, { status: 'ok' });
    });

    test('GET /readyz', async () => {
      const res = await server.request('/readyz', undefined, { key: null });
      assert.equal(res.status, 200);
      assertJsonContentType(res.headers.get('content-type'), '/readyz');
      assert.deepEqual(res.body, { status: 'ready' });
    });

    test('GET /openapi.json is an OpenAPI 3.1 document of every endpoint', async () => {
      const res = await server.request<any>('/openapi.json', undefined, { key: null });
      assert.equal(res.status, 200);
      assertJsonContentType(res.headers.get('content-type'), '/openapi.json');
      const doc = res.body;
      assert.match(String(doc.openapi), /^3\.1\.\d+$/);
      const expected = WRITE_OPERATIONS;
      for (const [path, method] of expected) {
        assert.ok(doc.paths?.[path]?.[method] !== undefined, `${method.toUpperCase()} ${path} is documented`);
      }
      for (const [path, method] of expected) {
        if (method === 'delete') continue;
        assert.ok(doc.paths[path][method].requestBody?.content?.['application/json']?.schema !== undefined, `${path} has a request schema`);
      }
    });

    test('the OpenAPI request schemas carry the limits that validation enforces', async () => {
      const doc = (await server.request<any>('/openapi.json', undefined, { key: null })).body;
      const schema = (path: string) => doc.paths[path].post.requestBody.content['application/json'].schema;

      const eventName = schema('/msv_cevt').properties.name;
      assert.equal(eventName.maxLength, 120);
      assert.equal(eventName.minLength, 1);
      const productId = schema('/product').properties.id;
      assert.equal(productId.maxLength, 50);
      const products = schema('/collection/{id}/products/add').properties.products;
      assert.equal(products.maxItems, MAPPING_MAX_ITEMS, 'made from the running settings');
      assert.equal(products.minItems, 1);
      assert.equal(products.items.maxLength, 50);
      const idParam = doc.paths['/product/{id}'].delete.parameters.find((p: { name: string }) => p.name === 'id');
      assert.equal(idParam.in, 'path');
      assert.equal(idParam.schema.maxLength, 50);

      // The documented limits are the enforced ones: at the limit passes the schema, one more fails.
      const { did } = await launch(server);
      assertSuccess(await server.post('/msv_cevt', { did, name: 'x'.repeat(eventName.maxLength), timestamp: T0 }), 'name at maxLength');
      const long = await server.post('/msv_cevt', { did, name: 'x'.repeat(eventName.maxLength + 1), timestamp: T0 });
      assert.equal(long.status, 422);
      assert.deepEqual(long.body.details.map((d: any) => [d.type, d.path, d.context.limit]), [['string.max', ['name'], eventName.maxLength]]);
      const longId = await server.post('/product', { id: 'p'.repeat(productId.maxLength + 1), name: 'n' });
      assert.equal(longId.status, 422);
      assert.deepEqual(longId.body.details.map((d: any) => [d.type, d.path, d.context.limit]), [['string.max', ['id'], productId.maxLength]]);
      const many = await server.post(`/collection/${probeCollection}/products/add`, { products: Array.from({ length: products.maxItems + 1 }, () => 'p') });
      assert.equal(many.status, 422);
      assert.deepEqual(many.body.details.map((d: any) => [d.type, d.path, d.context.limit]), [['array.max', ['products'], products.maxItems]]);
    });

    test('GET /metrics is Prometheus text', async () => {
      const res = await server.request('/metrics', undefined, { key: null });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/plain(;|$)/);
      assert.ok(res.text.includes('intake_requests_total'), 'has intake_requests_total');
      assert.match(res.text, /^# TYPE intake_requests_total counter$/m);
    });

    test('ops endpoints answer the same with a key and with a wrong key', async () => {
      for (const path of ['/healthz', '/readyz', '/openapi.json', '/metrics']) {
        for (const key of [KEY_A, 'not-a-key']) {
          assert.equal((await server.request(path, undefined, { key })).status, 200, `${path} with key ${key}`);
        }
      }
    });
  });

  // -------------------------------------------------------------------------------------------
  test('every response body but /metrics is JSON with content-type application/json', async () => {
    const { did } = await launch(server);
    const json = { 'content-type': 'application/json' };
    const requests: Array<[string, string, string | Uint8Array | undefined, Record<string, string>, string | null]> = [
      ['GET', '/healthz', undefined, {}, null],
      ['GET', '/readyz', undefined, {}, null],
      ['GET', '/openapi.json', undefined, {}, null],
      ['POST', '/msv_cevt', JSON.stringify({ did, name: 'e', timestamp: T0 }), json, KEY_A],
      ['POST', '/msv_cevt', JSON.stringify({ did: 'unknown-did', name: 'e', timestamp: T0 }), json, KEY_A],
      ['POST', '/msv_cevt', '{}', json, KEY_A],
      ['POST', '/msv_cevt', '{}', json, null],
      ['POST', '/msv_cevt', '[]', json, KEY_A],
      ['POST', '/msv_cevt', '{}', { 'content-type': 'text/xml' }, KEY_A],
      ['POST', '/msv_cevt', 'x'.repeat(BODY_LIMIT + 1), json, KEY_A],
      ['GET', '/msv_cevt', undefined, {}, KEY_A],
      ['GET', '/nowhere', undefined, {}, KEY_A],
      ['DELETE', '/product/whatever', undefined, {}, KEY_A],
      ['POST', '/mcrs_appl_v1', JSON.stringify({ timestamp: T0 }), json, KEY_A],
    ];
    for (const [method, path, raw, headers, key] of requests) {
      const res = await server.request(path, undefined, { method, raw, headers, key });
      const context = `${method} ${path} → ${res.status}`;
      assertJsonContentType(res.headers.get('content-type'), context);
      assert.doesNotThrow(() => JSON.parse(res.text), `${context}: body is JSON: ${res.text}`);
      assert.equal(typeof JSON.parse(res.text), 'object', context);
    }
  });
});

// -----------------------------------------------------------------------------------------------
describe('pipelined writes with COMMIT_MODE=sync', () => {
  let server: TestServer;

  before(async () => {
    // One thread: with edge threads (HTTP_THREADS > 1) every write's answer comes from the state
    // thread after its handler returned, so uWS closes a connection that pipelines behind it, in
    // either commit mode (README, "Edge threads").
    server = await startServer({ env: { ...LIMIT_ENV, COMMIT_MODE: 'sync', HTTP_THREADS: '1' } });
  });

  after(async () => {
    assert.equal(await server.stop(), 0, 'server exits 0 on SIGTERM');
  });

  test('(2) three pipelined track events: three 200s in order, all journaled in order', async () => {
    const { did } = await launch(server);
    const bodies = [1, 2, 3].map((n) => ({ did, name: `sync-${n}`, timestamp: T0 + n }));
    const conn = await RawConnection.open(server.port);
    try {
      conn.write(Buffer.concat(bodies.map((b) => jsonPost('/msv_cevt', b))));
      const responses = await conn.waitFor(3);
      assert.equal(responses.length, 3, 'three answers');
      responses.forEach((res, i) => assertRawSuccess(res, `pipelined write ${i + 1}`));
      assert.equal(conn.closed, false, 'the connection stays open');

      // More on the same connection, mixed with non-writes.
      conn.write(Buffer.concat([jsonPost('/msv_cevt', { did, name: 'sync-4', timestamp: T0 + 4 }), rawRequest('GET', '/healthz', { key: null }), jsonPost('/msv_cevt', {})]));
      const more = await conn.waitFor(6);
      assert.deepEqual(more.slice(3).map((r) => r.status), [200, 200, 422]);
      assertRawSuccess(more[3], 'sync-4');
    } finally {
      conn.destroy();
    }
    const events = exportLines<{ did: string; seq: number; data: Record<string, unknown> }>(server.dataDir, 'events', '--kind', 'event').filter((e) => e.did === did);
    assert.equal(events.length, 4);
    assert.deepEqual(events.map((e) => e.data), [...bodies, { did, name: 'sync-4', timestamp: T0 + 4 }]);
    const seqs = events.map((e) => e.seq);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'journaled in request order');
  });

  test('a 413 in sync mode still closes the connection and the server goes on', async () => {
    const over = rawRequest('POST', '/msv_cevt', { headers: { 'content-type': 'application/json' }, body: ' '.repeat(BODY_LIMIT + 1) });
    const { data, closed } = await rawExchange(server.port, [over], 2000);
    const responses = parseResponses(data);
    assert.equal(responses.length, 1, data);
    assertRawError(responses[0], 413, 'PayloadTooLarge', 'sync 413');
    assert.equal(closed, true);
    assertSuccess(await server.post('/product', { id: unique('sync-alive'), name: 'n' }), 'after a 413');
  });
});
