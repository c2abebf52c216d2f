// Reads committed journal records for the sinks, in bounded batches. Journal batches (one LMDB
// value each, up to JOURNAL_MAX_BATCH_RECORDS records; a few dozen under load) never change once
// written, so the most recently decoded are kept with their exported lines, up to `cacheRecords`
// records and `cacheBytes` of stored (msgpack) size: two sinks reading the same stretch of the
// journal decode and serialize it once, and a few huge mapping records cannot fill the memory.
import { Buffer } from 'node:buffer';
import type { Database } from 'lmdb';
import { exportLine } from '../journal/export-line.ts';
import { Journal } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import type { OutgoingRecord } from './sink.ts';

class DecodedBatch {
  private readonly lines: Array<string | undefined>;
  private readonly sizes: Array<number | undefined>;

  constructor(
    readonly firstSeq: number,
    readonly records: readonly JournalRecord[],
    /** Its size in LMDB (msgpack): what the cache counts. */
    readonly storedBytes: number,
  ) {
    this.lines = new Array(records.length);
    this.sizes = new Array(records.length);
  }

  outgoing(i: number): OutgoingRecord {
    const line = (this.lines[i] ??= exportLine(this.firstSeq + i, this.records[i]!));
    return { seq: this.firstSeq + i, record: this.records[i]!, line };
  }

  bytes(i: number): number {
    return (this.sizes[i] ??= Buffer.byteLength(this.outgoing(i).line));
  }
}

export class JournalReader {
  private readonly db: Database<JournalRecord[], number>;
  /** Decoded batches, oldest first, holding `cachedRecords` records in all. */
  private readonly cache = new Map<number, DecodedBatch>();
  private cachedRecords = 0;
  private cachedBytes = 0;
  private readonly cacheRecords: number;
  private readonly cacheBytes: number;

  /** How many decoded records, and of what stored size, to keep (the oldest batches go first). */
  constructor(db: Database<JournalRecord[], number>, cacheRecords: number, cacheBytes: number) {
    this.db = db;
    this.cacheRecords = cacheRecords;
    this.cacheBytes = cacheBytes;
  }

  /** The oldest stored seq (retention trims from the front), or null when the journal is empty. */
  firstSeq(): number | null {
    this.db.resetReadTxn();
    return Journal.firstSeq(this.db);
  }

  /**
   * Records with `after` < seq <= `upTo`, in order: at most `maxRecords`, and at most `maxBytes`
   * of exported JSON (but always the first one, however big).
   */
  read(after: number, upTo: number, maxRecords: number, maxBytes: number): OutgoingRecord[] {
    const out: OutgoingRecord[] = [];
    if (upTo <= after) return out;
    // lmdb-js renews a thread's read snapshot only from a timer; a loop that reads again before
    // any timer ran would see the journal as it was (found by review: the worker span on it).
    this.db.resetReadTxn();
    let bytes = 0;
    for (const key of this.keysFrom(after + 1)) {
      if (key > upTo) break;
      // A batch stops at a hole in the seqs (records missing from this node's journal): the
      // loop then sees the next batch start after its position and says so, never silently.
      if (out.length > 0 && key !== out[out.length - 1]!.seq + 1) return out;
      const batch = this.batch(key);
      if (batch === null) break;
      for (let i = Math.max(0, after + 1 - key); i < batch.records.length; i++) {
        if (key + i > upTo || out.length >= maxRecords) return out;
        const size = batch.bytes(i);
        if (out.length > 0 && bytes + size > maxBytes) return out;
        bytes += size;
        out.push(batch.outgoing(i));
      }
    }
    return out;
  }

  /** The record of `seq`, or null when it is not (or no longer) stored. */
  record(seq: number): OutgoingRecord | null {
    this.db.resetReadTxn();
    for (const key of this.keysFrom(seq)) {
      const batch = key > seq ? null : this.batch(key);
      return batch !== null && seq - key < batch.records.length ? batch.outgoing(seq - key) : null;
    }
    return null;
  }

  /** Batch keys from the batch holding `seq` (or the first one after it) on. */
  private *keysFrom(seq: number): Generator<number> {
    let start = seq;
    // The batch holding `seq` starts at or before it.
    for (const key of this.db.getKeys({ start: seq, reverse: true, limit: 1 })) start = key;
    yield* this.db.getKeys({ start });
  }

  private batch(key: number): DecodedBatch | null {
    let batch = this.cache.get(key);
    if (batch !== undefined) return batch;
    // Its stored size, without copying the bytes (getBinaryFast's buffer is reused: only its
    // length is read).
    const storedBytes = this.db.getBinaryFast(key)?.length;
    if (storedBytes === undefined) return null; // trimmed meanwhile
    const records = this.db.get(key)!;
    batch = new DecodedBatch(key, records, storedBytes);
    this.cache.set(key, batch);
    this.cachedRecords += records.length;
    this.cachedBytes += batch.storedBytes;
    for (const [oldKey, old] of this.cache) {
      if ((this.cachedRecords <= this.cacheRecords && this.cachedBytes <= this.cacheBytes) || old === batch) break;
      this.cache.delete(oldKey);
      this.cachedRecords -= old.records.length;
      this.cachedBytes -= old.storedBytes;
    }
    return batch;
  }
}
