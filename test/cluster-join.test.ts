// Cluster mode (CONTRACT.md §12 "Joining", §7 retention): snapshots stored in PostgreSQL, nodes
// joining through them from an empty data directory or after retention trimmed past their
// position, and journal retention in PostgreSQL. Real intake processes on the machine's
// PostgreSQL, one CLUSTER_NAME per test.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { exportLines, LAUNCH_INFO, T0, tempDataDir, type TestServer } from './helpers/server.ts';
import { clustersOfThisFile, type TestCluster, type TestNode } from './helpers/cluster.ts';
import { postgresHarness, SHARED_POSTGRES_URL, waitForHeld, withClient } from './helpers/sinks.ts';
import { metric, until } from './helpers/wait.ts';
import { startTcpProxy } from './helpers/tcp-proxy.ts';
import { openStore } from '../src/journal/store.ts';
import { DURABLE_SEQ_KEY } from '../src/journal/journal.ts';

const cluster = clustersOfThisFile();

/** One query on the cluster's PostgreSQL. */
function sql<T extends pg.QueryResultRow>(c: TestCluster, text: string): Promise<T[]> {
  return withClient(c.url, async (client) => (await client.query<T>(text, [c.name])).rows);
}

async function journalRows(c: TestCluster): Promise<{ batches: number; first: number | null; last: number | null }> {
  const [row] = await sql<{ batches: string; first: string | null; last: string | null }>(
    c,
    'SELECT count(*) AS batches, min(first_seq) AS first, max(last_seq) AS last FROM intake_cluster.journal WHERE cluster = $1',
  );
  return { batches: Number(row!.batches), first: row!.first === null ? null : Number(row!.first), last: row!.last === null ? null : Number(row!.last) };
}

async function storedSnapshots(c: TestCluster): Promise<Array<{ id: number; seq: number; chunks: number; complete: boolean; chunkRows: number }>> {
  const rows = await sql<{ id: string; seq: string; chunks: number; complete: boolean; chunk_rows: string }>(
    c,
    `SELECT s.id, s.seq, s.chunks, s.completed_at IS NOT NULL AS complete,
            (SELECT count(*) FROM intake_cluster.snapshot_chunks k WHERE k.cluster = s.cluster AND k.id = s.id) AS chunk_rows
     FROM intake_cluster.snapshots s WHERE s.cluster = $1 ORDER BY s.id`,
  );
  return rows.map((r) => ({ id: Number(r.id), seq: Number(r.seq), chunks: r.chunks, complete: r.complete, chunkRows: Number(r.chunk_rows) }));
}

function logged(node: TestServer, msg: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const line of node.logs()) {
    try {
      const entry = JSON.parse(line) as Record<string, unknown>;
      if (entry.msg === msg) out.push(entry);
    } catch {
      // not JSON
    }
  }
  return out;
}

/** Waits until `node` logged `msg` more than `before` times; returns the newest such line. */
async function nextLog(node: TestServer, msg: string, before: number, timeoutMs = 15_000): Promise<Record<string, unknown>> {
  try {
    return await until(`log line '${msg}'`, async () => {
      const lines = logged(node, msg);
      return lines.length > before ? lines[lines.length - 1]! : null;
    }, timeoutMs);
  } catch (error) {
    throw new Error(`${(error as Error).message}; the node logged:\n${node.logs().slice(-30).join('\n')}\n${node.stderr()}`);
  }
}

/** SIGUSR2 on the leader: a snapshot, then its upload to PostgreSQL. Returns the snapshot's seq. */
async function snapshotAndUpload(leader: TestNode): Promise<number> {
  const written = logged(leader, 'snapshot written').length;
  const stored = logged(leader, 'snapshot stored in PostgreSQL').length;
  leader.child.kill('SIGUSR2');
  const snapshot = await nextLog(leader, 'snapshot written', written);
  const upload = await nextLog(leader, 'snapshot stored in PostgreSQL', stored);
  assert.equal(upload.seq, snapshot.seq, 'the snapshot just written is the one stored');
  return snapshot.seq as number;
}

/** Every kind of write once (devices with customers and tokens, products, a collection with a member): 7 records. */
async function writeEveryKind(node: TestNode, tag: string): Promise<void> {
  const ok = (res: { status: number; text: string }): void => assert.equal(res.status, 200, res.text);
  const launched = await node.post<{ did: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO });
  ok(launched);
  const did = launched.body.did;
  ok(await node.post('/msv_cevt', { did, name: `e-${tag}`, timestamp: T0 }));
  ok(await node.post('/msv_cs_id', { did, clientCustomerId: `c-${tag}`, timestamp: T0, info: [{ name: 'email', value: `${tag}@b.c`, type: 'string' }] }));
  ok(await node.post('/mpush_token', { did, type: 'fcm', token: `t-${tag}`, timestamp: T0 }));
  ok(await node.post('/product', { id: `p-${tag}`, name: 'P', price: 1 }));
  ok(await node.post('/collection', { id: `c-${tag}`, name: 'C' }));
  ok(await node.post(`/collection/c-${tag}/products/add`, { products: [`p-${tag}`] }));
}

/**
 * A leader whose snapshot in PostgreSQL owes a joining node a copy of the records before it: a
 * keyed app launch (its record must be kept) between two rounds of every kind of write, older
 * than the retention of 1 s, then a snapshot stored. Returns the leader, the keyed record's seq
 * (where the copy starts) and the snapshot's seq.
 */
async function leaderWithOwedCopy(c: TestCluster, tag: string): Promise<{ a: TestNode; firstKeyed: number; snapshotSeq: number }> {
  const a = await c.add();
  await c.leader();
  await writeEveryKind(a, `${tag}0`);
  const firstKeyed = (await a.status()).appliedSeq + 1;
  const keyed = await a.request('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }, { headers: { 'idempotency-key': `${tag}-keyed` } });
  assert.equal(keyed.status, 200);
  await writeEveryKind(a, `${tag}1`);
  await sleep(1_100);
  const snapshotSeq = await snapshotAndUpload(a);
  return { a, firstKeyed, snapshotSeq };
}

/** A node that joins through the stored snapshot, catches up with `leader`, then stops (exit 0). */
async function joinedThenStopped(c: TestCluster, leader: TestNode): Promise<TestNode> {
  const joined = await c.add();
  await nextLog(joined, 'joined from the snapshot stored in PostgreSQL', 0);
  await caughtUp(joined, leader);
  // `export --follow` reads up to the durable position: right after the join it is there, with
  // no write since (it stayed at 0 until the next write reached the node).
  const applied = (await joined.status()).appliedSeq;
  const store = openStore(joined.dataDir);
  try {
    assert.equal(store.meta.get(DURABLE_SEQ_KEY), applied, 'the joined node\'s durable position');
  } finally {
    await store.close();
  }
  assert.equal(await joined.stop(), 0);
  return joined;
}

const STATE = ['devices', 'customers', 'products', 'collections'];

async function caughtUp(node: TestNode, leader: TestNode): Promise<void> {
  const total = (await leader.status()).appliedSeq;
  await until(`${node.nodeName} to catch up to ${total}`, async () => (await node.status()).appliedSeq === total);
}

function assertSameState(node: TestNode, leader: TestNode): void {
  for (const what of STATE) {
    const mine = exportLines(node.dataDir, what);
    assert.ok(mine.length > 0, `${what}: some`);
    assert.deepEqual(mine, exportLines(leader.dataDir, what), `${what}: ${node.nodeName}'s export equals ${leader.nodeName}'s`);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('cluster mode: snapshots in PostgreSQL, joining, retention', () => {
  test('a node with an empty data directory joins through the snapshot after retention trimmed the journal before it; keyed launches are answered again once it leads', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const a = await c.add();
    await c.leader();
    for (let i = 0; i < 3; i++) await writeEveryKind(a, `u${i}`);
    const firstKeyed = (await a.status()).appliedSeq + 1;
    const body = { timestamp: T0, info: LAUNCH_INFO };
    const launches: Array<{ did: string; sid: string }> = [];
    for (const key of ['launch-1', 'launch-2']) {
      const res = await a.request<{ did: string; sid: string }>('/mcrs_appl_v1', body, { headers: { 'idempotency-key': key } });
      assert.equal(res.status, 200, res.text);
      launches.push(res.body);
    }
    await writeEveryKind(a, 'm');
    // Older than the retention by the time the snapshot is stored.
    await sleep(1_100);
    const trims = logged(a, 'cluster journal trimmed by retention in PostgreSQL').length;
    const snapshotSeq = await snapshotAndUpload(a);
    assert.equal(snapshotSeq, (await a.status()).appliedSeq);
    const trim = await nextLog(a, 'cluster journal trimmed by retention in PostgreSQL', trims);
    // Trimmed up to the record before the oldest remembered Idempotency-Key (a replayed launch
    // is answered from its record), although the snapshot covers more.
    assert.equal(trim.trimmedThroughSeq, firstKeyed - 1);
    const journal = await journalRows(c);
    assert.equal(journal.first, firstKeyed, 'PostgreSQL keeps the journal from the oldest remembered key on');
    assert.equal(journal.last, snapshotSeq);
    const [stored, ...more] = await storedSnapshots(c);
    assert.equal(more.length, 0);
    assert.equal(stored!.seq, snapshotSeq);
    assert.equal(stored!.complete, true);
    assert.equal(stored!.chunkRows, stored!.chunks);

    await writeEveryKind(a, 'after');
    const joined = await c.add();
    const join = await nextLog(joined, 'joined from the snapshot stored in PostgreSQL', 0);
    assert.equal(join.seq, snapshotSeq);
    await caughtUp(joined, a);
    assert.equal((await joined.status()).role, 'follower');
    assertSameState(joined, a);
    // Its journal: the records of the remembered keys before the snapshot, then everything after it.
    const events = exportLines<{ seq: number }>(joined.dataDir, 'events');
    assert.equal(events[0]!.seq, firstKeyed, 'it holds the journal from the oldest remembered key on, not what retention trimmed');
    const leaderEvents = exportLines<{ seq: number }>(a.dataDir, 'events');
    assert.deepEqual(events, leaderEvents.filter((e) => e.seq >= firstKeyed), 'the same records as the leader from there');
    assert.ok(events.some((e) => e.seq > snapshotSeq));

    await a.kill();
    assert.equal(await c.leader(10_000), joined);
    for (const [i, key] of ['launch-1', 'launch-2'].entries()) {
      const again = await joined.request<{ did: string; sid: string }>('/mcrs_appl_v1', body, { headers: { 'idempotency-key': key } });
      assert.equal(again.status, 200, again.text);
      assert.deepEqual(again.body, launches[i], `${key}: the same did and sid`);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
    }
    assert.equal((await joined.post('/product', { id: 'new', name: 'N' })).status, 200);
  });

  test('without retention nothing is trimmed in PostgreSQL; a newer snapshot replaces the older; an empty node still joins through it', async () => {
    const c = cluster();
    const a = await c.add();
    await c.leader();
    for (let i = 0; i < 2; i++) await writeEveryKind(a, `n${i}`);
    await sleep(1_100);
    const first = await snapshotAndUpload(a);
    const before = await journalRows(c);
    assert.equal(before.first, 1);
    assert.equal(before.last, first);
    await writeEveryKind(a, 'n2');
    const second = await snapshotAndUpload(a);
    assert.ok(second > first);
    const snapshots = await storedSnapshots(c);
    assert.equal(snapshots.length, 1, 'only the newest snapshot is kept');
    assert.equal(snapshots[0]!.seq, second);
    assert.equal(snapshots[0]!.complete, true);
    const [chunkRows] = await sql<{ n: string }>(c, 'SELECT count(*) AS n FROM intake_cluster.snapshot_chunks WHERE cluster = $1');
    assert.equal(Number(chunkRows!.n), snapshots[0]!.chunks, 'no chunk of the older snapshot is left');
    const afterRows = await journalRows(c);
    assert.equal(afterRows.first, 1, 'the whole journal stays in PostgreSQL');
    assert.equal(afterRows.last, second);
    assert.equal(afterRows.batches, before.batches + 7);
    assert.equal(logged(a, 'cluster journal trimmed by retention in PostgreSQL').length, 0);

    await writeEveryKind(a, 'n3');
    const joined = await c.add();
    assert.equal((await nextLog(joined, 'joined from the snapshot stored in PostgreSQL', 0)).seq, second);
    await caughtUp(joined, a);
    assertSameState(joined, a);
    // No Idempotency-Key before the snapshot: its journal starts right after it.
    const events = exportLines<{ seq: number }>(joined.dataDir, 'events');
    assert.equal(events[0]!.seq, second + 1);
    assert.deepEqual(events, exportLines<{ seq: number }>(a.dataDir, 'events').filter((e) => e.seq > second));
  });

  test('a sink that had not confirmed the records before the snapshot: retention keeps them, a joined node copies them, and delivers them exactly once when it leads', async () => {
    const server = await postgresHarness.startOwnServer();
    const target = await postgresHarness.target(server);
    try {
      await server.stop();
      const c = cluster({ ...target.env, JOURNAL_RETENTION_SECONDS: '1' });
      const a = await c.add();
      await c.leader();
      for (let i = 0; i < 2; i++) await writeEveryKind(a, `s${i}`);
      await sleep(1_100);
      const snapshotSeq = await snapshotAndUpload(a);
      await sleep(200);
      assert.equal(logged(a, 'cluster journal trimmed by retention in PostgreSQL').length, 0, 'the sink confirmed nothing: nothing is trimmed');
      assert.equal((await journalRows(c)).first, 1);
      const joined = await c.add();
      await nextLog(joined, 'joined from the snapshot stored in PostgreSQL', 0);
      await writeEveryKind(a, 'after');
      await caughtUp(joined, a);
      const events = exportLines<{ seq: number }>(joined.dataDir, 'events');
      assert.equal(events[0]!.seq, 1, 'the joined node holds the records the sink still needs');
      assert.deepEqual(events, exportLines(a.dataDir, 'events'));
      assert.ok(events.length > snapshotSeq);
      await a.kill();
      assert.equal(await c.leader(10_000), joined);
      await writeEveryKind(joined, 'led');
      await server.start();
      const all = exportLines(joined.dataDir, 'events');
      const held = await waitForHeld(target, all.length);
      assert.deepEqual(held.records, all, 'every record once, in seq order');
    } finally {
      await server.stop();
    }
  });

  test('with a sink, a follower trims its own journal as far as the leader trimmed the cluster\'s (its own sink positions stop where it last led)', async () => {
    const server = await postgresHarness.startOwnServer();
    const target = await postgresHarness.target(server);
    try {
      const c = cluster({ ...target.env, JOURNAL_RETENTION_SECONDS: '1' });
      const a = await c.add();
      await c.leader();
      const b = await c.add();
      for (let i = 0; i < 2; i++) await writeEveryKind(a, `f${i}`);
      const total = (await a.status()).appliedSeq;
      await waitForHeld(target, total);
      await caughtUp(b, a);
      await sleep(1_100);
      await snapshotAndUpload(a);
      await until('the leader trimmed the cluster\'s journal', async () => logged(a, 'cluster journal trimmed by retention in PostgreSQL').length > 0, 10_000);
      // The follower reads how far the cluster's journal was trimmed every 10 s; then its own
      // snapshot trims its local journal that far (before: never, it had led no sink).
      await sleep(10_500);
      const written = logged(b, 'snapshot written').length;
      b.child.kill('SIGUSR2');
      await nextLog(b, 'snapshot written', written);
      const trimmed = await nextLog(b, 'journal trimmed by retention', 0);
      assert.ok(Number(trimmed.deliveredSeq) >= total - 7, JSON.stringify(trimmed));
      const events = exportLines<{ seq: number }>(b.dataDir, 'events');
      assert.ok(events.length === 0 || events[0]!.seq > 1, 'the follower\'s journal no longer starts at 1');
    } finally {
      await server.stop();
    }
  });

  test('nodes that were down while retention trimmed past their position rejoin through the snapshot', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const a = await c.add();
    await c.leader();
    const b = await c.add();
    const d = await c.add();
    await writeEveryKind(a, 'x');
    await caughtUp(b, a);
    await caughtUp(d, a);
    await b.kill();
    await d.kill();
    const downAt = (await a.status()).appliedSeq;
    for (let i = 0; i < 2; i++) await writeEveryKind(a, `y${i}`);
    await sleep(1_100);
    const trims = logged(a, 'cluster journal trimmed by retention in PostgreSQL').length;
    const snapshotSeq = await snapshotAndUpload(a);
    const trim = await nextLog(a, 'cluster journal trimmed by retention in PostgreSQL', trims);
    assert.equal(trim.trimmedThroughSeq, snapshotSeq);
    assert.equal((await journalRows(c)).batches, 0, 'no sink, no remembered key: the whole journal is covered by the snapshot, and old');

    // The journal holds nothing after b's position (it is empty).
    const b2 = await c.add({ dataDir: b.dataDir, nodeName: b.nodeName });
    const joinedB = await nextLog(b2, 'joined from the snapshot stored in PostgreSQL', 0);
    assert.equal(joinedB.seq, snapshotSeq);
    assert.equal(joinedB.appliedSeq, snapshotSeq);
    await caughtUp(b2, a);

    // The journal starts after d's position.
    await writeEveryKind(a, 'z');
    assert.ok(((await journalRows(c)).first ?? 0) > downAt + 1);
    const d2 = await c.add({ dataDir: d.dataDir, nodeName: d.nodeName });
    await nextLog(d2, 'joined from the snapshot stored in PostgreSQL', 0);
    await caughtUp(d2, a);
    await caughtUp(b2, a);
    for (const node of [b2, d2]) {
      assertSameState(node, a);
      const events = exportLines<{ seq: number }>(node.dataDir, 'events');
      assert.equal(events[0]!.seq, snapshotSeq + 1, `${node.nodeName}: its journal starts after the snapshot (the records before it, all older than the retention, are gone)`);
      assert.deepEqual(events, exportLines<{ seq: number }>(a.dataDir, 'events').filter((e) => e.seq > snapshotSeq));
      assert.equal((await node.status()).role, 'follower');
    }
    // A restart of a joined node recovers from its local copy of the snapshot.
    await b2.kill();
    const b3 = await c.add({ dataDir: b.dataDir, nodeName: b.nodeName });
    await caughtUp(b3, a);
    assert.equal(logged(b3, 'joined from the snapshot stored in PostgreSQL').length, 0);
    assertSameState(b3, a);
  });

  test('a join whose copy of the records before the snapshot was cut short finishes it at the next start, before the node may lead', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const { a, firstKeyed, snapshotSeq } = await leaderWithOwedCopy(c, 'c');
    const joined = await joinedThenStopped(c, a);
    const whole = exportLines<{ seq: number }>(joined.dataDir, 'events');
    assert.equal(whole[0]!.seq, firstKeyed);
    // As a crash in the middle of the copy leaves it: the marker set, the records before the
    // snapshot only partly there. And as a crash while a rejoining node removed its old journal
    // leaves it: a batch of that journal before the hole (here seq 1 on, the first copied
    // batch's records under another seq); the next start removes it too.
    const store = openStore(joined.dataDir);
    const cut: number[] = [];
    for (const key of store.journal.getKeys()) if (key > firstKeyed && key <= snapshotSeq) cut.push(key);
    const stale = store.journal.get(firstKeyed);
    assert.ok(stale !== undefined && 1 + stale.length < firstKeyed, 'a batch to leave before the copied records');
    await store.root.transaction(() => {
      for (const key of cut) store.journal.removeSync(key);
      store.journal.putSync(1, stale);
      store.meta.putSync('joinCopyFrom', firstKeyed);
      store.meta.putSync('joinCopyTo', snapshotSeq);
    });
    await store.close();
    assert.ok(cut.length > 0, 'some records before the snapshot were removed');
    assert.equal(exportLines<{ seq: number }>(joined.dataDir, 'events')[0]!.seq, 1, 'the stale batch is there before the start');
    const again = await c.add({ dataDir: joined.dataDir, nodeName: joined.nodeName });
    await nextLog(again, 'finished copying the journal records before the joined snapshot', 0);
    await caughtUp(again, a);
    assert.deepEqual(exportLines(again.dataDir, 'events'), exportLines(a.dataDir, 'events').filter((e) => e.seq >= firstKeyed), 'the copy is complete again');
    const store2 = openStore(again.dataDir);
    assert.equal(store2.meta.get('joinCopyFrom'), undefined, 'the marker is gone once the copy is done');
    await store2.close();
  });

  test('a crash right after a join stored its snapshot: the copy of the records before it is still owed, and finished at the next start', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const { a, firstKeyed } = await leaderWithOwedCopy(c, 'k');
    // The joining node SIGKILLs itself once the snapshot is stored (complete) and before its
    // journal is touched: the moment a power cut could hit. The snapshot's meta and the marker
    // of the copy owed were two writes, and a crash between them lost the marker.
    const dataDir = tempDataDir();
    await assert.rejects(c.add({ dataDir, nodeName: 'crashed', env: { INTAKE_TEST_SIGKILL_AT: 'join-snapshot-stored' } }), /exited/, 'it joins before it listens, and died there');
    const again = await c.add({ dataDir, nodeName: 'crashed' });
    await nextLog(again, 'finished copying the journal records before the joined snapshot', 0);
    await caughtUp(again, a);
    assert.deepEqual(exportLines(again.dataDir, 'events'), exportLines(a.dataDir, 'events').filter((e) => e.seq >= firstKeyed), 'the records before the snapshot are there');
    assertSameState(again, a);
  });

  test('a join whose rebuild of the state from the snapshot fails ends the node (exit 1); restarted, it recovers from the joined snapshot', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const { a } = await leaderWithOwedCopy(c, 'r');
    const dataDir = tempDataDir();
    const marker = `${dataDir}.state-rebuild.fired`;
    // Retried instead, the node held a dropped state meanwhile: it could take the lead with it,
    // and a snapshot of it could replace the joined one.
    await assert.rejects(c.add({ dataDir, nodeName: 'rebuilt', env: { INTAKE_TEST_THROW_ONCE: `state-rebuild:${marker}` } }), /exited \(1\)[^]*rebuilding the state from the joined snapshot failed: test fault: state-rebuild/, 'it joins before it listens, and ends there');
    const again = await c.add({ dataDir, nodeName: 'rebuilt' });
    await caughtUp(again, a);
    assert.equal(logged(again, 'joined from the snapshot stored in PostgreSQL').length, 0, 'it recovered from the snapshot it had stored, with no second join');
    assertSameState(again, a);
  });

  test('a node whose copy of the records before its snapshot cannot finish still reads the lease: it knows the leader and forwards writes to it', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const { a, firstKeyed, snapshotSeq } = await leaderWithOwedCopy(c, 'q');
    const joined = await joinedThenStopped(c, a);
    // The copy owed again, and made impossible: a batch in its middle removed from the cluster's
    // journal, so every attempt finds the hole and is retried later.
    const store = openStore(joined.dataDir);
    await store.root.transaction(() => {
      store.meta.putSync('joinCopyFrom', firstKeyed);
      store.meta.putSync('joinCopyTo', snapshotSeq);
    });
    await store.close();
    const [hole] = await sql<{ first_seq: string }>(c, `SELECT first_seq FROM intake_cluster.journal WHERE cluster = $1 AND first_seq > ${firstKeyed} AND last_seq < ${snapshotSeq} ORDER BY first_seq LIMIT 1`);
    assert.ok(hole !== undefined, 'a batch inside the copy');
    await sql(c, `DELETE FROM intake_cluster.journal WHERE cluster = $1 AND first_seq = ${hole.first_seq}`);

    const again = await c.add({ dataDir: joined.dataDir, nodeName: joined.nodeName });
    await until(`${again.nodeName} to know the leader`, async () => ((await again.status()).leader === a.nodeName ? true : null), 10_000);
    const forwarded = await again.post('/product', { id: 'through-the-stuck-node', name: 'P' });
    assert.equal(forwarded.status, 200, forwarded.text);
    assert.equal(logged(again, 'finished copying the journal records before the joined snapshot').length, 0, 'the copy is still owed');
    assert.equal((await again.status()).role, 'follower');
  });

  test('a follower cut off from PostgreSQL while the journal was committed on and then trimmed away (it heard no NOTIFY) catches up through the snapshot once it reaches PostgreSQL again, with no new write', async () => {
    const c = cluster({ JOURNAL_RETENTION_SECONDS: '1' });
    const a = await c.add();
    await c.leader();
    // The follower reaches PostgreSQL only through the proxy: cutting it is a partition of b alone.
    const pgUrl = new URL(SHARED_POSTGRES_URL);
    const proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      const b = await c.add({ env: { CLUSTER_POSTGRES_URL: proxy.urlFor(SHARED_POSTGRES_URL) } });
      for (let i = 0; i < 5; i++) assert.equal((await a.post('/product', { id: `p${i}`, name: 'P' })).status, 200);
      await caughtUp(b, a);
      const before = (await b.status()).appliedSeq;
      await proxy.cut();
      for (let i = 5; i < 10; i++) assert.equal((await a.post('/product', { id: `p${i}`, name: 'P' })).status, 200);
      const total = (await a.status()).appliedSeq;
      assert.equal(total, before + 5);
      await sleep(1_500);
      const trims = logged(a, 'cluster journal trimmed by retention in PostgreSQL').length;
      assert.equal(await snapshotAndUpload(a), total);
      await nextLog(a, 'cluster journal trimmed by retention in PostgreSQL', trims);
      assert.equal((await journalRows(c)).batches, 0, 'the journal in PostgreSQL is empty; only its head says it ends at the snapshot');
      assert.equal((await b.status()).appliedSeq, before);
      await proxy.restore();
      // Reconnecting takes up to 2 s (the retry's back-off), then one poll. Before, nothing read
      // the head: the follower stayed at `before`, with lag 0, until the next write's NOTIFY.
      await until(`${b.nodeName} to catch up to ${total} with no new write`, async () => (await b.status()).appliedSeq === total, 5_000);
      await nextLog(b, 'joined from the snapshot stored in PostgreSQL', 0);
      assert.equal(await metric(b, 'intake_cluster_lag_records'), 0);
      assert.deepEqual(exportLines(b.dataDir, 'products'), exportLines(a.dataDir, 'products'));
      assert.equal(exportLines(b.dataDir, 'products').length, 10);
    } finally {
      await proxy.close();
    }
  });
});
