// Answers are not buffered without limit for a client that does not read them. uWS's end()
// copies what the socket cannot take into its own buffer: one connection that pipelined 20,000
// `GET /openapi.json` (680 KB sent, no key needed) and read nothing made the server hold 1.3 GB
// of answers, and /healthz took 3 s (found by a review, 2026-11-29). Big answers now go out as
// the socket drains (respond.ts); a slow reader still gets every byte.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './helpers/server.ts';

const rssMb = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

// A reader with a 4 KB receive buffer (Node's net cannot set SO_RCVBUF), reading only after 1 s:
// the 67 KB answer cannot leave at once, so the part left goes out as the socket drains.
const SLOW_READER = `
import socket, sys, time, json
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(('127.0.0.1', int(sys.argv[1])))
s.sendall(b'GET /openapi.json HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')
time.sleep(1)
s.settimeout(5)
data = b''
while True:
    head, _, body = data.partition(b'\\r\\n\\r\\n')
    lengths = [l for l in head.split(b'\\r\\n') if l.lower().startswith(b'content-length:')]
    if lengths and len(body) >= int(lengths[0].split(b':')[1]): break
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
head, _, body = data.partition(b'\\r\\n\\r\\n')
print(json.dumps({'status': head.split(b'\\r\\n')[0].decode(), 'bytes': len(body), 'openapi': json.loads(body)['openapi']}))
`;

/** A connection to `port`, open, its errors ignored (the server may cut it). */
async function connected(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return socket;
}

for (const threads of ['1', '2']) {
  describe(`answers under backpressure (HTTP_THREADS=${threads})`, () => {
    test('20,000 pipelined GET /openapi.json never read: the server holds no gigabytes for them, and keeps serving', async () => {
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      try {
        const before = rssMb(server.child.pid!);
        const socket = await connected(server.port);
        socket.pause();
        socket.write('GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(20_000));
        await new Promise((resolve) => setTimeout(resolve, 2_500));
        const startedAt = performance.now();
        const health = await server.request('/healthz', undefined, { key: null });
        const healthMs = performance.now() - startedAt;
        const grownMb = rssMb(server.child.pid!) - before;
        socket.destroy();
        assert.equal(health.status, 200);
        assert.ok(healthMs < 1_000, `/healthz took ${Math.round(healthMs)} ms`);
        // Before: about 1,300 MB.
        assert.ok(grownMb < 200, `the server grew by ${Math.round(grownMb)} MB`);
      } finally {
        await server.stop();
      }
    });

    test('pipelined GET /healthz never read (small answers): the connection is cut, the server holds no answers for it', async () => {
      // Until 2026-11-30 answers under 16 Ki characters went through end(), which buffers
      // without limit: 2,000,000 such requests made a server hold 290 MB (a review).
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      try {
        const before = rssMb(server.child.pid!);
        const socket = await connected(server.port);
        const closed = new Promise<boolean>((resolve) => {
          socket.once('close', () => resolve(true));
          setTimeout(() => resolve(false), 20_000);
        });
        socket.pause();
        // 600,000 requests, 20 MB, in 1 MB writes as the socket takes them.
        const chunk = Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(30_000));
        let sent = 0;
        const writing = (async () => {
          for (let i = 0; i < 20 && !socket.destroyed; i++) {
            if (!socket.write(chunk)) await new Promise((resolve) => { socket.once('drain', resolve); socket.once('close', resolve); });
            sent++;
          }
        })();
        const wasClosed = await closed;
        await writing;
        const grownMb = rssMb(server.child.pid!) - before;
        socket.destroy();
        assert.ok(wasClosed, `the connection stayed open (${sent} MB of requests written)`);
        assert.ok(grownMb < 40, `the server grew by ${Math.round(grownMb)} MB`);
        assert.equal((await server.request('/healthz', undefined, { key: null })).status, 200);
      } finally {
        await server.stop();
      }
    });

    test('a slow reader (4 KB receive buffer) gets the whole of /openapi.json', async () => {
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      try {
        const run = spawnSync('python3', ['-c', SLOW_READER, String(server.port)], { encoding: 'utf8', timeout: 20_000 });
        assert.equal(run.status, 0, run.stderr);
        const got = JSON.parse(run.stdout) as { status: string; bytes: number; openapi: string };
        const whole = (await server.request('/openapi.json', undefined, { key: null })).text;
        assert.equal(got.status, 'HTTP/1.1 200 OK');
        assert.equal(got.bytes, Buffer.byteLength(whole));
        assert.equal(got.openapi, '3.1.0');
      } finally {
        await server.stop();
      }
    });
  });
}
