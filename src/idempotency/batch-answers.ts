// The answers of POST /batch requests sent with an Idempotency-Key header (CONTRACT.md §13: "a
// key for the whole batch: a retry gets the same results"). A retry of the same batch (same key,
// same fingerprint) is answered with the first answer's results, word for word, 4xx items
// included; another batch under that key gets 422 idempotency.reused, as any reused key does.
//
// Held in memory only, bounded by count, bytes and IDEMPOTENCY_WINDOW_SECONDS. What a restart
// (or a leader change) forgets is the answer as a whole; the items it applied stay remembered by
// their own keys (`"<batch key> <index>"`, journaled with each record, key-table.ts), so a retry
// after a crash applies none of them twice and replays their 200s, and only the items that were
// refused are judged again (README, Retries).
import type { IdempotencyClaim } from './claim.ts';

/** Batch answers held at most (a retry comes within minutes, not days). */
const MAX_ANSWERS = 10_000;
/** Their text, in UTF-16 code units (≈ bytes for JSON), at most. */
const MAX_TEXT_UNITS = 64 * 1024 * 1024;

interface BatchAnswer {
  f0: number;
  f1: number;
  text: string;
  atMs: number;
}

export type BatchReplay = { kind: 'replay'; text: string } | { kind: 'reused' } | null;

export class BatchAnswers {
  /** Scope hash → answer, oldest first (Map keeps insertion order). */
  private readonly answers = new Map<string, BatchAnswer>();
  private textUnits = 0;

  constructor(private readonly windowMs: number) {}

  private static scopeOf(claim: IdempotencyClaim): string {
    return `${claim.h0}:${claim.h1}:${claim.h2}`;
  }

  /** What a batch with this claim gets from an earlier one: its answer, a 422, or null (none held). */
  lookup(claim: IdempotencyClaim, nowMs: number): BatchReplay {
    const scope = BatchAnswers.scopeOf(claim);
    const held = this.answers.get(scope);
    if (held === undefined) return null;
    if (nowMs - held.atMs > this.windowMs) {
      this.drop(scope, held);
      return null;
    }
    return held.f0 === claim.f0 && held.f1 === claim.f1 ? { kind: 'replay', text: held.text } : { kind: 'reused' };
  }

  /** Keeps a batch's answer (a 200 with its results), unless one is held for that key already. */
  remember(claim: IdempotencyClaim, text: string, nowMs: number): void {
    if (text.length > MAX_TEXT_UNITS) return;
    const scope = BatchAnswers.scopeOf(claim);
    if (this.answers.has(scope)) return;
    this.answers.set(scope, { f0: claim.f0, f1: claim.f1, text, atMs: nowMs });
    this.textUnits += text.length;
    for (const [oldScope, old] of this.answers) {
      if (this.answers.size <= MAX_ANSWERS && this.textUnits <= MAX_TEXT_UNITS && nowMs - old.atMs <= this.windowMs) break;
      this.drop(oldScope, old);
    }
  }

  get size(): number {
    return this.answers.size;
  }

  private drop(scope: string, answer: BatchAnswer): void {
    this.answers.delete(scope);
    this.textUnits -= answer.text.length;
  }
}
