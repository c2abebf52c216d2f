// Rebuilds the in-memory state from the journal before the server listens. Every record goes
// through applyRecord, the same function live writes use. (A snapshot will later stand in for
// the replayed prefix: recovery = snapshot + records after its seq.)
import { applyRecord } from '../actors/apply.ts';
import type { ProfileInterner } from '../actors/interner.ts';
import type { Workspaces } from '../actors/workspace.ts';
import { Journal } from './journal.ts';
import type { Store } from './store.ts';

export interface RecoveryReport {
  records: number;
  lastSeq: number;
  durationMs: number;
}

export function recover(store: Store, workspaces: Workspaces, interner: ProfileInterner, afterSeq = 0): RecoveryReport {
  const startedAt = performance.now();
  let records = 0;
  let lastSeq = afterSeq;
  for (const { seq, record } of Journal.read(store.journal, afterSeq)) {
    applyRecord(workspaces, interner, record);
    records++;
    lastSeq = seq;
  }
  return { records, lastSeq, durationMs: performance.now() - startedAt };
}
