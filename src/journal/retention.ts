// Optional journal retention by age. The journal is the event log and is kept unless the operator
// sets a retention; even then a batch is deleted only when it is older than the retention AND
// every record in it is at or before `coveredSeq`: the caller passes the lower of what the newest
// complete snapshot covers (recovery never needs what was deleted) and what every configured
// sink has confirmed (no sink misses what was deleted).
import type { Store } from './store.ts';

export interface TrimReport {
  batches: number;
  records: number;
  /** The seq of the oldest record kept, or null when the journal is now empty. */
  firstKeptSeq: number | null;
}

/**
 * Most batches read (decoded, on the main thread) and deleted per step; requests run between
 * steps. A batch holds up to 8,192 records, so 1,000 at once could hold the event loop.
 */
const TRIM_BATCHES_PER_TXN = 100;
/**
 * A step also ends once it has decoded this many records (plus the batch that crossed it): 100
 * full batches were about 800,000 records, a synchronous pass of seconds while requests waited
 * (found by a review). Small batches (one request's commit each) still go 100 a step.
 */
export const TRIM_RECORDS_PER_STEP = 16_384;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

export async function trimJournal(store: Store, coveredSeq: number, olderThanMs: number): Promise<TrimReport> {
  const report: TrimReport = { batches: 0, records: 0, firstKeptSeq: null };
  for (;;) {
    const doomed: number[] = [];
    let stoppedAt: number | null = null;
    let recordsRead = 0;
    for (const { key, value } of store.journal.getRange({ limit: TRIM_BATCHES_PER_TXN })) {
      recordsRead += value.length;
      const lastSeq = key + value.length - 1;
      // The youngest record of the batch, not its last: `at` is when a write was received, and a
      // big mapping is appended only after its worker and slices, behind writes received later,
      // so a batch's last record may be older than one before it (a review).
      let newestAtMs = -Infinity;
      for (const record of value) if (record.at > newestAtMs) newestAtMs = record.at;
      if (lastSeq > coveredSeq || value.length === 0 || newestAtMs >= olderThanMs) {
        stoppedAt = key;
        break;
      }
      doomed.push(key);
      report.records += value.length;
      if (recordsRead >= TRIM_RECORDS_PER_STEP) break;
    }
    if (doomed.length > 0) {
      await store.root.transaction(() => {
        for (const key of doomed) store.journal.removeSync(key);
      });
      report.batches += doomed.length;
    }
    // Fewer batches than asked for, and not cut short by the records: the journal's end.
    if (stoppedAt !== null || (doomed.length < TRIM_BATCHES_PER_TXN && recordsRead < TRIM_RECORDS_PER_STEP)) {
      report.firstKeptSeq = stoppedAt;
      return report;
    }
    await nextTurn();
  }
}
