// A body's memory does not depend on how it is chunked on the wire (review of the HTTP layer,
// 2026-11-25): uWS calls onData once per chunk, and a Buffer kept per chunk cost ~400 bytes each,
// so a 1 MB body sent one byte per chunk took ~500 MB, and a few MB ended the process. Sent one
// byte per chunk, a body under the limit is answered as it would be in one piece, and the
// server's anonymous memory grows by about the body's size, not hundreds of times it.
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, rawExchange, startServer, type TestServer } from './helpers/server.ts';

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.kill();
});

function rssAnonBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('RssAnon:'))!;
  return Number(/(\d+)/.exec(line)![1]) * 1024;
}

test('a body sent one byte per chunk (chunked encoding): 200, and memory grows by about its size', async () => {
  // 400,000 bytes: JSON whitespace, then the product (whitespace around a value is valid JSON).
  const body = `${' '.repeat(400_000 - 40)}{"id":"one-byte-chunks","name":"n"}`;
  const chunked = Buffer.from([...body].map((c) => `1\r\n${c}\r\n`).join('') + '0\r\n\r\n');
  const head = `POST /product HTTP/1.1\r\nhost: x\r\nx-service-key: ${KEY_A}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`;
  const before = rssAnonBytes(server.child.pid!);
  const { data } = await rawExchange(server.port, [head, chunked], 5_000);
  const grownBytes = rssAnonBytes(server.child.pid!) - before;
  assert.match(data, /^HTTP\/1\.1 200 /, data.slice(0, 300));
  // A Buffer per chunk: ~170 MB here.
  assert.ok(grownBytes < 40 * 1024 * 1024, `anonymous memory grew by ${(grownBytes / 1048576).toFixed(1)} MB for a 0.4 MB body`);
  const products = exportLines(server.dataDir, 'products', '--workspace', 'ws-a');
  assert.ok(products.some((p) => p.id === 'one-byte-chunks'));
});
