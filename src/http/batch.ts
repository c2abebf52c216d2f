// POST /batch (CONTRACT.md §13): up to BATCH_MAX_ITEMS writes in one request, each handled by
// the same route code as the request sent alone (write-routes.ts), answered with one result per
// item. The batch itself is a write route: the server checks it like any other (route, key, one
// rate-limit token, write gate, Idempotency-Key header, content type, size under
// BATCH_BODY_LIMIT_BYTES, JSON), then handle() below checks the envelope (422), takes the other
// n - 1 tokens (429), and runs the items.
//
// Items run strictly one after the other: the next starts once the one before it is decided
// (applied and its record appended, or refused), so each sees the effect of those before it and
// their journal records are appended in item order. Items that decide at once (all but a big
// mapping applied in slices, or a catalog write queued behind another request's mapping) all
// run in one event-loop turn and so land in one journal commit (group commit; split only past
// JOURNAL_MAX_BATCH_RECORDS). The batch is answered once every item's answer is known: for a
// 200, once its record is durable.
//
// Big mapping items are not sent to the mapping workers: the batch's body is parsed already (it
// is at most BATCH_BODY_LIMIT_BYTES, 4 MiB), so an item is validated on this thread with the same
// compiled schema the workers use, and a mapping of more than 1,024 ids is applied in slices by
// the catalog actor, exactly as a small mapping request sent alone is.
import type { Settings } from '../config/settings.ts';
import { BatchAnswers, type BatchEntry } from '../idempotency/batch-answers.ts';
import { packResults, type JournaledBatchAnswers } from '../idempotency/batch-answer-record.ts';
import type { KeyTable } from '../idempotency/key-table.ts';
import { SUCCESS_BODY, type RetryCounts } from '../actors/acceptor.ts';
import { batchBodyFingerprint, bodyFingerprint, compactFingerprintInto, IdempotencyClaim, validIdempotencyKey } from '../idempotency/claim.ts';
import { detail } from '../schemas/details.ts';
import { BatchResults, batchBody, type BatchItem as BatchItemSpec } from '../schemas/endpoints.ts';
import { BodyTooDeepError, BodyValidator, MAX_JSON_DEPTH } from '../schemas/validators.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import { BatchItem, type ItemOwner } from './batch-item.ts';
import { ItemRouter } from './batch-paths.ts';
import { itemBodySlices, SLICE_SLOTS, type BatchSlices } from './batch-slices.ts';
import { bodyLimitBytes } from './body.ts';
import { ERRORS } from './errors.ts';
import { fillParam } from './path-param.ts';
import type { WriteRequest, WriteRoute } from './pending-request.ts';
import type { RateLimiter } from './rate-limits.ts';
import type { WriteGate } from './write-gate.ts';

export const BATCH_PATH = '/batch';

/** An item's result for the answer most items get. */
const SUCCESS_RESULT = `{"status":200,"body":${SUCCESS_BODY}}`;

export interface BatchDependencies {
  settings: Pick<Settings, 'batchMaxItems' | 'bodyLimitBytes' | 'mappingBodyLimitBytes' | 'batchBodyLimitBytes' | 'idempotencyWindowSeconds' | 'idempotencyMaxKeys'>;
  /** Where replays and conflicts are counted for /metrics (the state thread's; absent on an edge). */
  retries?: RetryCounts;
  /**
   * The remembered Idempotency-Keys (the state thread's; absent on an edge): a batch's own key
   * is one of them once an item of the batch is journaled, so that it outlives the answers kept
   * in memory (a restart, a leader change, their limits).
   */
  keys?: KeyTable;
  /**
   * A keyed batch's whole answer, kept in its last journaled item's record and read back for a
   * retry the answers in memory no longer hold (the state thread's; absent on an edge).
   */
  journaledAnswers?: JournaledBatchAnswers;
  /** The write routes an item may name. */
  routes: readonly WriteRoute[];
  /** Paths of the other endpoints (GET): an item naming one gets 405, as alone. */
  otherPaths: readonly string[];
  gate: WriteGate;
  rateLimits: RateLimiter;
  metrics: Metrics;
  log: Logger;
}

/** What the items share: the route table, limits and dependencies. */
interface BatchContext {
  readonly router: ItemRouter;
  readonly deps: BatchDependencies;
  /** Answers of batches sent with an Idempotency-Key header, for their retries (null: keys are off, IDEMPOTENCY_MAX_KEYS=0). */
  readonly answers: BatchAnswers | null;
}

/**
 * Per item, what must be read from the raw body while handle() runs (uWS reuses its memory
 * afterwards): the body's size in bytes and its fingerprint. Sizes are -1 when not measured: no
 * item can then be over its endpoint's limit (the whole body is not).
 */
interface ItemBytes {
  sizes: Int32Array;
  /** Two words per item; filled only when the batch carries Idempotency-Keys. */
  prints: Uint32Array | null;
  /** Whether the whole body is compact JSON (null: not scanned, or the scan could not tell). */
  compact: boolean | null;
}

function measureItems(raw: Buffer, known: BatchSlices | null, requests: readonly BatchItemSpec[], measureSizes: boolean, keyed: boolean, batchKeyed: boolean): ItemBytes {
  const n = requests.length;
  const sizes = new Int32Array(n).fill(-1);
  const prints = keyed ? new Uint32Array(n * 2) : null;
  if (!measureSizes && !keyed) return { sizes, prints, compact: null };
  const scan = known !== null && known.items.length === n * SLICE_SLOTS ? known : itemBodySlices(raw, n);
  const slices = scan === null ? null : scan.items;
  for (let i = 0; i < n; i++) {
    const item = requests[i]!;
    if (item.body === undefined) continue;
    // Only an item with a key (its own, or the batch's) is ever fingerprinted.
    const print = prints !== null && (batchKeyed || (typeof item.idempotencyKey === 'string' && item.idempotencyKey !== ''));
    const at = i * SLICE_SLOTS;
    if (slices !== null && slices[at]! >= 0) {
      const start = slices[at]!;
      const end = slices[at + 1]!;
      sizes[i] = end - start;
      if (!print) continue;
      if (slices[at + 2] === 1) compactFingerprintInto(raw, start, end, prints, 2 * i);
      else prints.set(bodyFingerprint(raw.subarray(start, end)), 2 * i);
      continue;
    }
    // Not expected (the scan follows JSON.parse); compact JSON is what most clients send alone.
    // A body too deep for JSON.stringify's stack (its item is refused as too deep anyway, as it
    // would be alone) is left unmeasured: it threw, and the batch was answered 500 (a review).
    let bytes: Buffer;
    try {
      bytes = Buffer.from(JSON.stringify(item.body));
    } catch {
      continue;
    }
    sizes[i] = bytes.length;
    if (print) prints.set(bodyFingerprint(bytes), 2 * i);
  }
  return { sizes, prints, compact: scan === null ? null : scan.compact };
}

/**
 * What a batch needs of its request beyond a write's: the raw body (item sizes and fingerprints)
 * and the service key (its tokens). A request sent alone (PendingRequest) and a command on the
 * state thread (StateRequest) both are one.
 */
export interface BatchRequest extends WriteRequest {
  readonly requestId: string;
  readonly serviceKey: string;
  /** The decoded body's bytes while validate() and apply() run. */
  readonly rawBody: Buffer | null;
  /** Where the items' bodies lie in rawBody, when the body's parse found them already (null: scan it). */
  readonly rawSlices: BatchSlices | null;
  rateLimited(retryAfterSeconds: number, message?: string): void;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An item's result as the batch's answer writes it. */
function resultOf(status: number, body: string, replayed: boolean): string {
  return status === 200 && body === SUCCESS_BODY && !replayed ? SUCCESS_RESULT : `{"status":${status},"body":${body}${replayed ? ',"replayed":true}' : '}'}`;
}

/** One POST /batch being run: its items, in order, and the answer once all are known. */
class BatchRun implements ItemOwner {
  readonly log: Logger;
  readonly requestId: string;
  private readonly items: BatchItem[] = [];
  private next = 0;
  private open: number;
  private waitingFor: BatchItem | null = null;
  private dispatched = false;
  /** The seq of the last item record this batch journaled (0: none yet). */
  private lastSeq = 0;

  constructor(
    private readonly context: BatchContext,
    private readonly request: BatchRequest,
    private readonly requests: readonly BatchItemSpec[],
    private readonly bytes: ItemBytes,
    private readonly batchKey: string | null,
    /** The batch's entry in the answers kept for its key (null: no key, or keys are off). */
    private readonly answerEntry: BatchEntry | null,
    /** The batch's own key (null: none, or keys are off), until an item's record carries it. */
    private unjournaledClaim: IdempotencyClaim | null,
  ) {
    this.log = context.deps.log;
    this.requestId = request.requestId;
    this.open = requests.length;
    for (let i = 0; i < requests.length; i++) this.items.push(new BatchItem(this, i, request.workspace, request.at));
  }

  readonly run = (): void => {
    while (this.next < this.items.length) {
      const item = this.items[this.next]!;
      this.next++;
      this.dispatch(item);
      // Decided later (in the catalog actor's turn): the next item waits for it (decided()).
      if (!item.isDecided) {
        this.waitingFor = item;
        return;
      }
    }
    this.dispatched = true;
    this.journalAnswer();
    this.answerWhenDone();
  };

  decided(item: BatchItem): void {
    if (item !== this.waitingFor) return;
    this.waitingFor = null;
    // Not from inside this call: the actor appends the item's journal record right after
    // deciding it, and the next item's record must come after it.
    queueMicrotask(this.run);
  }

  takeBatchKey(): IdempotencyClaim | null {
    const claim = this.unjournaledClaim;
    this.unjournaledClaim = null;
    return claim;
  }

  journaled(seq: number): void {
    this.lastSeq = seq;
  }

  /**
   * Every item is decided: with a key on the batch, its answer joins the record of its last
   * journaled item (batch-answer-record.ts), so that a retry gets it after a restart or a leader
   * change too. The 200s still waiting for their commit are answered as decided unless the commit
   * fails, and then the record carrying the answer is not durable either (records are durable in
   * order). Not kept, as in memory, when an item got a 5xx; nor when a replay waits for its first
   * write's commit (its answer is read from that record once durable).
   */
  private journalAnswer(): void {
    const stored = this.context.deps.journaledAnswers;
    const claim = this.request.idempotency;
    if (this.answerEntry === null || stored === undefined || claim === null || this.lastSeq === 0) return;
    const results = this.results(true);
    if (results !== null) stored.keep(this.lastSeq, claim, packResults(results, SUCCESS_RESULT));
  }

  /**
   * Each item's result as the answer writes it. `asDecided`: items still waiting for their
   * commit count with the 200 they were decided with, and null is returned when an item got a
   * 5xx or waits to replay (no answer to keep); otherwise every item is final.
   */
  private results(asDecided: boolean): string[] | null {
    const results = new Array<string>(this.items.length);
    for (let i = 0; i < this.items.length; i++) {
      const item = this.items[i]!;
      if (item.isFinal) {
        if (asDecided && item.status >= 500) return null;
        results[i] = resultOf(item.status, item.body, item.replayed);
        continue;
      }
      const body = asDecided ? item.pendingSuccessBody : null;
      if (body === null) return null;
      results[i] = resultOf(200, body, false);
    }
    return results;
  }

  final(item: BatchItem): void {
    this.context.deps.metrics.batchItem(item.routeName, item.status);
    this.open--;
    this.answerWhenDone();
  }

  private answerWhenDone(): void {
    if (!this.dispatched || this.open !== 0) return;
    // One join: no string per plain success, no rope of 2,000 pieces to flatten when it is sent.
    // Every item is final here (open is 0).
    const out = `{"results":[${this.results(false)!.join(',')}]}`;
    // With a key on the batch, its retry gets these results again, unless an item may succeed
    // when retried (a 5xx: only final answers are kept, CONTRACT.md §10).
    if (this.answerEntry !== null) this.context.answers!.finish(this.answerEntry, this.items.every((item) => item.status < 500) ? out : null, Date.now());
    this.request.succeed(out);
    this.request.committed();
  }

  /** The item through the checks the request alone would pass, in the same order, then its route. */
  private dispatch(item: BatchItem): void {
    const { router, deps } = this.context;
    const spec = this.requests[item.index]!;
    const target = router.resolve(spec.method, spec.path, BATCH_PATH);
    if (target.route === null) return item.error(target.error, target.message);
    const route = target.route;
    item.routeName = route.name;
    item.param = target.param;
    const refusal = deps.gate.refusal();
    if (refusal !== null) return item.error(ERRORS.serviceUnavailable, refusal.message);
    // An empty key is no key, as an empty header is alone (uWS cannot tell the two apart).
    let key: string | null = null;
    const own = spec.idempotencyKey;
    if (own !== undefined && own !== '') {
      if (!validIdempotencyKey(own)) return item.error(ERRORS.idempotencyKey);
      key = own;
    } else if (this.batchKey !== null) {
      // The batch's own key stands for a key per item (a space is never in a key a client
      // sends, so no item's key can be one a client sends alone).
      key = `${this.batchKey} ${item.index}`;
    }
    if (key !== null) item.idempotency = new IdempotencyClaim(this.request.workspace.name, spec.method, route.hasParam ? fillParam(route.pattern, target.param) : route.pattern, key);
    let body: Record<string, unknown> | null = null;
    if (route.limit === 'none') item.idempotency?.fingerprint(bodyFingerprint());
    else {
      if (this.bytes.sizes[item.index]! > bodyLimitBytes(route.limit, deps.settings)) return item.error(ERRORS.payloadTooLarge);
      if (spec.body === undefined) return item.malformed('request body is empty');
      if (!isObject(spec.body)) return item.malformed('request body must be a JSON object');
      body = spec.body;
      const prints = this.bytes.prints;
      if (prints !== null) item.idempotency?.fingerprint([prints[2 * item.index]!, prints[2 * item.index + 1]!]);
    }
    try {
      if (route.validate(item, body)) route.apply(item, body);
    } catch (error) {
      if (error instanceof BodyTooDeepError) return item.malformed(error.message);
      item.crashed(error);
    }
  }
}

/** The levels of the envelope above an item's body: {"requests": [{"body": ...}]}. */
const BATCH_BODY_DEPTH = 3;

export function buildBatchRoute(deps: BatchDependencies): WriteRoute {
  const envelope = new BodyValidator(batchBody(deps.settings.batchMaxItems), null, MAX_JSON_DEPTH + BATCH_BODY_DEPTH);
  const answers = deps.settings.idempotencyMaxKeys === 0 ? null : new BatchAnswers(deps.settings.idempotencyWindowSeconds * 1000);
  const context: BatchContext = { router: new ItemRouter(deps.routes, deps.otherPaths), deps, answers };
  // An item's bytes need measuring only when the whole body could be over some endpoint's limit.
  const smallestLimitBytes = Math.min(deps.settings.bodyLimitBytes, deps.settings.mappingBodyLimitBytes);
  const { rateLimits } = deps;
  return {
    name: 'batch',
    method: 'post',
    pattern: BATCH_PATH,
    limit: 'batch',
    hasParam: false,
    readsRawBody: true,
    // {"requests": [{"body": ...}]}: an item's body starts at the envelope's fourth level.
    nestedBodyDepth: BATCH_BODY_DEPTH,
    doc: {
      summary: 'Many writes in one request: each item is handled exactly as the same request alone, in order; one result per item',
      body: envelope.schema,
      result: BatchResults,
    },
    metrics: deps.metrics.route('batch'),
    // The edge half: the envelope (422) and the other n - 1 tokens (429). The server hands every
    // route its request: a batch's is a BatchRequest.
    validate(request: WriteRequest, body: Record<string, unknown> | null): boolean {
      const details = envelope.validate(body);
      if (details !== null) {
        request.invalid(details);
        return false;
      }
      const n = (body as { requests: BatchItemSpec[] }).requests.length;
      // One token was taken before the body was read; a batch of n items takes n in all.
      if (rateLimits.enabled && n > 1) {
        const batch = request as BatchRequest;
        const retryAfterSeconds = rateLimits.take(batch.serviceKey, performance.now(), n - 1);
        if (retryAfterSeconds > 0) {
          rateLimits.refund(batch.serviceKey, 1);
          const message = n > rateLimits.burst ? `a batch of ${n} items needs ${n} rate-limit tokens, more than this key's burst of ${rateLimits.burst}: send at most ${rateLimits.burst} items per batch` : undefined;
          batch.rateLimited(retryAfterSeconds, message);
          return false;
        }
      }
      return true;
    },
    // The state half: the items, each through its route's own two halves, in order.
    apply(request: WriteRequest, body: Record<string, unknown> | null): void {
      const batch = request as BatchRequest;
      const requests = (body as { requests: BatchItemSpec[] }).requests;
      const n = requests.length;
      const batchKey = batch.idempotency?.key ?? null;
      let keyed = batchKey !== null;
      for (let i = 0; i < n && !keyed; i++) keyed = typeof requests[i]!.idempotencyKey === 'string';
      // Now, whatever happens next: the raw body is only valid while this call runs.
      const raw = batch.rawBody!;
      const bytes = measureItems(raw, batch.rawSlices, requests, raw.length > smallestLimitBytes, keyed, batchKey !== null);
      // The batch's own key is fingerprinted here, from the bytes, whichever thread or node read
      // the request (pending-request.ts leaves it to this route).
      batch.idempotency?.fingerprint(batchBodyFingerprint(raw, bytes.compact));
      const replay = (text: string): void => {
        if (deps.retries !== undefined) deps.retries.replays++;
        batch.replay(() => text);
        batch.committed();
      };
      const start = (): void => {
        // The batch's own key: a retry of the same batch gets its first answer, another batch
        // under the key a 422 (while the answer is held: batch-answers.ts). Not while writes are
        // refused (a journal failure, a leader change): every item then gets its 503.
        const claim = answers === null || deps.gate.refusal() !== null ? null : batch.idempotency;
        const earlier = claim === null ? null : answers!.lookup(claim, Date.now());
        if (earlier === null || claim === null) {
          // Its answer is no longer held in memory (a restart, a leader change, the memory's
          // limits), but the key is remembered with the records of the batch's first and last
          // journaled items: another batch under it gets 422 and applies nothing (before
          // 2026-11-30 it ran as a new one: found by a review of §10 and §13).
          const n = claim === null || deps.keys === undefined ? -1 : deps.keys.find(claim, Math.floor(Date.now() / 1000));
          if (n >= 0 && !deps.keys!.sameRequest(n, claim!)) {
            if (deps.retries !== undefined) deps.retries.conflicts++;
            return batch.invalid([detail.idempotencyReused(claim!.key)]);
          }
          // Held from now on, so that the same batch sent again meanwhile waits for this one.
          const entry = claim === null ? null : answers!.begin(claim, Date.now());
          const runIt = (): void => new BatchRun(context, batch, requests, bytes, batchKey, entry, n >= 0 ? null : claim).run();
          if (n < 0 || deps.journaledAnswers === undefined) return runIt();
          // The same batch, answered before: its answer as its last journaled record keeps it.
          // Without one there (see batch-answer-record.ts for when), it runs again: the items it
          // applied replay from their own keys, and only the refused ones are judged again.
          deps.journaledAnswers.read(deps.keys!.seqOf(n), SUCCESS_RESULT, (text) => {
            if (text === null) return runIt();
            answers!.finish(entry!, text, Date.now());
            replay(text);
          });
          return;
        }
        if (earlier.kind === 'reused') {
          if (deps.retries !== undefined) deps.retries.conflicts++;
          return batch.invalid([detail.idempotencyReused(claim.key)]);
        }
        if (earlier.kind === 'replay') return replay(earlier.text);
        // The first batch under this key is still running: this one waits for its answer, and
        // runs itself only if that answer is not kept (an item got a 5xx).
        earlier.then((text) => (text !== null ? replay(text) : start()));
      };
      start();
    },
  };
}
