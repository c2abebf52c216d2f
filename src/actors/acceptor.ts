// How a live write ends: accepted (applied to memory, journaled, answered 200 once durable),
// refused (a 422, answered at once: see refuse()), or, for a retry
// with a known Idempotency-Key, answered as the first one was (CONTRACT.md §10). Once the
// journal has failed, every write that reaches one of these ends in 503 instead.
import type { IdempotencyClaim } from '../idempotency/claim.ts';
import type { KeyTable } from '../idempotency/key-table.ts';
import type { CommitWaiter, Journal } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import { detail, type ValidationDetail } from '../schemas/details.ts';
import { applyRecord } from './apply.ts';
import type { ProfileInterner } from './interner.ts';
import type { Workspaces } from './workspace.ts';

/** The HTTP side of one write: what to answer, and when (via CommitWaiter). */
export interface Reply extends CommitWaiter {
  /** The 200 body, sent once the write is durable. */
  succeed(body: string): void;
  /** A 422, sent when committed() follows (at once: Acceptor.refuse). */
  reject(details: ValidationDetail[]): void;
  /** A bug or a lost worker: 500, logged; nothing of the write was applied. */
  crashed(error: unknown): void;
  /** The request's Idempotency-Key, with its body fingerprint set; null without the header. */
  readonly idempotency: IdempotencyClaim | null;
  /** A retry: once durable, answer 200 with `answer()` and `idempotent-replayed: true`. */
  replay(answer: () => string): void;
  /**
   * A batch item: its batch's own Idempotency-Key (the header), the first time an item of that
   * batch is journaled, else null. It rides in that item's record beside the item's own key.
   */
  batchKey?(): IdempotencyClaim | null;
  /** A batch item: its record was appended as `seq` (its batch may add its answer to it). */
  journaled?(seq: number): void;
}

/** What retries did since start, for /metrics. */
export interface RetryCounts {
  replays: number;
  conflicts: number;
}

export const SUCCESS_BODY = '{"success":true}';

/** Characters a JSON string holds as they are: our ids' alphabet (nanoid's). */
const PLAIN = /^[A-Za-z0-9_-]*$/;

/**
 * An app launch's answer, {"did","sid"}, for a first launch and for its replay alike; written out
 * when the did needs no escaping (sid is always ours): a fifth of JSON.stringify's cost.
 */
export function launchAnswer(did: string, sid: string): string {
  return PLAIN.test(did) ? '{"did":"' + did + '","sid":"' + sid + '"}' : JSON.stringify({ did, sid });
}

export class Acceptor {
  readonly retries: RetryCounts = { replays: 0, conflicts: 0 };

  constructor(
    readonly workspaces: Workspaces,
    readonly interner: ProfileInterner,
    readonly journal: Journal,
    readonly keys: KeyTable,
  ) {}

  accept(record: JournalRecord, reply: Reply, body: string): void {
    if (this.journalHasFailed(reply)) return;
    applyRecord(this.workspaces, this.interner, record);
    this.append(record, reply, body);
  }

  /** For a write whose change to memory was already made (a staged mapping's commit). */
  journalApplied(record: JournalRecord, reply: Reply, body: string): void {
    if (this.journalHasFailed(reply)) return;
    this.append(record, reply, body);
  }

  private append(record: JournalRecord, reply: Reply, body: string): void {
    reply.succeed(body);
    const claim = reply.idempotency;
    // A keyed batch's own key travels in its first journaled item's record, after that item's
    // own (every item of a keyed batch has one): it survives a restart and a leader change as
    // the item's key does (CONTRACT.md §10), so that another batch under it gets 422 then too.
    const batchClaim = claim === null ? null : (reply.batchKey?.() ?? null);
    // One record, one fsync: the key travels in the write's own record.
    if (claim !== null) record.idem = batchClaim === null ? claim.recordBytes() : Buffer.concat([claim.recordBytes(), batchClaim.recordBytes()]);
    const seq = this.journal.append(record, reply);
    if (claim !== null && seq !== 0) this.keys.remember(claim, seq, record.at);
    if (batchClaim !== null && seq !== 0) this.keys.remember(batchClaim, seq, record.at);
    if (seq !== 0) reply.journaled?.(seq);
  }

  /**
   * In the write's turn, before anything else: if its Idempotency-Key is remembered, answers it
   * (the first answer again, or 422 idempotency.reused for another body) and returns true. A
   * retry of a write not yet durable is answered when it is. `launch`: the answer is the did
   * and sid of the first launch, read back from its journal record.
   */
  retried(reply: Reply, launch = false): boolean {
    const claim = reply.idempotency;
    if (claim === null) return false;
    if (this.journalHasFailed(reply)) return true;
    const n = this.keys.find(claim, Math.floor(Date.now() / 1000));
    if (n < 0) return false;
    if (!this.keys.sameRequest(n, claim)) {
      this.retries.conflicts++;
      this.refuse([detail.idempotencyReused(claim.key)], reply);
      return true;
    }
    const seq = this.keys.seqOf(n);
    this.retries.replays++;
    reply.replay(launch ? () => this.replayedLaunch(seq) : () => SUCCESS_BODY);
    // A first write not durable yet is waited for (and if its commit fails, so does this).
    if (seq <= this.journal.durableSeq) reply.committed();
    else if (!this.journal.afterPending(reply)) reply.failed(new Error(`journal record ${seq} is neither durable nor pending`));
    return true;
  }

  private replayedLaunch(seq: number): string {
    const record = this.journal.recordAt(seq);
    if (record === null || record.kind !== 'app_launch') throw new Error(`journal record ${seq} is not the app launch its Idempotency-Key names`);
    return launchAnswer(record.did, record.sid);
  }

  /**
   * A 422 is answered at once, not after the writes it observed are durable: CONTRACT.md §2 lets
   * every 4xx be pipelined, answered in order without waiting for the journal, and uWS closes a
   * connection on which a request arrives while an answer is pending (a 422 that waited lost the
   * request pipelined behind it, and its own answer). Nothing of the refused write is applied; a
   * 422 may reflect a write not yet durable (a delete still in its commit, say), which a crash
   * could still undo, as for any write not yet answered.
   */
  refuse(details: ValidationDetail[], reply: Reply): void {
    if (this.journalHasFailed(reply)) return;
    reply.reject(details);
    reply.committed();
  }

  /**
   * The one gate of live writes once the journal has failed (disk full, I/O error): nothing is
   * applied to memory or journaled, and no 422 or replay is answered once the failure is known
   * (the state it would be judged against may hold writes that were lost; a 422 answered just
   * before, at once, may reflect such a write, see refuse()). The write gets 503. The HTTP
   * layer checks too, but only when a request is dispatched: a catalog write queued behind a
   * mapping in a worker runs later (found in issue 17: it was applied, journaled by a later,
   * smaller commit that succeeded, and answered 200).
   */
  private journalHasFailed(reply: Reply): boolean {
    const failure = this.journal.failed;
    if (failure === null) return false;
    reply.failed(failure);
    return true;
  }
}
