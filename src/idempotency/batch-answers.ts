// The answers of POST /batch requests sent with an Idempotency-Key header (CONTRACT.md §13: "a
// key for the whole batch: a retry gets the same results"). A retry of the same batch (same key,
// same fingerprint) is answered with the first answer's results, word for word, 4xx items
// included; another batch under that key gets 422 idempotency.reused, as any reused key does.
// A batch under a key whose first batch is still running is held until that one is answered
// (CONTRACT.md §10: a duplicate waits for the first), so two batches under one key never both run.
//
// Held in memory, bounded by count, bytes and IDEMPOTENCY_WINDOW_SECONDS. What a restart (or a
// leader change, or these limits) forgets here, the journal keeps: the answer rides in the record
// of the batch's last journaled item (batch-answer-record.ts). Where it could not, the items the
// batch applied stay remembered by their own keys (`"<batch key> <index>"`, journaled with each
// record, key-table.ts), so a retry applies none of them twice and replays their 200s, and only
// the items that were refused are judged again (README, Retries).
import type { IdempotencyClaim } from './claim.ts';

/** Batch answers held at most (a retry comes within minutes, not days). */
export const MAX_ANSWERS = 10_000;
/** Their text, in UTF-16 code units (≈ bytes for JSON), at most. */
const MAX_TEXT_UNITS = 64 * 1024 * 1024;

/** One keyed batch: running (text null), or answered. */
export interface BatchEntry {
  readonly scope: string;
  readonly f0: number;
  readonly f1: number;
  text: string | null;
  atMs: number;
  /** Batches under the same key and fingerprint that arrived while this one ran. */
  waiters: Array<(text: string | null) => void>;
}

export type BatchLookup =
  | { kind: 'replay'; text: string }
  | { kind: 'reused' }
  /** The first batch is still running: `then` is called with its kept answer, or null (run it). */
  | { kind: 'wait'; then(waiter: (text: string | null) => void): void }
  | null;

export class BatchAnswers {
  /** Scope hash → entry, oldest first (Map keeps insertion order). */
  private readonly entries = new Map<string, BatchEntry>();
  private textUnits = 0;
  private answered = 0;

  constructor(private readonly windowMs: number) {}

  private static scopeOf(claim: IdempotencyClaim): string {
    return `${claim.h0}:${claim.h1}:${claim.h2}`;
  }

  /** What a batch with this claim gets from an earlier one; null when there is none. */
  lookup(claim: IdempotencyClaim, nowMs: number): BatchLookup {
    const entry = this.entries.get(BatchAnswers.scopeOf(claim));
    if (entry === undefined) return null;
    if (entry.text !== null && nowMs - entry.atMs > this.windowMs) {
      this.drop(entry);
      return null;
    }
    if (entry.f0 !== claim.f0 || entry.f1 !== claim.f1) return { kind: 'reused' };
    if (entry.text !== null) return { kind: 'replay', text: entry.text };
    return { kind: 'wait', then: (waiter) => entry.waiters.push(waiter) };
  }

  /** A keyed batch starts running (lookup() found nothing): later ones under its key wait for it. */
  begin(claim: IdempotencyClaim, nowMs: number): BatchEntry {
    const entry: BatchEntry = { scope: BatchAnswers.scopeOf(claim), f0: claim.f0, f1: claim.f1, text: null, atMs: nowMs, waiters: [] };
    this.entries.set(entry.scope, entry);
    return entry;
  }

  /**
   * The batch of `entry` is answered: `text` is kept for its retries, or, null (an item got a
   * 5xx, which a retry may turn into a 200), nothing is kept and the batches waiting run.
   */
  finish(entry: BatchEntry, text: string | null, nowMs: number): void {
    const waiters = entry.waiters;
    entry.waiters = [];
    const current = this.entries.get(entry.scope) === entry;
    if (text === null || text.length > MAX_TEXT_UNITS) {
      if (current) this.entries.delete(entry.scope);
    } else if (current) {
      entry.text = text;
      entry.atMs = nowMs;
      this.textUnits += text.length;
      this.answered++;
      this.evict(nowMs);
    }
    // What the entry holds now (null when it was not kept, or is no longer the key's entry).
    const kept = this.entries.get(entry.scope) === entry ? entry.text : null;
    for (const waiter of waiters) waiter(kept);
  }

  /** Answered entries held (for tests and limits). */
  get size(): number {
    return this.answered;
  }

  /** Drops the oldest answered entries past the limits or the window (running ones stay). */
  private evict(nowMs: number): void {
    for (const entry of this.entries.values()) {
      if (entry.text === null) continue;
      if (this.answered <= MAX_ANSWERS && this.textUnits <= MAX_TEXT_UNITS && nowMs - entry.atMs <= this.windowMs) break;
      this.drop(entry);
    }
  }

  private drop(entry: BatchEntry): void {
    if (this.entries.get(entry.scope) !== entry) return;
    this.entries.delete(entry.scope);
    if (entry.text !== null) {
      this.textUnits -= entry.text.length;
      this.answered--;
    }
  }
}
