// Graceful stop (CONTRACT.md §1): SIGTERM or SIGINT while writes are in flight. The server stops
// accepting, answers what it already received, flushes the journal, writes a snapshot, closes
// LMDB and exits 0 within 10 s; every write it answered 200 is there after a restart.
import { connect, type Socket } from 'node:net';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, launch, startServer, T0, tempDataDir } from './helpers/server.ts';

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  describe(`graceful stop on ${signal}`, () => {
    test('in-flight writes are answered, a final snapshot is written, exit 0 within 10 s, nothing answered 200 is lost', async (t) => {
      const dataDir = tempDataDir();
      const server = await startServer({ dataDir });
      const { did } = await launch(server);
      const acknowledged: string[] = [];
      const statuses = new Map<number, number>();
      let sent = 0;
      let stopping = false;
      let refusals = 0;
      const writer = async (w: number): Promise<void> => {
        for (let i = 0; !stopping || i < 1; i++) {
          const name = `w${w}-${i}`;
          sent++;
          try {
            const res = await server.post('/msv_cevt', { did, name, timestamp: T0 });
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
            if (res.status === 200) acknowledged.push(name);
            else {
              assert.equal(res.status, 503, res.text);
              // Every 503 of a stop says when to come back (the one for a write that came as the
              // server stopped did not, until 2026-11-29: a review).
              assert.equal(res.headers.get('retry-after'), '1', res.text);
              refusals++;
            }
          } catch {
            return; // connection closed by the stopping server
          }
          if (stopping) return;
        }
      };
      const writers = Array.from({ length: 48 }, (_, w) => writer(w));
      // Stop once writes are flowing (not after a fixed time: a loaded machine is slower).
      const flowingBy = Date.now() + 10_000;
      while (acknowledged.length < 200 && Date.now() < flowingBy) await new Promise((r) => setTimeout(r, 20));
      const signalledAt = Date.now();
      const exited = new Promise<number | null>((resolve) => server.child.once('close', (code) => resolve(code)));
      server.child.kill(signal);
      stopping = true;
      const code = await exited;
      const stopMs = Date.now() - signalledAt;
      await Promise.all(writers);
      assert.equal(code, 0);
      assert.ok(stopMs < 10_000, `stopped in ${stopMs} ms`);
      assert.ok(acknowledged.length > 100, `writes were acknowledged before the stop (${acknowledged.length} of ${sent})`);
      t.diagnostic(`${refusals} writes answered 503 during the stop`);
      const messages = server.logs().map((l) => JSON.parse(l) as { msg: string; reason?: string; signal?: string });
      assert.ok(messages.some((m) => m.msg === 'stopping: no new requests, answering those in flight' && m.signal === signal));
      assert.ok(messages.some((m) => m.msg === 'snapshot started' && m.reason === 'shutdown'), 'a final snapshot was started');
      assert.ok(messages.some((m) => m.msg === 'snapshot written'), 'and written');
      assert.equal(messages.at(-1)?.msg, 'stopped');

      const restarted = await startServer({ dataDir });
      try {
        const names = new Set(exportLines(dataDir, 'events', '--kind', 'event').map((e) => e.data.name as string));
        assert.deepEqual(acknowledged.filter((n) => !names.has(n)), [], 'every write answered 200 is in the journal');
        const recovered = restarted.logs().map((l) => JSON.parse(l) as { msg: string; records?: number; snapshotId?: number | null }).find((m) => m.msg.startsWith('recovered state'))!;
        assert.equal(recovered.records, 0, 'the final snapshot covers the whole journal: nothing to replay');
        assert.notEqual(recovered.snapshotId, null);
        assert.equal((await restarted.post('/msv_cevt', { did, name: 'after', timestamp: T0 })).status, 200);
      } finally {
        await restarted.stop();
      }
    });
  });
}

describe('a stop right after a start', () => {
  // Node 20 aborts the process (FATAL ERROR: v8::Module::IsGraphAsync, exit 134) when a mapping
  // worker is terminated while it is still loading its task module; the pool now waits for its
  // workers to load before ending them (mapping-pool.ts). Before: 5 aborts in 135 such stops.
  test('SIGTERM as soon as the first write is answered exits 0, every time', async () => {
    const CYCLES = 15;
    const codes: Array<number | null> = [];
    for (let i = 0; i < CYCLES; i++) {
      const server = await startServer({ dataDir: tempDataDir() });
      await launch(server);
      codes.push(await server.stop());
    }
    assert.deepEqual(codes, Array<number>(CYCLES).fill(0));
  });
});

test('a write on an open keep-alive connection while the server stops: 503 with Retry-After: 1, connection closed', async () => {
  // Until 2026-11-29 this 503 had no Retry-After, unlike every other 503 of a stop, though in a
  // cluster another node takes the write within a second or two (found by a review).
  const server = await startServer();
  const connected = (): Promise<Socket> =>
    new Promise((resolve) => {
      const socket = connect(server.port, '127.0.0.1', () => resolve(socket));
      socket.on('error', () => {});
    });
  const body = JSON.stringify({ id: 'during-stop', name: 'n' });
  const head = (length: number) => `POST /product HTTP/1.1\r\nHost: x\r\nx-service-key: ${KEY_A}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
  // A request in flight (half its body sent) keeps the stop waiting for it.
  const slow = await connected();
  slow.write(head(body.length) + body.slice(0, 10));
  const keptAlive = await connected();
  const answers: Buffer[] = [];
  keptAlive.on('data', (chunk: Buffer) => answers.push(chunk));
  const closed = new Promise<void>((resolve) => keptAlive.once('close', () => resolve()));
  await new Promise((resolve) => setTimeout(resolve, 200));
  server.child.kill('SIGTERM');
  await server.waitForLog((line) => line.includes('stopping: no new requests'));
  keptAlive.write(head(body.length) + body);
  await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5_000))]);
  const text = Buffer.concat(answers).toString();
  assert.match(text, /^HTTP\/1\.1 503 /, text);
  assert.match(text, /\r\nretry-after: 1\r\n/i, text);
  slow.end(body.slice(10));
  await new Promise<void>((resolve) => server.child.once('close', () => resolve()));
  slow.destroy();
});

test('an edge thread stuck as the server stops (HTTP_THREADS=2): the stop ends within 10 s, the log names the stuck edge, and every write answered 200 is there', async () => {
  // A stuck edge still holds its connections, and Node aborts (SIGABRT) when the process exits
  // with them: nothing another thread can close. Until 2026-11-30 the process exited (1.5 s)
  // before the edge's close timeout (2 s) ran out, so the abort came with no word of its cause.
  const dataDir = tempDataDir();
  const marker = join(dataDir, '..', `edge-close-${process.pid}-${Date.now()}`);
  const server = await startServer({ dataDir, env: { HTTP_THREADS: '2', INTAKE_TEST_BLOCK_ONCE: `edge-close:20000:${marker}` } });
  for (let i = 0; i < 5; i++) assert.equal((await server.post('/product', { id: `p${i}`, name: 'n' })).status, 200);
  // Connections on both edges (the kernel spreads them), kept open through the stop.
  const sockets = await Promise.all(
    Array.from({ length: 8 }, () => new Promise<Socket>((resolve) => {
      const socket = connect(server.port, '127.0.0.1', () => resolve(socket));
      socket.on('error', () => {});
    })),
  );
  const startedAt = Date.now();
  server.child.kill('SIGTERM');
  await new Promise<void>((resolve) => server.child.once('close', () => resolve()));
  const tookMs = Date.now() - startedAt;
  for (const socket of sockets) socket.destroy();
  rmSync(marker, { force: true });
  assert.ok(tookMs < 10_000, `the stop took ${tookMs} ms`);
  assert.ok(server.logs().some((line) => line.includes('an edge thread did not close its connections in time (stuck)')), server.logs().slice(-5).join('\n'));
  assert.ok(server.logs().some((line) => line.includes('"msg":"stopped"')), 'the stop ran to its end before the exit');
  assert.deepEqual(exportLines(dataDir, 'products').map((p) => p.id).sort(), ['p0', 'p1', 'p2', 'p3', 'p4']);
});
