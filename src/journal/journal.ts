// The journal with group commit. Records appended during one event-loop turn form one batch,
// written as ONE LMDB put (one value) when the turn ends; every request in it is answered after
// that put's promise resolves, which with lmdb-js's defaults means after the commit is fsync'd.
// At most `maxInFlight` batches are handed to lmdb-js at once (default 1: each commit is an
// fsync plus lmdb-js bookkeeping on this thread, and measured per request that costs more CPU
// than overlapping commits saves in latency); meanwhile the open batch grows, and a batch that
// fills (`maxBatchRecords`) waits, closed, for its turn. A crash leaves a prefix of whole
// batches: never half a write.
//
// After a failed commit the journal is done (issue 17): append() stores nothing more, and no
// batch is acknowledged after the failed one, even one LMDB did commit. A batch handed to LMDB
// while an earlier one is still in flight is written only if that earlier batch is in the
// database by then (a conditional write in the same transaction), so the stored journal stays a
// prefix without holes even when a later, smaller commit would have succeeded.
//
// Cluster mode (CONTRACT.md §12) adds a commit target before LMDB: the leader's batch is first
// committed in the cluster's journal in PostgreSQL (the `remote` step), and only then written to
// this node's LMDB, its own copy: so the local journal only ever holds records PostgreSQL
// committed. The leader answers at the PostgreSQL commit (the 200 needs no more, CONTRACT §12),
// its copy a few batches behind at most (remoteCommitted()). A follower appends whole batches it
// read from PostgreSQL (appendReplicated), and takes no writes of its own (append() refuses them
// with the reason it was given).
//
// A leader's commits also keep a least gap between their starts (CLUSTER_COMMIT_GAP_MS): a commit
// in PostgreSQL costs the leader about 100 µs of CPU whatever its size (node-postgres, the socket
// round trip, the wakeup for the answer) and PostgreSQL a WAL flush, and under a steady stream a
// commit started as soon as the one before it ended carried 4 records at 4,000 writes/s. Records
// that come within the gap wait and go together, as PostgreSQL's own commit_delay does. The first
// write after a quiet spell goes at once, and so does a batch that is full or holds
// GAP_HOLDS_BELOW_RECORDS records; a stop ends the gap (endCommitGap()).
import { asBinary, IF_EXISTS, type Database } from 'lmdb';
import { encodeRecords } from './record-bytes.ts';
import type { JournalRecord } from './records.ts';
import { stallPointOnce } from '../config/fault-points.ts';

/** Told when the batch holding its record (or the writes it observed) is durable, or is not. */
export interface CommitWaiter {
  committed(): void;
  failed(error: Error): void;
}

interface Batch {
  firstSeq: number;
  records: JournalRecord[];
  /**
   * The records as stored (record-bytes.ts), when they are already encoded: a leader encodes a
   * batch once for PostgreSQL and its own copy; a follower stores the batch it read as it read it.
   */
  bytes: Uint8Array | null;
  /**
   * The writes of its records: told once the batch is committed (single node: in LMDB; a cluster
   * leader: in PostgreSQL, its own LMDB copy written behind).
   */
  waiters: CommitWaiter[];
  /**
   * Told once the batch is in this node's LMDB (afterPending(), whenDurable()): what reads the
   * record back from LMDB, or needs everything before a snapshot's position on this disk.
   */
  localWaiters: CommitWaiter[];
  /** Cluster mode: PostgreSQL committed it (its waiters may be answered, in order). */
  remoteCommitted: boolean;
  /** LMDB has answered for it; `error` is null when it was committed. */
  settled: boolean;
  error: Error | null;
}

/**
 * A batch LMDB did not write because the batch before it was not in the database when its turn
 * came: that earlier batch failed, and its own error is the one to report.
 */
class PreviousBatchMissing extends Error {}

/**
 * Cluster mode: commits a batch in the cluster's journal; resolves once it is committed there.
 * `bytes` are the records encoded as this node's LMDB copy stores them.
 */
export type RemoteCommit = (firstSeq: number, records: JournalRecord[], bytes: Uint8Array) => Promise<void>;

/** Cluster mode: this node does not lead, so it takes no writes (503 with Retry-After). */
export class NotLeadingError extends Error {}

/**
 * Cluster mode: the commit in the cluster's journal failed (`cause`), as opposed to this node's
 * own LMDB copy. The first is a reason to step down; the second means this node's disk fails.
 */
export class RemoteCommitError extends Error {
  constructor(readonly reason: Error) {
    super(reason.message);
  }
}

/**
 * What a write whose cluster commit failed is told (503, Retry-After: 1): the node logs the
 * failure once and stops leading; a fenced commit was not applied, a lost connection may have
 * committed, so the client cannot know which.
 */
export const REMOTE_COMMIT_FAILED = 'the commit to the cluster\'s PostgreSQL failed and this node stopped leading: the write may or may not have been applied; send it again (with its Idempotency-Key) to the cluster\'s leader';

/** A batch of an earlier leadership term, settling after the journal moved on: ignored. */
class Superseded extends Error {}

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

const ignore = (): void => undefined;

/** What was thrown or rejected, as an Error. */
function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** Tells each waiter: committed when `failure` is null, else failed. */
function tell(waiters: readonly CommitWaiter[], failure: Error | null): void {
  for (const waiter of waiters) {
    try {
      if (failure === null) waiter.committed();
      else waiter.failed(failure);
    } catch {
      // A waiter's own error (a closed socket) must not stop the others from hearing.
    }
  }
}

/**
 * The commit gap holds a batch only while it has fewer records than this. Past it a commit's own
 * cost (about 100 µs of the leader's CPU) is under 2 µs a record, and waiting gains nothing when
 * the writers wait for their answers before they send more (wrk's 256 connections: a batch held
 * for the gap did not grow, about 128 records either way, and some rounds answered up to 20%
 * fewer requests a second).
 */
const GAP_HOLDS_BELOW_RECORDS = 64;

/**
 * Cluster mode: batches a leader has committed in PostgreSQL (and answered) that may wait for
 * their LMDB copy, besides the commits in flight in PostgreSQL. Past it the next PostgreSQL
 * commit waits: a disk slower than PostgreSQL holds writes back instead of queueing without end.
 */
const LOCAL_COPIES_BEHIND = 4;

export class Journal {
  private readonly db: Database<JournalRecord[], number>;
  private readonly mode: CommitMode;
  private readonly maxBatchRecords: number;
  private readonly maxInFlight: number;
  private readonly stats: JournalStats;
  private nextSeq: number;
  private current: Batch | null = null;
  /**
   * Batches handed to LMDB and not yet answered, oldest first: a batch stays here, settled, until
   * every batch before it has settled too (answers go out in order). After a failure only the
   * batches LMDB has not answered for yet are kept (drain() waits for them).
   */
  private readonly inFlight: Batch[] = [];
  /**
   * Batches that filled (maxBatchRecords) while maxInFlight batches were in LMDB, oldest first:
   * each goes when a commit settles, before the open batch. Before, a full batch went to lmdb-js
   * at once whatever was in flight, and a stalled disk let any number queue there.
   */
  private readonly full: Batch[] = [];
  private flushScheduled = false;
  private failure: Error | null = null;
  private idleWaiters: Array<() => void> = [];
  /** Every record up to this seq is durable. */
  private durable: number;
  /** Every record up to this seq is committed and answered (a cluster leader: in PostgreSQL; else durableSeq). */
  private acknowledged: number;
  private readonly durableWatchers: Array<(seq: number) => void> = [];
  private marker: Database<number, string> | null = null;
  /** The durable position last handed to LMDB (meta `durableSeq`). */
  private markerSeq = 0;
  private markerTimer: NodeJS.Timeout | null = null;
  /** The batch recordAt() decoded last (batches never change once written). */
  private lastRead: { key: number; records: JournalRecord[] } | null = null;
  /** Cluster mode: the PostgreSQL commit each batch goes through before LMDB (null: none). */
  private remote: RemoteCommit | null = null;
  /** Cluster mode: why this node takes no writes (it does not lead), or null while it does. */
  private notLeading: Error | null = null;
  /** Grows whenever the journal starts over (a leadership term begins or ends): batches of an older term are ignored when they settle. */
  private term = 0;
  /** Cluster mode: the least time between the starts of two commits through `remote` (lead()). */
  private remoteGapMs = 0;
  /** When the last batch was handed to `remote` (performance.now()). */
  private remoteStartedAtMs = -Infinity;
  /** Hands the open batch over once the gap has passed (closeBatch() found it too early). */
  private gapTimer: NodeJS.Timeout | null = null;
  /** Cluster mode: batches handed to `remote` that PostgreSQL has not answered for yet (this term). */
  private remoteInFlight = 0;
  /** Test fault point `journal-local-copy` (copyLocally()): the leader's LMDB copies wait for it. */
  private localCopyStall: Promise<void> | null = null;
  /** A leader's LMDB copies handed to lmdb-js and not yet settled (stopLeading() waits for them). */
  private readonly localCopies = new Set<Promise<boolean>>();
  /** The failure of a leader's LMDB copy reported after another failure or a step-down, once. */
  private localCopyFailure: Error | null = null;

  constructor(db: Database<JournalRecord[], number>, mode: CommitMode, maxBatchRecords: number, stats: JournalStats = {}, maxInFlight = 1) {
    this.db = db;
    this.mode = mode;
    this.maxBatchRecords = maxBatchRecords;
    this.maxInFlight = maxInFlight;
    this.stats = stats;
    this.nextSeq = Journal.lastSeq(db) + 1;
    // What a fresh process finds stored survived whatever came before; markDurable() fsyncs it.
    this.durable = this.nextSeq - 1;
    this.acknowledged = this.durable;
    this.flushNow = this.flushNow.bind(this);
    this.gapEnded = this.gapEnded.bind(this);
    this.writeIdleMarker = this.writeIdleMarker.bind(this);
  }

  /** Every record up to this seq is durable (fsync'd); delivery reads no further. */
  get durableSeq(): number {
    return this.durable;
  }

  /**
   * Every record up to this seq is committed: in PostgreSQL on a cluster leader, whose LMDB copy
   * (durableSeq) may be a few batches behind; durableSeq otherwise. GET /cluster's appliedSeq on
   * the leader ("the last committed", CONTRACT.md §12).
   */
  get acknowledgedSeq(): number {
    return Math.max(this.acknowledged, this.durable);
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
    this.marker.put(DURABLE_SEQ_KEY, this.durable).catch(this.markerFailed);
  }

  /**
   * The marker's commit failed (alone: the idle marker; with a batch, that batch fails too). The
   * journal fails as for a batch: after a failed fsync the kernel may drop the pages it could
   * not write and mark them clean, so a later fsync that succeeds proves nothing about them
   * (PostgreSQL's "fsyncgate"), and the next commits reuse pages the failed one wrote (the main
   * database's, the free list's). Ignored before 2026-11-29: writes went on being answered 200
   * after an EIO on the idle marker's fsync (found by a review).
   */
  private readonly markerFailed = (error: unknown): void => {
    // lmdb-js also rejects a shared commitError promise (see settle()).
    const commitError = (error as { commitError?: unknown } | null)?.commitError;
    if (commitError instanceof Promise) commitError.catch(() => undefined);
    this.fail(asError(error));
  };

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

  /**
   * Why the journal takes no writes, or null while it does: a failed commit, or (cluster mode)
   * this node not leading.
   */
  get failed(): Error | null {
    return this.failure ?? this.notLeading;
  }

  /**
   * Why a commit failed (disk full, I/O error; in cluster mode also a failed PostgreSQL commit
   * until the node rebuilt), or null. Unlike `failed`, not set merely because a cluster node
   * does not lead: a follower that stops has a healthy journal.
   */
  get commitFailure(): Error | null {
    return this.failure;
  }

  /**
   * Cluster mode: takes writes from now on, each batch committed through `remote` before LMDB.
   * Until this is called, a journal made with `leading: false` refuses every append.
   */
  lead(remote: RemoteCommit, commitGapMs = 0): void {
    this.remote = remote;
    this.remoteGapMs = commitGapMs;
    this.notLeading = null;
    this.newTerm();
  }

  /** Cluster mode, before the node is in the election: refuse writes, for `reason`. */
  follow(reason: Error): void {
    this.notLeading = reason;
  }

  /**
   * Cluster mode: takes no more writes. The open batch and every batch not yet acknowledged fail
   * now (their requests get 503), whatever their commits do later (a commit hung on an unreachable
   * PostgreSQL may still land: it is then in the cluster's journal, which is allowed for a write
   * that was not answered 200). Resolves to true when records were applied to memory that the
   * cluster's journal may not hold: the caller must then rebuild the state.
   */
  async stopLeading(reason: Error): Promise<boolean> {
    this.notLeading = reason;
    this.remote = null;
    this.clearGapTimer();
    this.newTerm();
    const open = this.current;
    this.current = null;
    const pending = [...this.inFlight.splice(0), ...this.full.splice(0)];
    const lost = this.failure !== null || open !== null || pending.length > 0;
    const failure = this.failure ?? reason;
    for (const batch of pending) this.answer(batch, failure);
    if (open !== null) this.answer(open, failure);
    const idle = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of idle) resolve();
    // Copies of batches PostgreSQL committed may still be on their way to LMDB (up to
    // maxInFlight + LOCAL_COPIES_BEHIND): the caller rebuilds from this node's own journal next,
    // which must not change under it, and a copy that fails must be known first (write()).
    if (this.localCopies.size > 0) await Promise.allSettled([...this.localCopies]);
    return lost;
  }

  /**
   * Cluster mode: starts over after the state was rebuilt from this node's own journal, whose
   * last record is `lastSeq` (a follower's next replicated batch follows it).
   */
  reset(lastSeq: number): void {
    this.newTerm();
    this.failure = null;
    this.current = null;
    this.inFlight.length = 0;
    this.full.length = 0;
    this.nextSeq = lastSeq + 1;
    this.durable = lastSeq;
    this.acknowledged = lastSeq;
    this.lastRead = null;
  }

  /**
   * Cluster mode, a follower: journals locally a batch the leader committed in the cluster's
   * journal (firstSeq must follow the last record). Resolves once it is durable here.
   */
  appendReplicated(firstSeq: number, records: JournalRecord[], bytes: Uint8Array | null = null): Promise<void> {
    if (this.failure !== null) return Promise.reject(this.failure);
    if (firstSeq !== this.nextSeq) return Promise.reject(new Error(`replicated batch at seq ${firstSeq}, but the journal's next seq is ${this.nextSeq}`));
    this.nextSeq += records.length;
    return new Promise((resolve, reject) => {
      // Stored as read, the batch needs its records' count only: holding the records until LMDB
      // commits (up to 32 batches in flight) kept them alive across scavenges for nothing.
      const held = bytes === null ? records : new Array<JournalRecord>(records.length);
      const batch: Batch = { firstSeq, records: held, bytes, waiters: [{ committed: resolve, failed: reject }], localWaiters: [], remoteCommitted: false, settled: false, error: null };
      const previous = this.inFlight[this.inFlight.length - 1];
      this.inFlight.push(batch);
      this.write(batch, previous, null);
    });
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
   * Adds a record to the open batch and returns its seq; `waiter` hears when it is durable. After
   * a failure (this one's, in sync mode, or an earlier commit's) nothing is stored: `waiter` hears
   * the failure at once and 0 is returned.
   */
  append(record: JournalRecord, waiter: CommitWaiter): number {
    const failure = this.failure ?? this.notLeading;
    if (failure !== null) {
      waiter.failed(failure);
      return 0;
    }
    if (this.mode === 'sync') return this.appendSync(record, waiter);
    let batch = this.current;
    if (batch === null) {
      batch = this.current = { firstSeq: this.nextSeq, records: [], bytes: null, waiters: [], localWaiters: [], remoteCommitted: false, settled: false, error: null };
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(this.flushNow);
      }
    }
    batch.records.push(record);
    batch.waiters.push(waiter);
    const seq = this.nextSeq++;
    if (batch.records.length >= this.maxBatchRecords) {
      this.current = null;
      this.full.push(batch);
      if (this.mayHandOver()) this.closeBatch();
    } else if (batch.records.length === GAP_HOLDS_BELOW_RECORDS) {
      // If held for the commit gap: large enough now that waiting saves little.
      this.sendHeldBatch();
    }
    return seq;
  }

  /**
   * The record of `seq` while it waits in the open batch, not yet handed to a commit (so not yet
   * encoded): what is added to it now is committed with it. Null otherwise.
   */
  openRecord(seq: number): JournalRecord | null {
    const batch = this.current;
    if (batch === null || seq < batch.firstSeq || seq >= batch.firstSeq + batch.records.length) return null;
    return batch.records[seq - batch.firstSeq]!;
  }

  private appendSync(record: JournalRecord, waiter: CommitWaiter): number {
    const seq = this.nextSeq;
    const startedAt = performance.now();
    try {
      // putSync commits and fdatasyncs on this thread before it returns (checked with strace).
      this.db.putSync(seq, [record]);
    } catch (error) {
      this.fail(asError(error));
      waiter.failed(this.failure!);
      return 0;
    }
    this.nextSeq++;
    this.stats.onCommit?.(1, performance.now() - startedAt);
    this.advanceDurable(seq);
    this.armIdleMarker();
    waiter.committed();
    return seq;
  }

  /**
   * Tells `waiter` once every record appended so far is durable in this node's LMDB (durableSeq).
   * Returns false when nothing is pending (the caller may answer at once). Used for answers that
   * depend on state changed by writes not yet committed, so no answer ever reflects a write that
   * could still be lost, and for reads of a record back from LMDB.
   */
  afterPending(waiter: CommitWaiter): boolean {
    const failure = this.failure ?? this.notLeading;
    if (failure !== null) {
      // Nothing pending will ever be durable now.
      waiter.failed(failure);
      return true;
    }
    const batch = this.current ?? this.full[this.full.length - 1] ?? this.inFlight[this.inFlight.length - 1];
    if (batch === undefined) return false;
    batch.localWaiters.push(waiter);
    return true;
  }

  /**
   * Resolves once every record appended so far is durable; rejects if the journal failed (then
   * or before). A snapshot covering position P waits on this before it calls itself complete.
   */
  whenDurable(): Promise<void> {
    if (this.failure !== null) return Promise.reject(this.failure);
    // A follower's replicated batches are pending while it does not lead: wait for them too.
    if (this.notLeading !== null) {
      const last = this.inFlight[this.inFlight.length - 1];
      if (last === undefined) return Promise.resolve();
      return new Promise((resolve, reject) => last.localWaiters.push({ committed: () => resolve(), failed: reject }));
    }
    return new Promise((resolve, reject) => {
      if (!this.afterPending({ committed: () => resolve(), failed: reject })) resolve();
    });
  }

  private flushNow(): void {
    this.flushScheduled = false;
    // With enough commits in flight the batch stays open and grows; the next commit to settle
    // closes it. Bigger batches under load, and never more than a few commits queued in LMDB.
    if (this.mayHandOver()) this.closeBatch();
  }

  /**
   * Whether another batch may be handed over now. Single node: fewer than maxInFlight batches in
   * LMDB. A cluster leader: fewer than maxInFlight in PostgreSQL, and at most LOCAL_COPIES_BEHIND
   * more waiting for their LMDB copy (those are answered already: see remoteCommitted()).
   */
  private mayHandOver(): boolean {
    if (this.remote === null) return this.inFlight.length < this.maxInFlight;
    return this.remoteInFlight < this.maxInFlight && this.inFlight.length < this.maxInFlight + LOCAL_COPIES_BEHIND;
  }

  /** Hands over waiting batches (full ones first, then the open one) while mayHandOver() allows. */
  private handOverWaiting(): void {
    while ((this.full.length > 0 || this.current !== null) && this.mayHandOver()) {
      if (!this.closeBatch()) break;
    }
  }

  /**
   * Cluster mode: PostgreSQL committed `batch` (of this term), and its LMDB copy has been handed to
   * lmdb-js. Its writes are answered now, once every batch before it is committed in PostgreSQL
   * too (they are: one PostgreSQL commit follows another, each checking that the journal ends
   * where the one before it left it); then the next batch may go to PostgreSQL.
   *
   * Why not after the LMDB copy too, as before 2026-11-29: the 200 needs the PostgreSQL commit only
   * (CONTRACT.md §12), and waiting for both in turn left a leader under a closed loop (wrk, 256
   * connections) waiting on its commit cycle with a quarter of the machine idle: 0.55-0.62 of a
   * single node's throughput, 0.78-0.83 answering at the PostgreSQL commit (README, Performance).
   * What the LMDB copy is still needed for waits for it: durableSeq (delivery, exports, the
   * durable marker), afterPending() and whenDurable() (snapshots). If it fails, the node ends
   * (main.ts) and its writes are in PostgreSQL.
   */
  private remoteCommitted(batch: Batch): void {
    this.remoteInFlight--;
    batch.remoteCommitted = true;
    if (this.failure !== null) return;
    for (const front of this.inFlight) {
      if (!front.remoteCommitted) break;
      const waiters = front.waiters;
      front.waiters = [];
      this.acknowledged = Math.max(this.acknowledged, front.firstSeq + front.records.length - 1);
      tell(waiters, null);
    }
    this.handOverWaiting();
  }

  /**
   * Hands the oldest waiting batch to LMDB (to `remote` first, in cluster mode): a full one if any
   * waits, else the open one. False when nothing was handed over: nothing waits, or the open batch
   * waits for the commit gap (a timer hands it over then).
   */
  private closeBatch(gapEnded = false): boolean {
    if (!gapEnded && this.full.length === 0 && this.current !== null && this.current.records.length < GAP_HOLDS_BELOW_RECORDS && this.remote !== null && this.remoteGapMs > 0) {
      const waitMs = this.remoteStartedAtMs + this.remoteGapMs - performance.now();
      if (waitMs > 0) {
        this.gapTimer ??= setTimeout(this.gapEnded, Math.ceil(waitMs));
        return false;
      }
    }
    const batch = this.full.shift() ?? this.current;
    if (batch === null) return false;
    if (batch === this.current) this.current = null;
    if (this.remote !== null) {
      this.remoteStartedAtMs = performance.now();
      this.remoteInFlight++;
      this.clearGapTimer();
    }
    // The batch handed to LMDB just before this one, if LMDB has not answered for it yet.
    const previous = this.inFlight[this.inFlight.length - 1];
    this.inFlight.push(batch);
    this.write(batch, previous, this.remote);
    return true;
  }

  private gapEnded(): void {
    this.gapTimer = null;
    // The timer may fire a little early by performance.now() (timers count from the loop's cached time).
    if (this.mayHandOver()) this.closeBatch(true);
  }

  /**
   * A stop: no commit gap from now on, and a batch held for it goes at once. The requests in
   * flight that a stop waits for must not wait for the gap too (1 s at most, CLUSTER_COMMIT_GAP_MS).
   */
  endCommitGap(): void {
    this.remoteGapMs = 0;
    this.sendHeldBatch();
  }

  /**
   * Hands over at once the open batch held for the commit gap, if one is: one that has grown
   * large enough, or one a stop (endCommitGap(), drain()) must not wait for, nor send after it
   * has let the lease go (found by review).
   */
  private sendHeldBatch(): void {
    if (this.gapTimer === null) return;
    this.clearGapTimer();
    if (this.mayHandOver()) this.closeBatch(true);
  }

  private clearGapTimer(): void {
    if (this.gapTimer === null) return;
    clearTimeout(this.gapTimer);
    this.gapTimer = null;
  }

  /**
   * Hands `batch` to its targets: the cluster's journal first when `remote` is set, then LMDB;
   * settles it with the outcome (in this term only).
   */
  private write(batch: Batch, previous: Batch | undefined, remote: RemoteCommit | null): void {
    const startedAt = performance.now();
    const term = this.term;
    const stallMs = stallPointOnce('journal-commit');
    const stalled = stallMs === 0 ? null : new Promise<void>((resolve) => setTimeout(resolve, stallMs));
    const written =
      remote === null
        ? stalled === null
          ? this.writeLocal(batch, previous)
          : stalled.then(() => this.writeLocal(batch, previous))
        : (stalled === null ? this.encoded(batch) : stalled.then(() => this.encoded(batch))).then((bytes) => remote(batch.firstSeq, batch.records, bytes)).then(
            () => {
              // Stepped down while PostgreSQL committed it: the rebuilt state reads it from there.
              if (term !== this.term) throw new Superseded('superseded');
              const local = this.copyLocally(batch, previous);
              // After the put is handed to lmdb-js, so that the next batch's comes after it.
              this.remoteCommitted(batch);
              return local;
            },
            (error: unknown) => {
              throw new RemoteCommitError(asError(error));
            },
          );
    written.then(
      (done) => term === this.term && this.settle(batch, done ? null : this.missingBefore(batch, previous), performance.now() - startedAt),
      (error: unknown) => {
        const failure = asError(error);
        if (term === this.term) this.settle(batch, failure, 0);
        // A leader's LMDB copy that fails after the leader stepped down (its writes were answered
        // at the PostgreSQL commit): the outcome no longer settles anything, but this disk failed
        // and the node must learn it (it ends, main.ts), not follow on it (found by a review).
        else if (!(failure instanceof RemoteCommitError) && !(failure instanceof Superseded)) this.localCopyFailed(failure);
      },
    );
  }

  /**
   * A new term (leading, stepping down, a reset): outcomes of the old term's batches settle
   * nothing, and none of this term's is in PostgreSQL's hands yet.
   */
  private newTerm(): void {
    this.term++;
    this.remoteInFlight = 0;
  }

  /**
   * A leader's LMDB copy of a batch PostgreSQL committed. The test fault point
   * `journal-local-copy` (INTAKE_TEST_STALL_ONCE) holds this copy and every later one, in order,
   * for its time: an fsync that stalls after the batch was answered.
   */
  private copyLocally(batch: Batch, previous: Batch | undefined): Promise<boolean> {
    const stallMs = stallPointOnce('journal-local-copy');
    if (stallMs > 0) {
      const stall = new Promise<void>((resolve) => setTimeout(resolve, stallMs)).then(() => {
        if (this.localCopyStall === stall) this.localCopyStall = null;
      });
      this.localCopyStall = stall;
    }
    const stalled = this.localCopyStall;
    const copy = stalled === null ? this.writeLocal(batch, previous) : stalled.then(() => this.writeLocal(batch, previous));
    this.localCopies.add(copy);
    const forget = (): void => void this.localCopies.delete(copy);
    copy.then(forget, forget);
    return copy;
  }

  private missingBefore(batch: Batch, previous: Batch | undefined): Error {
    return new PreviousBatchMissing(`journal batch at seq ${batch.firstSeq} was not written: the batch before it (seq ${previous?.firstSeq}) is not in the database`);
  }

  /** The batch's records encoded once, kept for its LMDB put; a rejection if they cannot be. */
  private encoded(batch: Batch): Promise<Uint8Array> {
    try {
      batch.bytes ??= encodeRecords(batch.records);
      return Promise.resolve(batch.bytes);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The batch's LMDB put; false when it was not written because the batch before it is missing. */
  private writeLocal(batch: Batch, previous: Batch | undefined): Promise<boolean> {
    let write: Promise<boolean>;
    try {
      // Same event-loop turn as the batch's put: lmdb-js commits both in one transaction.
      this.writeMarker();
      // Bytes already encoded are stored as they are; otherwise the database's encoder (the same
      // record-bytes.ts) encodes the records.
      const value = batch.bytes === null ? batch.records : asBinary(batch.bytes);
      write =
        previous === undefined
          ? this.db.put(batch.firstSeq, value as JournalRecord[])
          : // Written only if the batch before it is in the database when this one's transaction
            // runs (the same transaction, or a later one): never after a batch that failed. The
            // block's promise tells the outcome; the put's own, if it has one, is not awaited.
            this.db.ifVersion(previous.firstSeq, IF_EXISTS, () => {
              this.db.put(batch.firstSeq, value as JournalRecord[]).catch(ignore);
            });
    } catch (error) {
      write = Promise.reject(error);
    }
    return write;
  }

  private fail(error: Error): void {
    if (this.failure !== null) {
      // A failed PostgreSQL commit came first, and now this node's own copy of an earlier batch
      // (answered at its PostgreSQL commit) failed too: the step-down the first one started must
      // not hide it, or the node would go on following on a disk whose fsync failed (a review).
      if (this.failure instanceof RemoteCommitError && !(error instanceof RemoteCommitError)) this.localCopyFailed(error);
      return;
    }
    this.failure = error;
    this.stats.onFailure?.(error);
  }

  /** Reports (once) that this node's LMDB copy failed, whatever else failed or changed first. */
  private localCopyFailed(error: Error): void {
    if (this.localCopyFailure !== null) return;
    this.localCopyFailure = error;
    this.stats.onFailure?.(error);
  }

  private settle(batch: Batch, error: Error | null, commitLatencyMs: number): void {
    // lmdb-js also rejects a shared `commitError` promise that nobody else awaits; left alone,
    // that unhandled rejection would end the process instead of this failure being reported.
    const commitError = (error as { commitError?: unknown } | null)?.commitError;
    if (commitError instanceof Promise) commitError.catch(() => undefined);
    batch.settled = true;
    batch.error = error;
    if (error === null) {
      if (this.failure === null) this.stats.onCommit?.(batch.records.length, commitLatencyMs);
    } else if (!(error instanceof PreviousBatchMissing)) {
      this.fail(error);
    }
    // A batch is acknowledged only once every batch before it is durable, whatever order LMDB
    // answered in: no answer may depend on a write that could still be lost.
    const acknowledged: Batch[] = [];
    while (this.failure === null) {
      const front = this.inFlight[0];
      if (front === undefined || !front.settled) break;
      if (front.error !== null) this.fail(front.error);
      else acknowledged.push(this.inFlight.shift()!);
    }
    const last = acknowledged[acknowledged.length - 1];
    if (last !== undefined) this.advanceDurable(last.firstSeq + last.records.length - 1);
    for (const done of acknowledged) this.answer(done, null);
    const failure = this.failure;
    if (failure !== null) {
      // Nothing pending is acknowledged any more, even a batch LMDB did commit: the batch before
      // it may be missing. Records appended while the failed commit was in flight (the open
      // batch) will never be written (found by review: with one commit in flight they waited
      // forever, and drain() never resolved, so a stop hung until its hard limit).
      for (let i = this.inFlight.length - 1; i >= 0; i--) {
        const pending = this.inFlight[i]!;
        this.answer(pending, failure);
        if (pending.settled) this.inFlight.splice(i, 1);
      }
      for (const waiting of this.full.splice(0)) this.answer(waiting, failure);
      const open = this.current;
      this.current = null;
      if (open !== null) this.answer(open, failure);
    } else {
      this.handOverWaiting();
    }
    if (this.current === null && this.inFlight.length === 0 && this.full.length === 0) {
      if (failure === null) this.armIdleMarker();
      const idle = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of idle) resolve();
    }
  }

  /**
   * Tells each of the batch's waiters, both kinds (once): committed when `failure` is null, else
   * failed. Called when LMDB has settled the batch, or when it never will be.
   */
  private answer(batch: Batch, failure: Error | null): void {
    const waiters = batch.waiters;
    batch.waiters = [];
    tell(waiters, failure);
    const local = batch.localWaiters;
    batch.localWaiters = [];
    tell(local, failure);
  }

  /** Resolves when every appended record has been committed or has failed. */
  drain(): Promise<void> {
    // A stop waits for nothing: a batch held for the commit gap goes now.
    this.sendHeldBatch();
    if (this.current === null && this.inFlight.length === 0 && this.full.length === 0) return Promise.resolve();
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
