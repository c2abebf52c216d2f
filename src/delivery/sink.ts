// The one interface every delivery sink implements (nats-sink.ts, postgres-sink.ts). A sink
// stores journal records handed to it in batches of consecutive seqs; the delivery loop
// (delivery-loop.ts) owns the order, the position, retries and backoff, so a sink only has to
// say what it holds (open) and confirm what it stored (deliver).
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

/** The newest record a sink holds. */
export interface SinkHead {
  seq: number;
  /** True when what the sink holds at `seq` is this journal's record of that seq. */
  matches(record: OutgoingRecord): boolean;
}

export interface Sink {
  /** Metrics label and log name: `nats` or `postgres`. */
  readonly kind: string;
  /** Key of this sink's position in LMDB: the kind and its stream or table, e.g. `nats:INTAKE`. */
  readonly id: string;
  /**
   * Connects, creates the stream or table when it is missing, and reads the newest record the
   * sink holds (null when it holds none of ours). Rejects when the sink cannot be reached.
   */
  open(): Promise<SinkHead | null>;
  /**
   * Stores a prefix of `batch` (consecutive seqs, the first right after the last one confirmed)
   * and resolves with how many records, from the first, the sink confirmed (at least 1).
   * Rejects when it cannot confirm the first one; the loop then calls close() and open() again,
   * and open() tells where the sink really is.
   */
  deliver(batch: readonly OutgoingRecord[]): Promise<number>;
  /** Drops the connection and whatever it had not sent. Never rejects. */
  close(): Promise<void>;
}

/** The sink holds records this journal does not have (another intake's, or an older data directory's). */
export class SinkMismatchError extends Error {}

/**
 * A record the sink cannot take as it is configured (bigger than NATS max_payload, say):
 * delivery waits at it, and the log tells the operator what to change.
 */
export class UndeliverableRecordError extends Error {}
