// The cluster's schema in PostgreSQL (src/cluster/schema.ts), made or checked at every node start
// and every `npm run keys`: on a schema that exists it must take no lock that the lease's own
// statements conflict with, or a node starting (or a keys CLI stalled on a bad link) stalls every
// renewal and takeover of every cluster in the database. The machine's PostgreSQL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { clusterIdentity, ensureClusterRows, ensureSchema, SCHEMA } from '../src/cluster/schema.ts';
import { saveSinkPositions } from '../src/cluster/sink-positions.ts';
import { dropCluster } from './helpers/cluster.ts';
import { SHARED_POSTGRES_URL, withClient } from './helpers/sinks.ts';

test('on a schema that exists, ensureSchema waits for no lock a transaction on the lease table holds', async () => {
  const holder = new pg.Client({ connectionString: SHARED_POSTGRES_URL });
  const starting = new pg.Client({ connectionString: SHARED_POSTGRES_URL });
  await holder.connect();
  await starting.connect();
  try {
    await ensureSchema(starting);
    // As a lease read or renewal in its transaction holds it (any statement on the table does).
    await holder.query('BEGIN');
    await holder.query(`LOCK TABLE ${SCHEMA}.lease IN ACCESS SHARE MODE`);
    await starting.query(`SET statement_timeout = '3s'`);
    const startedAt = performance.now();
    await ensureSchema(starting);
    const tookMs = performance.now() - startedAt;
    assert.ok(tookMs < 2_000, `ensureSchema took ${Math.round(tookMs)} ms`);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    await holder.end();
    await starting.end();
  }
});

test('dropCluster (the tests\' clean-up) leaves no row of the cluster in any table of the schema, sink positions included', async () => {
  const name = `t${randomBytes(5).toString('hex')}`;
  await withClient(SHARED_POSTGRES_URL, async (client) => {
    await ensureSchema(client);
    await ensureClusterRows(client, name);
    await saveSinkPositions(client, name, 1, [{ sink: 'nats', confirmed: { seq: 3, marker: null } }]);
    await dropCluster(SHARED_POSTGRES_URL, name);
    const { rows: tables } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.columns WHERE table_schema = '${SCHEMA}' AND column_name = 'cluster'`,
    );
    assert.ok(tables.some((t) => t.table_name === 'sink_positions'));
    for (const { table_name } of tables) {
      const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${SCHEMA}."${table_name}" WHERE cluster = $1`, [name]);
      assert.equal(Number(rows[0]!.n), 0, `${table_name}: no row of the dropped cluster`);
    }
  });
});

test('a cluster made before identities gets exactly one: of ten nodes giving it one at once, all read the same', async () => {
  const name = `t${randomBytes(5).toString('hex')}`;
  const clients = Array.from({ length: 10 }, () => new pg.Client({ connectionString: SHARED_POSTGRES_URL }));
  await Promise.all(clients.map((client) => client.connect()));
  try {
    await ensureSchema(clients[0]!);
    await ensureClusterRows(clients[0]!, name);
    const made = await clusterIdentity(clients[0]!, name);
    assert.ok(made !== null && made.length > 0, 'a new cluster is made with one');
    assert.equal(await clusterIdentity(clients[1]!, name), made, 'and keeps it');
    // As a version before identities left the head row.
    await clients[0]!.query(`UPDATE ${SCHEMA}.head SET cluster_id = NULL WHERE cluster = $1`, [name]);
    const ids = await Promise.all(clients.map((client) => clusterIdentity(client, name)));
    assert.equal(new Set(ids).size, 1, JSON.stringify(ids));
    assert.ok(ids[0] !== null && ids[0] !== made);
    assert.equal(await clusterIdentity(clients[0]!, 'no-such-cluster-' + name), null);
  } finally {
    await dropCluster(SHARED_POSTGRES_URL, name);
    await Promise.all(clients.map((client) => client.end()));
  }
});

test('journal batches and snapshot chunks are stored LZ4-compressed, also in a schema made before (its columns are switched at the next start)', async () => {
  const name = `t${randomBytes(5).toString('hex')}`;
  await withClient(SHARED_POSTGRES_URL, async (client) => {
    try {
      await ensureSchema(client);
      // As a schema made by an older version has them: the server's default compression (pglz).
      for (const [table, column] of [['journal', 'records'], ['snapshot_chunks', 'data']]) {
        await client.query(`ALTER TABLE ${SCHEMA}.${table} ALTER COLUMN ${column} SET COMPRESSION pglz`);
      }
      await ensureSchema(client);
      const { rows: columns } = await client.query<{ attname: string; attcompression: string }>(
        `SELECT attname, attcompression FROM pg_attribute WHERE (attrelid, attname) IN (('${SCHEMA}.journal'::regclass, 'records'), ('${SCHEMA}.snapshot_chunks'::regclass, 'data'))`,
      );
      assert.deepEqual(columns.map((c) => c.attcompression).sort(), ['l', 'l']);
      // A big value (a batch of a few hundred records, compressible as msgpack records are) is stored compressed, with LZ4.
      const big = Buffer.from('{"kind":"event","workspace":"default","name":"product_view"}'.repeat(400));
      await client.query(`INSERT INTO ${SCHEMA}.journal (cluster, first_seq, last_seq, epoch, records) VALUES ($1, 1, 1, 1, $2)`, [name, big]);
      await client.query(`INSERT INTO ${SCHEMA}.snapshot_chunks (cluster, id, chunk, data) VALUES ($1, 1, 0, $2)`, [name, big]);
      const { rows } = await client.query<{ j: string; s: string }>(
        `SELECT (SELECT pg_column_compression(records) FROM ${SCHEMA}.journal WHERE cluster = $1) AS j, (SELECT pg_column_compression(data) FROM ${SCHEMA}.snapshot_chunks WHERE cluster = $1) AS s`,
        [name],
      );
      assert.deepEqual(rows[0], { j: 'lz4', s: 'lz4' });
    } finally {
      await dropCluster(SHARED_POSTGRES_URL, name);
    }
  });
});
