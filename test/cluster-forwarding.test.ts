// Followers as edges (issue 21 item 3, CONTRACT.md §12): a write sent to any node of a cluster is
// validated there and, on a follower, forwarded to the leader, whose answer the client gets. Real
// intake processes on the machine's PostgreSQL, one CLUSTER_NAME per cluster; where a test needs
// the connection between a follower and the leader to misbehave, the leader advertises a fault
// proxy (test/helpers/fault-proxy.ts) in front of itself (CLUSTER_ADVERTISE_URL). The suite runs
// once with HTTP_THREADS=1 (the main thread forwards) and once with HTTP_THREADS=2 (edge threads
// hand writes to the state thread, which forwards them).
import http from 'node:http';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { freePort } from '../bench/lib/sink-servers.ts';
import { startFaultProxy, type Action, type FaultProxy } from './helpers/fault-proxy.ts';
import { FORWARD_PATH, FORWARD_SECRET_HEADER } from '../src/cluster/forward-protocol.ts';
import { exportLines, LAUNCH_INFO, rawExchange, T0, type Response } from './helpers/server.ts';
import { clustersOfThisFile, type TestCluster, type TestNode } from './helpers/cluster.ts';
import { until } from './helpers/wait.ts';

const cluster = clustersOfThisFile();

/** A forwarded frame with at least one command (a probe's empty frame is a few dozen bytes). */
function carriesCommands(headers: { 'content-length'?: string | undefined }): boolean {
  return Number(headers['content-length'] ?? 0) > 100;
}

const WHATS = ['events', 'devices', 'customers', 'products', 'collections'];

/** The two nodes' exports are the same once the follower has applied all the leader committed. */
async function sameState(leader: TestNode, follower: TestNode): Promise<void> {
  const applied = (await leader.status()).appliedSeq;
  await until('the follower to apply everything', async () => (await follower.status()).appliedSeq === applied);
  for (const what of WHATS) assert.deepEqual(exportLines(follower.dataDir, what), exportLines(leader.dataDir, what), `${what}: the follower's export equals the leader's`);
}

/** A cluster whose leader `a` is reached by the followers through a fault proxy. */
async function proxiedCluster(c: TestCluster): Promise<{ a: TestNode; b: TestNode; proxy: FaultProxy; plan: { action: (seen: { headers: Record<string, string | string[] | undefined> }) => Action } }> {
  const port = await freePort();
  const plan = { action: (_seen: { headers: Record<string, string | string[] | undefined> }): Action => ({ kind: 'pass' }) };
  const proxy = await startFaultProxy(`http://127.0.0.1:${port}`, (seen) => plan.action(seen));
  const a = await c.add({ env: { PORT: String(port), CLUSTER_ADVERTISE_URL: proxy.url } });
  assert.equal(await c.leader(), a);
  const b = await c.add();
  await until('the follower to reach the leader', async () => (await b.request('/readyz', undefined, { key: null })).status === 200);
  return { a, b, proxy, plan };
}

/** POSTs `body` whole to the forward endpoint as a follower does (node:http): 'status N', or the error's code. */
function postWhole(port: number, body: Buffer, secret: string): Promise<string> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: FORWARD_PATH, method: 'POST', agent: false, headers: { [FORWARD_SECRET_HEADER]: secret, 'content-type': 'application/octet-stream', 'content-length': body.length } }, (res) => {
      res.resume();
      res.on('end', () => resolve(`status ${res.statusCode}`));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(`error ${error.code ?? error.message}`));
    req.end(body);
  });
}

function retryAfter(res: Response): string | null {
  return res.headers.get('retry-after');
}

// With HTTP_THREADS=2 the edge threads hold the connections: they read every such body to its
// end before the state thread said 401, until the state thread posted them the admission (found
// by a review of the edge threads, 2026-11-25).
for (const threads of ['1', '2']) {
  test(`the forward endpoint answers a wrong cluster secret 401 without keeping the body (it kept up to its limit, 16 MiB or more, for anyone who could reach the port), from the header when it is announced past the limit; HTTP_THREADS=${threads}`, async () => {
    const c = cluster({ HTTP_THREADS: threads });
    const a = await c.add();
    assert.equal(await c.leader(), a);
    // Headers only, announcing 50 MB that never come: the answer must not wait for them.
    const head = `POST ${FORWARD_PATH} HTTP/1.1\r\nhost: x\r\n${FORWARD_SECRET_HEADER}: not-the-secret\r\ncontent-length: 50000000\r\n\r\n`;
    const { data } = await rawExchange(a.port, [head], 2_000);
    assert.match(data, /^HTTP\/1\.1 401 /, `answered at once: ${JSON.stringify(data.slice(0, 200))}`);
    // A frame of 4 MB with a stale secret, sent whole as a follower sends it: the 401 reaches the
    // sender (the body is counted, not kept). Answered at once with the connection closed, the
    // sender mostly got EPIPE instead, and took its frame for "may have been applied" (a review).
    for (let i = 0; i < 3; i++) {
      const outcome = await postWhole(a.port, Buffer.alloc(4 * 1024 * 1024, 'x'), 'stale-secret');
      assert.equal(outcome, 'status 401', `try ${i}: the answer, not a broken pipe`);
    }
    // A follower with this epoch's secret still gets its writes through the same edges.
    const b = await c.add();
    await until('the follower to reach the leader', async () => (await b.request('/readyz', undefined, { key: null })).status === 200);
    assert.equal((await b.post('/product', { id: 'via-follower', name: 'P' })).status, 200);

    // A node that does not lead cannot judge the secret (a follower that has not seen a leader
    // change sends it the epoch it knows), so it answers 503. It used to keep a forward's body
    // up to its limit first, for anyone (review, 2026-11-28); it now drops the body as it comes,
    // and one announced past the limit gets its 503 at once (it waited for 16 MiB of it).
    const declared = await rawExchange(b.port, [head], 2_000);
    assert.match(declared.data, /^HTTP\/1\.1 503 /, `a follower answers a forward past the limit at once: ${JSON.stringify(declared.data.slice(0, 200))}`);
    // A body it reads (chunked, 1 MiB) gets a 503 on a connection that stays open: what a
    // follower with a stale leader sends, and it must see a clean 503, not a reset.
    const chunkBytes = 1024 * 1024;
    const chunked = await rawExchange(b.port, [`POST ${FORWARD_PATH} HTTP/1.1\r\nhost: x\r\n${FORWARD_SECRET_HEADER}: s\r\ntransfer-encoding: chunked\r\n\r\n${chunkBytes.toString(16)}\r\n${'x'.repeat(chunkBytes)}\r\n0\r\n\r\n`], 1_000);
    assert.match(chunked.data, /^HTTP\/1\.1 503 /, chunked.data.slice(0, 200));
    assert.match(chunked.data, /retry-after: 1/i);
    assert.equal(chunked.closed, false, 'a forward to a follower gets its 503 on a connection that stays open');
  });
}

for (const threads of ['1', '2']) {
  describe(`followers forward writes to the leader (HTTP_THREADS=${threads})`, () => {
    test('a write sent to a follower gets the leader\'s answer (200, a launch\'s did and sid, 422 from the state, a batch), in order, and is in both nodes\' state; an Idempotency-Key retried through another node replays', async () => {
      const c = cluster({ HTTP_THREADS: threads });
      const a = await c.add();
      assert.equal(await c.leader(), a);
      const b = await c.add();
      await until('/readyz 200 on the follower (a leader answers it)', async () => (await b.request('/readyz', undefined, { key: null })).status === 200);
      assert.equal((await b.status()).role, 'follower');

      // A first launch through the follower: the leader's did and sid; then that device's writes,
      // each sent after the previous answer (one connection's order).
      const launched = await b.post<{ did: string; sid: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO });
      assert.equal(launched.status, 200, launched.text);
      assert.match(launched.body.did, /^[A-Za-z0-9_-]{21}$/);
      assert.match(launched.body.sid, /^[A-Za-z0-9_-]{21}$/);
      const did = launched.body.did;
      for (let i = 0; i < 5; i++) {
        const res = await b.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 + i });
        assert.equal(res.status, 200, res.text);
        assert.deepEqual(res.body, { success: true });
      }
      assert.equal((await b.post('/msv_cs_id', { did, clientCustomerId: 'cust-1', timestamp: T0, info: [] })).status, 200);
      assert.equal((await b.post('/product', { id: 'p1', name: 'P', price: 1 })).status, 200);
      assert.equal((await b.post('/collection', { id: 'c1', name: 'C' })).status, 200);
      assert.equal((await b.post('/collection/c1/products/add', { products: ['p1'] })).status, 200);

      // 422s: the state's (an unknown did, a missing product) come from the leader, the schema's
      // from the follower itself; each is exactly what the leader answers.
      for (const [path, body] of [
        ['/msv_cevt', { did: 'nobody-has-this-did-00', name: 'e', timestamp: T0 }],
        ['/collection/c1/products/add', { products: ['p1', 'missing'] }],
        ['/msv_cevt', { did, timestamp: T0 }],
      ] as const) {
        const viaFollower = await b.post(path, body);
        const direct = await a.post(path, body);
        assert.equal(viaFollower.status, 422, viaFollower.text);
        assert.deepEqual(viaFollower.body, direct.body, `${path}: the follower answers what the leader does`);
      }

      // A batch through the follower: its items applied in order on the leader.
      const batch = await b.post<{ results: Array<{ status: number }> }>('/batch', {
        requests: [
          { method: 'POST', path: '/product', body: { id: 'p2', name: 'Q' } },
          { method: 'POST', path: '/collection/c1/products/add', body: { products: ['p2'] } },
          { method: 'POST', path: '/msv_cevt', body: { did: 'nobody-has-this-did-00', name: 'x', timestamp: T0 } },
        ],
      });
      assert.equal(batch.status, 200, batch.text);
      assert.deepEqual(batch.body.results.map((r) => r.status), [200, 200, 422]);

      // An app launch with an Idempotency-Key through the follower, retried on the leader and on
      // the follower: the same did and sid, replayed; one device more, not three.
      const first = await b.request<{ did: string; sid: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }, { headers: { 'idempotency-key': 'launch-k' } });
      assert.equal(first.status, 200);
      for (const node of [a, b]) {
        const again = await node.request<{ did: string; sid: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }, { headers: { 'idempotency-key': 'launch-k' } });
        assert.equal(again.status, 200);
        assert.deepEqual(again.body, first.body);
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
      }
      // The other way round: a key first used on the leader, retried through the follower.
      const onLeader = await a.request('/product', { id: 'p3', name: 'R' }, { headers: { 'idempotency-key': 'product-k' } });
      assert.equal(onLeader.status, 200);
      const retried = await b.request('/product', { id: 'p3', name: 'R' }, { headers: { 'idempotency-key': 'product-k' } });
      assert.equal(retried.status, 200);
      assert.equal(retried.headers.get('idempotent-replayed'), 'true');
      const reused = await b.request('/product', { id: 'other', name: 'O' }, { headers: { 'idempotency-key': 'product-k' } });
      assert.equal(reused.status, 422);

      await sameState(a, b);
      const events = exportLines(a.dataDir, 'events', '--kind', 'event').filter((e) => e.data.did === did).map((e) => e.data.name as string);
      assert.deepEqual(events, ['e0', 'e1', 'e2', 'e3', 'e4'], 'one connection\'s writes in the order it sent them');
      assert.equal(exportLines(a.dataDir, 'devices').length, 2, 'the keyed launch made one device');
    });

    test('a forward whose answer is lost is sent again and applied exactly once; /readyz on a follower is 503 while it cannot reach a leader, and writes get 503 with Retry-After after the deadline', async () => {
      const c = cluster({ HTTP_THREADS: threads, CLUSTER_FORWARD_TIMEOUT_MS: '1500' });
      const { a, b, proxy, plan } = await proxiedCluster(c);

      // The leader applies the first frame, and the proxy drops the connection instead of
      // answering: the follower sends the same commands again and gets the leader's first answer.
      let dropped = 0;
      plan.action = (seen) => (carriesCommands(seen.headers) && dropped++ === 0 ? { kind: 'drop-after' } : { kind: 'pass' });
      const before = (await a.status()).appliedSeq;
      const res = await b.post('/product', { id: 'once', name: 'Once', price: 1 });
      assert.equal(res.status, 200, res.text);
      const forwards = proxy.seen.filter((s) => carriesCommands(s.headers));
      assert.equal(forwards[0]?.action, 'drop-after');
      assert.equal(forwards[0]?.upstreamStatus, 200, 'the leader answered the first POST (its answer was lost)');
      assert.ok(forwards.length >= 2, 'the follower sent it again');
      const upserts = exportLines(a.dataDir, 'events', '--kind', 'product_upsert').filter((e) => e.data.id === 'once');
      assert.equal(upserts.length, 1, 'applied exactly once');
      assert.equal((await a.status()).appliedSeq, before + 1);

      // No leader reachable: a write waits out CLUSTER_FORWARD_TIMEOUT_MS and gets 503 with
      // Retry-After; nothing is applied. /readyz is 503 on the follower (not on the leader) once
      // the leader has not answered for 3 s.
      plan.action = () => ({ kind: 'drop-before' });
      const started = performance.now();
      const refused = await b.post('/product', { id: 'unreachable', name: 'U' });
      assert.equal(refused.status, 503, refused.text);
      assert.equal(retryAfter(refused), '1');
      assert.ok(performance.now() - started >= 1000, 'it waited for a leader first');
      // Refusing writes at once now (no leader for the whole 1.5 s deadline): not ready, though
      // the leader answered less than 3 s ago.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const notReady = await b.request('/readyz', undefined, { key: null });
      assert.equal(notReady.status, 503, notReady.text);
      assert.match(notReady.text, /cannot reach the cluster's leader to forward writes/);
      assert.equal((await a.request('/readyz', undefined, { key: null })).status, 200);
      // Unreachable for longer than the deadline: refused at once, before the body is read.
      await new Promise((resolve) => setTimeout(resolve, 1600));
      const early = performance.now();
      const fast = await b.post('/product', { id: 'unreachable-2', name: 'U' });
      assert.equal(fast.status, 503);
      assert.equal(retryAfter(fast), '1');
      assert.ok(performance.now() - early < 500, 'refused at once once the leader has been out of reach past the deadline');

      // Reachable again: ready, and writes go through.
      plan.action = () => ({ kind: 'pass' });
      await until('/readyz 200 on the follower again', async () => (await b.request('/readyz', undefined, { key: null })).status === 200, 5_000);
      assert.equal((await b.post('/product', { id: 'after', name: 'A' })).status, 200);
      const ids = exportLines(a.dataDir, 'events', '--kind', 'product_upsert').map((e) => e.data.id as string);
      assert.equal(ids.includes('unreachable') || ids.includes('unreachable-2'), false, 'a write refused with 503 here was not applied');
      await sameState(a, b);
      await proxy.close();
    });

    test('a follower stopped gracefully (SIGTERM) while its writes are in flight to the leader answers each of them 503 with Retry-After', async () => {
      const c = cluster({ HTTP_THREADS: threads });
      const { b, proxy, plan } = await proxiedCluster(c);
      // The leader never answers (the proxy holds the POST): the follower cannot know whether it
      // applied the writes. Before, a stop cut the POST and put its writes back in a queue that no
      // longer flushed: the clients got no answer at all.
      plan.action = (seen) => (carriesCommands(seen.headers) ? { kind: 'hang' } : { kind: 'pass' });
      const sent = Array.from({ length: 4 }, (_, i) => b.request('/product', { id: `p${i}`, name: 'P' }, { timeoutMs: 15_000 }).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error)))));
      await until('the writes to be in flight to the leader', async () => proxy.seen.some((s) => carriesCommands(s.headers)));
      const exit = b.stop();
      const answers = await Promise.all(sent);
      for (const res of answers) {
        assert.ok(!(res instanceof Error), `an answer, not ${res instanceof Error ? res.message : ''}`);
        assert.equal(res.status, 503, res.text);
        assert.equal(retryAfter(res), '1');
        assert.match(res.text, /shutting down/);
      }
      // Those in flight cannot say that nothing was applied (a write not yet sent may).
      assert.ok(answers.some((res) => !(res instanceof Error) && res.text.includes('the leader did not answer, the write may or may not have been applied')), 'the writes in flight: "may or may not have been applied"');
      assert.equal(await exit, 0);
      await proxy.close();
    });

    // Every way of going away with edge threads (the forwarding path of issue 21); one with a
    // single thread, whose forwarding is the same link without the edges' relay (suite time).
    for (const signal of threads === '2' ? (['SIGTERM', 'SIGKILL', 'SIGSTOP'] as const) : (['SIGKILL'] as const)) test(`the leader goes away (${signal}) while writes go through followers: each waits and then gets 200 from the new leader, or 503 with Retry-After; every 200 is in the journal, once`, async () => {
      const c = cluster({ HTTP_THREADS: threads });
      const a = await c.add();
      assert.equal(await c.leader(), a);
      const b = await c.add();
      const d = await c.add();
      for (const follower of [b, d]) await until('the followers to reach the leader', async () => (await follower.request('/readyz', undefined, { key: null })).status === 200);
      const answers: Array<{ id: string; keyed: boolean; status: number; retryAfter: string | null; error?: string }> = [];
      let stop = false;
      // Four clients, two per follower, half of their writes with an Idempotency-Key.
      const client = async (w: number): Promise<void> => {
        const node = w % 2 === 0 ? b : d;
        for (let i = 0; !stop; i++) {
          const id = `w${w}-${i}`;
          const keyed = i % 2 === 0;
          try {
            const res = await node.request('/product', { id, name: 'N' }, { headers: keyed ? { 'idempotency-key': id } : {}, timeoutMs: 20_000 });
            answers.push({ id, keyed, status: res.status, retryAfter: retryAfter(res) });
          } catch (error) {
            // A follower must answer every write: recorded, and asserted below.
            answers.push({ id, keyed, status: 0, retryAfter: null, error: (error as Error).message });
          }
        }
      };
      const clients = Array.from({ length: 4 }, (_, w) => client(w));
      let leader: TestNode;
      let stopped: Promise<number | null>;
      try {
        await until('writes through the followers', async () => answers.length > 40);
        // SIGTERM: a graceful stop hands the lease over; SIGKILL: forwards in flight are cut off
        // (they may have been applied), and the lease runs out first; SIGSTOP: forwards in flight
        // get no answer at all, and are given up on once another node leads.
        stopped = signal === 'SIGTERM' ? a.stop() : signal === 'SIGKILL' ? a.kill().then(() => 0) : Promise.resolve(0);
        if (signal === 'SIGSTOP') a.child.kill('SIGSTOP');
        // The stopping leader may still say it leads for a moment: the new one is b or d.
        leader = await until('a new leader', async () => {
          for (const node of [b, d]) if ((await node.status()).role === 'leader' && (await node.request('/readyz', undefined, { key: null })).status === 200) return node;
          return null;
        }, 10_000);
        const atChange = answers.length;
        await until('writes through the followers after the change', async () => answers.filter((x, i) => i >= atChange && x.status === 200).length > 40);
      } finally {
        stop = true;
        await Promise.all(clients);
      }
      assert.equal(await stopped, 0);

      const unexpected = answers.filter((x) => x.status !== 200 && !(x.status === 503 && x.retryAfter === '1'));
      assert.deepEqual(unexpected, [], 'every write is answered 200, or 503 with Retry-After');
      const journal = exportLines(leader.dataDir, 'events', '--kind', 'product_upsert').map((e) => e.data.id as string);
      const inJournal = new Set(journal);
      assert.equal(inJournal.size, journal.length, 'no write applied twice');
      const ok = answers.filter((x) => x.status === 200);
      for (const x of ok) assert.ok(inJournal.has(x.id), `${x.id} was answered 200, so it is in the journal`);
      assert.ok(ok.length > 80, `${ok.length} writes answered 200`);
      for (const follower of [b, d]) if (follower !== leader) await sameState(leader, follower);
    });
  });
}

test('a follower whose leader stops answering stays ready for CLUSTER_LEASE_MS + 2 s (writes sent to it are held for the new leader), then /readyz is 503', async () => {
  // A 2 s lease: ready for 4 s after the leader last answered.
  const c = cluster({ HTTP_THREADS: '1', CLUSTER_LEASE_MS: '2000', CLUSTER_FORWARD_TIMEOUT_MS: '10000' });
  const { b, plan } = await proxiedCluster(c);
  assert.equal((await b.post('/product', { id: 'before-cut', name: 'n' })).status, 200);
  plan.action = () => ({ kind: 'drop-before' });
  const cutAt = performance.now();
  // A write at once: its forward fails, so the follower knows right away (before 2026-11-29 that
  // made it unready at once, taking it out of the load balancer while its leader was replaced).
  const held = b.post('/product', { id: 'held', name: 'n' });
  let firstNotReadyMs: number | null = null;
  while (firstNotReadyMs === null && performance.now() - cutAt < 8_000) {
    if ((await b.request('/readyz', undefined, { key: null })).status === 503) firstNotReadyMs = performance.now() - cutAt;
    else await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.ok(firstNotReadyMs !== null, 'not ready within 8 s of the cut');
  assert.ok(firstNotReadyMs >= 3_200 && firstNotReadyMs <= 5_500, `not ready ${Math.round(firstNotReadyMs)} ms after the cut (4 s after the leader last answered)`);
  const notReady = await b.request('/readyz', undefined, { key: null });
  assert.match(notReady.text, /cannot reach the cluster's leader/, notReady.text);
  plan.action = () => ({ kind: 'pass' });
  assert.equal((await held).status, 200, 'the held write went to the leader once it answered again');
  await until('/readyz 200 again', async () => (await b.request('/readyz', undefined, { key: null })).status === 200, 5_000);
});

test('writes held while the leader was away go to it in frames its limit takes, counted in UTF-8 bytes (CJK text: three bytes a character)', async () => {
  // MAPPING_BODY_LIMIT_BYTES at 4 MiB: the leader's forward limit is then 5 MiB. Frames were
  // packed up to 4 Mi UTF-16 units, about 11 MiB of CJK text: 413, and every write in the frame
  // got 503 (found by a review).
  // The follower's hold of a write is the default's (lease + 3 s = 4 s) no more: this test is
  // about frames, and 15 MB of CJK text parsed and forwarded on a busy machine can take longer.
  // A 3 s lease: on a machine busy with other test files, a 1 s lease could lapse while 15 MB
  // are parsed, and a leader change answer some writes 503 (seen once in a suite run, 2026-11-30).
  const c = cluster({ MAPPING_BODY_LIMIT_BYTES: String(4 * 1024 * 1024), CLUSTER_FORWARD_TIMEOUT_MS: '25000', CLUSTER_LEASE_MS: '3000' });
  const { a, b, proxy, plan } = await proxiedCluster(c);
  const did = (await b.post<{ did: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO })).body.did;
  const cjk = (n: number, seed: number) => Array.from({ length: n }, (_, i) => String.fromCharCode(0x4e00 + ((seed * 131 + i) % 20_000))).join('');
  const info = Array.from({ length: 256 }, (_, i) => ({ name: cjk(120, i), value: cjk(100, i + 7), type: 'string' }));
  const body = (k: number) => JSON.stringify({ did, name: `ev${k}`, timestamp: T0, info });
  assert.ok(Buffer.byteLength(body(0)) > 2.5 * body(0).length, 'mostly three-byte characters');
  // The leader is away for a second (503 from it): the follower holds the writes, then sends them together.
  plan.action = (seen) => (carriesCommands(seen.headers) ? { kind: 'status', status: 503, headers: { 'retry-after': '1' } } : { kind: 'pass' });
  const sent = Array.from({ length: 80 }, (_, k) => b.request('/msv_cevt', undefined, { raw: body(k), headers: { 'content-type': 'application/json' }, timeoutMs: 30_000 }));
  await new Promise((resolve) => setTimeout(resolve, 1000));
  plan.action = () => ({ kind: 'pass' });
  const statuses = (await Promise.all(sent)).map((res) => res.status);
  assert.deepEqual(statuses, statuses.map(() => 200));
  const forwarded = proxy.seen.filter((s) => s.action === 'pass' && carriesCommands(s.headers));
  assert.ok(forwarded.length >= 3, 'in several frames');
  for (const s of forwarded) assert.equal(s.upstreamStatus, 200, `a frame of ${String(s.headers['content-length'])} bytes`);
  await sameState(a, b);
  await proxy.close();
});

test('nodes listening on an IPv6 address advertise it in brackets: a write sent to the follower is forwarded and lands', async () => {
  // `http://::1:<port>` (no brackets) is no URL: every write sent to a follower waited out the
  // forward timeout, then 503 (found by a review).
  const c = cluster({ HOST: '::1' });
  const a = await c.add();
  assert.equal(await c.leader(), a);
  const b = await c.add();
  await until('b follows a', async () => (await b.status()).role === 'follower' && (await b.request('/readyz', undefined, { key: null })).status === 200);
  const res = await b.post('/product', { id: 'over-ipv6', name: 'n' });
  assert.equal(res.status, 200, res.text);
  await sameState(a, b);
  assert.ok(exportLines(a.dataDir, 'products').some((p: { id: string }) => p.id === 'over-ipv6'), 'applied by the leader');
});

test('a node started with the NODE_NAME of the live leader says so: an error in its log, and /readyz names the clash (it said only "no leader is known")', async () => {
  const c = cluster();
  const a = await c.add({ nodeName: 'twin' });
  assert.equal(await c.leader(), a);
  const b = await c.add({ nodeName: 'twin' });
  const line = await b.waitForLog((l) => l.includes('under this node\'s name (twin)'), 10_000);
  assert.match(line, /"level":50/);
  assert.match(line, /another node uses this NODE_NAME/);
  await until('/readyz names the clash', async () => {
    const ready = await b.request('/readyz', undefined, { key: null });
    return ready.status === 503 && ready.text.includes('own name (twin)') && ready.text.includes('give every node its own NODE_NAME');
  });
  assert.equal((await c.leader()).port, a.port, 'the first one still leads');
});
