// The one interface every delivery sink implements (nats-sink.ts, postgres-sink.ts). A sink
// stores journal records handed to it in batches of consecutive seqs; the delivery loop
// (delivery-loop.ts) owns the order, retries, backoff and deadlines, so a sink only has to say
// where it stands (open) and confirm what it stored (deliver).
import type { JournalRecord } from '../journal/records.ts';

export type SinkConfig = { kind: 'nats'; url: string; stream: string; subjectPrefix: string } | { kind: 'postgres'; url: string; table: string };

/** Where a sink's position is kept in LMDB: its kind and its stream or table (a new table starts from the beginning). */
export function sinkId(config: SinkConfig): string {
  return config.kind === 'nats' ? `nats:${config.stream}` : `postgres:${config.table}`;
}

/** A journal record on its way out: its seq, the record, and its exported JSON line. */
export interface OutgoingRecord {
  readonly seq: number;
  readonly record: JournalRecord;
  /** exportLine(seq, record): what `npm run export -- events` prints, without the newline. */
  readonly line: string;
}

/**
 * Where a sink stands in its own terms: JSON-able, compared only by the sink that made it (NATS:
 * the stream's creation time and the stream sequence of the last confirmed record; PostgreSQL:
 * none, its exact position is kept in the sink database). Saved in LMDB with the seq it goes with.
 */
export type SinkMarker = Readonly<Record<string, string | number>>;

/** The last record a sink confirmed, and the sink's marker of it. */
export interface Confirmed {
  seq: number;
  marker: SinkMarker | null;
}

/**
 * What open() found, the sink being the authority on where it stands:
 * - `holds`: it holds this journal's records up to `seq` (`matches` checks the one at `seq`);
 * - `consumed`: it got records up to `seq` and someone removed (some of) them since (a WorkQueue
 *   or max_age stream, a consumer that deletes rows): they are not delivered again;
 * - `new`: it holds nothing of ours and is not the sink `confirmed` named (a new, dropped and
 *   recreated, or deleted stream or table, a new database): `seq` is 0, it gets every retained
 *   record.
 */
export interface SinkOpened {
  seq: number;
  how: 'holds' | 'consumed' | 'new';
  /** True when what the sink knows of `seq` is this journal's record of that seq; null: nothing to compare. */
  matches: ((record: OutgoingRecord) => boolean) | null;
  /** The sink's marker of `seq` (saved with it). */
  marker: SinkMarker | null;
}

/** How many records, from the first of a batch, the sink confirmed, and its marker of the last of them. */
export interface Delivered {
  records: number;
  marker: SinkMarker | null;
}

export interface Sink {
  /** Metrics label and log name: `nats` or `postgres`. */
  readonly kind: string;
  /** Key of this sink's position in LMDB: the kind and its stream or table, e.g. `nats:INTAKE`. */
  readonly id: string;
  /**
   * True when the sink itself keeps its exact position, written with the records (PostgreSQL):
   * the loop then saves its copy in LMDB at most every 200 ms. False (NATS): after every batch.
   */
  readonly keepsPosition: boolean;
  /**
   * Connects, creates the stream or table when it is missing, and says where the sink stands
   * (SinkOpened). `confirmed` is the last record it confirmed to this journal as far as the loop
   * knows (exact within a process, saved in LMDB across restarts; null: never delivered).
   * Rejects when the sink cannot be reached.
   */
  open(confirmed: Confirmed | null): Promise<SinkOpened>;
  /**
   * Stores a prefix of `batch` (consecutive seqs, the first right after the last one confirmed)
   * and resolves with how many records, from the first, the sink confirmed (at least 1).
   * Rejects when it cannot confirm the first one; the loop then calls close() and open() again,
   * and open() tells where the sink really is.
   */
  deliver(batch: readonly OutgoingRecord[]): Promise<Delivered>;
  /**
   * False once the connection open() made is known to be gone (the server closed it, or it
   * failed). Asked while there is nothing to deliver, so that a sink that went down while idle
   * is reported down (and reopened) then, not at the next record.
   */
  connected(): boolean;
  /**
   * Drops the connection and whatever it had not sent. Never rejects. A call still running on
   * the dropped connection (one the loop gave up on) must not change what the next open() sets up.
   */
  close(): Promise<void>;
}

/** The sink holds records this journal does not have (another intake's, or an older data directory's). */
export class SinkMismatchError extends Error {}

/**
 * A record the sink cannot take as it is configured (bigger than NATS max_payload, say):
 * delivery waits at it, and the log tells the operator what to change.
 */
export class UndeliverableRecordError extends Error {}

/** A sink call that did not return within DELIVERY_STALL_TIMEOUT_MS: the loop gives up on it. */
export class SinkStallError extends Error {}
