// One item of a POST /batch, in the role the HTTP request plays for a write sent alone: the
// route's handler and the actors answer it through the same WriteRequest/Reply calls, and it
// keeps the status and body the request alone would have been sent, for the batch's results.
//
// Two moments matter to the batch (batch.ts): when the item is *decided* (applied to memory and
// its journal record appended, or refused: the next item may run and must see its effect), and
// when it is *final* (its answer known: for a 200, once its record is durable).
import type { IdempotencyClaim } from '../idempotency/claim.ts';
import type { Workspace } from '../actors/workspace.ts';
import { NotLeadingError, REMOTE_COMMIT_FAILED, RemoteCommitError } from '../journal/journal.ts';
import { MAX_DETAILS, validationBody, type ValidationDetail } from '../schemas/details.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Encoding } from './body.ts';
import { ERRORS, errorBody, type ErrorSpec } from './errors.ts';
import { MAPPING_WORKERS_BUSY, type WriteRequest } from './pending-request.ts';
import type { Refusal } from './write-gate.ts';

export interface ItemOwner {
  /** The item is decided (called at most once, possibly from inside the actor's own call). */
  decided(item: BatchItem): void;
  /** The item's answer is known (called once). */
  final(item: BatchItem): void;
  /** The batch's own key, the first time one of its items is journaled, else null (acceptor.ts). */
  takeBatchKey(): IdempotencyClaim | null;
  /** The item's journal record was appended as `seq`. */
  journaled(seq: number): void;
  readonly log: Logger;
  readonly requestId: string;
}

export class BatchItem implements WriteRequest {
  readonly index: number;
  readonly workspace: Workspace;
  readonly at: number;
  /** Items never go to a mapping worker (their body is parsed already): these are unused. */
  readonly encoding: Encoding = 'identity';
  readonly limitBytes: number = 0;
  param = '';
  idempotency: IdempotencyClaim | null = null;
  /** Metrics label: the route's name, or "unknown" for an item that named none. */
  routeName = 'unknown';
  status = 0;
  /** The answer's JSON text. */
  body = '';
  replayed = false;
  isDecided = false;
  isFinal = false;
  private readonly owner: ItemOwner;
  private replyStatus = 200;
  private replyBody = '';
  private replayAnswer: (() => string) | null = null;

  constructor(owner: ItemOwner, index: number, workspace: Workspace, at: number) {
    this.owner = owner;
    this.index = index;
    this.workspace = workspace;
    this.at = at;
  }

  // Answers known before the route runs, or found by it at once.
  error(error: ErrorSpec, message?: string): void {
    this.finish(error.status, errorBody(error, message));
  }

  invalid(details: ValidationDetail[]): void {
    this.finish(422, validationBody(details.length > MAX_DETAILS ? details.slice(0, MAX_DETAILS) : details));
  }

  malformed(message: string): void {
    this.error(ERRORS.malformedJson, message);
  }

  payloadTooLarge(message: string): void {
    this.error(ERRORS.payloadTooLarge, message);
  }

  workersBusy(): void {
    this.error(ERRORS.serviceUnavailable, MAPPING_WORKERS_BUSY);
  }

  refused(refusal: Refusal): void {
    this.error(ERRORS.serviceUnavailable, refusal.message);
  }

  // Reply: decided now, final once the journal speaks (committed / failed).
  succeed(body: string): void {
    this.replyStatus = 200;
    this.replyBody = body;
    this.decide();
  }

  reject(details: ValidationDetail[]): void {
    this.replyStatus = 422;
    this.replyBody = validationBody(details);
    this.decide();
  }

  replay(answer: () => string): void {
    this.replayAnswer = answer;
    this.decide();
  }

  batchKey(): IdempotencyClaim | null {
    return this.owner.takeBatchKey();
  }

  journaled(seq: number): void {
    this.owner.journaled(seq);
  }

  /**
   * The 200 body this decided item will be answered with once its record is durable; null when
   * it is final already or its answer is not known yet (a replay of a write still in its commit).
   */
  get pendingSuccessBody(): string | null {
    return this.isFinal || this.replayAnswer !== null || this.replyStatus !== 200 ? null : this.replyBody;
  }

  committed(): void {
    const replay = this.replayAnswer;
    if (replay === null) return this.finish(this.replyStatus, this.replyBody);
    let body: string;
    try {
      body = replay();
    } catch (error) {
      return this.crashed(error);
    }
    this.replayed = true;
    this.finish(200, body);
  }

  crashed(error: unknown): void {
    this.owner.log.error({ err: error, route: this.routeName, reqId: this.owner.requestId, item: this.index }, 'batch item failed');
    this.error(ERRORS.internal);
  }

  failed(error: Error): void {
    // Cluster mode: this node stopped leading while the item waited (CONTRACT.md §12).
    if (error instanceof NotLeadingError) return this.error(ERRORS.serviceUnavailable, error.message);
    if (error instanceof RemoteCommitError) return this.error(ERRORS.serviceUnavailable, REMOTE_COMMIT_FAILED);
    this.owner.log.error({ err: error, route: this.routeName, reqId: this.owner.requestId, item: this.index }, 'journal commit failed; answering the batch item 503');
    this.error(ERRORS.serviceUnavailable);
  }

  private decide(): void {
    if (this.isDecided) return;
    this.isDecided = true;
    this.owner.decided(this);
  }

  private finish(status: number, body: string): void {
    if (this.isFinal) return;
    this.status = status;
    this.body = body;
    this.isFinal = true;
    this.decide();
    this.owner.final(this);
  }
}
