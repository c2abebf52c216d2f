// Snapshots and journal retention in PostgreSQL (CONTRACT.md §12 "Joining", §7).
//
// Snapshots. The leader stores its newest local snapshot in PostgreSQL after it completes: a row
// in `snapshots` (created first, incomplete), its chunks in `snapshot_chunks` (the local LMDB
// chunk values as they are: self-contained msgpack, snapshot-format.ts), a few per statement, and
// then `completed_at`, set only if every chunk row is there. A node that joins with an empty data
// directory, or whose position the journal no longer reaches back to, loads the newest complete
// one and applies the journal after it.
//
// A snapshot's id is max(id) + 1 of its cluster, taken in the INSERT that creates its row: each
// upload owns its id alone (two uploads at once, a former leader's and the new one's, cannot mix
// chunks: the second INSERT with the same id fails on the primary key and is tried again at the
// next snapshot). Which snapshot is newest goes by `seq`, never by id: an upload that started
// later may carry an older state. Deleting older snapshots also goes by seq, so a slow upload of
// an older state never deletes a newer snapshot, which retention may already rely on.
//
// Retention. With JOURNAL_RETENTION_SECONDS set, the leader deletes journal batches from the
// front, in bounded steps, while each batch is older than the retention (committed_at, by
// PostgreSQL's clock) and ends at or before the newest complete snapshot's seq and the caller's
// limit (every sink's confirmed position, the oldest remembered Idempotency-Key's seq − 1). The
// journal keeps no hole: deletion stops at the first batch that must stay.
import type pg from 'pg';
import type { EntityCounts } from '../journal/snapshot-format.ts';
import { SCHEMA } from './schema.ts';

/** A snapshot as PostgreSQL holds it. */
export interface StoredSnapshot {
  id: number;
  /** The state after record `seq` of the cluster's journal. */
  seq: number;
  chunks: number;
  bytes: number;
  entities: EntityCounts | null;
  /** The first seq of the records before the snapshot that a joining node copies too (seq + 1: none). */
  journalFrom: number;
}

export interface RemovedSnapshots {
  snapshots: number;
  chunks: number;
}

export interface JournalTrim {
  batches: number;
  records: number;
  /** The last seq deleted, or null when nothing was. */
  lastSeq: number | null;
}

/** Chunk rows deleted per statement when an old snapshot goes. */
const DELETE_CHUNKS_PER_STATEMENT = 1_000;

export class ClusterSnapshots {
  constructor(readonly cluster: string) {}

  /** The newest complete snapshot (highest seq), or null. */
  async newest(client: pg.Client): Promise<StoredSnapshot | null> {
    const { rows } = await client.query<{ id: string; seq: string; chunks: number; bytes: string; entities: EntityCounts | null; journal_from: string | null }>(
      `SELECT id, seq, chunks, bytes, entities, journal_from FROM ${SCHEMA}.snapshots
       WHERE cluster = $1 AND completed_at IS NOT NULL ORDER BY seq DESC, id DESC LIMIT 1`,
      [this.cluster],
    );
    const row = rows[0];
    if (row === undefined) return null;
    const seq = Number(row.seq);
    const journalFrom = row.journal_from === null ? seq + 1 : Math.min(Number(row.journal_from), seq + 1);
    return { id: Number(row.id), seq, chunks: row.chunks, bytes: Number(row.bytes), entities: row.entities, journalFrom };
  }

  /**
   * Creates the (incomplete) row of a snapshot of the state after `seq` and returns its id, or
   * null when a complete snapshot of that seq or a later one is stored already.
   */
  async create(client: pg.Client, seq: number, chunks: number, bytes: number, entities: EntityCounts, journalFrom: number): Promise<number | null> {
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO ${SCHEMA}.snapshots (cluster, id, seq, chunks, bytes, entities, journal_from)
       SELECT $1, coalesce((SELECT max(id) FROM ${SCHEMA}.snapshots WHERE cluster = $1), 0) + 1, $2, $3, $4, $5, $6
       WHERE NOT EXISTS (SELECT 1 FROM ${SCHEMA}.snapshots WHERE cluster = $1 AND completed_at IS NOT NULL AND seq >= $2)
       RETURNING id`,
      [this.cluster, seq, chunks, bytes, JSON.stringify(entities), journalFrom],
    );
    return rows[0] === undefined ? null : Number(rows[0].id);
  }

  /** Stores chunks first.. of snapshot `id` (one statement, one implicit transaction). */
  async putChunks(client: pg.Client, id: number, first: number, data: Buffer[]): Promise<void> {
    await client.query(
      `INSERT INTO ${SCHEMA}.snapshot_chunks (cluster, id, chunk, data)
       SELECT $1, $2, $3::int + c.n - 1, c.data FROM unnest($4::bytea[]) WITH ORDINALITY AS c(data, n)`,
      [this.cluster, id, first, data],
    );
  }

  /** Marks snapshot `id` complete; throws unless its row and all of its chunk rows are there. */
  async complete(client: pg.Client, id: number): Promise<void> {
    const result = await client.query(
      `UPDATE ${SCHEMA}.snapshots s SET completed_at = clock_timestamp()
       WHERE s.cluster = $1 AND s.id = $2 AND s.completed_at IS NULL
         AND s.chunks = (SELECT count(*) FROM ${SCHEMA}.snapshot_chunks c WHERE c.cluster = $1 AND c.id = $2)`,
      [this.cluster, id],
    );
    if (result.rowCount !== 1) throw new Error(`snapshot ${id} in PostgreSQL lost its row or chunks before it was complete (a newer snapshot replaced it)`);
  }

  /**
   * Deletes the snapshots older than snapshot `id` (of `seq`): those of a lower seq, and
   * unfinished uploads begun before it. The row goes first (nothing reads a snapshot without
   * one), then its chunks in bounded statements; chunks whose row is gone (an earlier deletion
   * cut short) go too.
   */
  async removeOlder(client: pg.Client, id: number, seq: number): Promise<RemovedSnapshots> {
    const removed: RemovedSnapshots = { snapshots: 0, chunks: 0 };
    const { rows } = await client.query<{ id: string }>(
      `DELETE FROM ${SCHEMA}.snapshots WHERE cluster = $1 AND id <> $2 AND (seq < $3 OR (id < $2 AND completed_at IS NULL)) RETURNING id`,
      [this.cluster, id, seq],
    );
    removed.snapshots = rows.length;
    const orphans = await client.query<{ id: string }>(
      `SELECT DISTINCT c.id FROM ${SCHEMA}.snapshot_chunks c
       WHERE c.cluster = $1 AND c.id <> $2 AND NOT EXISTS (SELECT 1 FROM ${SCHEMA}.snapshots s WHERE s.cluster = $1 AND s.id = c.id)`,
      [this.cluster, id],
    );
    for (const row of orphans.rows) {
      for (;;) {
        const deleted = await client.query(
          `DELETE FROM ${SCHEMA}.snapshot_chunks WHERE cluster = $1 AND id = $2
             AND chunk IN (SELECT chunk FROM ${SCHEMA}.snapshot_chunks WHERE cluster = $1 AND id = $2 ORDER BY chunk LIMIT $3)`,
          [this.cluster, row.id, DELETE_CHUNKS_PER_STATEMENT],
        );
        removed.chunks += deleted.rowCount ?? 0;
        if ((deleted.rowCount ?? 0) < DELETE_CHUNKS_PER_STATEMENT) break;
      }
    }
    return removed;
  }

  /** Chunks first.. of snapshot `id`, at most `count`, in order (fewer when the snapshot is gone). */
  async chunks(client: pg.Client, id: number, first: number, count: number): Promise<Buffer[]> {
    const { rows } = await client.query<{ chunk: number; data: Buffer }>(
      `SELECT chunk, data FROM ${SCHEMA}.snapshot_chunks WHERE cluster = $1 AND id = $2 AND chunk >= $3 ORDER BY chunk LIMIT $4`,
      [this.cluster, id, first, count],
    );
    const out: Buffer[] = [];
    for (const row of rows) {
      if (row.chunk !== first + out.length) break;
      out.push(row.data);
    }
    return out;
  }

  /**
   * One step of journal retention: deletes, from the front of the journal and among its first
   * `maxBatches` batches, those committed more than `retentionSeconds` ago whose last seq is at
   * or before the newest complete snapshot's seq and `keepAfter` (null: no such limit). Stops at
   * the first batch that must stay, so the journal never gets a hole.
   */
  async trimJournal(client: pg.Client, keepAfter: number | null, retentionSeconds: number, maxBatches: number): Promise<JournalTrim> {
    const { rows } = await client.query<{ batches: string; records: string | null; last_seq: string | null }>(
      `WITH b AS (
         SELECT max(seq) AS snap FROM ${SCHEMA}.snapshots WHERE cluster = $1 AND completed_at IS NOT NULL
       ), front AS (
         SELECT j.first_seq,
                (j.last_seq <= b.snap AND ($2::bigint IS NULL OR j.last_seq <= $2::bigint)
                 AND j.committed_at < clock_timestamp() - make_interval(secs => $3)) AS doomed
         FROM ${SCHEMA}.journal j, b WHERE j.cluster = $1 ORDER BY j.first_seq LIMIT $4
       ), stop AS (
         SELECT min(first_seq) AS at FROM front WHERE doomed IS NOT TRUE
       ), d AS (
         DELETE FROM ${SCHEMA}.journal j USING front f, stop s
         WHERE j.cluster = $1 AND j.first_seq = f.first_seq AND f.doomed AND (s.at IS NULL OR f.first_seq < s.at)
         RETURNING j.first_seq, j.last_seq
       )
       SELECT count(*) AS batches, sum(last_seq - first_seq + 1) AS records, max(last_seq) AS last_seq FROM d`,
      [this.cluster, keepAfter, retentionSeconds, maxBatches],
    );
    const row = rows[0]!;
    return { batches: Number(row.batches), records: Number(row.records ?? 0), lastSeq: row.last_seq === null ? null : Number(row.last_seq) };
  }
}
