// Writes snapshots: the exact in-memory state at one journal position P, without stopping the
// server. The walk visits every entity in slices of bounded size, yielding to the event loop
// between slices, so requests keep flowing. Requests that change an entity the walk has not
// reached yet make it write that entity first, as it was at P (copy-on-write through the
// actors' ChangeTracker calls); entities created after P carry the snapshot's epoch and are left
// out. The result is the state after record P, exactly, whatever ran during the walk.
//
// Entries are written in chunks of up to 250 (one LMDB value each). The snapshot's meta gets `completedAt`
// only after every chunk is durable and every record up to P is durable, so a crash mid-way
// leaves an incomplete snapshot that recovery ignores, and the previous one stays usable.
import type { ChangeTracker, TrackedEntity } from '../actors/change-tracker.ts';
import type { Workspace, Workspaces } from '../actors/workspace.ts';
import type { KeyTable } from '../idempotency/key-table.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Journal } from './journal.ts';
import { encodeRecords } from './record-bytes.ts';
import { SnapshotEncoder, type EntityCounts } from './snapshot-format.ts';
import type { SnapshotMeta, Store } from './store.ts';

/** Chunk writes allowed in flight before the walk waits (bounds the memory a snapshot holds). */
const MAX_CHUNKS_IN_FLIGHT = 8;
/** Walk time between pauses, and pause length per walk time: the walk gets a quarter of the
 * main thread (see WalkPace). */
const WALK_BUSY_MS = 4;
const WALK_PAUSE_PER_BUSY = 3;
const WALK_MAX_PAUSE_MS = 50;
/** Entries per chunk (one LMDB value, ~12 KB for devices): bigger chunks made each flush
 * longer and pushed request p99 up while a snapshot ran (14 ms vs 8 ms at 64 connections). */
const CHUNK_ENTRIES = 250;
/** Remembered Idempotency-Keys per slice and chunk (32 bytes each: 256 KB). */
const KEY_SLICE_ENTRIES = 8192;

export class SnapshotAborted extends Error {
  constructor() {
    super('snapshot aborted');
  }
}

/**
 * A chunk's bytes: the journal's msgpack writer (record-bytes.ts), not msgpackr's encoder. In a
 * busy server msgpackr's encoder runs several times slower (record-bytes.ts says why), and
 * snapshots of a growing device set were most of what an app launch cost beyond the yardstick
 * at saturation (a round with a snapshot: +4 µs a launch). The loader reads both encodings.
 */
export function encodeChunk(entries: unknown[]): Buffer {
  return encodeRecords(entries);
}

/** One snapshot being written. */
class RunningSnapshot {
  readonly encoder = new SnapshotEncoder();
  chunks = 0;
  bytes = 0;
  aborted = false;
  private readonly inFlight: Array<Promise<unknown>> = [];

  constructor(
    private readonly store: Store,
    readonly meta: SnapshotMeta,
    readonly epoch: number,
  ) {}

  /** Writes `entity` as it is now and marks it written. */
  capture(workspace: string, entity: TrackedEntity): void {
    entity.snapEpoch = this.epoch;
    this.encoder.add(workspace, entity);
    // Captures come from the walk and from requests (copy-on-write); either way a full chunk
    // goes to LMDB without waiting here.
    if (this.encoder.pending >= CHUNK_ENTRIES) this.flushChunk();
  }

  /** A slice of remembered Idempotency-Keys: a chunk of its own. */
  captureKeys(entries: Uint8Array): void {
    this.encoder.addKeys(entries);
    this.flushChunk();
  }

  /** Hands the pending entries to LMDB as one chunk. */
  flushChunk(): void {
    if (this.encoder.pending === 0) return;
    const buffer = encodeChunk(this.encoder.take());
    const chunk = this.chunks++;
    this.bytes += buffer.length;
    const write = this.store.snapshotChunks.put([this.meta.id, chunk], buffer);
    this.inFlight.push(write);
    void write.then(
      () => this.inFlight.splice(this.inFlight.indexOf(write), 1),
      (error: unknown) => {
        // lmdb-js also rejects a shared `commitError` promise nobody else awaits (journal.ts
        // settle() does the same): left alone it was logged as an unhandled rejection.
        const commitError = (error as { commitError?: unknown } | null)?.commitError;
        if (commitError instanceof Promise) commitError.catch(() => undefined);
      },
    );
  }

  /** Resolves once every chunk write handed to LMDB has succeeded or failed. */
  async allSettled(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  /** Waits while too many chunk writes are in flight (rejects if one failed). */
  async backpressure(): Promise<void> {
    while (this.inFlight.length > MAX_CHUNKS_IN_FLIGHT) await this.inFlight[0];
  }

  async allWritten(): Promise<void> {
    await Promise.all([...this.inFlight]);
  }
}

export interface SnapshotWriterOptions {
  /** Entities serialized per slice between requests (chunks are CHUNK_ENTRIES, whatever this is). */
  sliceEntities: number;
  /** The remembered Idempotency-Keys, written after the entities (null: none). */
  keys?: KeyTable | null;
}

export class SnapshotWriter {
  private readonly store: Store;
  private readonly journal: Journal;
  private readonly workspaces: () => Workspaces;
  private readonly log: Logger;
  private readonly sliceEntities: number;
  private readonly keys: KeyTable | null;
  /** The current (or last) snapshot's epoch: new entities are stamped with it. */
  private epoch = 0;
  private running: RunningSnapshot | null = null;
  private runningDone: Promise<SnapshotMeta | null> | null = null;
  private nextId: number;
  /** The seq covered by the newest complete snapshot (0: none). */
  private coveredSeq = 0;
  /** The entities (devices, customers, products, collections) the newest complete snapshot wrote. */
  private coveredEntities = 0;
  /** Cluster mode: told of each snapshot written (the leader stores it in PostgreSQL). */
  private readonly listeners: Array<(meta: SnapshotMeta) => void> = [];
  /** Cluster mode: a snapshot from PostgreSQL is being installed; none of this node's own starts. */
  private installing = false;

  constructor(store: Store, journal: Journal, workspaces: () => Workspaces, log: Logger, options: SnapshotWriterOptions) {
    this.store = store;
    this.journal = journal;
    this.workspaces = workspaces;
    this.log = log;
    this.sliceEntities = options.sliceEntities;
    this.keys = options.keys ?? null;
    let lastId = 0;
    for (const key of store.snapshots.getKeys({ reverse: true, limit: 1 })) lastId = key;
    for (const key of store.snapshotChunks.getKeys({ reverse: true, limit: 1 })) lastId = Math.max(lastId, key[0]);
    this.nextId = lastId + 1;
    const newest = newestCompleteSnapshot(store);
    if (newest !== null) this.cover(newest);
  }

  /** `meta` is now the newest complete snapshot. */
  private cover(meta: SnapshotMeta): void {
    this.coveredSeq = meta.seq;
    this.coveredEntities = entitiesOf(meta);
  }

  /** The change tracker of one workspace's actors. */
  trackerFor(workspace: string): ChangeTracker {
    const writer = this;
    return {
      get epoch() {
        return writer.epoch;
      },
      beforeChange(entity: TrackedEntity) {
        const running = writer.running;
        if (running !== null && entity.snapEpoch !== running.epoch) running.capture(workspace, entity);
      },
    };
  }

  get isRunning(): boolean {
    return this.running !== null;
  }

  /** The seq the newest complete snapshot covers. */
  get lastCoveredSeq(): number {
    return this.coveredSeq;
  }

  /** How many entities the newest complete snapshot wrote (0: none): what the next one costs, about. */
  get lastEntities(): number {
    return this.coveredEntities;
  }

  /**
   * Starts a snapshot of the state at the journal's current position unless one is running or
   * nothing changed since the last one. Resolves to its meta, or null when none was needed or it
   * was aborted.
   */
  snapshot(reason: string, { paced = true }: { paced?: boolean } = {}): Promise<SnapshotMeta | null> {
    if (this.installing) return Promise.resolve(null);
    // After a journal failure the server takes no write until it is restarted, and a snapshot
    // could never complete (it waits for the journal to be durable): each one tried wrote a
    // full copy of the state for nothing, one per interval, on a disk that had just failed.
    // (commitFailure, not `failed`: a cluster follower's journal refuses appends, `failed`, and
    // its snapshots are taken all the same.)
    if (this.journal.commitFailure !== null) return Promise.resolve(null);
    if (this.runningDone !== null) return this.runningDone;
    const seq = this.journal.lastAppendedSeq;
    if (seq === this.coveredSeq) return Promise.resolve(null);
    const meta: SnapshotMeta = {
      id: this.nextId++,
      seq,
      startedAt: Date.now(),
      completedAt: null,
      chunks: 0,
      bytes: 0,
      entities: { devices: 0, customers: 0, products: 0, collections: 0, profiles: 0, idempotencyKeys: 0 },
    };
    const running = new RunningSnapshot(this.store, meta, ++this.epoch);
    this.running = running;
    // The keys held now are those of the records up to P (a key is added with its record).
    this.keys?.beginSnapshot((entries) => running.captureKeys(entries), KEY_SLICE_ENTRIES);
    this.log.info({ snapshot: meta.id, seq, reason }, 'snapshot started');
    const done = this.write(running, paced).then(
      (written) => {
        this.log.info({ snapshot: written.id, seq: written.seq, bytes: written.bytes, chunks: written.chunks, durationMs: (written.completedAt ?? 0) - written.startedAt, ...written.entities }, 'snapshot written');
        for (const listener of this.listeners) listener(written);
        return written;
      },
      async (error: unknown) => {
        if (error instanceof SnapshotAborted) this.log.info({ snapshot: meta.id }, 'snapshot aborted');
        else this.log.error({ err: error, snapshot: meta.id }, 'snapshot failed; the previous one stays in use');
        // Its chunks go now, not when a later snapshot completes (after a journal failure none
        // does until a restart); best effort, the next complete snapshot removes what is left.
        // Detached first, so that no write (copy-on-write) or key slice adds a chunk meanwhile.
        if (this.running === running) this.running = null;
        this.keys?.endSnapshot();
        await running.allSettled();
        await removeSnapshotChunks(this.store, meta.id).catch(() => undefined);
        return null;
      },
    );
    this.runningDone = done.finally(() => {
      this.keys?.endSnapshot();
      this.running = null;
      this.runningDone = null;
    });
    return this.runningDone;
  }

  /** Calls `listener` with each snapshot written from now on (after it is complete). */
  onWritten(listener: (meta: SnapshotMeta) => void): void {
    this.listeners.push(listener);
  }

  /**
   * Cluster mode, joining: stores a snapshot that comes from elsewhere (PostgreSQL) as this
   * node's newest. A running snapshot is aborted and none starts until this is done. `write`
   * gets the local id to use and resolves to the complete meta it stored; older local snapshots
   * are then removed, and `then` runs (the caller rebuilds the state from it there: until then
   * the state in memory is older than the snapshot, and no snapshot may be taken of it).
   * The snapshot counts as covered (lastCoveredSeq, what retention trims up to) only once `then`
   * has rebuilt the state from it. Before 2026-11-29 it counted from the moment it was stored: a
   * trim during the copy of the records before it (a join) took the snapshot's seq as its limit
   * with the old state's key table (empty on an empty directory), and could drop copied records
   * that the snapshot's remembered keys name, so a retried key got no first answer (found by a
   * review). If `then` fails, the old covered seq stays: no trim or snapshot leans on a state
   * that was never rebuilt.
   */
  async install(write: (id: number) => Promise<SnapshotMeta>, then: () => Promise<void>): Promise<SnapshotMeta> {
    this.installing = true;
    try {
      await this.abort();
      const meta = await write(this.nextId++);
      await removeSnapshotsBefore(this.store, meta.id);
      await then();
      this.cover(meta);
      return meta;
    } finally {
      this.installing = false;
    }
  }

  /**
   * Removes what crashes left in the store: the chunks (and any meta) of snapshots that never
   * completed, and every snapshot older than the newest complete one. Left alone they stayed
   * until a snapshot completed, so a server killed during each snapshot (out of memory, say)
   * kept one more partial copy of the state per crash. Called once, after recovery; the
   * snapshots this process writes have ids from `nextId` on and are never touched.
   */
  async removeLeftovers(): Promise<void> {
    const ownFrom = this.nextId;
    const newest = newestCompleteSnapshot(this.store);
    if (newest !== null) await removeSnapshotsBefore(this.store, newest.id);
    await removeSnapshotRange(this.store, newest === null ? 0 : newest.id + 1, ownFrom);
  }

  /**
   * Stops a running snapshot at its next slice; it stays incomplete and is cleaned up later.
   * Resolves once no snapshot is under way, one that failed included: its clean-up (removing its
   * chunks) runs after it was detached, and until 2026-11-29 abort() returned at once then, so
   * the shutdown's snapshot() that followed got the failed one's result (null) and none was
   * taken (found by a review).
   */
  async abort(): Promise<void> {
    if (this.running !== null) this.running.aborted = true;
    await this.runningDone;
  }

  private async write(running: RunningSnapshot, paced: boolean): Promise<SnapshotMeta> {
    const sliceEntities = this.sliceEntities;
    let inSlice = 0;
    /** Writes the entity unless already written; true when the slice is full. */
    const visit = (ws: Workspace, entity: TrackedEntity): boolean => {
      if (entity.snapEpoch !== running.epoch) running.capture(ws.name, entity);
      return ++inSlice >= sliceEntities;
    };
    const pace = new WalkPace(paced);
    const endSlice = async (): Promise<void> => {
      inSlice = 0;
      await pace.yield();
      if (running.aborted) throw new SnapshotAborted();
      // A journal that failed meanwhile: this snapshot can never complete, stop writing it.
      if (this.journal.commitFailure !== null) throw this.journal.commitFailure;
      await running.backpressure();
    };
    // Maps iterate live: entries added after P are visited too, and skipped by their epoch;
    // entries deleted before being reached were captured by the delete.
    for (const ws of [...this.workspaces().all()]) {
      for (const device of ws.devices.values()) if (visit(ws, device)) await endSlice();
      for (const customer of ws.customers.values()) if (visit(ws, customer)) await endSlice();
      for (const product of ws.catalog.products.values()) if (visit(ws, product)) await endSlice();
      for (const collection of ws.catalog.collections.values()) if (visit(ws, collection)) await endSlice();
    }
    running.flushChunk();
    // Then the keys, oldest first; an insert that would overwrite one not written yet writes a slice first.
    while (this.keys?.snapshotSlice() === true) await endSlice();
    await running.allWritten();
    // Every record up to P must be durable before the snapshot may stand in for them.
    await this.journal.whenDurable();
    if (running.aborted) throw new SnapshotAborted();
    const meta: SnapshotMeta = {
      ...running.meta,
      completedAt: Date.now(),
      chunks: running.chunks,
      bytes: running.bytes,
      entities: { ...running.encoder.counts },
    };
    await this.store.snapshots.put(meta.id, meta);
    this.cover(meta);
    // Complete from here on. Removing the older ones may fail (a failing disk) without undoing
    // it: the failure handler in snapshot() removes the chunks of a snapshot whose meta was never
    // stored, and must not reach this one (its chunks went, its meta stayed: no start after).
    try {
      await removeSnapshotsBefore(this.store, meta.id);
    } catch (error) {
      this.log.warn({ err: error, snapshot: meta.id }, 'removing the snapshots older than the new one failed; the next snapshot removes them');
    }
    return meta;
  }
}

function yieldToRequests(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Keeps the walk to a quarter of the main thread: after every WALK_BUSY_MS of walking it pauses
 * three times as long. Unpaced, the walk took every idle moment, and its garbage and chunk writes
 * (which share the journal's commits) raised request p99 by half; paced, a 1M-device snapshot
 * takes about twice as long and costs about 2 ms of p99. Unpaced at shutdown: nothing else runs.
 */
class WalkPace {
  private busySince = performance.now();
  private busyMs = 0;

  constructor(private readonly paced: boolean) {}

  /**
   * Ends a stretch of walking: yields to requests, and pauses if the walk had its share. Time
   * spent waiting for chunk writes (backpressure) counts as walking on purpose: a slow disk
   * makes the walk back off and leaves the disk to the journal (p99 during a snapshot 10 to 13 ms
   * at 64 connections, against 15 to 16 ms when only the walk's own time counted). The cap
   * keeps abort() and graceful stop prompt.
   */
  async yield(): Promise<void> {
    this.busyMs += performance.now() - this.busySince;
    if (this.paced && this.busyMs >= WALK_BUSY_MS) {
      await sleep(Math.min(this.busyMs * WALK_PAUSE_PER_BUSY, WALK_MAX_PAUSE_MS));
      this.busyMs = 0;
    } else {
      await yieldToRequests();
    }
    this.busySince = performance.now();
  }
}

/**
 * The entities a snapshot wrote: what its walk visited and encoded. Launch profiles (shared by
 * many devices) and remembered Idempotency-Keys (32 bytes each, copied in slices) cost little.
 */
function entitiesOf(meta: SnapshotMeta): number {
  const entities: Partial<Record<keyof EntityCounts, unknown>> = meta.entities ?? {};
  const { devices, customers, products, collections } = entities;
  // A count missing from a meta counts as none: NaN here would stop snapshots by count for good.
  const count = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) ? n : 0);
  return count(devices) + count(customers) + count(products) + count(collections);
}

/** The newest snapshot whose every chunk is durable, or null. */
export function newestCompleteSnapshot(store: Store): SnapshotMeta | null {
  for (const { value } of store.snapshots.getRange({ reverse: true })) {
    if (value.completedAt !== null) return value;
  }
  return null;
}

/** Chunk keys removed per LMDB write when old snapshots are deleted. */
const REMOVE_CHUNKS_PER_WRITE = 500;

/** Removes the chunks of snapshot `id`, one that failed (no meta, or one whose write failed). */
function removeSnapshotChunks(store: Store, id: number): Promise<void> {
  return removeSnapshotRange(store, id, id + 1);
}

/** Removes the metas and chunks of snapshots `fromId` to `belowId - 1`, metas first (see removeSnapshotsBefore). */
async function removeSnapshotRange(store: Store, fromId: number, belowId: number): Promise<void> {
  if (fromId >= belowId) return;
  await Promise.all([...store.snapshots.getKeys({ start: fromId, end: belowId })].map((key) => store.snapshots.remove(key)));
  const chunkKeys = [...store.snapshotChunks.getKeys({ start: [fromId, 0], end: [belowId, 0] })];
  for (let i = 0; i < chunkKeys.length; i += REMOVE_CHUNKS_PER_WRITE) {
    await Promise.all(chunkKeys.slice(i, i + REMOVE_CHUNKS_PER_WRITE).map((key) => store.snapshotChunks.remove(key)));
  }
}

/**
 * Deletes every snapshot (complete or not) older than `id`. Metas go first, so a crash half-way
 * leaves only chunks without a meta, which nothing reads and the next call removes. Chunks go in
 * groups of queued (not synchronous) removes: one transaction callback removing a whole 1M-device
 * snapshot held the event loop for ~20 ms.
 */
export async function removeSnapshotsBefore(store: Store, id: number): Promise<void> {
  const metaKeys = [...store.snapshots.getKeys({ end: id })];
  const metaRemoved = metaKeys.map((key) => store.snapshots.remove(key));
  await Promise.all(metaRemoved);
  // Keys first (a few KB even for big snapshots), so no read cursor stays open across awaits.
  const chunkKeys = [...store.snapshotChunks.getKeys({ end: [id, 0] })];
  let group: Array<Promise<boolean>> = [];
  for (const key of chunkKeys) {
    group.push(store.snapshotChunks.remove(key));
    if (group.length >= REMOVE_CHUNKS_PER_WRITE) {
      await Promise.all(group);
      group = [];
    }
  }
  await Promise.all(group);
}
