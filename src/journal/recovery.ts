// Rebuilds the in-memory state before the server listens: the newest complete snapshot, then
// every journal record after the position it covers, through applyRecord (the function live
// writes use). The export CLI rebuilds state the same way.
import { applyRecord } from '../actors/apply.ts';
import type { ProfileInterner } from '../actors/interner.ts';
import type { Workspaces } from '../actors/workspace.ts';
import { keyHashOf, RECORD_BYTES, type KeyTable } from '../idempotency/key-table.ts';
import { Journal } from './journal.ts';
import type { JournalRecord } from './records.ts';
import { loadSnapshot } from './snapshot-loader.ts';
import { newestCompleteSnapshot } from './snapshot-writer.ts';
import type { Store } from './store.ts';

export interface RecoveryReport {
  snapshotId: number | null;
  snapshotSeq: number;
  snapshotBytes: number;
  snapshotMs: number;
  records: number;
  replayMs: number;
  lastSeq: number;
}

export class JournalGap extends Error {}

/** Records missing in the middle of the journal, with records stored after them. */
export interface JournalHole {
  /** The first missing seq (the record after the last one before the hole). */
  missingFrom: number;
  /** The seq of the first record stored after the hole. */
  resumesAt: number;
  /** The seq of the newest stored record. */
  lastSeq: number;
}

/** What an operator reads when the server (or a state export) refuses a journal with a hole. */
export function describeHole(hole: JournalHole, dataDir: string | null = null): string {
  const { missingFrom, resumesAt, lastSeq } = hole;
  const missing = resumesAt - 1 === missingFrom ? `seq ${missingFrom} is` : `seqs ${missingFrom} to ${resumesAt - 1} are`;
  const after = lastSeq === resumesAt ? `record ${resumesAt}` : `records ${resumesAt} to ${lastSeq}`;
  const where = dataDir === null ? 'the data directory' : `the data directory (${dataDir})`;
  return [
    `the journal has a hole: ${missing} missing, and ${after} ${lastSeq === resumesAt ? 'is' : 'are'} stored after it.`,
    `A journal commit failed (disk full, I/O error) and later records were stored anyway (older versions of intake could do that).`,
    `Those records were never acknowledged: their requests were answered 503 (or not at all).`,
    `Replaying them without the missing writes would rebuild a state no client was told about, so intake refuses this journal.`,
    `What to do: fix the disk, copy ${where} somewhere safe, then run \`npm run journal -- repair\` with the same DATA_DIR:`,
    `it deletes ${after} and nothing else, and intake then starts with every acknowledged write (clients retry what got 503).`,
    `If the hole has another cause (the data directory was damaged or edited), restore it from a backup instead.`,
  ].join(' ');
}

export class JournalHoleError extends JournalGap {
  constructor(readonly hole: JournalHole, dataDir: string | null = null) {
    super(describeHole(hole, dataDir));
  }
}

/**
 * `keys`: the remembered Idempotency-Keys, rebuilt like the rest of the state: from the snapshot,
 * then from the records after it (a key travels in its write's record). `dataDir` only names the
 * directory in an error message. `untilSeq`: no record after it is replayed (a state export
 * beside a running server stops at the position the server made durable; null: every record).
 */
export function recover(store: Store, workspaces: Workspaces, interner: ProfileInterner, keys: KeyTable | null = null, dataDir: string | null = null, untilSeq: number | null = null): RecoveryReport {
  const started = performance.now();
  const snapshot = newestCompleteSnapshot(store);
  if (snapshot !== null) loadSnapshot(store, snapshot, workspaces, interner, keys);
  const oldestKeptMs = keptSinceMs(keys);
  const afterSeq = snapshot?.seq ?? 0;
  const loaded = performance.now();
  checkStart(store, afterSeq);
  let records = 0;
  let lastSeq = afterSeq;
  for (const { seq, record } of Journal.read(store.journal, afterSeq)) {
    if (untilSeq !== null && seq > untilSeq) break;
    // Seqs follow each other without a gap: a hole means a commit failed and later records were
    // stored anyway (issue 17); they were never acknowledged and must not be replayed.
    if (seq !== lastSeq + 1) throw brokenSequence(store, lastSeq, seq, dataDir);
    replayRecord(workspaces, interner, keys, seq, record, oldestKeptMs);
    records++;
    lastSeq = seq;
  }
  return {
    snapshotId: snapshot?.id ?? null,
    snapshotSeq: afterSeq,
    snapshotBytes: snapshot?.bytes ?? 0,
    snapshotMs: loaded - started,
    records,
    replayMs: performance.now() - loaded,
    lastSeq,
  };
}

/**
 * Records accepted before this (Unix ms) carry keys already out of the window: not remembered.
 * In whole seconds, as KeyTable.find() and a snapshot's restore() judge a key (its accept second
 * plus the window before the current second): in milliseconds a restart in the last second of a
 * key's window forgot a key the live server still held, and its retry was applied twice.
 */
export function keptSinceMs(keys: KeyTable | null): number {
  return keys === null ? 0 : (Math.floor(Date.now() / 1000) - keys.windowSeconds) * 1000;
}

/**
 * A stored record becomes state: applyRecord, and its Idempotency-Key (a key travels in its
 * write's record) remembered unless older than the window. Recovery and a cluster follower
 * (cluster/node-state.ts) replay records through this one function.
 */
export function replayRecord(workspaces: Workspaces, interner: ProfileInterner, keys: KeyTable | null, seq: number, record: JournalRecord, keptSince: number): void {
  applyRecord(workspaces, interner, record);
  if (keys === null || record.idem === undefined || record.at < keptSince) return;
  keys.remember(keyHashOf(record.idem), seq, record.at);
  // The first journaled item of a keyed batch carries the batch's key too (acceptor.ts).
  if (record.idem.length >= 2 * RECORD_BYTES) keys.remember(keyHashOf(record.idem.subarray(RECORD_BYTES, 2 * RECORD_BYTES)), seq, record.at);
}

function brokenSequence(store: Store, previous: number, seq: number, dataDir: string | null): JournalGap {
  if (seq > previous + 1) return new JournalHoleError({ missingFrom: previous + 1, resumesAt: seq, lastSeq: Journal.lastSeq(store.journal) }, dataDir);
  return new JournalGap(`journal batches overlap: seq ${seq} follows seq ${previous}; the data directory is damaged, restore it from a backup`);
}

function checkStart(store: Store, afterSeq: number): void {
  const first = Journal.firstSeq(store.journal);
  if (first !== null && first > afterSeq + 1) {
    // Retention only trims what a snapshot covers; a gap means the data directory is damaged.
    throw new JournalGap(
      `journal starts at seq ${first} but the newest snapshot covers only up to ${afterSeq}: records ${afterSeq + 1} to ${first - 1} are missing, the data directory is damaged; restore it from a backup`,
    );
  }
}

/**
 * The first hole in the part of the journal that recovery replays (after the newest complete
 * snapshot), or null. Reads the journal without applying it (`npm run journal`).
 */
export function findHole(store: Store): JournalHole | null {
  const afterSeq = newestCompleteSnapshot(store)?.seq ?? 0;
  checkStart(store, afterSeq);
  let lastSeq = afterSeq;
  for (const { seq } of Journal.read(store.journal, afterSeq)) {
    if (seq !== lastSeq + 1) {
      const broken = brokenSequence(store, lastSeq, seq, null);
      if (broken instanceof JournalHoleError) return broken.hole;
      throw broken;
    }
    lastSeq = seq;
  }
  return null;
}
