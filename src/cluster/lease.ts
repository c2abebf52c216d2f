// The leader lease (CONTRACT.md §12), kept in PostgreSQL and timed by PostgreSQL's clock only
// (clock_timestamp(), not now(): now() is the transaction's start, and a node's own clock is
// never compared with another's). The lease is for liveness: it says who should lead and when a
// silent leader may be replaced. Safety does not rest on it: the head row's epoch does
// (cluster-journal.ts), so a leader that still believes in an expired lease commits nothing.
import type pg from 'pg';
import { SCHEMA } from './schema.ts';

export interface LeaseState {
  /** The node holding (or that last held) the lease, null when none ever did. */
  node: string | null;
  address: string | null;
  /** The secret of its endpoint for forwarded writes (forward-protocol.ts), null before any. */
  secret: string | null;
  epoch: number;
  /** Still valid by PostgreSQL's clock. */
  live: boolean;
  /** How long it stays valid unless renewed, by PostgreSQL's clock at the read (0 when not live): a follower tries to take it over then. */
  remainingMs: number;
  /** The cluster's lease row exists (it is created with the head row: schema.ts). */
  exists: boolean;
}

export class Lease {
  constructor(
    readonly cluster: string,
    readonly leaseMs: number,
  ) {}

  async read(client: pg.Client): Promise<LeaseState> {
    const { rows } = await client.query<{ node: string | null; address: string | null; forward_secret: string | null; epoch: string; live: boolean; remaining_ms: number }>(
      `SELECT node, address, forward_secret, epoch, expires_at > now AS live,
              -- an unset lease expires at -infinity, which cannot be subtracted
              CASE WHEN expires_at > now THEN EXTRACT(EPOCH FROM expires_at - now) * 1000 ELSE 0 END::float8 AS remaining_ms
       FROM ${SCHEMA}.lease, (SELECT clock_timestamp() AS now) c WHERE cluster = $1`,
      [this.cluster],
    );
    const row = rows[0];
    return row === undefined
      ? { node: null, address: null, secret: null, epoch: 0, live: false, remainingMs: 0, exists: false }
      : { node: row.node, address: row.address, secret: row.forward_secret, epoch: Number(row.epoch), live: row.live, remainingMs: row.live ? row.remaining_ms : 0, exists: true };
  }

  /**
   * Takes the lease if it has expired (or was released): a compare-and-set that also bumps the
   * epoch, and in the same statement moves the head row to the new epoch, so that from this
   * statement's commit on no earlier leader can commit. Returns the new epoch and the journal's
   * last seq as of the takeover, or null when the lease is still someone's. `secret` is the new
   * epoch's secret for forwarded writes. With `channel`, the takeover NOTIFYs it ('leader') on
   * commit: the other nodes read the lease at once and forward to the new leader, instead of
   * learning of it at their next look (up to a fifth of a lease later) or from a refused forward.
   */
  async takeOver(client: pg.Client, node: string, address: string, secret: string | null = null, channel: string | null = null): Promise<{ epoch: number; lastSeq: number } | null> {
    const { rows } = await client.query<{ epoch: string; last_seq: string }>(
      `WITH l AS (
         UPDATE ${SCHEMA}.lease
         SET node = $2, address = $3, forward_secret = $5, epoch = epoch + 1, expires_at = clock_timestamp() + $4 * interval '1 millisecond'
         WHERE cluster = $1 AND expires_at <= clock_timestamp()
           -- never a lease without its head row: the epoch would be bumped for nobody
           AND EXISTS (SELECT 1 FROM ${SCHEMA}.head WHERE head.cluster = $1)
         RETURNING epoch
       ), h AS (
         UPDATE ${SCHEMA}.head SET epoch = l.epoch FROM l WHERE head.cluster = $1
         RETURNING head.epoch, head.last_seq
       )
       SELECT epoch, last_seq, CASE WHEN $6::text IS NULL THEN NULL ELSE pg_notify($6, 'leader') END FROM h`,
      [this.cluster, node, address, this.leaseMs, secret, channel],
    );
    const row = rows[0];
    return row === undefined ? null : { epoch: Number(row.epoch), lastSeq: Number(row.last_seq) };
  }

  /** Extends the lease by leaseMs from now (PostgreSQL's now); false when it is no longer ours. */
  async renew(client: pg.Client, node: string, epoch: number): Promise<boolean> {
    const result = await client.query(
      `UPDATE ${SCHEMA}.lease SET expires_at = clock_timestamp() + $4 * interval '1 millisecond' WHERE cluster = $1 AND node = $2 AND epoch = $3`,
      [this.cluster, node, epoch, this.leaseMs],
    );
    return result.rowCount === 1;
  }

  /** Gives the lease up at once (graceful stop), and wakes the followers to take it. */
  async release(client: pg.Client, node: string, epoch: number, channel: string): Promise<boolean> {
    const result = await client.query(
      `WITH l AS (
         UPDATE ${SCHEMA}.lease SET expires_at = clock_timestamp() WHERE cluster = $1 AND node = $2 AND epoch = $3 RETURNING epoch
       )
       SELECT pg_notify($4, 'released') FROM l`,
      [this.cluster, node, epoch, channel],
    );
    return result.rowCount === 1;
  }
}
