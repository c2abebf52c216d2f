// A keyed batch's whole answer, kept in the journal (CONTRACT.md §13: "a retry gets the same
// results"; §10: the first answer survives a restart and a crash like the write itself).
//
// The answers held in memory (batch-answers.ts) go with a restart, a leader change or their
// limits. Before 2026-11-29 a retry after that replayed the items the batch had applied from their
// own keys and judged the refused ones again: a mapping refused for a product that did not exist
// yet was applied by the retry once the product existed, and the results differed from the first
// answer. Now the answer rides in the record of the batch's last journaled item, beside that
// item's key and the batch's (so the batch's key names that record), and a retry whose answer is
// no longer in memory reads it back from there: word for word, with `idempotent-replayed: true`.
//
// Only while that record waits in the journal's open batch (not yet encoded for its commit) can
// the answer join it: a batch whose last journaled record was handed to a commit before its last
// item was decided (items after it refused or replayed in a later turn, after a wait behind a
// worker mapping or a mapping applied in slices; a record that filled a journal batch;
// `COMMIT_MODE=sync`) keeps its answer in memory only, and is judged again as before (README).
import type { Journal } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import type { IdempotencyClaim } from './claim.ts';
import { RECORD_BYTES, type KeyTable } from './key-table.ts';

/**
 * An answer larger than this (UTF-16 units of its packed form) stays in memory only: a journal
 * record is not the place for megabytes of 422 details (1,000 items of 100 details each).
 */
export const MAX_JOURNALED_ANSWER_UNITS = 1024 * 1024;

/**
 * The results of one batch as a record carries them: `[n, i, result, i, result, …]`, JSON, where
 * every result not listed is `success` (most items of a catalog sync or of a client's batch of
 * events), so a batch of 1,000 plain upserts adds a few bytes to its last record.
 */
export function packResults(results: readonly string[], success: string): string {
  const packed: Array<number | string> = [results.length];
  for (let i = 0; i < results.length; i++) {
    if (results[i] !== success) packed.push(i, results[i]!);
  }
  return JSON.stringify(packed);
}

/** The batch's whole answer, `{"results":[…]}`, from packResults()'s text; null if it is not one. */
export function unpackAnswer(packed: string, success: string): string | null {
  let value: unknown;
  try {
    value = JSON.parse(packed);
  } catch {
    return null;
  }
  if (!Array.isArray(value) || value.length % 2 !== 1) return null;
  const n = value[0];
  if (!Number.isSafeInteger(n) || (n as number) < 1 || (n as number) > 1_000_000) return null;
  const results = new Array<string>(n as number).fill(success);
  for (let k = 1; k < value.length; k += 2) {
    const i = value[k];
    const result = value[k + 1];
    if (!Number.isSafeInteger(i) || (i as number) < 0 || (i as number) >= (n as number) || typeof result !== 'string') return null;
    results[i as number] = result;
  }
  return `{"results":[${results.join(',')}]}`;
}

/** The state thread's journal and keys, as a batch keeps and reads its answer through them. */
export class JournaledBatchAnswers {
  constructor(
    private readonly journal: Pick<Journal, 'openRecord' | 'recordAt' | 'durableSeq' | 'afterPending'>,
    private readonly keys: KeyTable,
  ) {}

  /**
   * Puts a batch's packed results into the record `seq` (its last journaled item) if that record
   * has not been handed to a commit yet, with the batch's key beside the item's own, and makes
   * the key name it. Returns whether it did.
   *
   * The key is remembered now, not when the record was appended: if the batch's last item was
   * decided in a later turn (by the catalog actor) and a snapshot began in between, that snapshot
   * covers the record but holds the key as it was, naming the batch's first record, and a restart
   * from it finds no answer there (the retry falls back; found by a review). A later snapshot, or
   * a restart that replays the record, holds the key as it is now.
   */
  keep(seq: number, claim: IdempotencyClaim, packed: string): boolean {
    if (packed.length > MAX_JOURNALED_ANSWER_UNITS) return false;
    const record: JournalRecord | null = this.journal.openRecord(seq);
    // Every item of a keyed batch has a key (its own, or "<batch key> <index>"): a record without
    // one is not an item of this batch.
    if (record === null || record.idem === undefined) return false;
    record.answer = packed;
    // The first journaled item's record carries the batch key already (acceptor.ts).
    if (record.idem.length < 2 * RECORD_BYTES) record.idem = Buffer.concat([record.idem, claim.recordBytes()]);
    this.keys.remember(claim, seq, record.at);
    return true;
  }

  /**
   * The whole answer kept with record `seq`, once that record is durable, to `then`; null when
   * that record holds none (a batch cut across commits, an answer too big, a record trimmed by
   * retention, or written before 2026-11-29).
   */
  read(seq: number, success: string, then: (answer: string | null) => void): void {
    const read = (): void => {
      const record = this.journal.recordAt(seq);
      then(record === null || typeof record.answer !== 'string' ? null : unpackAnswer(record.answer, success));
    };
    if (seq <= this.journal.durableSeq) return read();
    // Remembered from a record still in its commit (a follower that has just taken the lease).
    if (!this.journal.afterPending({ committed: read, failed: () => then(null) })) read();
  }
}
