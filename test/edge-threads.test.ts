// HTTP_THREADS > 1 (issue 21): edge threads share the port and hand valid writes to the state
// thread. What only shows with several threads: connections land on every thread; /metrics sums
// them (intake_http_threads, every request counted once); a rate limit is per key across threads,
// not per thread; a write sent after a 200 sees it, whichever thread each came through; a stop
// with idle keep-alive connections on every thread ends with exit 0 (a thread that kept uWS
// handles would make Node abort or hang). The conformance tests themselves run again with
// HTTP_THREADS=2 in `npm test` (package.json, README "Development").
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { exportLines, KEY_A, LAUNCH_INFO, startServer, type TestServer } from './helpers/server.ts';
import { until } from './helpers/wait.ts';

const THREADS = { HTTP_THREADS: '2' };

/** One request on a new connection of its own (the kernel spreads connections, not requests). */
function postAlone(port: number, path: string, body: unknown): Promise<number> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent: false, headers: { 'x-service-key': KEY_A, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** postAlone, with the answer's Retry-After and body too. */
function postAloneAnswer(port: number, path: string, body: unknown, timeoutMs = 20_000): Promise<{ status: number; retryAfter: string | undefined; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent: false, headers: { 'x-service-key': KEY_A, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'], text }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

function metric(text: string, name: string): number {
  let total = 0;
  for (const line of text.split('\n')) if (line.startsWith(name)) total += Number(line.slice(line.lastIndexOf(' ') + 1));
  return total;
}

describe('edge threads (HTTP_THREADS=2)', () => {
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) await s.stop().catch(() => undefined);
  });

  test('connections land on both threads; /metrics counts each request once and says intake_http_threads 2', async () => {
    const server = await startServer({ env: { ...THREADS, LOG_LEVEL: 'debug' } });
    servers.push(server);
    const statuses = await Promise.all(Array.from({ length: 60 }, (_, i) => postAlone(server.port, '/product', { id: `p${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    const edges = new Set(server.logs().filter((l) => l.includes('"msg":"request"')).map((l) => (JSON.parse(l) as { edge: number }).edge));
    assert.deepEqual([...edges].sort(), [0, 1], 'both edge threads answered requests');
    const text = (await server.request('/metrics')).text;
    assert.equal(metric(text, 'intake_http_threads '), 2);
    assert.equal(metric(text, 'intake_requests_total{route="product_upsert",status="200"}'), 60, 'summed over threads, counted once');
    assert.equal(metric(text, 'process_cpu_seconds_total '), metric(text, 'process_cpu_seconds_total '), 'process metrics present');
    assert.equal(text.split('\n').filter((l) => l.startsWith('process_cpu_user_seconds_total ')).length, 1, 'process-wide figures once, not once per thread');
    assert.equal(exportLines(server.dataDir, 'products').length, 60);
  });

  test('/metrics shows every metric family HTTP_THREADS=1 shows (process_start_time_seconds was dropped by the sum)', async () => {
    const families = async (threads: string): Promise<Set<string>> => {
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      try {
        assert.equal((await server.post('/product', { id: 'p', name: 'P' })).status, 200);
        const text = (await server.request('/metrics')).text;
        return new Set(text.split('\n').filter((l) => l.startsWith('# TYPE ')).map((l) => l.split(' ')[2]!));
      } finally {
        await server.stop();
      }
    };
    const one = await families('1');
    const two = await families('2');
    // GC kinds come and go with the collections that ran; the rest must match.
    assert.deepEqual([...one].filter((name) => !two.has(name)), [], 'families missing with HTTP_THREADS=2');
    assert.ok(two.has('process_start_time_seconds'));
  });

  test('a rate limit is per key across threads: 80 requests on 80 connections, burst 20, get 20 answers 200', async () => {
    const server = await startServer({ env: { ...THREADS, RATE_LIMIT_PER_SECOND: '1', RATE_LIMIT_BURST: '20' } });
    servers.push(server);
    const statuses = await Promise.all(Array.from({ length: 80 }, (_, i) => postAlone(server.port, '/product', { id: `p${i}`, name: 'P' })));
    const ok = statuses.filter((s) => s === 200).length;
    // One token a second refills while the 80 run: at most a couple more than the burst.
    assert.ok(ok >= 20 && ok <= 22, `${ok} answered 200 (per-thread buckets would allow up to 40)`);
    assert.equal(statuses.filter((s) => s === 429).length, 80 - ok);
    assert.equal(metric((await server.request('/metrics')).text, 'intake_rate_limited_total '), 80 - ok);
  });

  test('read-your-writes across threads: a write sent on any connection after a 200 sees it; journal order is answer order', async () => {
    const server = await startServer({ env: THREADS });
    servers.push(server);
    // uWS closes a connection that pipelines a request behind one not yet answered (in either
    // mode), so a client's order is the order of its answers: each write here waits for the last.
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let v = 1; v <= 15; v++) {
          // A launch on one connection, the event on another (the kernel may put it on the other thread).
          const launched = await new Promise<{ did: string }>((resolve, reject) => {
            const payload = JSON.stringify({ timestamp: 1_700_000_000_000, info: LAUNCH_INFO });
            const req = http.request({ host: '127.0.0.1', port: server.port, path: '/mcrs_appl_v1', method: 'POST', agent: false, headers: { 'x-service-key': KEY_A, 'content-type': 'application/json' } }, (res) => {
              let text = '';
              res.setEncoding('utf8').on('data', (d: string) => (text += d)).on('end', () => resolve(JSON.parse(text) as { did: string }));
            });
            req.on('error', reject);
            req.end(payload);
          });
          assert.equal(await postAlone(server.port, '/msv_cevt', { did: launched.did, name: 'opened', timestamp: 1_700_000_000_000 }), 200, 'the device the 200 created is known to the next write');
          assert.equal(await postAlone(server.port, '/product', { id: `conn${c}`, name: `v${v}` }), 200);
        }
      }),
    );
    const events = exportLines<{ kind: string; data: { id?: string; name?: string } }>(server.dataDir, 'events');
    for (let c = 0; c < 8; c++) {
      const names = events.filter((e) => e.kind === 'product_upsert' && e.data.id === `conn${c}`).map((e) => e.data.name);
      assert.deepEqual(names, Array.from({ length: 15 }, (_, v) => `v${v + 1}`), 'journal order is the order sent');
    }
  });

  test('SIGTERM with idle keep-alive connections on every thread: exit 0, quickly', async () => {
    const server = await startServer({ env: THREADS });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
    await Promise.all(
      Array.from({ length: 16 }, () => new Promise((resolve) => http.get({ host: '127.0.0.1', port: server.port, path: '/healthz', agent }, (res) => res.resume().on('end', resolve)))),
    );
    const startedAt = Date.now();
    assert.equal(await server.stop(), 0, server.stderr());
    assert.ok(Date.now() - startedAt < 3000, `stopped in ${Date.now() - startedAt} ms`);
    assert.doesNotMatch(server.stderr(), /open handles|Assertion failed/);
    agent.destroy();
  });
  test('an edge thread that throws, uncaught (a stand-in for a bug), ends alone: another takes its place, the server serves on and stops with exit 0', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    // The first edge to listen throws once (config/fault-points.ts). Ending with its uWS sockets
    // open used to abort the whole process (uv_loop_close() with open handles).
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: `edge-listening:${marker}` } });
    servers.push(server);
    await until('the failed edge to be replaced', async () => (server.logs().some((l) => l.includes('an edge thread ended; starting another')) ? true : null), 10_000);
    assert.ok(existsSync(marker), 'the fault fired');
    assert.ok(server.logs().some((l) => l.includes('an edge thread failed: closing its connections')), server.logs().slice(-10).join('\n'));
    // A connection may meet the failing thread as it closes: refused or reset, then tried again.
    await until('both edges listening again', async () => (metric((await server.request('/metrics').catch(() => ({ text: '' }))).text, 'intake_http_threads ') === 2 ? true : null), 10_000);
    assert.equal(server.logs().filter((l) => l.includes('an edge thread failed: closing its connections')).length, 1, 'one edge failed, once');
    const statuses = await Promise.all(Array.from({ length: 40 }, (_, i) => postAlone(server.port, '/product', { id: `after-${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    assert.equal(await server.stop(), 0, server.stderr());
    assert.doesNotMatch(server.stderr(), /open handles|Assertion failed/);
  });

  test('a bug on the state thread (an uncaught exception) ends the process with exit 1 and its stack, as with HTTP_THREADS=1, not a SIGABRT', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    // The main thread throws once, uncaught, right after it logged 'listening' (config/fault-points.ts).
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: `state-listening:${marker}` } });
    const ended = await new Promise<{ code: number | null; signal: string | null }>((resolve) => {
      if (server.child.exitCode !== null || server.child.signalCode !== null) return resolve({ code: server.child.exitCode, signal: server.child.signalCode });
      server.child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    assert.ok(existsSync(marker), 'the fault fired');
    // Before: Node's exit ended the edge threads with their uWS sockets open and aborted.
    assert.deepEqual(ended, { code: 1, signal: null }, server.stderr());
    assert.match(server.stderr(), /test fault: state-listening/);
    assert.doesNotMatch(server.stderr(), /open handles|Assertion failed/);
  });

  test('/readyz is 503 while the state thread is stuck (the edges answered 200 while every write waited), and 200 again once it runs', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    // The state thread's first frame of commands blocks it for 4 s (config/fault-points.ts): a
    // stand-in for a synchronous call that hangs on a stalled disk.
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_BLOCK_ONCE: `state-command:4000:${marker}` } });
    servers.push(server);
    assert.equal((await server.request('/readyz', undefined, { key: null })).status, 200);
    const write = server.post('/product', { id: 'stuck', name: 'P' });
    const startedAt = Date.now();
    const notReady = await until('/readyz 503', async () => {
      const res = await server.request<{ message: string }>('/readyz', undefined, { key: null, timeoutMs: 1_000 });
      return res.status === 503 ? res : null;
    }, 3_500);
    assert.ok(existsSync(marker), 'the fault fired');
    assert.match(notReady.body.message, /the state thread has not run for \d+ ms/);
    assert.ok(Date.now() - startedAt < 3_900, 'said while the state thread was still stuck');
    assert.equal((await write).status, 200, 'the write waited for the state thread, and was applied');
    await until('/readyz 200 again', async () => (await server.request('/readyz', undefined, { key: null })).status === 200, 2_000);
  });

  test('writes waiting for a stuck state thread are limited per edge (EDGE_QUEUE_MAX): beyond it 503 with Retry-After, nothing applied; the rest applied once it runs', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    const server = await startServer({ env: { ...THREADS, EDGE_QUEUE_MAX: '5', INTAKE_TEST_BLOCK_ONCE: `state-command:6000:${marker}` } });
    servers.push(server);
    const first = postAloneAnswer(server.port, '/product', { id: 'first', name: 'P' });
    await until('the state thread to be stuck', async () => existsSync(marker), 2_000);
    // Before, every one of these waited (an edge took any number, and their bodies, in memory).
    const answers = await Promise.all([first, ...Array.from({ length: 40 }, (_, i) => postAloneAnswer(server.port, '/product', { id: `q${i}`, name: 'P' }))]);
    const ids = ['first', ...Array.from({ length: 40 }, (_, i) => `q${i}`)];
    const refused = answers.flatMap((a, i) => (a.status === 503 ? [ids[i]!] : []));
    const applied = answers.flatMap((a, i) => (a.status === 200 ? [ids[i]!] : []));
    assert.equal(refused.length + applied.length, ids.length, `200 or 503 only: ${answers.map((a) => a.status).join(' ')}`);
    assert.ok(applied.length <= 2 * 5, `at most EDGE_QUEUE_MAX a thread waited: ${applied.length}`);
    assert.ok(refused.length >= 41 - 2 * 5, `the others were refused: ${refused.length}`);
    for (const answer of answers.filter((a) => a.status === 503)) {
      assert.equal(answer.retryAfter, '1', answer.text);
      assert.match(answer.text, /writes waiting for the state thread \(EDGE_QUEUE_MAX\)/);
    }
    const products = new Set(exportLines<{ id: string }>(server.dataDir, 'products').map((p) => p.id));
    assert.deepEqual([...products].sort(), [...applied].sort(), 'what was answered 200 is there, what was refused is not');
    assert.equal((await postAloneAnswer(server.port, '/product', { id: 'after', name: 'P' })).status, 200, 'taken again once the state thread runs');
  });

  test('a frame the state thread cannot read ends its edge (its clients see a reset, not a wait for ever); another edge takes its place', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: `state-frame:${marker}` } });
    servers.push(server);
    const startedAt = Date.now();
    const outcome = await postAloneAnswer(server.port, '/product', { id: 'lost', name: 'P' }, 8_000).then((a) => `answered ${a.status}`, (error: Error) => `failed: ${error.message}`);
    assert.ok(existsSync(marker), 'the fault fired');
    assert.match(outcome, /failed: (socket hang up|read ECONNRESET)/, 'the connection was closed unanswered');
    assert.ok(Date.now() - startedAt < 5_000, 'at once, not after a client timeout');
    await until('another edge in its place', async () => (server.logs().some((l) => l.includes('an edge thread ended; starting another')) ? true : null), 10_000);
    await until('both edges listening again', async () => (metric((await server.request('/metrics').catch(() => ({ text: '' }))).text, 'intake_http_threads ') === 2 ? true : null), 10_000);
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => postAlone(server.port, '/product', { id: `later-${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    assert.ok(!exportLines<{ id: string }>(server.dataDir, 'products').some((p) => p.id === 'lost'), 'the unread write was not applied');
    assert.equal(await server.stop(), 0, server.stderr());
  });

  test('an edge thread whose replacement fails to start is started again later, not given up for good', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'intake-fault-'));
    // The first edge to listen throws once; its replacement throws before it listens, once
    // (config/fault-points.ts). Before, that replacement was given up: one edge for good.
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: `edge-listening:${join(dir, 'a')},edge-restarting:${join(dir, 'b')}` } });
    servers.push(server);
    await until('the replacement to fail', async () => existsSync(join(dir, 'b')), 10_000);
    await until('both edges listening again', async () => (metric((await server.request('/metrics').catch(() => ({ text: '' }))).text, 'intake_http_threads ') === 2 ? true : null), 10_000);
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => postAlone(server.port, '/product', { id: `again-${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    assert.equal(await server.stop(), 0, server.stderr());
    assert.doesNotMatch(server.stderr(), /open handles|Assertion failed/);
  });

  test('edges replaced again and again: their counts are summed into one share and stay exact', async () => {
    // Six failures (fault-points.ts: one per marker file). Each replaced edge's last share was
    // kept apart for good, one more per failure, summed again by every scrape (a review,
    // 2026-11-29); past four they are now summed into one.
    const dir = mkdtempSync(join(tmpdir(), 'intake-fault-'));
    const markers = Array.from({ length: 6 }, (_, i) => join(dir, `fired-${i}`));
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: markers.map((m) => `edge-collected:${m}`).join(',') } });
    servers.push(server);
    const statuses = await Promise.all(Array.from({ length: 60 }, (_, i) => postAlone(server.port, '/product', { id: `p${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    const scrape = async () => (await server.request('/metrics').catch(() => ({ text: '' }))).text;
    await until('six edge failures, and both edges listening after them', async () => {
      const text = await scrape();
      return markers.every((m) => existsSync(m)) && metric(text, 'intake_http_threads ') === 2 ? true : null;
    }, 60_000);
    const ended = server.logs().filter((l) => l.includes('an edge thread ended; starting another')).length;
    assert.ok(ended >= 6, `${ended} edges replaced`);
    await until('the retired shares summed', async () => (server.logs().some((l) => l.includes('summed the metrics of ended edge threads into one share')) ? true : null), 10_000);
    const upserts = metric(await scrape(), 'intake_requests_total{route="product_upsert",status="200"}');
    assert.equal(upserts, 60, 'every edge\'s requests counted once, replaced or not');
    assert.equal(await server.stop(), 0, server.stderr());
  });

  test('/metrics counters never fall when an edge thread is replaced: its counts stay in the sum', async () => {
    const marker = join(mkdtempSync(join(tmpdir(), 'intake-fault-')), 'fired');
    // The first edge asked for its share of /metrics sends it, then throws (config/fault-points.ts).
    const server = await startServer({ env: { ...THREADS, INTAKE_TEST_THROW_ONCE: `edge-collected:${marker}` } });
    servers.push(server);
    const statuses = await Promise.all(Array.from({ length: 60 }, (_, i) => postAlone(server.port, '/product', { id: `p${i}`, name: 'P' })));
    assert.deepEqual(new Set(statuses), new Set([200]));
    const upserts = async (): Promise<number> => metric((await server.request('/metrics')).text, 'intake_requests_total{route="product_upsert",status="200"}');
    // The scrape that makes one edge fail may be answered by that very edge: its connection
    // then closes unanswered.
    await upserts().catch(() => null);
    await until('the failed edge to be replaced', async () => (server.logs().some((l) => l.includes('an edge thread ended; starting another')) ? true : null), 10_000);
    await until('both edges listening again', async () => (metric((await server.request('/metrics').catch(() => ({ text: '' }))).text, 'intake_http_threads ') === 2 ? true : null), 10_000);
    assert.ok(existsSync(marker), 'the fault fired');
    // Before, the replaced edge's share was gone: the counter fell (a counter reset to Prometheus).
    assert.equal(await upserts(), 60, 'the replaced edge\'s requests still counted');
    assert.equal(await server.stop(), 0, server.stderr());
  });
});
