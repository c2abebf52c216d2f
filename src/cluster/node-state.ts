// The state side of a cluster node: what ClusterNode (cluster-node.ts) asks of the rest of the
// server. Replicated batches become state through applyRecord, exactly as live writes and
// recovery do, and are journaled locally (the node's own copy, for restarts, export and
// snapshots); the remembered Idempotency-Keys come with them, so a follower holds the full
// state. A leader that stepped down after a failed commit rebuilds everything from its own
// data directory, which only ever holds records PostgreSQL committed.
//
// Joining through a snapshot stored in PostgreSQL (installSnapshot): its chunks become this
// node's newest complete local snapshot, the local journal is replaced by the cluster journal's
// records from the snapshot's `journalFrom` up to its seq (those a sink had not confirmed, or
// that a remembered Idempotency-Key names, when the leader stored it: a retried app launch is
// answered from its record, and this node may lead and deliver one day), and the state is
// rebuilt from that, as recovery does at a start. The local snapshot is complete before the
// local journal is touched, so a crash at any point leaves a data directory recovery accepts
// (the snapshot, and a local journal that starts at or before it).
import type { ProfileInterner } from '../actors/interner.ts';
import type { SinkPosition } from '../delivery/delivery.ts';
import { faultPoint, throwPointOnceHere } from '../config/fault-points.ts';
import type { Workspaces } from '../actors/workspace.ts';
import type { KeyTable } from '../idempotency/key-table.ts';
import type { Journal, RemoteCommit } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import { keptSinceMs, recover, replayRecord } from '../journal/recovery.ts';
import type { SnapshotWriter } from '../journal/snapshot-writer.ts';
import { readClusterId, writeClusterId, type SnapshotMeta, type Store } from '../journal/store.ts';
import type { Logger } from '../telemetry/logger.ts';
import { StateLostError, type ClusterHost, type SnapshotSource } from './cluster-node.ts';

/** meta keys: the records a snapshot join still has to copy into the local journal. */
const COPY_FROM_KEY = 'joinCopyFrom';
const COPY_TO_KEY = 'joinCopyTo';

/** Local journal writes a follower lets run ahead of it (each is one LMDB put and fsync). */
const MAX_LOCAL_WRITES_IN_FLIGHT = 32;
/** Snapshot chunks read per step (from LMDB to upload, from PostgreSQL to install); chunks are ~12 KB, key chunks up to 256 KB. */
const CHUNKS_PER_STEP = 32;
/** Bytes of chunks per upload step at most (one statement; node-postgres hex-encodes them on this thread). */
const CHUNK_BYTES_PER_STEP = 1024 * 1024;
/** Cluster journal batches read per step while copying the records before a joined snapshot. */
const JOURNAL_BATCHES_PER_STEP = 16;
/** Local journal batches removed per LMDB transaction when a join replaces the local journal. */
const REMOVE_BATCHES_PER_TXN = 1_000;

export interface NodeStateDeps {
  store: Store;
  dataDir: string;
  journal: Journal;
  workspaces: Workspaces;
  interner: ProfileInterner;
  keys: KeyTable;
  writer: SnapshotWriter;
  /** Starts or stops what only the leader runs (delivery downstream). */
  leading(on: boolean): void;
  /** Records after this seq must be kept (undelivered to a sink, or a remembered key's record and after); null: no such limit. */
  keepAfter(): number | null;
  /** Delivery's saved sink positions, and taking the cluster's (Delivery.positions, adopt). */
  sinkPositions(): SinkPosition[];
  adoptSinkPositions(positions: readonly SinkPosition[]): Promise<number>;
  log: Logger;
}

export class NodeState implements ClusterHost {
  private readonly deps: NodeStateDeps;
  private readonly writes = new Set<Promise<void>>();

  constructor(deps: NodeStateDeps) {
    this.deps = deps;
  }

  localRecord(seq: number): JournalRecord | null {
    return this.deps.journal.recordAt(seq);
  }

  clusterId(): string | null {
    return readClusterId(this.deps.store);
  }

  adoptClusterId(id: string): Promise<void> {
    return writeClusterId(this.deps.store, id);
  }

  committedSeq(): number {
    return this.deps.journal.acknowledgedSeq;
  }

  appliedSeq(): number {
    return this.deps.journal.lastAppendedSeq;
  }

  async applyBatch(firstSeq: number, records: JournalRecord[], bytes: Uint8Array | null = null): Promise<void> {
    const { journal, workspaces, interner, keys } = this.deps;
    // This node's own copy cannot be written: apply nothing (main.ts ends the process).
    const failure = journal.commitFailure;
    if (failure !== null) throw failure;
    if (firstSeq !== journal.lastAppendedSeq + 1) throw new Error(`replicated batch at seq ${firstSeq} does not follow this node's ${journal.lastAppendedSeq}`);
    const keptSince = keptSinceMs(keys);
    for (let i = 0; i < records.length; i++) replayRecord(workspaces, interner, keys, firstSeq + i, records[i]!, keptSince);
    const write = journal.appendReplicated(firstSeq, records, bytes);
    this.writes.add(write);
    void write.finally(() => this.writes.delete(write)).catch(() => undefined);
    // Apply ahead of the local fsyncs, but only so far: each write holds its batch's bytes.
    if (this.writes.size >= MAX_LOCAL_WRITES_IN_FLIGHT) await Promise.race(this.writes);
  }

  async whenApplied(): Promise<void> {
    await Promise.all([...this.writes]);
    await this.deps.journal.whenDurable();
  }

  lead(epoch: number, commit: RemoteCommit, commitGapMs: number): void {
    this.deps.journal.lead(commit, commitGapMs);
  }

  stopLeading(reason: Error): Promise<boolean> {
    return this.deps.journal.stopLeading(reason);
  }

  async rebuild(): Promise<void> {
    const { store, journal, workspaces, interner, keys, writer, dataDir } = this.deps;
    // A snapshot in progress covers state that is being dropped.
    await writer.abort();
    await Promise.allSettled([...this.writes]);
    workspaces.clear();
    keys.clear();
    throwPointOnceHere('state-rebuild');
    store.root.resetReadTxn();
    const report = recover(store, workspaces, interner, keys, dataDir);
    journal.reset(report.lastSeq);
    // The durable position as rebuilt: `export --follow` reads up to it, and after a join it
    // still named the old position until the next write reached this node (an idle cluster:
    // nothing followed). Found by a review.
    await journal.markDurable();
  }

  leading(on: boolean): void {
    this.deps.leading(on);
  }

  keepAfter(): number | null {
    return this.deps.keepAfter();
  }

  sinkPositions(): SinkPosition[] {
    return this.deps.sinkPositions();
  }

  adoptSinkPositions(positions: readonly SinkPosition[]): Promise<number> {
    return this.deps.adoptSinkPositions(positions);
  }

  async readSnapshot(meta: SnapshotMeta, each: (first: number, chunks: Buffer[]) => Promise<void>): Promise<void> {
    const { store } = this.deps;
    // A read transaction of its own: a newer local snapshot may delete this one meanwhile.
    const txn = store.root.useReadTransaction();
    try {
      for (let first = 0; first < meta.chunks; ) {
        const chunks: Buffer[] = [];
        let bytes = 0;
        while (first + chunks.length < meta.chunks && chunks.length < CHUNKS_PER_STEP && bytes < CHUNK_BYTES_PER_STEP) {
          const chunk = store.snapshotChunks.get([meta.id, first + chunks.length], { transaction: txn });
          if (chunk === undefined) throw new Error(`local snapshot ${meta.id} has no chunk ${first + chunks.length}`);
          chunks.push(chunk);
          bytes += chunk.length;
        }
        await each(first, chunks);
        first += chunks.length;
      }
    } finally {
      txn.done();
    }
  }

  async installSnapshot(source: SnapshotSource): Promise<void> {
    const { store, writer } = this.deps;
    const { seq, chunks, bytes } = source;
    await Promise.allSettled([...this.writes]);
    await writer.install(async (id) => {
      const meta: SnapshotMeta = { id, seq, startedAt: Date.now(), completedAt: null, chunks, bytes, entities: source.entities };
      await store.snapshots.put(id, meta);
      let stored = 0;
      for (let first = 0; first < chunks; ) {
        const data = await source.readChunks(first, Math.min(CHUNKS_PER_STEP, chunks - first));
        if (data.length === 0) throw new Error(`the snapshot in PostgreSQL lost chunk ${first} of ${chunks} (a newer one replaced it)`);
        await Promise.all(data.map((chunk, i) => store.snapshotChunks.put([id, first + i], chunk)));
        for (const chunk of data) stored += chunk.length;
        first += data.length;
      }
      if (stored !== bytes) throw new Error(`the snapshot in PostgreSQL has ${stored} bytes of chunks, not ${bytes}`);
      const complete: SnapshotMeta = { ...meta, completedAt: Date.now() };
      // The copy of the records before the snapshot is owed from the moment the snapshot is
      // complete (a restart then recovers from it): a marker in `meta` says which records, so
      // that a copy cut short (PostgreSQL unreachable, a crash) is finished later (finishCopy)
      // instead of leaving this node's journal without records a sink or a replayed key may
      // need. Both in one transaction: with the marker written after, a crash between the two
      // left a node that recovered from the snapshot, owed nothing, and could lead and deliver
      // around the missing records. (The marker alone first would not do either: with the
      // snapshot incomplete, recovery uses an older one, and the copy would leave a hole after it.)
      await store.root.transaction(() => {
        store.snapshots.putSync(id, complete);
        store.meta.putSync(COPY_FROM_KEY, source.journalFrom);
        store.meta.putSync(COPY_TO_KEY, seq);
      });
      return complete;
    }, async () => {
      faultPoint('join-snapshot-stored');
      // The local journal ends before the snapshot, and the cluster's journal no longer has
      // what follows it (or this node holds nothing): replace it, so it has no hole.
      try {
        await removeJournal(store);
        await this.copyRecordsBefore(source, source.journalFrom, seq);
        await this.copyDone();
      } catch (error) {
        this.deps.log.warn({ err: error }, 'copying the journal records before the snapshot failed; finishing it later');
      } finally {
        // Whatever happened to the copy, the state is the snapshot's from now on. A rebuild that
        // fails leaves the state dropped: retried, the node could take the lead with it (the
        // leader gone meanwhile), and a snapshot of it could replace the joined one (found by a
        // review), so it is fatal.
        await this.rebuild().catch((error: unknown) => {
          throw new StateLostError(`rebuilding the state from the joined snapshot failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
        });
      }
    });
  }

  /** Records the local journal still owes from a snapshot join (copied before the snapshot's seq), or null. */
  pendingCopy(): { from: number; to: number } | null {
    const from = this.deps.store.meta.get(COPY_FROM_KEY);
    const to = this.deps.store.meta.get(COPY_TO_KEY);
    return from === undefined || to === undefined ? null : { from, to };
  }

  /** Finishes a copy a join left owed (pendingCopy()); rejects when PostgreSQL cannot be read. */
  async finishCopy(source: Pick<SnapshotSource, 'batchesAfter'>): Promise<void> {
    const owed = this.pendingCopy();
    if (owed === null) return;
    // The copy starts again from a local journal that holds nothing up to the snapshot: a crash
    // while the join removed the old journal (a node that rejoins because retention trimmed past
    // it) left part of it, before a hole, which `export events` showed (found by a review). What
    // the cut-short copy put is copied again. Nothing after the snapshot is journaled here while
    // the copy is owed: replication goes on only once it is done.
    await removeJournal(this.deps.store, owed.to);
    await this.copyRecordsBefore(source, owed.from, owed.to);
    await this.copyDone();
  }

  private async copyDone(): Promise<void> {
    await this.deps.store.meta.remove(COPY_FROM_KEY);
    await this.deps.store.meta.remove(COPY_TO_KEY);
  }

  /** Copies the cluster journal's records from `fromSeq` (or its first, if later) to `toSeq` into the local journal. */
  private async copyRecordsBefore(source: Pick<SnapshotSource, 'batchesAfter'>, fromSeq: number, toSeq: number): Promise<void> {
    const { store } = this.deps;
    if (fromSeq > toSeq) return;
    let after = fromSeq - 1;
    while (after < toSeq) {
      const batches = await source.batchesAfter(after, JOURNAL_BATCHES_PER_STEP);
      if (batches.length === 0) return;
      // A step's puts are issued together, so lmdb-js commits them in one transaction: one fsync
      // a step, not one a batch row. Awaited one by one, a join that owed 200,000 rows of journal
      // spent 4.5 minutes in fdatasync (found by a review of the cluster under faults, 2026-11-29).
      const puts: Array<Promise<boolean>> = [];
      let reachedEnd = false;
      for (const batch of batches) {
        const start = Math.max(after + 1, batch.firstSeq);
        if (start > toSeq) {
          reachedEnd = true;
          break;
        }
        // Retention may have trimmed past journalFrom since (sinks confirmed, keys expired): start later.
        if (start > after + 1 && after >= fromSeq) {
          await Promise.all(puts);
          throw new Error(`the cluster's journal has no records ${after + 1} to ${start - 1}`);
        }
        const end = Math.min(batch.lastSeq, toSeq);
        puts.push(store.journal.put(start, batch.records.slice(start - batch.firstSeq, end - batch.firstSeq + 1)));
        after = end;
      }
      await Promise.all(puts);
      if (reachedEnd) return;
    }
  }
}

/** Removes the local journal's batches, all of them or those that start at or before `throughSeq`, in bounded LMDB transactions. */
async function removeJournal(store: Store, throughSeq = Infinity): Promise<void> {
  const keys = [...store.journal.getKeys(Number.isFinite(throughSeq) ? { end: throughSeq + 1 } : {})];
  for (let i = 0; i < keys.length; i += REMOVE_BATCHES_PER_TXN) {
    const group = keys.slice(i, i + REMOVE_BATCHES_PER_TXN);
    await store.root.transaction(() => {
      for (const key of group) store.journal.removeSync(key);
    });
  }
}
