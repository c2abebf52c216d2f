// Rebuilds the in-memory state before the server listens: the newest complete snapshot, then
// every journal record after the position it covers, through applyRecord (the function live
// writes use). The export CLI rebuilds state the same way.
import { applyRecord } from '../actors/apply.ts';
import type { ProfileInterner } from '../actors/interner.ts';
import type { Workspaces } from '../actors/workspace.ts';
import { keyHashOf, type KeyTable } from '../idempotency/key-table.ts';
import { Journal } from './journal.ts';
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

/**
 * `keys`: the remembered Idempotency-Keys, rebuilt like the rest of the state: from the snapshot,
 * then from the records after it (a key travels in its write's record).
 */
export function recover(store: Store, workspaces: Workspaces, interner: ProfileInterner, keys: KeyTable | null = null): RecoveryReport {
  const started = performance.now();
  const snapshot = newestCompleteSnapshot(store);
  if (snapshot !== null) loadSnapshot(store, snapshot, workspaces, interner, keys);
  const oldestKeptMs = keys === null ? 0 : Date.now() - keys.windowSeconds * 1000;
  const afterSeq = snapshot?.seq ?? 0;
  const loaded = performance.now();
  const first = Journal.firstSeq(store.journal);
  if (first !== null && first > afterSeq + 1) {
    // Retention only trims what a snapshot covers; a gap means the data directory is damaged.
    throw new JournalGap(`journal starts at seq ${first} but the newest snapshot covers only up to ${afterSeq}`);
  }
  let records = 0;
  let lastSeq = afterSeq;
  for (const { seq, record } of Journal.read(store.journal, afterSeq)) {
    applyRecord(workspaces, interner, record);
    if (keys !== null && record.idem !== undefined && record.at >= oldestKeptMs) keys.remember(keyHashOf(record.idem), seq, record.at);
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
