// The leader's memory of the commands followers forwarded, so that none is applied twice. A
// follower whose POST timed out or lost its connection cannot know whether the leader applied
// it; it sends the same commands again (same origin, same ids), and each is answered from here:
// with its answer when it has one, or, while it is still running, with the answer it will get.
//
// Bounded by count, bytes (the answers kept) and age, forgetting the oldest answered first. A
// command still running is never forgotten (the followers' own limits bound how many there are).
// Per origin the highest id forgotten is kept: a command not found at or below it may have been
// applied and forgotten, so it gets 503 (the client's Idempotency-Key makes its retry safe)
// rather than being applied a second time. A follower's ids grow, so a new command is never below.
import type { Answer } from '../handoff/frames.ts';

export interface DedupLimits {
  maxEntries: number;
  maxBytes: number;
  maxAgeMs: number;
}

export const DEFAULT_DEDUP_LIMITS: DedupLimits = {
  // A few seconds of forwarded writes at the rates one leader takes (a follower retries for at
  // most CLUSTER_FORWARD_TIMEOUT_MS), each entry about 150 bytes besides its answer.
  maxEntries: 200_000,
  maxBytes: 64 * 1024 * 1024,
  maxAgeMs: 60_000,
};

/** Origins whose forgotten ids are kept at most (a follower's process makes one; restarts add more). */
const MAX_ORIGINS = 4096;
/** Counted for an entry besides its answer's body: the key, the object, the map's slot. */
const ENTRY_OVERHEAD_BYTES = 150;

type Reply = (answer: Answer) => void;

interface Entry {
  answer: Answer | null;
  /** Retries that came while it ran. */
  waiters: Reply[] | null;
  /** When its answer came (or it arrived, while it runs), ms (performance.now()). */
  atMs: number;
  bytes: number;
  origin: string;
  id: number;
}

/** The answer to a retried command whose first run is too old to be remembered. */
export function forgottenAnswer(id: number): Answer {
  return {
    id,
    status: 503,
    body: '{"type":"ServiceUnavailableError","message":"this write was forwarded too long ago for the leader to tell whether it was applied: retry it with the same Idempotency-Key"}',
    header: 'retry-after',
    headerValue: '1',
    close: false,
  };
}

export class ForwardDedup {
  /**
   * Commands still running: never evicted, so kept apart. (In one map with the answered ones,
   * running commands at its front stopped eviction, which gave up after 64 of them, so the table
   * grew past every limit while they ran; found by a review, 2026-11-28.)
   */
  private readonly running = new Map<string, Entry>();
  /** Commands answered, in the order their answers came: eviction looks here, oldest first. */
  private readonly entries = new Map<string, Entry>();
  private readonly forgottenUpTo = new Map<string, number>();
  private bytes = 0;

  constructor(private readonly limits: DedupLimits = DEFAULT_DEDUP_LIMITS) {}

  get size(): number {
    return this.running.size + this.entries.size;
  }

  /**
   * Command `id` of `origin` arrived (`nowMs`: performance.now()), to be answered through `reply`. Returns the function the
   * caller hands the command's answer to when the command is new (the caller runs it), or null
   * when it was seen before: `reply` then gets its answer (now, or when it comes).
   */
  take(origin: string, id: number, reply: Reply, nowMs: number): Reply | null {
    this.evict(nowMs);
    const key = origin + '\n' + id;
    const seen = this.running.get(key) ?? this.entries.get(key);
    if (seen !== undefined) {
      if (seen.answer !== null) reply(seen.answer);
      else (seen.waiters ??= []).push(reply);
      return null;
    }
    const forgotten = this.forgottenUpTo.get(origin);
    if (forgotten !== undefined && id <= forgotten) {
      reply(forgottenAnswer(id));
      return null;
    }
    const entry: Entry = { answer: null, waiters: null, atMs: nowMs, bytes: ENTRY_OVERHEAD_BYTES + key.length, origin, id };
    this.running.set(key, entry);
    this.bytes += entry.bytes;
    return (answer) => {
      if (entry.answer !== null) return;
      this.running.delete(key);
      this.entries.set(key, entry);
      entry.answer = answer;
      entry.atMs = performance.now();
      const more = answer.body.length + answer.headerValue.length;
      entry.bytes += more;
      // Forgotten meanwhile is impossible (a running entry is never evicted), so it is counted.
      this.bytes += more;
      reply(answer);
      const waiters = entry.waiters;
      entry.waiters = null;
      if (waiters !== null) for (const waiter of waiters) waiter(answer);
    };
  }

  /** Forgets answered entries from the oldest on, while over a limit (running ones count, and stay). */
  private evict(nowMs: number): void {
    const { maxEntries, maxBytes, maxAgeMs } = this.limits;
    for (const [key, entry] of this.entries) {
      const over = this.size > maxEntries || this.bytes > maxBytes || nowMs - entry.atMs > maxAgeMs;
      if (!over) return;
      this.entries.delete(key);
      this.bytes -= entry.bytes;
      const before = this.forgottenUpTo.get(entry.origin);
      if (before === undefined || entry.id > before) {
        this.forgottenUpTo.delete(entry.origin);
        this.forgottenUpTo.set(entry.origin, entry.id);
        if (this.forgottenUpTo.size > MAX_ORIGINS) this.forgottenUpTo.delete(this.forgottenUpTo.keys().next().value!);
      }
    }
  }
}
