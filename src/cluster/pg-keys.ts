// Service keys in cluster mode (CONTRACT.md §12): in PostgreSQL, tables intake_cluster.keys and
// intake_cluster.keys_version (schema.ts), one set per cluster name, so that the keys CLI run
// anywhere changes the keys of every node. The rules are key-store.ts's; this is only where the
// keys live. Every change takes the cluster's keys lock and bumps its version in one
// transaction; nodes poll the version (authenticator.ts) and re-read the keys when it moved.
import type pg from 'pg';
import type { KeyRecord, KeySource } from '../auth/key-store.ts';
import type { StoredKey } from '../journal/store.ts';
import { LazyClient } from './pg-client.ts';
import { ensureSchema, SCHEMA } from './schema.ts';

/** A key read that takes longer than this counts as PostgreSQL unreachable (the last keys stay). */
const QUERY_TIMEOUT_MS = 5_000;
/**
 * The first of the two advisory-lock keys that serialize the key changes of one cluster ("keys");
 * the second is hashtext(cluster). Two clusters whose names hash alike merely wait on each other.
 */
const KEYS_LOCK_CLASS = 0x6b657973;

interface KeyRow {
  hash: string;
  workspace: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
}

function toRecord(row: KeyRow): KeyRecord {
  // bigint columns come back as strings; milliseconds since 1970 are safe integers.
  return { hash: row.hash, workspace: row.workspace, prefix: row.prefix, createdAt: Number(row.created_at), revokedAt: row.revoked_at === null ? null : Number(row.revoked_at) };
}

export class PgKeys implements KeySource {
  private readonly client: LazyClient;
  private schemaReady = false;

  constructor(
    url: string,
    private readonly cluster: string,
    applicationName = 'intake-keys',
  ) {
    this.client = new LazyClient(url, { queryTimeoutMs: QUERY_TIMEOUT_MS, applicationName });
  }

  async version(): Promise<number> {
    return this.use(async (client) => {
      const { rows } = await client.query<{ version: string }>(`SELECT version FROM ${SCHEMA}.keys_version WHERE cluster = $1`, [this.cluster]);
      return rows.length === 0 ? 0 : Number(rows[0]!.version);
    });
  }

  async list(): Promise<KeyRecord[]> {
    return this.use(async (client) => {
      const { rows } = await client.query<KeyRow>(
        `SELECT hash, workspace, prefix, created_at, revoked_at FROM ${SCHEMA}.keys WHERE cluster = $1 ORDER BY created_at, hash`,
        [this.cluster],
      );
      return rows.map(toRecord);
    });
  }

  async add(key: KeyRecord, onlyIfNone: boolean): Promise<boolean> {
    return this.change(async (client) => {
      if (onlyIfNone) {
        const { rowCount } = await client.query(`SELECT 1 FROM ${SCHEMA}.keys WHERE cluster = $1 LIMIT 1`, [this.cluster]);
        if (rowCount !== 0) return false;
      }
      await client.query(
        `INSERT INTO ${SCHEMA}.keys (cluster, hash, workspace, prefix, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)`,
        [this.cluster, key.hash, key.workspace, key.prefix, key.createdAt, key.revokedAt],
      );
      return true;
    });
  }

  async revoke(hash: string, at: number): Promise<StoredKey | null> {
    return this.change(async (client) => {
      const { rows } = await client.query<KeyRow>(
        `UPDATE ${SCHEMA}.keys SET revoked_at = $3 WHERE cluster = $1 AND hash = $2 AND revoked_at IS NULL
         RETURNING hash, workspace, prefix, created_at, revoked_at`,
        [this.cluster, hash, at],
      );
      if (rows.length === 0) return null;
      const { hash: _, ...revoked } = toRecord(rows[0]!);
      return revoked;
    });
  }

  async close(): Promise<void> {
    await this.client.close();
  }

  /** Runs `run` on the connection, creating the tables first when this source has not yet. */
  private use<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
    return this.client.use(async (client) => {
      if (!this.schemaReady) {
        await ensureSchema(client);
        this.schemaReady = true;
      }
      return run(client);
    });
  }

  /**
   * One change: under the cluster's keys lock (so the first start's "no key yet?" and its insert
   * cannot interleave with another node's), bumping the version when `run` changed something
   * (anything but false or null) in the same transaction.
   */
  private change<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
    return this.use(async (client) => {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [KEYS_LOCK_CLASS, this.cluster]);
        const result = await run(client);
        if (result !== false && result !== null) {
          await client.query(
            `INSERT INTO ${SCHEMA}.keys_version (cluster, version) VALUES ($1, 1)
             ON CONFLICT (cluster) DO UPDATE SET version = ${SCHEMA}.keys_version.version + 1`,
            [this.cluster],
          );
        }
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    });
  }
}
