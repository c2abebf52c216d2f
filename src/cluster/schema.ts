// The cluster's tables in PostgreSQL, schema `intake_cluster`, shared by every cluster of one
// database (each row carries its cluster's name). Created when missing, under an advisory lock:
// several nodes starting at once would otherwise race on CREATE ... IF NOT EXISTS (which is not
// safe against a concurrent create of the same name).
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { closeClient, connectClient } from './pg-client.ts';

export const SCHEMA = 'intake_cluster';

const DDL_LOCK_KEY = 0x696e74616b65; // "intake"
/** The most the schema's statements wait for a lock (the DDL lock, or a table's). */
const DDL_LOCK_TIMEOUT_MS = 10_000;

/** DDL adding a column to a table made by an older version, only when it is missing (why: forward_secret below). */
function addColumnIfMissing(table: string, column: string, type: string): string {
  return `DO $$ BEGIN
     IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = '${SCHEMA}' AND table_name = '${table}' AND column_name = '${column}') THEN
       ALTER TABLE ${SCHEMA}.${table} ADD COLUMN ${column} ${type};
     END IF;
   END $$`;
}

/**
 * DDL storing a bytea column's big values compressed with LZ4 instead of PostgreSQL's default
 * (pglz), only when it is not so already (why only then: forward_secret below). A journal batch
 * over about 2 KB is compressed by PostgreSQL when it is stored (TOAST): with pglz that was most
 * of PostgreSQL's CPU per commit at load, with LZ4 a half to a quarter of it, with about the same
 * WAL and table size (measured 2026-11-28 on PostgreSQL 15, msgpack batches of track events:
 * 150 records 2.60 -> 1.20 µs of the backend's CPU per record, 500 records 2.30 -> 0.56; reading
 * them back 2.32 -> 0.44 µs at 500). Rows already stored keep their compression. A PostgreSQL
 * before 14 (no per-column compression) or one built without LZ4 keeps pglz: the change is
 * skipped, never an error.
 */
function lz4IfAvailable(table: string, column: string): string {
  return `DO $$ BEGIN
     IF current_setting('server_version_num')::int >= 140000 THEN
       IF EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '${SCHEMA}.${table}'::regclass AND attname = '${column}' AND attcompression IS DISTINCT FROM 'l') THEN
         BEGIN
           ALTER TABLE ${SCHEMA}.${table} ALTER COLUMN ${column} SET COMPRESSION lz4;
         EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
           NULL; -- built without LZ4: pglz stays
         END;
       END IF;
     END IF;
   END $$`;
}

const DDL = [
  `CREATE SCHEMA IF NOT EXISTS ${SCHEMA}`,
  // The leader lease: which node leads, in which epoch, until when (PostgreSQL's clock only).
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.lease (
     cluster text PRIMARY KEY,
     node text,
     address text,
     epoch bigint NOT NULL,
     expires_at timestamptz NOT NULL)`,
  // The secret of the leader's internal endpoint for forwarded writes (forward-protocol.ts): a
  // new one with each takeover, read by the followers with the lease. Added to tables made
  // before followers forwarded. Only when missing: ALTER TABLE takes an ACCESS EXCLUSIVE lock on
  // the lease table even when the column exists (IF NOT EXISTS), until this transaction ends,
  // and every node start and every `npm run keys` runs this: every renewal, lease read and
  // takeover of every cluster of the database waited for it.
  addColumnIfMissing('lease', 'forward_secret', 'text'),
  // The journal's head: the epoch allowed to commit and the last committed seq. Every commit is
  // a compare-and-set on this row; a takeover bumps its epoch in the same statement that takes
  // the lease. That row is what makes two leaders' commits impossible (cluster-journal.ts).
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.head (
     cluster text PRIMARY KEY,
     epoch bigint NOT NULL,
     last_seq bigint NOT NULL,
     cluster_id text)`,
  // The cluster's identity (clusterIdentity below): random, made with the head row. A node's data
  // directory records the identity of the cluster it belongs to, and a node refuses a directory
  // of another. Added to tables made before identities, as forward_secret above (and why only
  // when missing: there).
  addColumnIfMissing('head', 'cluster_id', 'text'),
  // One row per group-commit batch: records first_seq..last_seq, msgpack (record-codec.ts).
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.journal (
     cluster text NOT NULL,
     first_seq bigint NOT NULL,
     last_seq bigint NOT NULL,
     epoch bigint NOT NULL,
     committed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
     records bytea NOT NULL,
     PRIMARY KEY (cluster, first_seq),
     CHECK (last_seq >= first_seq))`,
  lz4IfAvailable('journal', 'records'),
  // The newest snapshot of the cluster, for nodes that join (cluster-snapshots.ts): one row per
  // snapshot (the state after record `seq`), complete once `completed_at` is set, which is only
  // after all `chunks` chunk rows were written. Chunks are the local snapshot's own values
  // (snapshot-format.ts: self-contained msgpack, read in chunk order). Older snapshots are
  // deleted once a newer one is complete. `journal_from`: a node that joins from the snapshot
  // also copies the journal's records from this seq up to `seq` (records a sink had not
  // confirmed, or that a remembered Idempotency-Key names, when the snapshot was stored).
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.snapshots (
     cluster text,
     id bigint,
     seq bigint NOT NULL,
     chunks int NOT NULL,
     bytes bigint NOT NULL,
     entities jsonb,
     journal_from bigint,
     created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
     completed_at timestamptz,
     PRIMARY KEY (cluster, id))`,
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.snapshot_chunks (
     cluster text,
     id bigint,
     chunk int,
     data bytea NOT NULL,
     PRIMARY KEY (cluster, id, chunk))`,
  lz4IfAvailable('snapshot_chunks', 'data'),
  // Service keys of cluster mode (pg-keys.ts): sha256 of the key, the 12-character prefix in
  // plain text, never the key. Times in milliseconds since 1970, as the keys CLI shows them.
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.keys (
     cluster text,
     hash text,
     workspace text NOT NULL,
     prefix text NOT NULL,
     created_at bigint NOT NULL,
     revoked_at bigint,
     PRIMARY KEY (cluster, hash))`,
  // Each sink's last confirmed position (seq, and the sink's marker: NATS's stream creation time
  // and stream sequence) as the leader of `epoch` saved it (sink-positions.ts): a new leader
  // starts from it when its own is behind.
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.sink_positions (
     cluster text,
     sink text,
     epoch bigint NOT NULL,
     seq bigint NOT NULL,
     marker jsonb,
     PRIMARY KEY (cluster, sink))`,
  // Bumped in the transaction of every key change; each node polls it (every 250 ms).
  `CREATE TABLE IF NOT EXISTS ${SCHEMA}.keys_version (
     cluster text PRIMARY KEY,
     version bigint NOT NULL)`,
];

export async function ensureSchema(client: pg.Client): Promise<void> {
  await client.query('BEGIN');
  try {
    // A lock this cannot get soon (a session stuck in a transaction that holds one) fails the
    // statement instead of waiting for it without end; the caller tries again later.
    await client.query(`SET LOCAL lock_timeout = '${DDL_LOCK_TIMEOUT_MS}ms'`);
    await client.query('SELECT pg_advisory_xact_lock($1)', [DDL_LOCK_KEY]);
    for (const statement of DDL) await client.query(statement);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** The cluster's lease and head rows, created when missing (epoch 0, nothing committed, a new identity). */
export async function ensureClusterRows(client: pg.Client, cluster: string): Promise<void> {
  // One statement: both rows or neither.
  await client.query(
    `WITH l AS (INSERT INTO ${SCHEMA}.lease (cluster, node, address, epoch, expires_at) VALUES ($1, NULL, NULL, 0, '-infinity') ON CONFLICT (cluster) DO NOTHING)
     INSERT INTO ${SCHEMA}.head (cluster, epoch, last_seq, cluster_id) VALUES ($1, 0, 0, $2) ON CONFLICT (cluster) DO NOTHING`,
    [cluster, randomUUID()],
  );
}

/**
 * The cluster's identity, given one first when its head row has none (a cluster made before
 * identities). Several nodes may do this at once: the UPDATE sets it only while it is NULL, and a
 * second UPDATE waiting on the first's row lock re-checks that on the row the first wrote
 * (READ COMMITTED), so it changes nothing; both then read the one identity. Null when the
 * cluster has no head row.
 */
export async function clusterIdentity(client: pg.Client, cluster: string): Promise<string | null> {
  await client.query(`UPDATE ${SCHEMA}.head SET cluster_id = $2 WHERE cluster = $1 AND cluster_id IS NULL`, [cluster, randomUUID()]);
  const { rows } = await client.query<{ cluster_id: string | null }>(`SELECT cluster_id FROM ${SCHEMA}.head WHERE cluster = $1`, [cluster]);
  return rows[0]?.cluster_id ?? null;
}

/**
 * The cluster's identity as it stands, changing nothing: null when the cluster has no head row
 * (no node of it ever started, its rows were removed, or the name is not the one meant), or when
 * the database has no cluster schema at all. For tools (`npm run keys`, `cluster:local`).
 */
export async function readClusterIdentity(client: pg.Client, cluster: string): Promise<string | null> {
  try {
    const { rows } = await client.query<{ cluster_id: string | null }>(`SELECT cluster_id FROM ${SCHEMA}.head WHERE cluster = $1`, [cluster]);
    return rows.length === 0 ? null : (rows[0]!.cluster_id ?? '');
  } catch (error) {
    if ((error as { code?: unknown }).code === '42P01') return null; // undefined_table: no cluster in this database
    throw error;
  }
}

/** readClusterIdentity on a connection of its own to `url`, closed after (`applicationName`: as PostgreSQL lists it). */
export async function readClusterIdentityAt(url: string, cluster: string, applicationName: string): Promise<string | null> {
  const client = await connectClient(url, { queryTimeoutMs: 10_000, applicationName });
  try {
    return await readClusterIdentity(client, cluster);
  } finally {
    await closeClient(client);
  }
}

/** The LISTEN/NOTIFY channel of a cluster: commits and lease releases wake its followers. */
export function channelOf(cluster: string): string {
  return `intake_cluster.${cluster}`;
}
