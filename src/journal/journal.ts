// The journal with group commit. Records appended during one event-loop turn form one batch,
// written as ONE LMDB put (one value) when the turn ends; every request in it is answered after
// that put's promise resolves, which with lmdb-js's defaults means after the commit is fsync'd.
// At most `maxInFlight` batches are handed to lmdb-js at once (default 1: each commit is an
// fsync plus lmdb-js bookkeeping on this thread, and measured per request that costs more CPU
// than overlapping commits saves in latency); meanwhile the open batch grows. A crash leaves a
// prefix of whole batches: never half a write.
import type { Database } from 'lmdb';
import type { JournalRecord } from './records.ts';

/** Told when the batch holding its record (or the writes it observed) is durable, or is not. */
export interface CommitWaiter {
  committed(): void;
  failed(error: Error): void;
}

interface Batch {
  firstSeq: number;
  records: JournalRecord[];
  waiters: CommitWaiter[];
}

export interface JournalStats {
  /** Called once per committed batch. */
  onCommit?(records: number, commitLatencyMs: number): void;
  onFailure?(error: Error): void;
}

/**
 * group: records of one event-loop turn share one commit (answers wait for it).
 * sync: each record is committed and fsync'd before append() returns, and its waiter hears at
 * once. uWS closes a connection that pipelines a request behind a response still pending, so
 * only sync mode lets clients pipeline writes; it costs one fsync per write.
 */
export type CommitMode = 'group' | 'sync';

/** Key of the durable position in the meta database. */
export const DURABLE_SEQ_KEY = 'durableSeq';

/**
 * How long the journal waits, once idle, before writing the durable position on its own (under
 * load it rides along with the next batch and costs no extra commit).
 */
const MARKER_IDLE_MS = 20;

export class Journal {
  private readonly db: Database<JournalRecord[], number>;
  private readonly mode: CommitMode;
  private readonly maxBatchRecords: number;
  private readonly maxInFlight: number;
  private readonly stats: JournalStats;
  private nextSeq: number;
  private current: Batch | null = null;
  /** Batches handed to LMDB and not yet settled, oldest first. */
  private readonly inFlight: Batch[] = [];
  private flushScheduled = false;
  private failure: Error | null = null;
  private idleWaiters: Array<() => void> = [];
  /** Every record up to this seq is durable. */
  private durable: number;
  private readonly durableWatchers: Array<(seq: number) => void> = [];
  private marker: Database<number, string> | null = null;
  /** The durable position last handed to LMDB (meta `durableSeq`). */
  private markerSeq = 0;
  private markerTimer: NodeJS.Timeout | null = null;
  /** The batch recordAt() decoded last (batches never change once written). */
  private lastRead: { key: number; records: JournalRecord[] } | null = null;

  constructor(db: Database<JournalRecord[], number>, mode: CommitMode, maxBatchRecords: number, stats: JournalStats = {}, maxInFlight = 1) {
    this.db = db;
    this.mode = mode;
    this.maxBatchRecords = maxBatchRecords;
    this.maxInFlight = maxInFlight;
    this.stats = stats;
    this.nextSeq = Journal.lastSeq(db) + 1;
    // What a fresh process finds stored survived whatever came before; markDurable() fsyncs it.
    this.durable = this.nextSeq - 1;
    this.flushNow = this.flushNow.bind(this);
    this.writeIdleMarker = this.writeIdleMarker.bind(this);
  }

  /** Every record up to this seq is durable (fsync'd); delivery reads no further. */
  get durableSeq(): number {
    return this.durable;
  }

  /** Calls `watcher` with the new durable position each time it grows. */
  watchDurable(watcher: (seq: number) => void): void {
    this.durableWatchers.push(watcher);
  }

  /** Keeps the durable position in `meta` (key DURABLE_SEQ_KEY) for readers in other processes. */
  useMarker(meta: Database<number, string>): void {
    this.marker = meta;
    this.markerSeq = meta.get(DURABLE_SEQ_KEY) ?? 0;
  }

  /**
   * Writes the durable position now and resolves once that commit is fsync'd (which also makes
   * everything committed before it durable). At start, after recovery; at stop, after drain().
   */
  async markDurable(): Promise<void> {
    if (this.marker === null || this.failure !== null) return;
    this.markerSeq = this.durable;
    await this.marker.put(DURABLE_SEQ_KEY, this.durable);
  }

  private advanceDurable(seq: number): void {
    if (seq <= this.durable) return;
    this.durable = seq;
    for (const watcher of this.durableWatchers) watcher(seq);
  }

  /** Hands the durable position to LMDB with the next write, if it moved. */
  private writeMarker(): void {
    if (this.marker === null || this.durable <= this.markerSeq) return;
    this.markerSeq = this.durable;
    // A lost marker only delays followers; the journal's own commits report real failures.
    this.marker.put(DURABLE_SEQ_KEY, this.durable).catch(() => undefined);
  }

  private writeIdleMarker(): void {
    this.markerTimer = null;
    if (this.failure === null) this.writeMarker();
  }

  private armIdleMarker(): void {
    if (this.marker === null || this.markerTimer !== null || this.durable <= this.markerSeq) return;
    this.markerTimer = setTimeout(this.writeIdleMarker, MARKER_IDLE_MS);
    this.markerTimer.unref();
  }

  /** The seq of the newest stored record, 0 when the journal is empty. */
  static lastSeq(db: Database<JournalRecord[], number>): number {
    for (const { key, value } of db.getRange({ reverse: true, limit: 1 })) return key + value.length - 1;
    return 0;
  }

  /** The seq of the oldest stored record (retention trims from the front), null when empty. */
  static firstSeq(db: Database<JournalRecord[], number>): number | null {
    for (const key of db.getKeys({ limit: 1 })) return key;
    return null;
  }

  /** Why the journal stopped accepting writes, or null while it works. */
  get failed(): Error | null {
    return this.failure;
  }

  /**
   * Makes the next seq follow `seq` at least: after retention emptied the journal, numbering goes
   * on from the newest snapshot, so a seq is never used twice.
   */
  continueAfter(seq: number): void {
    if (this.nextSeq <= seq) this.nextSeq = seq + 1;
    if (this.durable < seq) this.durable = seq;
  }

  /** Seq of the last record appended (committed or not). */
  get lastAppendedSeq(): number {
    return this.nextSeq - 1;
  }

  /**
   * Adds a record to the open batch; `waiter` hears when it is durable. Callers check `failed`
   * first: after a failure nothing more is appended.
   */
  append(record: JournalRecord, waiter: CommitWaiter): number {
    if (this.mode === 'sync') return this.appendSync(record, waiter);
    let batch = this.current;
    if (batch === null) {
      batch = this.current = { firstSeq: this.nextSeq, records: [], waiters: [] };
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flushNow);
      }
    }
    batch.records.push(record);
    batch.waiters.push(waiter);
    const seq = this.nextSeq++;
    if (batch.records.length >= this.maxBatchRecords) this.closeBatch();
    return seq;
  }

  private appendSync(record: JournalRecord, waiter: CommitWaiter): number {
    const seq = this.nextSeq++;
    const startedAt = performance.now();
    try {
      // putSync commits and fdatasyncs on this thread before it returns (checked with strace).
      this.db.putSync(seq, [record]);
    } catch (error) {
      const failure = error instanceof Error ? error : new Error(String(error));
      if (this.failure === null) {
        this.failure = failure;
        this.stats.onFailure?.(failure);
      }
      waiter.failed(this.failure);
      return seq;
    }
    this.stats.onCommit?.(1, performance.now() - startedAt);
    this.advanceDurable(seq);
    this.armIdleMarker();
    waiter.committed();
    return seq;
  }

  /**
   * Tells `waiter` once every record appended so far is durable. Returns false when nothing is
   * pending (the caller may answer at once). Used for answers that depend on state changed by
   * writes not yet committed, so no answer ever reflects a write that could still be lost.
   */
  afterPending(waiter: CommitWaiter): boolean {
    const batch = this.current ?? this.inFlight[this.inFlight.length - 1];
    if (batch === undefined) return false;
    batch.waiters.push(waiter);
    return true;
  }

  /**
   * Resolves once every record appended so far is durable; rejects if the journal failed (then
   * or before). A snapshot covering position P waits on this before it calls itself complete.
   */
  whenDurable(): Promise<void> {
    if (this.failure !== null) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      if (!this.afterPending({ committed: () => resolve(), failed: reject })) resolve();
    });
  }

  private flushNow(): void {
    this.flushScheduled = false;
    // With enough commits in flight the batch stays open and grows; the next commit to settle
    // closes it. Bigger batches under load, and never more than a few commits queued in LMDB.
    if (this.inFlight.length < this.maxInFlight) this.closeBatch();
  }

  private closeBatch(): void {
    const batch = this.current;
    if (batch === null) return;
    this.current = null;
    this.inFlight.push(batch);
    const startedAt = performance.now();
    let write: Promise<boolean>;
    try {
      // Same event-loop turn as the batch's put: lmdb-js commits both in one transaction.
      this.writeMarker();
      write = this.db.put(batch.firstSeq, batch.records);
    } catch (error) {
      write = Promise.reject(error);
    }
    write.then(
      () => this.settle(batch, null, performance.now() - startedAt),
      (error: unknown) => this.settle(batch, error instanceof Error ? error : new Error(String(error)), 0),
    );
  }

  private settle(batch: Batch, error: Error | null, commitLatencyMs: number): void {
    this.settleBatch(batch, error, commitLatencyMs);
    const open = this.current;
    if (open === null) return;
    if (this.failure !== null) {
      // Records appended while the failed commit was in flight will never be written: their
      // waiters hear the failure now (found by review: with one commit in flight they waited
      // forever, and drain() never resolved, so a stop hung until its hard limit).
      this.current = null;
      this.settleBatch(open, this.failure, 0);
    } else if (this.inFlight.length < this.maxInFlight) this.closeBatch();
  }

  private settleBatch(batch: Batch, error: Error | null, commitLatencyMs: number): void {
    // lmdb-js also rejects a shared `commitError` promise that nobody else awaits; left alone,
    // that unhandled rejection would end the process instead of this failure being reported.
    const commitError = (error as { commitError?: unknown } | null)?.commitError;
    if (commitError instanceof Promise) commitError.catch(() => undefined);
    const i = this.inFlight.indexOf(batch);
    if (i !== -1) this.inFlight.splice(i, 1);
    if (error !== null && this.failure === null) {
      this.failure = error;
      this.stats.onFailure?.(error);
    }
    // After a failure no batch is acknowledged, even one LMDB did commit: the batch before it may
    // be missing, and answers must not depend on a lost write.
    const failure = this.failure;
    if (failure === null) {
      this.stats.onCommit?.(batch.records.length, commitLatencyMs);
      // Every batch before the oldest one still pending has settled (and none failed), whatever
      // order they settled in.
      this.advanceDurable((this.inFlight[0]?.firstSeq ?? this.current?.firstSeq ?? this.nextSeq) - 1);
    }
    for (const waiter of batch.waiters) {
      try {
        if (failure === null) waiter.committed();
        else waiter.failed(failure);
      } catch {
        // A waiter's own error (a closed socket) must not stop the others from hearing.
      }
    }
    if (this.current === null && this.inFlight.length === 0) {
      if (failure === null) this.armIdleMarker();
      const idle = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of idle) resolve();
    }
  }

  /** Resolves when every appended record has been committed or has failed. */
  drain(): Promise<void> {
    if (this.current === null && this.inFlight.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * The stored record of `seq`, or null (not written yet, or trimmed). A batch decodes whole (up
   * to JOURNAL_MAX_BATCH_RECORDS records, ~3 ms at 8,192), so the last one decoded is kept:
   * retries of one app launch, the reason this is called, read it once.
   */
  recordAt(seq: number): JournalRecord | null {
    const cached = this.lastRead;
    if (cached !== null && seq >= cached.key && seq - cached.key < cached.records.length) return cached.records[seq - cached.key]!;
    for (const { key, value } of this.db.getRange({ start: seq, reverse: true, limit: 1 })) {
      this.lastRead = { key, records: value };
      return seq - key < value.length ? value[seq - key]! : null;
    }
    return null;
  }

  /** Every stored record in order, with its seq. */
  static *read(db: Database<JournalRecord[], number>, afterSeq = 0): Generator<{ seq: number; record: JournalRecord }> {
    // The batch holding afterSeq + 1 starts at or before it.
    let start = afterSeq + 1;
    for (const { key } of db.getRange({ start: afterSeq + 1, reverse: true, limit: 1 })) start = key;
    for (const { key, value } of db.getRange({ start })) {
      for (let i = 0; i < value.length; i++) {
        const seq = key + i;
        if (seq > afterSeq) yield { seq, record: value[i]! };
      }
    }
  }
}
