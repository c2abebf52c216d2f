// The cluster's journal in PostgreSQL (CONTRACT.md §12): the one commit point of every node.
//
// Fencing, and why batches can never overlap. Each commit is ONE statement (one round trip, one
// implicit transaction): a compare-and-set on the cluster's head row — "my epoch is still the
// head's epoch, and the journal still ends at first_seq − 1" — and, only if that row was
// updated, the insert of the batch row first_seq..last_seq. The head row moves to last_seq in the
// same statement. So a batch starts exactly where the previous one ended (no overlap, no gap,
// whatever the two leaders' batch boundaries), and a leader whose epoch was bumped by a takeover
// commits nothing more: the takeover updates the same row, so a commit either finished before it
// (and the new leader reads it, since it reads the journal only after the bump) or waits for the
// row lock and then finds another epoch (READ COMMITTED re-checks the WHERE clause on the row
// the takeover wrote). The batch rows' primary key (cluster, first_seq) is a second guard only.
import type pg from 'pg';
import type { JournalRecord } from '../journal/records.ts';
import { decodeBatch, encodeBatch } from './record-codec.ts';
import { channelOf, SCHEMA } from './schema.ts';

/** The commit was refused: another node took over (epoch) or the journal moved (head). */
export class FencedError extends Error {}

export interface Head {
  epoch: number;
  lastSeq: number;
}

export interface StoredBatch {
  firstSeq: number;
  lastSeq: number;
  epoch: number;
  /**
   * The records, decoded from `bytes` each time this is read, and not kept: a follower decodes a
   * batch as it applies it. Decoded when read (before 2026-11-29), the 16 batches of a read were
   * all alive across the garbage collector's scavenges (a 4 MB young generation), which took 37%
   * of a follower's busy time at saturation (`--cpu-prof`).
   */
  readonly records: JournalRecord[];
  /** The records as stored: the same encoding as a node's LMDB copy (journal/record-bytes.ts). */
  bytes: Uint8Array;
}

function storedBatch(firstSeq: number, lastSeq: number, epoch: number, bytes: Uint8Array): StoredBatch {
  return {
    firstSeq,
    lastSeq,
    epoch,
    bytes,
    get records(): JournalRecord[] {
      return decodeBatch(bytes);
    },
  };
}

export class ClusterJournal {
  private readonly commitSql: string;
  /** The same commit without its NOTIFY (the leader spaces them out: cluster-node.ts). */
  private readonly quietCommitSql: string;

  constructor(readonly cluster: string) {
    this.commitSql = `WITH h AS (
        UPDATE ${SCHEMA}.head SET last_seq = $4
        WHERE cluster = $1 AND epoch = $2 AND epoch > 0 AND last_seq = $3::bigint - 1
        RETURNING last_seq
      ), j AS (
        INSERT INTO ${SCHEMA}.journal (cluster, first_seq, last_seq, epoch, records)
        SELECT $1, $3, $4, $2, $5 FROM h
        RETURNING first_seq
      )
      SELECT j.first_seq, pg_notify($6, $4::text) FROM j`;
    this.quietCommitSql = this.commitSql.replace('pg_notify($6, $4::text)', '$6::text');
  }

  /**
   * Commits records firstSeq.. as one batch of `epoch`. Resolves once PostgreSQL committed it;
   * rejects with FencedError when the head's epoch or end is not what this leader thinks (it is
   * no longer the leader: nothing was written), with another error when the outcome is unknown
   * (a lost connection: the batch may or may not be committed).
   */
  async commit(client: pg.Client, epoch: number, firstSeq: number, records: readonly JournalRecord[], bytes: Uint8Array = encodeBatch(records), notify = true): Promise<void> {
    const lastSeq = firstSeq + records.length - 1;
    // A named statement: PostgreSQL parses and plans it once per connection, not per batch.
    const statement = notify ? { name: 'intake-commit', text: this.commitSql } : { name: 'intake-commit-quiet', text: this.quietCommitSql };
    const result = await client.query({ ...statement, values: [this.cluster, epoch, firstSeq, lastSeq, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), channelOf(this.cluster)] });
    if (result.rowCount !== 1) throw new FencedError(`epoch ${epoch} may not commit seq ${firstSeq}..${lastSeq}: another node leads, or the journal moved`);
  }

  /** Tells the nodes listening that the journal ends at `lastSeq` (what a commit's NOTIFY says). */
  async notify(client: pg.Client, lastSeq: number): Promise<void> {
    await client.query('SELECT pg_notify($1, $2::text)', [channelOf(this.cluster), lastSeq]);
  }

  async head(client: pg.Client): Promise<Head> {
    const { rows } = await client.query<{ epoch: string; last_seq: string }>(`SELECT epoch, last_seq FROM ${SCHEMA}.head WHERE cluster = $1`, [this.cluster]);
    const row = rows[0];
    return row === undefined ? { epoch: 0, lastSeq: 0 } : { epoch: Number(row.epoch), lastSeq: Number(row.last_seq) };
  }

  /** The first seq the journal still holds (retention trims from the front), or null when empty. */
  async firstSeq(client: pg.Client): Promise<number | null> {
    const { rows } = await client.query<{ first_seq: string }>(`SELECT first_seq FROM ${SCHEMA}.journal WHERE cluster = $1 ORDER BY first_seq LIMIT 1`, [this.cluster]);
    return rows[0] === undefined ? null : Number(rows[0].first_seq);
  }

  /**
   * Batches holding records after `afterSeq`, in order, at most `maxBatches` of them: the batch
   * holding afterSeq + 1 first (found backwards on the primary key).
   */
  async batchesAfter(client: pg.Client, afterSeq: number, maxBatches: number): Promise<StoredBatch[]> {
    const { rows } = await client.query<{ first_seq: string; last_seq: string; epoch: string; records: Buffer }>(
      `SELECT first_seq, last_seq, epoch, records FROM ${SCHEMA}.journal
       WHERE cluster = $1 AND first_seq >= coalesce((SELECT max(first_seq) FROM ${SCHEMA}.journal WHERE cluster = $1 AND first_seq <= $2::bigint + 1), 0)
         AND last_seq > $2
       ORDER BY first_seq LIMIT $3`,
      [this.cluster, afterSeq, maxBatches],
    );
    return rows.map((row) => storedBatch(Number(row.first_seq), Number(row.last_seq), Number(row.epoch), row.records));
  }
}
