// What one sink does that the other has no counterpart for (the shared suite is delivery.test.ts):
// NATS's max_payload and messages someone else published on the stream; PostgreSQL's refused
// characters, a table that belongs to another journal (and two intakes on one table), and
// schema-qualified tables.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import type pg from 'pg';
import { exportLines, launch, startServer, T0, type TestServer } from './helpers/server.ts';
import { startOwnNats } from '../bench/lib/sink-servers.ts';
import { openStore } from '../src/journal/store.ts';
import { natsHarness, postgresHarness, SHARED_POSTGRES_URL, waitForHeld, withClient, type SinkTarget } from './helpers/sinks.ts';
import { metric, until } from './helpers/wait.ts';

const servers: TestServer[] = [];
const targets: SinkTarget[] = [];
after(async () => {
  for (const server of servers) await server.kill();
  for (const target of targets) await target.cleanup();
});

async function start(env: Record<string, string>, dataDir?: string): Promise<TestServer> {
  const server = await startServer({ env, ...(dataDir === undefined ? {} : { dataDir }) });
  servers.push(server);
  return server;
}

describe('NATS sink', () => {
  test('a record over the server\'s max_payload stops delivery there (writes go on) until the limit is raised', async () => {
    const nats = await startOwnNats({ maxPayloadBytes: 2048 });
    try {
      const target = await natsHarness.target(nats);
      targets.push(target);
      const server = await start({ ...target.env, DELIVERY_RETRY_MAX_MS: '100' });
      assert.equal((await server.post('/product', { id: 'small', name: 'fits' })).status, 200);
      assert.equal((await server.post('/product', { id: 'big', name: 'x'.repeat(1900) })).status, 200);
      assert.equal((await server.post('/product', { id: 'after', name: 'waits its turn' })).status, 200);
      await server.waitForLog((line) => line.includes('sink down') && line.includes('max_payload'), 10_000);
      const held = await target.read();
      assert.deepEqual(held.records.map((r) => r.seq), [1], 'nothing after the record that does not fit');
      await until('up = 0', async () => (await metric(server, 'intake_sink_up', { sink: 'nats' })) === 0);

      // Retried with backoff all along, but one "down" line for the operator, not one per retry.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const lines = (msg: string) => server.logs().filter((line) => line.includes(msg)).length;
      assert.equal(lines('sink down'), 1);
      assert.equal(lines('sink back'), 0);

      await nats.restartWith({ maxPayloadBytes: 64 * 1024 });
      const all = await waitForHeld(target, 3);
      assert.deepEqual(all.records, exportLines(server.dataDir, 'events'));
      await until('"back" logged', async () => lines('sink back') === 1);
      assert.equal(lines('sink down'), 1);
    } finally {
      await nats.stop();
    }
  });

  test('a record over the stream\'s own max_msg_size (under the server\'s max_payload) stops delivery there with an error naming the record and the limit', async () => {
    // Before 2026-11-29 it went out mid-batch: JetStream refused it, the rest failed their chain
    // check, and the log said only "wrong last sequence" while delivery waited at it for good.
    const target = await natsHarness.target(undefined, { maxMsgBytes: 1024 });
    targets.push(target);
    const server = await start({ ...target.env, DELIVERY_RETRY_MAX_MS: '100' });
    assert.equal((await server.post('/product', { id: 'small', name: 'fits' })).status, 200);
    assert.equal((await server.post('/product', { id: 'big', name: 'x', description: 'd'.repeat(1500) })).status, 200);
    assert.equal((await server.post('/product', { id: 'after', name: 'waits its turn' })).status, 200);
    const line = await server.waitForLog((l) => l.includes('sink down') && l.includes('max_msg_size'), 10_000);
    assert.match(line, /record 2 is \d+ bytes; stream \S+ takes messages up to 1024 bytes/);
    assert.match(line, /"level":50/, 'an error: the operator must change the stream');
    assert.deepEqual((await target.read()).records.map((r) => r.seq), [1], 'nothing after the record that does not fit');
    assert.equal(await metric(server, 'intake_sink_up', { sink: 'nats' }), 0);
  });

  test('a message someone else published on the stream is stepped over: every record still once, in order', async () => {
    const target = await natsHarness.target();
    targets.push(target);
    const server = await start({ ...target.env, DELIVERY_RETRY_MAX_MS: '100' });
    const { did } = await launch(server);
    for (let i = 0; i < 5; i++) await server.post('/msv_cevt', { did, name: `before-${i}`, timestamp: T0 });
    await waitForHeld(target, 6);
    const prefix = target.env.SINK_NATS_SUBJECT_PREFIX!;
    const nc = await connect({ servers: target.env.SINK_NATS_URL!, reconnect: false });
    await jetstream(nc).publish(`${prefix}.someone.else`, 'not ours');
    await nc.close();
    for (let i = 0; i < 5; i++) await server.post('/msv_cevt', { did, name: `after-${i}`, timestamp: T0 });

    // Read the stream ourselves: the harness refuses messages that are not intake's.
    const exported = exportLines(server.dataDir, 'events');
    let bodies: string[] = [];
    await until('all records in the stream', async () => {
      const c = await connect({ servers: target.env.SINK_NATS_URL!, reconnect: false });
      try {
        const consumer = await jetstream(c).consumers.get(target.env.SINK_NATS_STREAM!);
        const messages = await consumer.fetch({ max_messages: 100, expires: 1_000 });
        bodies = [];
        for await (const m of messages) {
          bodies.push(m.string());
          if (bodies.length === exported.length + 1) break;
        }
      } finally {
        await c.close();
      }
      return bodies.length === exported.length + 1;
    });
    assert.deepEqual(
      bodies.filter((b) => b !== 'not ours').map((b) => JSON.parse(b)),
      exported,
    );
    assert.equal(bodies[6], 'not ours', 'the foreign message stays where it was published');
  });

  test('the NATS server frozen longer than the ack timeout under writes: every record once, in order', async () => {
    const nats = await startOwnNats();
    try {
      const target = await natsHarness.target(nats, { duplicateWindowMs: 100 });
      targets.push(target);
      const server = await start({ ...target.env, DELIVERY_BATCH_RECORDS: '100', DELIVERY_RETRY_MAX_MS: '200' });
      const { did } = await launch(server);
      let writing = true;
      const writers = Array.from({ length: 8 }, async (_, w) => {
        for (let i = 0; writing; i++) await server.post('/msv_cevt', { did, name: `w${w}-${i}`, timestamp: T0 });
      });
      await until('delivery under way', async () => ((await metric(server, 'intake_sink_delivered_seq', { sink: 'nats' })) ?? 0) > 300);
      // SIGSTOP: the connection stays open and nothing answers. Publishes in flight meet the
      // 10 s ack timeout; those the server took before freezing land after it wakes up.
      nats.freeze();
      await new Promise((resolve) => setTimeout(resolve, 11_500));
      nats.resume();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      writing = false;
      await Promise.all(writers);
      const exported = exportLines(server.dataDir, 'events');
      const held = await waitForHeld(target, exported.length, 30_000);
      assert.deepEqual(held.records, exported);
    } finally {
      await nats.stop();
    }
  });

  test('upgraded from before position markers, on a WorkQueue stream its consumer emptied: records the server knows as duplicates count as stored', async () => {
    // The server's duplicate window (2 minutes by default) still knows the records after the
    // stale saved position: the first publish after a reconnect is answered "duplicate", which
    // means stored (and consumed), not an error. Older intakes stopped there for good.
    const target = await natsHarness.target(undefined, { removes: true });
    targets.push(target);
    const consumer = target.consume();
    const env = { ...target.env, DELIVERY_RETRY_MAX_MS: '100' };
    const first = await start(env);
    const { did } = await launch(first);
    for (let i = 0; i < 19; i++) assert.equal((await first.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 })).status, 200);
    await until('all consumed', async () => consumer.seqs().length === 20);
    assert.equal(await first.stop(), 0);
    // What an intake from before markers left in LMDB: a seq only, and a stale one (it was saved
    // at most every 200 ms).
    const store = openStore(first.dataDir);
    const id = `nats:${target.env.SINK_NATS_STREAM}`;
    await store.delivery.put(id, 10);
    await store.delivery.remove(`confirmed:${id}`);
    await store.close();
    const server = await start(env, first.dataDir);
    for (let i = 0; i < 5; i++) assert.equal((await server.post('/msv_cevt', { did, name: `n${i}`, timestamp: T0 })).status, 200);
    await until('the new records consumed', async () => consumer.seqs().length >= 25);
    await until('no lag', async () => (await metric(server, 'intake_sink_lag_records', { sink: 'nats' })) === 0);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(await consumer.stop(), Array.from({ length: 25 }, (_, i) => i + 1));
  });
});

describe('both sinks at once', () => {
  test('bursts of writes from several clients reach both, once each, in order', async () => {
    const nats = await natsHarness.target();
    const pgTarget = await postgresHarness.target();
    targets.push(nats, pgTarget);
    const server = await start({ ...nats.env, ...pgTarget.env });
    const { did } = await launch(server);
    for (let burst = 0; burst < 12; burst++) {
      await Promise.all(Array.from({ length: 4 }, (_, c) => Promise.all(Array.from({ length: 40 }, (_, i) => server.post('/msv_cevt', { did, name: `b${burst}-${c}-${i}`, timestamp: T0 })))));
      await new Promise((resolve) => setTimeout(resolve, 100 + burst * 20));
    }
    const exported = exportLines(server.dataDir, 'events');
    assert.deepEqual((await waitForHeld(nats, exported.length)).records, exported);
    assert.deepEqual((await waitForHeld(pgTarget, exported.length)).records, exported);
    await until('no lag', async () => (await metric(server, 'intake_sink_lag_records', { sink: 'nats' })) === 0 && (await metric(server, 'intake_sink_lag_records', { sink: 'postgres' })) === 0);
  });
});

describe('PostgreSQL sink', () => {
  const query = (sql: string, params: unknown[] = []): Promise<pg.QueryResult> => withClient(SHARED_POSTGRES_URL, (client) => client.query(sql, params));

  test('U+0000 and unpaired surrogates, which PostgreSQL refuses, arrive as U+FFFD; everything else exactly', async () => {
    const target = await postgresHarness.target();
    targets.push(target);
    const server = await start(target.env);
    const { did } = await launch(server);
    const nasty = 'a\u0000b\ud800c\udc00d"e\\f\u0001é😀';
    assert.equal((await server.post('/msv_cs_id', { did, clientCustomerId: `cust\u0000omer`, timestamp: T0, info: [{ name: 'n\u0000', value: nasty, type: 'string' }] })).status, 200);
    assert.equal((await server.post('/msv_cevt', { did, name: 'plain', timestamp: T0, info: [{ name: 'v', value: 'a\\u0000b', type: 'string' }] })).status, 200);
    const held = await waitForHeld(target, 3);
    const exported = exportLines<any>(server.dataDir, 'events');
    const clean = (s: string): string => s.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
    const identify = held.records[1] as any;
    assert.equal(identify.customer, clean(exported[1].customer));
    assert.equal(identify.data.clientCustomerId, clean(exported[1].data.clientCustomerId));
    assert.equal(identify.data.info[0].name, 'n\ufffd');
    assert.equal(identify.data.info[0].value, clean(exported[1].data.info[0].value));
    assert.ok(identify.data.info[0].value.includes('"e\\f\u0001é😀'), 'other characters unchanged');
    // An escaped backslash before "u0000" is text, not a NUL: stored as it was (the device's
    // customer, which the event carries, is still cleaned).
    assert.deepEqual(held.records[2], { ...exported[2], customer: clean(exported[2].customer) });
    assert.equal((held.records[2] as any).data.info[0].value, 'a\\u0000b');
    assert.deepEqual(held.records[0], exported[0]);
  });

  test('a table dropped and created again while delivery is connected gets every retained record, not only those after', async () => {
    // Before, the connection opened on the old table stored its next batch in the new, empty
    // one and moved the position there: the records before that batch never reached it.
    const target = await postgresHarness.target();
    targets.push(target);
    const table = target.env.SINK_POSTGRES_TABLE!;
    const server = await start(target.env);
    for (let i = 0; i < 5; i++) assert.equal((await server.post('/product', { id: `p${i}`, name: 'P' })).status, 200);
    await waitForHeld(target, 5);
    await withClient(SHARED_POSTGRES_URL, async (client) => {
      await client.query('BEGIN');
      await client.query(`DROP TABLE "${table}"`);
      await client.query(`CREATE TABLE "${table}" (seq bigint PRIMARY KEY, workspace text NOT NULL, kind text NOT NULL, at bigint NOT NULL, did text, sid text, customer text, data jsonb NOT NULL)`);
      await client.query('COMMIT');
    });
    for (let i = 5; i < 10; i++) assert.equal((await server.post('/product', { id: `p${i}`, name: 'P' })).status, 200);
    const held = await waitForHeld(target, 10);
    assert.deepEqual(held.records, exportLines(server.dataDir, 'events'), 'all ten, once each, in order');
  });

  test('a table holding another journal\'s records is left alone: delivery stops with an error, writes go on', async () => {
    const target = await postgresHarness.target();
    targets.push(target);
    const table = target.env.SINK_POSTGRES_TABLE!;
    await query(`CREATE TABLE "${table}" (seq bigint PRIMARY KEY, workspace text NOT NULL, kind text NOT NULL, at bigint NOT NULL, did text, sid text, customer text, data jsonb NOT NULL)`);
    await query(`INSERT INTO "${table}" VALUES (1, 'elsewhere', 'product_upsert', 1, null, null, null, '{"id":"x","name":"y"}')`);
    const server = await start({ ...target.env, DELIVERY_RETRY_MAX_MS: '100' });
    assert.equal((await server.post('/product', { id: 'p', name: 'mine' })).status, 200);
    assert.equal((await server.post('/product', { id: 'q', name: 'mine too' })).status, 200);
    await server.waitForLog((line) => line.includes('sink down') && line.includes('another journal'), 10_000);
    assert.equal((await server.request('/readyz')).status, 200);
    const rows = (await query(`SELECT seq, workspace FROM "${table}" ORDER BY seq`)).rows;
    assert.deepEqual(rows, [{ seq: '1', workspace: 'elsewhere' }]);
  });

  test('a sink that lost records the journal no longer holds: delivery goes on after them, with a warning', async () => {
    // Found by review: the worker span on a stale read snapshot here and delivered nothing more.
    const own = await postgresHarness.startOwnServer();
    try {
      const target = await postgresHarness.target(own);
      targets.push(target);
      const env = { ...target.env, JOURNAL_RETENTION_SECONDS: '1', SNAPSHOT_INTERVAL_MS: '0', DELIVERY_RETRY_MAX_MS: '100' };
      const first = await start(env);
      const { did } = await launch(first);
      for (let i = 0; i < 19; i++) await first.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 });
      await waitForHeld(target, 20);
      await own.backup(); // the table (and intake's position row) with records 1..20
      for (let i = 19; i < 30; i++) await first.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 });
      await waitForHeld(target, 31);
      await until('position saved', async () => (await metric(first, 'intake_sink_lag_records', { sink: 'postgres' })) === 0);
      await new Promise((resolve) => setTimeout(resolve, 1_300));
      first.child.kill('SIGUSR2');
      await first.waitForLog((line) => line.includes('journal trimmed'), 10_000);
      assert.equal(await first.stop(), 0);
      await own.restoreBackup(); // e.g. the database restored from an older backup
      const server = await start(env, first.dataDir);
      await server.waitForLog((line) => line.includes('trimmed from the journal before this sink received them'), 10_000);
      for (let i = 0; i < 5; i++) assert.equal((await server.post('/msv_cevt', { did, name: `n${i}`, timestamp: T0 })).status, 200);
      const held = await waitForHeld(target, 25);
      assert.deepEqual(held.records.map((r) => r.seq), [...Array.from({ length: 20 }, (_, i) => i + 1), 32, 33, 34, 35, 36]);
      await until('no lag', async () => (await metric(server, 'intake_sink_lag_records', { sink: 'postgres' })) === 0);
    } finally {
      await own.stop();
    }
  });

  test('two intakes (two journals) on one table: one keeps delivering, the other stops with a mismatch error; nothing is lost silently', async () => {
    const target = await postgresHarness.target();
    targets.push(target);
    const env = { ...target.env, DELIVERY_RETRY_MAX_MS: '100' };
    const [a, b] = await Promise.all([start(env), start(env)]);
    const write = async (server: TestServer, tag: string, n: number): Promise<void> => {
      const { did } = await launch(server);
      for (let i = 0; i < n; i++) assert.equal((await server.post('/msv_cevt', { did, name: `${tag}-${i}`, timestamp: T0 })).status, 200);
    };
    await Promise.all([write(a, 'a', 40), write(b, 'b', 40)]);
    const mismatch = (l: string): boolean => l.includes('sink down') && l.includes('another journal');
    const loser = await until('one of them stops with a mismatch', async () => [a, b].find((server) => server.logs().some(mismatch)) ?? null);
    const winner = loser === a ? b : a;
    // Both go on writing: writes are answered as usual, only the loser's delivery is stopped.
    await Promise.all([write(a, 'a2', 20), write(b, 'b2', 20)]);
    const line = loser.logs().find(mismatch)!;
    assert.ok(line.includes('"level":50'), 'an error: an operator must act');
    assert.ok(!winner.logs().some(mismatch), 'the winner saw no mismatch');
    const exported = exportLines(winner.dataDir, 'events');
    const held = await waitForHeld(target, exported.length);
    assert.deepEqual(held.records, exported, 'the table holds exactly the winner\'s journal');
    await until('the winner has no lag', async () => (await metric(winner, 'intake_sink_lag_records', { sink: 'postgres' })) === 0);
    assert.equal(await metric(winner, 'intake_sink_up', { sink: 'postgres' }), 1);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(await metric(loser, 'intake_sink_up', { sink: 'postgres' }), 0, 'the loser stays down');
    assert.deepEqual((await target.read()).records, exported);
    assert.equal((await loser.request('/readyz')).status, 200);
  });

  test('SINK_POSTGRES_TABLE may name a schema: both are created when missing', async () => {
    const schema = `s_${Date.now().toString(36)}`;
    const server = await start({ SINK_POSTGRES_URL: SHARED_POSTGRES_URL, SINK_POSTGRES_TABLE: `${schema}.events` });
    try {
      assert.equal((await server.post('/product', { id: 'p', name: 'n' })).status, 200);
      await until('the row', async () => {
        try {
          return (await query(`SELECT count(*)::int AS n FROM "${schema}"."events"`)).rows[0].n === 1;
        } catch {
          return false;
        }
      });
    } finally {
      await server.kill();
      await query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
