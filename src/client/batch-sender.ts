// Sends one batch of queued writes through POST /batch until every write in it is settled:
// retries (same per-write keys, same batch key while the body is the same), splits (413, the
// envelope's 422, and a connection closed while the body was sent halve a batch; a 429 for more
// items than the key's burst cuts it to the burst),
// and each item's own answer resolved or rejected.
import { randomUUID } from 'node:crypto';
import { cutOffWhileSending, IntakeProtocolError, IntakeRequestError, IntakeUnavailableError, IntakeValidationError, neverConnected, type WriteIdentity } from './errors.ts';
import type { ResolvedOptions } from './options.ts';
import { isRetryableStatus, MIN_ATTEMPT_MS, parseRetryAfterMs, retryDelayMs } from './retry-policy.ts';
import { attempt, prepareBody, type PreparedBody } from './transport.ts';
import { batchBodyBytes, itemBodyJson } from './item-json.ts';
import type { BatchResult, ValidationDetail, WriteMethod } from './types.ts';

export const BATCH_PATH = '/batch';

/** A write waiting for its answer. `bodyJson` is its body, serialized once when it was queued; `bytes` its batch item's length. Settles once: later calls are ignored. */
export interface QueuedWrite {
  seq: number;
  method: WriteMethod;
  path: string;
  idempotencyKey: string;
  bodyJson: string | undefined;
  bytes: number;
  enqueuedAtMs: number;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

type ItemResult = Pick<BatchResult, 'status'> & { body: unknown };

const identity = (w: QueuedWrite): WriteIdentity => ({ method: w.method, path: w.path, idempotencyKey: w.idempotencyKey });

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function errorType(body: unknown): string | null {
  return typeof body === 'object' && body !== null && typeof (body as { type?: unknown }).type === 'string' ? (body as { type: string }).type : null;
}

function detailsOf(body: unknown): ValidationDetail[] {
  const details = typeof body === 'object' && body !== null ? (body as { details?: unknown }).details : undefined;
  return Array.isArray(details) ? (details as ValidationDetail[]) : [];
}

/** A final (non-retryable) answer for one write. */
function settleFinal(write: QueuedWrite, status: number, body: unknown): void {
  if (status === 200) write.resolve(body);
  else if (status === 422) write.reject(new IntakeValidationError(identity(write), detailsOf(body)));
  else write.reject(new IntakeRequestError(identity(write), status, errorType(body), body));
}

function readResults(body: unknown, count: number): ItemResult[] | null {
  const results = typeof body === 'object' && body !== null ? (body as { results?: unknown }).results : undefined;
  if (!Array.isArray(results) || results.length !== count) return null;
  for (const r of results) if (typeof r !== 'object' || r === null || typeof (r as ItemResult).status !== 'number') return null;
  return results as ItemResult[];
}

function halves(writes: QueuedWrite[]): QueuedWrite[][] {
  const half = Math.ceil(writes.length / 2);
  return [writes.slice(0, half), writes.slice(half)];
}

function groupsOf(writes: QueuedWrite[], size: number): QueuedWrite[][] {
  const groups: QueuedWrite[][] = [];
  for (let i = 0; i < writes.length; i += size) groups.push(writes.slice(i, i + size));
  return groups;
}

/**
 * The key's rate-limit burst, from the message of the 429 the server gives a batch of more items
 * than that (src/http/batch.ts: "... more than this key's burst of B ..."); null for any other
 * 429, which is retried as it is.
 */
export function burstOf(body: unknown): number | null {
  const message = typeof body === 'object' && body !== null ? (body as { message?: unknown }).message : undefined;
  if (typeof message !== 'string') return null;
  const m = /burst of (\d+)\b/.exec(message);
  const burst = m === null ? NaN : Number(m[1]);
  return Number.isSafeInteger(burst) && burst >= 1 ? burst : null;
}

/**
 * What one attempt sends. A batch: its body and its batch-level Idempotency-Key, a new key
 * whenever the items change (a key names one exact body). Or one write `alone` to its own
 * endpoint, with its own key and its own body (null: none, a DELETE).
 */
interface Envelope {
  writes: QueuedWrite[];
  body: PreparedBody | null;
  batchKey: string;
  alone: boolean;
}

async function envelope(writes: QueuedWrite[], options: ResolvedOptions): Promise<Envelope> {
  return { writes, body: await prepareBody(batchBodyBytes(writes), options.gzipThresholdBytes), batchKey: `batch-${randomUUID()}`, alone: false };
}

/**
 * One write sent alone to its own endpoint, when even alone it is over the batch body limit
 * (BATCH_BODY_LIMIT_BYTES, 4 MiB by default): its endpoint may take more (a mapping, 16 MiB).
 * Its Idempotency-Key is the one it had in the batches: the server recognises a write retried
 * alone after a batch that applied it.
 */
async function loneEnvelope(write: QueuedWrite, options: ResolvedOptions): Promise<Envelope> {
  const json = itemBodyJson(write);
  return { writes: [write], body: json === null ? null : await prepareBody(json, options.gzipThresholdBytes), batchKey: write.idempotencyKey, alone: true };
}

/** The queue's limit on batches in flight: a batch holds a slot from its first attempt until it is settled. */
export interface BatchSlots {
  acquire(): Promise<void>;
  release(): void;
}

/**
 * When the server last settled a write of this client (a 200 or a final answer; performance.now(),
 * -Infinity: never). Shared by the queue's batches.
 */
export interface ServerProgress {
  lastSettledAtMs: number;
}

/**
 * When a batch must be settled: retryDeadlineMs after it was ready to leave, or after the
 * server's last settled write if that is later, so time spent waiting for a slot counts only
 * while the server settles nothing. Ready to leave: when it was taken from the queue, or, if
 * sooner, once its oldest write had waited flushIntervalMs (writes the slots kept in the queue past
 * that are late already; waiting for the interval itself never counts). Counted from the first
 * attempt alone (as it was), every batch queued behind one that gave up on an unreachable server
 * was retried for a whole deadline of its own, one after the other, and close() could take hours
 * (a review). Counted from the enqueue time, a backlog behind a server that is merely rate
 * limiting would fail writes never sent, and a flushIntervalMs near the deadline would use it up.
 * All times are performance.now(): a step of the wall clock moves none of them.
 */
export function batchDeadlineAtMs(writes: readonly QueuedWrite[], takenAtMs: number, options: ResolvedOptions, progress: ServerProgress): number {
  // Batches are taken in queue order: the first write is the oldest.
  const readyAtMs = Math.min(takenAtMs, writes[0]!.enqueuedAtMs + options.flushIntervalMs);
  return Math.max(readyAtMs, progress.lastSettledAtMs) + options.retryDeadlineMs;
}

/**
 * Settles every write of `writes`, in order (items are applied by the server in the order sent;
 * halves of a split go one after the other). Its slot is asked for at once, before the body is
 * made: slots are granted in the order asked, so batches leave in the order they were taken even
 * when a later one's body is ready first (a small one under the gzip threshold, say), and a batch
 * waiting for its slot is made meanwhile. Never rejects: each write's promise carries its
 * outcome, a body that cannot be made (or any other failure here) included.
 */
export async function sendBatch(writes: QueuedWrite[], options: ResolvedOptions, slots: BatchSlots, progress: ServerProgress): Promise<void> {
  const takenAtMs = performance.now();
  const slot = slots.acquire();
  let first: Envelope | null = null;
  let failure: unknown = null;
  try {
    first = await envelope(writes, options);
  } catch (error) {
    failure = error;
  }
  await slot;
  try {
    if (first === null) throw failure;
    // The deadline as the batch leaves, moved on by each write of its own the server settles
    // later (a group split from it, items answered before others retried): worked out once for
    // the whole batch, a batch cut into groups of a rate-limited key's burst failed its later
    // groups while the server was still settling the earlier ones (found by a review). Only its
    // own: other batches' settlements would keep a batch whose item always fails retrying for as
    // long as the client had other traffic.
    const leavingDeadlineAtMs = batchDeadlineAtMs(writes, takenAtMs, options, progress);
    const own: ServerProgress = { lastSettledAtMs: -Infinity };
    const deadlineAtMs = (): number => Math.max(leavingDeadlineAtMs, own.lastSettledAtMs + options.retryDeadlineMs);
    let prepared: Envelope | null = first;
    // A group split from one that may have reached the server keeps saying so.
    const groups: Array<{ writes: QueuedWrite[]; reached: boolean }> = [{ writes, reached: false }];
    while (groups.length > 0) {
      const group = groups.shift()!;
      const smaller = await sendGroup(prepared ?? (await envelope(group.writes, options)), options, deadlineAtMs, progress, own, group.reached);
      prepared = null;
      if (smaller !== null) groups.unshift(...smaller.groups.map((w) => ({ writes: w, reached: smaller.reached })));
    }
  } catch (error) {
    // Writes settled already ignore this (QueuedWrite settles once).
    for (const w of writes) w.reject(error);
  } finally {
    slots.release();
  }
}

/**
 * Sends one group until settled; returns smaller groups instead when the server found it too
 * large (in order), and whether an attempt may have reached the server. `reachedBefore`: the group
 * it was split from may have.
 */
async function sendGroup(
  start: Envelope,
  options: ResolvedOptions,
  deadlineAtMs: () => number,
  progress: ServerProgress,
  own: ServerProgress,
  reachedBefore: boolean,
): Promise<{ groups: QueuedWrite[][]; reached: boolean } | null> {
  /** The server settled writes of this batch: the client's deadlines, and this batch's, move on. */
  const settledNow = (): void => {
    own.lastSettledAtMs = progress.lastSettledAtMs = performance.now();
  };
  let current = start;
  let attempts = 0;
  let retries = 0;
  /** The attempt made at the end of the deadline instead of a wait past it has been made. */
  let lastAttempt = false;
  /**
   * The last HTTP status the server answered, kept across attempts: when the attempt the deadline
   * cut short (its timeout is what was left) was the last, the user still learns that the server
   * was answering 503, say, and the timeout is the error's cause.
   */
  let lastStatus: number | null = null;
  /** Whether some attempt may have reached the server (an answer, or a failure after connecting). */
  let reached = reachedBefore;
  /** The last attempt's network error or timeout (null: it was answered). */
  let lastError: unknown = null;
  const giveUp = (): null => {
    for (const w of current.writes) w.reject(new IntakeUnavailableError(identity(w), attempts, lastStatus, lastError, reached));
    return null;
  };
  /**
   * A final answer that does not judge the writes themselves (a redirect: a proxy's, a load
   * balancer's; a 401 after a key was revoked; a whole batch refused): after an attempt that may
   * have reached the server it says nothing of that attempt, so the writes may have been applied,
   * and the error says so, with the answer as its cause.
   */
  const refuseAll = (status: number, type: string | null, body: unknown, location: string | null = null): null => {
    for (const w of current.writes) {
      const answer = new IntakeRequestError(identity(w), status, type, body, location);
      w.reject(reached ? new IntakeUnavailableError(identity(w), attempts, status, answer, true) : answer);
    }
    return null;
  };
  for (;;) {
    const remainingMs = deadlineAtMs() - performance.now();
    // Too little left for an attempt (one cut short before it connects would count as maybe
    // applied): every path here, the first attempt, a retry, a half, a write sent alone.
    if (remainingMs < MIN_ATTEMPT_MS) return giveUp();
    const lone = current.alone ? current.writes[0]! : null;
    const outcome = await attempt({
      url: options.url + (lone === null ? BATCH_PATH : lone.path),
      method: lone === null ? 'POST' : lone.method,
      serviceKey: options.serviceKey,
      body: current.body,
      idempotencyKey: current.batchKey,
      timeoutMs: Math.min(options.requestTimeoutMs, remainingMs),
      maxAnswerBytes: options.maxAnswerBytes,
    });
    attempts++;
    let retryStatus: number | null = null;
    let retryError: unknown = null;
    let retryAfterMs: number | null = null;
    if (outcome.kind === 'network' && !current.alone && cutOffWhileSending(outcome.error)) {
      // Closed on while sending: most likely a body too large for the server, whose 413 went
      // unread (cutOffWhileSending). Sent again unchanged it would meet the same end on every
      // attempt, until the deadline; split as a 413 splits it. If it was something else (a
      // server going down), the parts are retried as any write, each with its own key, and the
      // attempt may have reached the server.
      reached = true;
      if (current.writes.length > 1) return { groups: halves(current.writes), reached };
      current = await loneEnvelope(current.writes[0]!, options);
      lastError = outcome.error;
      continue;
    } else if (outcome.kind === 'too-large') {
      // Answered, but longer than any answer of intake's: not read, and not sent again (the same
      // answer would come back). Whatever it answered may have been applied.
      const cause = new IntakeProtocolError(`${lone === null ? 'POST /batch' : `${lone.method} ${lone.path}`} answered ${outcome.status} with a body longer than maxAnswerBytes (${options.maxAnswerBytes} bytes): not read`);
      for (const w of current.writes) w.reject(new IntakeUnavailableError(identity(w), attempts, outcome.status, cause, true));
      return null;
    } else if (outcome.kind === 'network') {
      retryError = outcome.error;
      if (!neverConnected(outcome.error)) reached = true;
    } else if (outcome.status >= 300 && outcome.status < 400) {
      // fetch is told not to follow redirects (transport.ts): a redirect is a final answer that
      // names where it pointed.
      return refuseAll(outcome.status, null, outcome.body, outcome.headers.get('location'));
    } else if (outcome.status === 200 && lone !== null) {
      settledNow();
      settleFinal(lone, 200, outcome.body);
      return null;
    } else if (outcome.status === 200) {
      const results = readResults(outcome.body, current.writes.length);
      if (results === null) {
        const error = new IntakeProtocolError(`POST /batch answered 200 without one result per item: ${outcome.text.slice(0, 200)}`);
        for (const w of current.writes) w.reject(error);
        return null;
      }
      // Items that would be retried alone (a 503 of one item, say) go again, with their own keys.
      const again: QueuedWrite[] = [];
      results.forEach((result, i) => {
        const write = current.writes[i]!;
        if (isRetryableStatus(result.status)) {
          again.push(write);
          retryStatus = result.status;
        } else settleFinal(write, result.status, result.body);
      });
      if (again.length < current.writes.length) settledNow();
      if (again.length === 0) return null;
      current = await envelope(again, options);
    } else if (outcome.status === 413 && current.writes.length === 1 && !current.alone) {
      current = await loneEnvelope(current.writes[0]!, options);
      lastError = null;
      continue;
    } else if ((outcome.status === 413 || outcome.status === 422) && current.writes.length > 1) {
      // Too large for the server: its body limit (413), or its BATCH_MAX_ITEMS (a 422 of the
      // envelope; the envelope the client makes is otherwise always valid). Halves, until a
      // write alone gets the answer as its own. Applied nothing: the halves may have reached
      // the server only if an attempt before this one may have.
      return { groups: halves(current.writes), reached };
    } else if (outcome.status === 429 && current.writes.length > (burstOf(outcome.body) ?? Infinity)) {
      // More items than the key's rate-limit burst: such a batch can never pass (it needs a token
      // per item), however long it waits. Groups of at most the burst, each then rate limited
      // as any batch.
      return { groups: groupsOf(current.writes, burstOf(outcome.body)!), reached };
    } else if (isRetryableStatus(outcome.status)) {
      retryStatus = outcome.status;
      retryAfterMs = parseRetryAfterMs(outcome.headers.get('retry-after'));
    } else {
      // A final answer for the whole batch (401, 415, 400, a 422 of one write, a 404 from a server
      // without /batch), or for a write sent alone (413 there too: over its endpoint's own limit): every write gets it.
      settledNow();
      // Only a write sent alone answered 422 (its body), 404 (what it names) or 413 (its size) is
      // judged itself: under the same Idempotency-Key a write an earlier attempt applied would
      // have been replayed, so it was not applied. Anything else (the key refused: 401, 403; a
      // path, method or content type refused; any final answer to a whole batch) is refuseAll's.
      const judgesTheWrite = lone !== null && (outcome.status === 422 || outcome.status === 404 || outcome.status === 413);
      if (reached && !judgesTheWrite) return refuseAll(outcome.status, errorType(outcome.body), outcome.body);
      for (const w of current.writes) settleFinal(w, outcome.status, outcome.body);
      return null;
    }
    // A 429 applied nothing (refused before anything was read into the state); any other answer
    // may follow a write the server applied (a 503 after a journal failure, a proxy's 502).
    if (outcome.kind === 'answer' && outcome.status !== 429) reached = true;
    if (retryStatus !== null) lastStatus = retryStatus;
    lastError = retryError;
    retries++;
    // A computed wait that would end past the deadline becomes one last attempt shortly before
    // it (at 90 to 100% of what is left), after which the batch gives up: it gave up at once, as
    // much as retryMaxDelayMs early (a walkthrough: 0.6 to 2.7 s of a 3 s deadline used). Not
    // waits cut to half of what is left each time: those shrank to a burst of attempts at the
    // deadline (a review). A server's Retry-After is not cut: asked to wait past the deadline,
    // the batch gives up now.
    const leftMs = deadlineAtMs() - performance.now() - MIN_ATTEMPT_MS;
    let delayMs = retryDelayMs(retries, retryAfterMs, options);
    const serverAsked = retryAfterMs !== null && retryAfterMs > 0;
    if (!serverAsked && delayMs > leftMs && !lastAttempt && leftMs >= 0) {
      lastAttempt = true;
      delayMs = Math.floor(leftMs * (0.9 + 0.1 * Math.random()));
    }
    if (leftMs < 0 || delayMs > leftMs) return giveUp();
    // The caller's callback (a logger, say) must not turn a retry into a failure of its own.
    try {
      options.onRetry?.({ attempt: retries, delayMs, status: retryStatus, error: retryError, items: current.writes.length });
    } catch {
      // ignored: the retry goes on
    }
    if (delayMs > 0) await sleep(delayMs);
  }
}
