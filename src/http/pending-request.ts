// The state of one write request from its headers to its answer. It reads the body under the
// route's limit, decodes it, hands it to the route, and is itself the journal's CommitWaiter:
// the answer is written when the journal says the write (or what it observed) is durable.
import type { TSchema } from '@sinclair/typebox';
import type { HttpResponse } from 'uWebSockets.js';
import type { Reply } from '../actors/intake.ts';
import { bodyFingerprint, type IdempotencyClaim } from '../idempotency/claim.ts';
import type { Workspace } from '../actors/workspace.ts';
import { MAX_DETAILS, validationBody, type ValidationDetail } from '../schemas/details.ts';
import { NotLeadingError } from '../journal/journal.ts';
import { BodyTooDeepError } from '../schemas/validators.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { RouteMetrics } from '../telemetry/metrics.ts';
import { inflateBody, parseJsonObject, type Encoding } from './body.ts';
import { Drain } from './drain.ts';
import { ERRORS, errorBody, type ErrorSpec } from './errors.ts';
import { OK, send, UNPROCESSABLE, type SendOptions } from './respond.ts';
import type { Refusal, WriteGate } from './write-gate.ts';

/** The message of a 503 for a mapping body refused because the workers are busy (issue 17). */
export const MAPPING_WORKERS_BUSY = 'the mapping workers are busy and their queue is full; nothing was applied: retry after the number of seconds in Retry-After';

/** The header on an answer replayed for an Idempotency-Key (CONTRACT.md §10). */
const REPLAYED: SendOptions = { header: ['idempotent-replayed', 'true'] };

/** What /openapi.json says of a route. */
export interface RouteDoc {
  summary: string;
  body: TSchema | null;
  /** App launch answers {did, sid} instead of {success: true}. */
  launch?: boolean;
  /** The 200 body when it is neither (POST /batch: its results). */
  result?: TSchema;
}

/**
 * What a route's handler sees of a write: a request sent alone (PendingRequest) or one item of a
 * POST /batch (batch-item.ts). Routes take this, not the HTTP request, so that a batch item runs
 * through exactly the same route code as the request sent alone.
 */
export interface WriteRequest extends Reply {
  readonly workspace: Workspace;
  /** The decoded `:id` URL parameter ('' for routes without one). */
  readonly param: string;
  /** Server receive time, Unix ms (journaled as `at`). */
  readonly at: number;
  readonly limitBytes: number;
  readonly encoding: Encoding;
  /** A schema violation: answered at once, nothing was applied. */
  invalid(details: ValidationDetail[]): void;
  /** Not gzip, not JSON, or not an object (found by a worker). */
  malformed(message: string): void;
  /** The inflated body is over the limit (found by a worker). */
  payloadTooLarge(message: string): void;
  /** Every mapping worker is busy and their queue is full: 503 with Retry-After. */
  workersBusy(retryAfterSeconds: number): void;
}

export interface WriteRoute {
  /** Metrics label, e.g. "track_event". */
  readonly name: string;
  readonly method: 'post' | 'del';
  readonly pattern: string;
  /** Which body limit applies; "none" routes (DELETE) do not read a body. */
  readonly limit: 'body' | 'mapping' | 'batch' | 'none';
  readonly hasParam: boolean;
  readonly doc: RouteDoc;
  metrics: RouteMetrics;
  /** Validates and dispatches; `body` is null for routes without a body. */
  handle(request: WriteRequest, body: Record<string, unknown> | null): void;
  /** True when a body of this size and encoding should be handed over raw (to a worker). */
  offload?(sizeBytes: number, encoding: Encoding): boolean;
  /** Takes a raw body that `offload` asked for: not yet inflated, parsed or validated. */
  handleRaw?(request: WriteRequest, bytes: Buffer): void;
}

export interface RequestEnvironment {
  log: Logger;
  /** Debug level: one log line per request (id, route, status, time). */
  logRequests: boolean;
  /** Whether writes are accepted now (a journal failure; in cluster mode, the node's role). */
  gate: WriteGate;
  /** Requests started and not yet answered or aborted (graceful stop waits for 0). */
  inFlight: number;
  onIdle: (() => void) | null;
}

export class PendingRequest implements WriteRequest {
  readonly res: HttpResponse;
  readonly route: WriteRoute;
  readonly workspace: Workspace;
  /** The decoded `:id` URL parameter ('' for routes without one). */
  readonly param: string;
  /** Server receive time, Unix ms (journaled as `at`). */
  readonly at: number;
  private readonly startedAt: number;
  readonly limitBytes: number;
  readonly encoding: Encoding;
  /** The Idempotency-Key, or null; its fingerprint is set once the body is decoded. */
  readonly idempotency: IdempotencyClaim | null;
  /** x-request-id: on the answer and on every log line about the request. */
  readonly requestId: string;
  /** The x-service-key it was authenticated with: a batch takes one rate-limit token per item. */
  readonly serviceKey: string;
  private readonly env: RequestEnvironment;
  private aborted = false;
  private done = false;
  private received = 0;
  private chunks: Buffer[] | null = null;
  /** Set once the body grew past the limit: the rest is read and thrown away, then 413. */
  private drain: Drain | null = null;
  private replyCode = 200;
  private replyStatus = OK;
  private replyBody = '';
  private replayAnswer: (() => string) | null = null;
  /**
   * The decoded body's bytes, set only while the route's handle() runs (a batch reads its items'
   * bytes from it). They may be uWS's own memory, which it reuses once onData returns: never keep them.
   */
  rawBody: Buffer | null = null;

  constructor(
    res: HttpResponse,
    route: WriteRoute,
    workspace: Workspace,
    param: string,
    startedAt: number,
    limitBytes: number,
    encoding: Encoding,
    env: RequestEnvironment,
    idempotency: IdempotencyClaim | null,
    requestId: string,
    serviceKey: string,
  ) {
    this.res = res;
    this.route = route;
    this.workspace = workspace;
    this.param = param;
    this.at = Date.now();
    this.startedAt = startedAt;
    this.limitBytes = limitBytes;
    this.encoding = encoding;
    this.env = env;
    this.idempotency = idempotency;
    this.requestId = requestId;
    this.serviceKey = serviceKey;
  }

  /** Called from the uWS route handler. */
  start(): void {
    this.env.inFlight++;
    this.res.onAborted(this.onAborted);
    if (this.route.limit === 'none') {
      this.idempotency?.fingerprint(bodyFingerprint());
      this.dispatch(null);
    }
    else this.res.onData(this.onData);
  }

  private readonly onAborted = (): void => {
    this.aborted = true;
    this.drain?.abort();
    // An aborted request is no longer waited for; its write (if dispatched) still commits.
    if (!this.done) this.leave();
  };

  private leave(): void {
    if (--this.env.inFlight === 0 && this.env.onIdle !== null) {
      const idle = this.env.onIdle;
      this.env.onIdle = null;
      idle();
    }
  }

  private readonly onData = (chunk: ArrayBuffer, isLast: boolean): void => {
    if (this.drain !== null) return this.drain.data(chunk.byteLength, isLast);
    if (this.done) return;
    this.received += chunk.byteLength;
    if (this.received > this.limitBytes) {
      // Keep nothing more; read and throw away the rest (drain.ts), then 413 and close.
      this.chunks = null;
      this.drain = new Drain(this.limitBytes, () => this.answerError(ERRORS.payloadTooLarge, undefined, { close: true }));
      this.drain.data(0, isLast);
      return;
    }
    if (!isLast) {
      // uWS reuses the chunk's memory after we return: copy it.
      (this.chunks ??= []).push(Buffer.from(chunk.slice(0)));
      return;
    }
    if (this.route.offload?.(this.received, this.encoding) === true) {
      // Handed to another thread: the bytes must be ours (a copy of a single chunk; a concat of
      // several is a fresh buffer already).
      const own = this.chunks === null ? Buffer.from(chunk.slice(0)) : Buffer.concat([...this.chunks, Buffer.from(chunk)]);
      this.chunks = null;
      return this.dispatchRaw(own);
    }
    // The last chunk is consumed synchronously below, so a view of it is enough.
    const last = Buffer.from(chunk);
    const whole = this.chunks === null ? last : Buffer.concat([...this.chunks, last]);
    this.chunks = null;
    const inflated = inflateBody(whole, this.encoding, this.limitBytes);
    if (!inflated.ok) {
      if (inflated.error === 'tooLarge') this.answerError(ERRORS.payloadTooLarge, inflated.message, { close: true });
      else this.answerError(ERRORS.malformedJson, inflated.message);
      return;
    }
    // The fingerprint is of the decoded body: a retry sent gzip'd or not is the same request.
    this.idempotency?.fingerprint(bodyFingerprint(inflated.raw));
    const parsed = parseJsonObject(inflated.raw);
    if (!parsed.ok) return this.answerError(ERRORS.malformedJson, parsed.message);
    this.rawBody = inflated.raw;
    try {
      this.dispatch(parsed.body);
    } finally {
      this.rawBody = null;
    }
  };

  private dispatchRaw(bytes: Buffer): void {
    const refusal = this.env.gate.refusal();
    if (refusal !== null) return this.refused(refusal);
    try {
      this.route.handleRaw!(this, bytes);
    } catch (error) {
      this.crashed(error);
    }
  }

  private dispatch(body: Record<string, unknown> | null): void {
    const refusal = this.env.gate.refusal();
    if (refusal !== null) return this.refused(refusal);
    try {
      this.route.handle(this, body);
    } catch (error) {
      if (error instanceof BodyTooDeepError) return this.malformed(error.message);
      this.crashed(error);
    }
  }

  /** Writes are not taken now (write-gate.ts): 503, with Retry-After when it says. */
  private refused(refusal: Refusal): void {
    this.answerError(ERRORS.serviceUnavailable, refusal.message, refusal.retryAfterSeconds === null ? undefined : { header: ['retry-after', String(refusal.retryAfterSeconds)] });
  }

  /** The inflated body is over the limit (found by a worker): 413, and the connection is closed. */
  payloadTooLarge(message: string): void {
    this.answerError(ERRORS.payloadTooLarge, message, { close: true });
  }

  /** Not gzip, not JSON, or not an object (found by a worker). */
  malformed(message: string): void {
    this.answerError(ERRORS.malformedJson, message);
  }

  /**
   * Every mapping worker is busy and their queue is full: 503 with Retry-After, answered at once.
   * Nothing was applied and the body was read to its end, so the connection stays usable.
   */
  workersBusy(retryAfterSeconds: number): void {
    this.answerError(ERRORS.serviceUnavailable, MAPPING_WORKERS_BUSY, { header: ['retry-after', String(retryAfterSeconds)] });
  }

  /** Over the rate limit once the body told how many tokens it needs (a batch of n items: n). */
  rateLimited(retryAfterSeconds: number, message?: string): void {
    this.answerError(ERRORS.rateLimit, message, { header: ['retry-after', String(retryAfterSeconds)] });
  }

  /** A schema violation: answered at once, nothing was applied. */
  invalid(details: ValidationDetail[]): void {
    this.answer(422, UNPROCESSABLE, validationBody(details.length > MAX_DETAILS ? details.slice(0, MAX_DETAILS) : details));
  }

  // Reply: what to answer once the journal speaks.
  succeed(body: string): void {
    this.replyCode = 200;
    this.replyStatus = OK;
    this.replyBody = body;
  }

  reject(details: ValidationDetail[]): void {
    this.replyCode = 422;
    this.replyStatus = UNPROCESSABLE;
    this.replyBody = validationBody(details);
  }

  replay(answer: () => string): void {
    this.replayAnswer = answer;
  }

  committed(): void {
    const replay = this.replayAnswer;
    if (replay === null) return this.answer(this.replyCode, this.replyStatus, this.replyBody);
    let body: string;
    try {
      body = replay();
    } catch (error) {
      return this.crashed(error);
    }
    this.answer(200, OK, body, REPLAYED);
  }

  crashed(error: unknown): void {
    this.env.log.error({ err: error, route: this.route.name, reqId: this.requestId }, 'request failed');
    this.answerError(ERRORS.internal);
  }

  failed(error: Error): void {
    // Cluster mode: this node stopped leading while the write waited (CONTRACT.md §12).
    if (error instanceof NotLeadingError) return this.refused({ message: error.message, retryAfterSeconds: 1 });
    this.env.log.error({ err: error, route: this.route.name, reqId: this.requestId }, 'journal commit failed; answering 503');
    this.answerError(ERRORS.serviceUnavailable);
  }

  private answerError(error: ErrorSpec, message?: string, options?: SendOptions): void {
    this.answer(error.status, error.statusLine, errorBody(error, message), options);
  }

  private answer(code: number, statusLine: string, body: string, options?: SendOptions): void {
    if (this.done) return;
    this.done = true;
    this.route.metrics.observe(code, this.startedAt);
    if (this.env.logRequests) this.env.log.debug({ reqId: this.requestId, route: this.route.name, status: code, ms: performance.now() - this.startedAt, aborted: this.aborted }, 'request');
    if (this.aborted) return;
    send(this.res, this.requestId, statusLine, body, options);
    this.leave();
  }
}
