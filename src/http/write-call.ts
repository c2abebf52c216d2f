// What a write's answer will be, and when it is sent: the part shared by a request the HTTP server
// holds (PendingRequest, on an edge) and a command the state thread runs for an edge or a follower
// (state/state-request.ts). The actors, the journal and the routes speak to either through the
// same WriteRequest/Reply calls; only `answer` differs (write to the socket, or post the answer
// back to the edge that holds the socket).
import type { Workspace } from '../actors/workspace.ts';
import type { IdempotencyClaim } from '../idempotency/claim.ts';
import { NotLeadingError, REMOTE_COMMIT_FAILED, RemoteCommitError } from '../journal/journal.ts';
import { MAX_DETAILS, validationBody, type ValidationDetail } from '../schemas/details.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Encoding } from './body.ts';
import { ERRORS, errorBody, type ErrorSpec } from './errors.ts';
import type { WriteRequest, WriteRoute } from './pending-request.ts';
import { OK, UNPROCESSABLE, type SendOptions } from './respond.ts';
import type { Refusal } from './write-gate.ts';
import type { BatchSlices } from './batch-slices.ts';

/** The message of a 503 for a mapping body refused because the workers are busy (issue 17). */
export const MAPPING_WORKERS_BUSY = 'the mapping workers are busy and their queue is full; nothing was applied: retry after the number of seconds in Retry-After';

/** The header on an answer replayed for an Idempotency-Key (CONTRACT.md §10). */
const REPLAYED: SendOptions = { header: ['idempotent-replayed', 'true'] };

export abstract class WriteCall implements WriteRequest {
  readonly route: WriteRoute;
  /** The decoded `:id` URL parameter ('' for routes without one). */
  readonly param: string;
  /** Server receive time, Unix ms (journaled as `at`). */
  readonly at: number;
  readonly limitBytes: number;
  readonly encoding: Encoding;
  /** The Idempotency-Key, or null; its fingerprint is set once the body is decoded. */
  readonly idempotency: IdempotencyClaim | null;
  /** x-request-id: on the answer and on every log line about the request. */
  readonly requestId: string;
  protected readonly log: Logger;
  private replyCode = 200;
  private replyStatus = OK;
  private replyBody = '';
  private replayAnswer: (() => string) | null = null;
  /**
   * The decoded body's bytes, set only while the route's validate() and apply() run (a batch
   * reads its items' bytes from it). They may be uWS's own memory, which it reuses once onData
   * returns: never keep them.
   */
  rawBody: Buffer | null = null;
  /** Where a batch's items' bodies lie in rawBody, when its parse found them (body.ts, ParsedBytes); set and cleared with it. */
  rawSlices: BatchSlices | null = null;

  constructor(route: WriteRoute, param: string, at: number, limitBytes: number, encoding: Encoding, idempotency: IdempotencyClaim | null, requestId: string, log: Logger) {
    this.route = route;
    this.param = param;
    this.at = at;
    this.limitBytes = limitBytes;
    this.encoding = encoding;
    this.idempotency = idempotency;
    this.requestId = requestId;
    this.log = log;
  }

  abstract readonly workspace: Workspace;

  /** Sends the answer (once: later calls are ignored by the implementation). */
  protected abstract answer(code: number, statusLine: string, body: string, options?: SendOptions): void;

  /** Writes are not taken now (write-gate.ts): 503, with Retry-After when it says. */
  refused(refusal: Refusal): void {
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
    this.log.error({ err: error, route: this.route.name, reqId: this.requestId }, 'request failed');
    this.answerError(ERRORS.internal);
  }

  failed(error: Error): void {
    // Cluster mode: this node stopped leading while the write waited (CONTRACT.md §12).
    if (error instanceof NotLeadingError) return this.refused({ message: error.message, retryAfterSeconds: 1 });
    // Logged once by the journal's owner (main.ts), not once per write of the batch.
    if (error instanceof RemoteCommitError) return this.refused({ message: REMOTE_COMMIT_FAILED, retryAfterSeconds: 1 });
    this.log.error({ err: error, route: this.route.name, reqId: this.requestId }, 'journal commit failed; answering 503');
    this.answerError(ERRORS.serviceUnavailable);
  }

  protected answerError(error: ErrorSpec, message?: string, options?: SendOptions): void {
    this.answer(error.status, error.statusLine, errorBody(error, message), options);
  }
}
