// Delivery downstream (CONTRACT.md §11): one suite, run against every sink (NATS JetStream and
// PostgreSQL), with the real servers. What a sink holds is compared with what
// `npm run export -- events` prints: the same records, in seq order, each exactly once (NATS:
// the same bytes). Outage tests stop (or freeze, or restore from a backup) a NATS or PostgreSQL
// server of their own, never the shared one.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, KEY_A, KEY_B, launch, runCli, startServer, T0, type TestServer } from './helpers/server.ts';
import { SINK_HARNESSES, waitForHeld, type SinkHarness, type SinkTarget } from './helpers/sinks.ts';
import { metric, until } from './helpers/wait.ts';

/** Every kind of write, in both workspaces; returns how many were answered 200 (all of them). */
async function writeEveryKind(server: TestServer, tag: string): Promise<number> {
  let ok = 0;
  const expect200 = (res: { status: number; text: string }): void => {
    assert.equal(res.status, 200, res.text);
    ok++;
  };
  const a = await launch(server);
  ok++;
  const b = await launch(server, undefined, KEY_B);
  ok++;
  expect200(await server.post('/msv_cevt', { did: a.did, name: `view-${tag}`, timestamp: T0, info: [{ name: 'sku', value: 'é"\\', type: 'string' }] }));
  expect200(await server.post('/msv_cs_id', { did: a.did, clientCustomerId: `c-${tag}`, timestamp: String(T0), info: [{ name: 'email', value: 'a@b.c', type: 'string' }] }));
  expect200(await server.post('/msv_cevt', { did: a.did, name: 'after-identify', timestamp: T0 }));
  expect200(await server.post('/mpush_token', { did: b.did, type: 'fcm', token: 'tok', timestamp: T0 }, KEY_B));
  expect200(await server.post('/product', { id: `p-${tag}`, name: 'Shoe', price: 10.5, status: 'inStock' }));
  expect200(await server.post('/product', { id: `q-${tag}`, name: 'Sock', description: null }));
  expect200(await server.post('/collection', { id: `c-${tag}`, name: 'Sale' }));
  expect200(await server.post(`/collection/c-${tag}/products/add`, { products: [`p-${tag}`, `q-${tag}`, `p-${tag}`] }));
  expect200(await server.post(`/collection/c-${tag}/products/remove`, { products: [`q-${tag}`] }));
  expect200(await server.del(`/product/q-${tag}`));
  expect200(await server.del(`/collection/c-${tag}`));
  expect200(await server.post('/logout', { did: b.did }, KEY_B));
  return ok;
}

/** `concurrency` clients each sending track events in a loop; resolves with the 200 count when `stop()` says so. */
function keepWriting(server: TestServer, did: string, concurrency: number): { stop(): Promise<number> } {
  let stopping = false;
  let ok = 0;
  const client = async (): Promise<void> => {
    for (let i = 0; !stopping; i++) {
      try {
        const res = await server.post('/msv_cevt', { did, name: `load-${i}`, timestamp: T0 });
        if (res.status === 200) ok++;
      } catch {
        // the server was killed under us: an unanswered write
      }
    }
  };
  const clients = Array.from({ length: concurrency }, client);
  return {
    async stop() {
      stopping = true;
      await Promise.all(clients);
      return ok;
    },
  };
}

/** The sink holds exactly what the journal holds: same records, same order, once each. */
async function assertSinkEqualsJournal(server: TestServer, target: SinkTarget, timeoutMs = 30_000): Promise<number> {
  const exported = exportLines<Record<string, unknown>>(server.dataDir, 'events');
  const held = await waitForHeld(target, exported.length, timeoutMs);
  assert.equal(held.records.length, exported.length, 'no record twice');
  assert.deepEqual(held.records, exported);
  if (held.lines !== null) {
    const raw = runCli('export', ['events'], server.dataDir).stdout.split('\n').filter((l) => l !== '');
    assert.deepEqual(held.lines, raw, 'each message body is exactly the exported line');
  }
  return exported.length;
}

function sinkSuite(harness: SinkHarness): void {
  const targets: SinkTarget[] = [];
  const servers: TestServer[] = [];
  const newTarget = async (...args: Parameters<SinkHarness['target']>): Promise<SinkTarget> => {
    const target = await harness.target(...args);
    targets.push(target);
    return target;
  };
  const start = async (...args: Parameters<typeof startServer>): Promise<TestServer> => {
    const server = await startServer(...args);
    servers.push(server);
    return server;
  };
  after(async () => {
    for (const server of servers) await server.kill();
    for (const target of targets) await target.cleanup();
  });

  test('every kind of write arrives exactly once, in seq order, as the exported line', async () => {
    const target = await newTarget();
    // Small batches: the records cross many batch boundaries.
    const server = await start({ env: { ...target.env, DELIVERY_BATCH_RECORDS: '3' } });
    const written = (await writeEveryKind(server, 'x')) + (await writeEveryKind(server, 'y'));
    const delivered = await assertSinkEqualsJournal(server, target);
    assert.equal(delivered, written);
    await until('metrics to catch up', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);
    assert.equal(await metric(server, 'intake_sink_delivered_seq', { sink: harness.name }), delivered);
    assert.equal(await metric(server, 'intake_sink_up', { sink: harness.name }), 1);
    assert.ok((await metric(server, 'intake_sink_batch_duration_seconds_count', { sink: harness.name }))! > 0);
    // A clean stop and start: nothing delivered again, new writes follow.
    assert.equal(await server.stop(), 0);
    const again = await start({ dataDir: server.dataDir, env: target.env });
    await writeEveryKind(again, 'z');
    await assertSinkEqualsJournal(again, target);
  });

  test('a backlog cut into batches by DELIVERY_BATCH_BYTES goes without waiting: only a sink that caught up lingers', async () => {
    // 40 records of about 2 KB, durable in one commit (one POST /batch): 16 KiB batches take 7
    // or 8 each. Before 2026-11-29 every batch short of DELIVERY_BATCH_RECORDS waited
    // DELIVERY_LINGER_MS, cut by bytes or not: 6 batches, 12 s at 2 s each. Now only the last
    // read, which reaches the durable end, waits (found by a review).
    const target = await newTarget();
    const server = await start({ env: { ...target.env, DELIVERY_BATCH_BYTES: '16384', DELIVERY_LINGER_MS: '2000' } });
    const requests = Array.from({ length: 40 }, (_, i) => ({ method: 'POST', path: '/product', body: { id: `big-${i}`, name: 'Big', description: 'd'.repeat(1_900) } }));
    const startedAt = performance.now();
    const res = await server.request<{ results: Array<{ status: number }> }>('/batch', { requests });
    assert.equal(res.status, 200, res.text);
    assert.ok(res.body.results.every((r) => r.status === 200), res.text.slice(0, 300));
    const delivered = await assertSinkEqualsJournal(server, target);
    assert.equal(delivered, 40);
    const tookMs = performance.now() - startedAt;
    assert.ok(tookMs < 8_000, `the backlog took ${Math.round(tookMs)} ms (one linger is 2,000)`);
    assert.ok((await metric(server, 'intake_sink_batch_duration_seconds_count', { sink: harness.name }))! >= 3, 'cut into several batches');
  });

  test('SIGKILL in the middle of delivery, then restart: no gap, no duplicate', async () => {
    // NATS: a 100 ms duplicate window, so the msg-id dedupe cannot be what keeps records single.
    const target = await newTarget(undefined, { duplicateWindowMs: 100 });
    // Tiny batches make delivery lag behind the writes, so each kill lands mid-delivery.
    const env = { ...target.env, DELIVERY_BATCH_RECORDS: '2' };
    let server = await start({ env });
    const { did } = await launch(server);
    for (let round = 0; round < 3; round++) {
      const load = keepWriting(server, did, 16);
      await until('delivery under way', async () => {
        const seq = await metric(server, 'intake_sink_delivered_seq', { sink: harness.name });
        return seq !== null && seq > round * 100 + 50;
      });
      await server.kill();
      await load.stop();
      server = await start({ dataDir: server.dataDir, env });
    }
    await assertSinkEqualsJournal(server, target, 60_000);
  });

  test('the sink server down for a while: writes keep their 200s and latency, then everything arrives once', async () => {
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own);
      const server = await start({ env: { ...target.env, DELIVERY_RETRY_MAX_MS: '200' } });
      const { did } = await launch(server);
      const timedWrites = async (n: number): Promise<number[]> => {
        const ms: number[] = [];
        for (let i = 0; i < n; i++) {
          const t0 = performance.now();
          const res = await server.post('/msv_cevt', { did, name: `e-${i}`, timestamp: T0 });
          ms.push(performance.now() - t0);
          assert.equal(res.status, 200, res.text);
        }
        return ms.sort((x, y) => x - y);
      };
      const before = await timedWrites(200);
      await until('sink confirmed the first writes', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);

      await own.stop();
      const during = await timedWrites(200);
      await until('sink reported down', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 0);
      assert.equal((await server.request('/readyz')).status, 200, 'a sink outage does not make the server unready');
      const moreDuring = await timedWrites(100);
      assert.ok((await metric(server, 'intake_sink_lag_records', { sink: harness.name }))! >= 300, 'the journal holds what is not delivered');

      const median = (ms: number[]): number => ms[Math.floor(ms.length / 2)]!;
      // The same closed loop of one client: a sink outage must not show in write latency.
      assert.ok(median(during) < median(before) * 2 + 5, `median write ${median(during).toFixed(2)} ms during the outage vs ${median(before).toFixed(2)} ms before`);
      assert.ok(median(moreDuring) < median(before) * 2 + 5, `median write ${median(moreDuring).toFixed(2)} ms later in the outage vs ${median(before).toFixed(2)} ms before`);

      await own.start();
      await assertSinkEqualsJournal(server, target);
      await until('sink reported up', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 1);
      const about = (msg: string) => server.logs().filter((line) => line.includes(`"sink":"${harness.name}"`) && line.includes(msg));
      assert.equal(about('sink down').length, 1, 'one "down" line per outage');
      assert.equal(about('sink back').length, 1, 'one "back" line per outage');
    } finally {
      await own.stop();
    }
  });

  test('the sink server stopped while there is nothing to deliver: reported down then (intake_sink_up 0, one "down" line), not at the next record; back when it is', async () => {
    // Before 2026-11-29 an idle loop only re-read the journal: after 10 s of NATS down the metric
    // still said up, and nothing was logged until a write came (found by a review).
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own);
      const server = await start({ env: { ...target.env, DELIVERY_RETRY_MAX_MS: '200' } });
      const { did } = await launch(server);
      assert.equal((await server.post('/msv_cevt', { did, name: 'before', timestamp: T0 })).status, 200);
      await until('delivered', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);
      assert.equal(await metric(server, 'intake_sink_up', { sink: harness.name }), 1);
      await own.stop();
      await until('reported down with nothing written since', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 0, 5_000);
      const about = (msg: string) => server.logs().filter((line) => line.includes(`"sink":"${harness.name}"`) && line.includes(msg));
      assert.equal(about('sink down').length, 1, 'one "down" line');
      await own.start();
      await until('reported up again', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 1, 10_000);
      assert.equal(about('sink back').length, 1, 'one "back" line');
      assert.equal((await server.post('/msv_cevt', { did, name: 'after', timestamp: T0 })).status, 200);
      await assertSinkEqualsJournal(server, target);
    } finally {
      await own.stop();
    }
  });

  test('the sink server killed twice under a stream of concurrent writes: every record once, in order', async () => {
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own, { duplicateWindowMs: 100 });
      const server = await start({ env: { ...target.env, DELIVERY_BATCH_RECORDS: '50', DELIVERY_RETRY_MAX_MS: '100' } });
      const { did } = await launch(server);
      const load = keepWriting(server, did, 16);
      for (let round = 0; round < 2; round++) {
        // While batches are in flight: some publishes or inserts are cut off part-way.
        await until('delivery under way', async () => ((await metric(server, 'intake_sink_delivered_seq', { sink: harness.name })) ?? 0) > 200 * (round + 1));
        await own.kill();
        await new Promise((resolve) => setTimeout(resolve, 300));
        await own.start();
      }
      const ok = await load.stop();
      assert.ok(ok > 400, `${ok} writes answered 200`);
      await assertSinkEqualsJournal(server, target, 60_000);
    } finally {
      await own.stop();
    }
  });

  test('a sink that lost its newest records (a restored backup, a crash of its host) gets them again, once each', async () => {
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own, { duplicateWindowMs: 100 });
      const server = await start({ env: { ...target.env, DELIVERY_RETRY_MAX_MS: '100' } });
      const first = await writeEveryKind(server, 'a');
      await assertSinkEqualsJournal(server, target);
      // A backup of the sink's server (PostgreSQL: rows and intake's position row; NATS: the
      // stream's store), then more records.
      await own.backup();
      await writeEveryKind(server, 'b');
      const all = await assertSinkEqualsJournal(server, target);
      assert.equal(await server.stop(), 0);
      // The backup is restored: the sink loses everything after the first records, while
      // intake saved a later position.
      await own.restoreBackup();
      assert.equal((await target.read()).records.length, first);
      const again = await start({ dataDir: server.dataDir, env: target.env });
      await again.waitForLog((line) => line.includes('holds fewer records than it confirmed'), 10_000);
      await writeEveryKind(again, 'c');
      assert.ok((await assertSinkEqualsJournal(again, target)) > all);
    } finally {
      await own.stop();
    }
  });

  test('a stream or table deleted (and created again by intake) gets every record from seq 1, with or without a restart of intake', async () => {
    const target = await newTarget();
    const env = { ...target.env, DELIVERY_RETRY_MAX_MS: '100' };
    let server = await start({ env });
    await writeEveryKind(server, 'a');
    await assertSinkEqualsJournal(server, target);
    await until('the position saved', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);
    await new Promise((resolve) => setTimeout(resolve, 300));

    // Deleted while intake runs: the next batch finds it gone, and intake creates it again.
    await target.drop();
    await writeEveryKind(server, 'b');
    await assertSinkEqualsJournal(server, target);
    await server.waitForLog((line) => line.includes('holds none of the records it confirmed'));

    // Deleted while intake is stopped (e.g. the sink URL now names a fresh database).
    assert.equal(await server.stop(), 0);
    await target.drop();
    server = await start({ dataDir: server.dataDir, env });
    await assertSinkEqualsJournal(server, target);
    await writeEveryKind(server, 'c');
    await assertSinkEqualsJournal(server, target);
    await until('no lag', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);
  });

  test('a consumer that removes what it reads gets every record exactly once, across dropped connections and intake crashes', async () => {
    const own = await harness.startOwnServer();
    try {
      // NATS: a WorkQueue stream (a message goes once acknowledged) with a 100 ms duplicate
      // window, so the msg-id dedupe cannot hide a record sent twice. PostgreSQL: DELETE … RETURNING.
      const target = await newTarget(own, { duplicateWindowMs: 100, removes: true });
      const env = { ...target.env, DELIVERY_BATCH_RECORDS: '50', DELIVERY_RETRY_MAX_MS: '100' };
      const consumer = target.consume();
      let server = await start({ env });
      const { did } = await launch(server);
      let load = keepWriting(server, did, 8);
      /** Waits until the consumer got `n` more records. */
      const more = async (n: number): Promise<void> => {
        const target = consumer.seqs().length + n;
        await until(`the consumer got ${target} records`, async () => consumer.seqs().length >= target, 30_000);
      };
      // Intake's connection dropped under load (PostgreSQL: its backend ended; NATS: the server
      // restarted): the sink holds little or nothing of what it was given when intake is back.
      for (let round = 1; round <= 3; round++) {
        await more(200);
        await harness.dropConnections(own);
      }
      // Intake killed under load, and the consumer takes everything before it starts again:
      // the sink holds nothing, and the position intake saved is behind what the sink got.
      for (let crash = 1; crash <= 3; crash++) {
        await more(200);
        await server.kill();
        await load.stop();
        let seen = -1;
        let since = 0;
        await until('the consumer took everything (nothing new for 500 ms)', async () => {
          const now = consumer.seqs().length;
          if (now !== seen) [seen, since] = [now, performance.now()];
          return performance.now() - since > 500;
        });
        server = await start({ dataDir: server.dataDir, env });
        load = keepWriting(server, did, 8);
      }
      await more(200);
      await load.stop();
      const exported = exportLines<{ seq: number }>(server.dataDir, 'events').map((r) => r.seq);
      await until('every record consumed', async () => consumer.seqs().length >= exported.length, 30_000);
      await until('no lag', async () => (await metric(server, 'intake_sink_lag_records', { sink: harness.name })) === 0);
      await new Promise((resolve) => setTimeout(resolve, 500)); // a record sent twice would show up
      const seqs = await consumer.stop();
      assert.deepEqual([...seqs].sort((a, b) => a - b), exported, 'every record once');
    } finally {
      await own.stop();
    }
  });

  test('the sink server frozen (SIGSTOP) under writes: marked down and stalled within the stall timeout, then everything once, in order', async () => {
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own, { duplicateWindowMs: 100 });
      const server = await start({ env: { ...target.env, DELIVERY_STALL_TIMEOUT_MS: '1000', DELIVERY_RETRY_MAX_MS: '200', DELIVERY_BATCH_RECORDS: '100' } });
      const { did } = await launch(server);
      const load = keepWriting(server, did, 8);
      await until('delivery under way', async () => ((await metric(server, 'intake_sink_delivered_seq', { sink: harness.name })) ?? 0) > 200);
      assert.equal((await metric(server, 'intake_sink_stalls_total', { sink: harness.name })) ?? 0, 0);
      // The connection stays open and nothing answers: no error ever comes (NATS would wait 10 s
      // for an ack, PostgreSQL 30 s for a query).
      own.freeze();
      const frozenAt = performance.now();
      await until('sink down', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 0, 10_000);
      const downAfterMs = performance.now() - frozenAt;
      assert.ok(downAfterMs < 3_000, `down after ${Math.round(downAfterMs)} ms`);
      assert.ok((await metric(server, 'intake_sink_stalls_total', { sink: harness.name }))! >= 1);
      const stalled = server.logs().filter((line) => line.includes(`"sink":"${harness.name}"`) && line.includes('sink stalled'));
      assert.equal(stalled.length, 1, 'one "sink stalled" line per outage');
      assert.ok(stalled[0]!.includes('"level":50'), 'logged as an error');
      await new Promise((resolve) => setTimeout(resolve, 2_000)); // retries meet the frozen server too
      own.resume();
      await new Promise((resolve) => setTimeout(resolve, 500));
      const ok = await load.stop();
      assert.ok(ok > 300, `${ok} writes answered 200`);
      await assertSinkEqualsJournal(server, target, 60_000);
      await until('sink up', async () => (await metric(server, 'intake_sink_up', { sink: harness.name })) === 1);
    } finally {
      await own.stop();
    }
  });

  test('retention keeps an undelivered tail, and trims it once delivered', async () => {
    const own = await harness.startOwnServer();
    try {
      const target = await newTarget(own);
      await own.stop();
      const env = { ...target.env, JOURNAL_RETENTION_SECONDS: '1', SNAPSHOT_INTERVAL_MS: '0', DELIVERY_RETRY_MAX_MS: '200' };
      const server = await start({ env });
      const { did } = await launch(server);
      for (let i = 0; i < 30; i++) assert.equal((await server.post('/msv_cevt', { did, name: `old-${i}`, timestamp: T0 })).status, 200);
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      // A snapshot covers every record and all are older than the retention: only the sink holds them back.
      server.child.kill('SIGUSR2');
      await server.waitForLog((line) => line.includes('snapshot written'), 10_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const kept = exportLines(server.dataDir, 'events');
      assert.equal(kept.length, 31);
      assert.equal(kept[0].seq, 1);
      assert.ok(!server.logs().some((line) => line.includes('journal trimmed')), 'nothing trimmed while undelivered');

      await own.start();
      await assertSinkEqualsJournal(server, target);
      // Delivered and old: the next trim may take them.
      assert.equal((await server.post('/msv_cevt', { did, name: 'new', timestamp: T0 })).status, 200);
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      server.child.kill('SIGUSR2');
      await server.waitForLog((line) => line.includes('journal trimmed'), 10_000);
      // Delivered, covered by the snapshot and older than the retention: all of them go.
      assert.deepEqual(exportLines(server.dataDir, 'events'), []);
    } finally {
      await own.stop();
    }
  });
}

for (const harness of SINK_HARNESSES) describe(`delivery to ${harness.name}`, () => sinkSuite(harness));
