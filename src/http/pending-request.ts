// The state of one write request from its headers to its answer. It reads the body under the
// route's limit, decodes it, hands it to the route, and is itself the journal's CommitWaiter:
// the answer is written when the journal says the write (or what it observed) is durable.
import type { TSchema } from '@sinclair/typebox';
import type { HttpResponse } from 'uWebSockets.js';
import type { Reply } from '../actors/intake.ts';
import type { Workspace, Workspaces } from '../actors/workspace.ts';
import type { Answer, CommandKind } from '../handoff/frames.ts';
import { bodyFingerprint, type IdempotencyClaim } from '../idempotency/claim.ts';
import { BodyBuffer } from './body-buffer.ts';
import { bodiesHeldMessage, type HeldBodies } from './held-bodies.ts';
import type { ValidationDetail } from '../schemas/details.ts';
import { BodyTooDeepError } from '../schemas/validators.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { RouteMetrics } from '../telemetry/metrics.ts';
import { inflateBody, parseJsonObject, type Encoding } from './body.ts';
import { Drain } from './drain.ts';
import { ERRORS } from './errors.ts';
import { send, statusLine, type SendOptions } from './respond.ts';
import { WriteCall } from './write-call.ts';
import type { Refusal, WriteGate } from './write-gate.ts';

export { MAPPING_WORKERS_BUSY } from './write-call.ts';

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
  /** Not taken now (the server is stopping, say): 503 with `refusal`'s message and Retry-After; nothing was applied. */
  refused(refusal: Refusal): void;
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
  /**
   * The edge half: checks the body (null for routes without one) and `:id`; on failure answers
   * the request (422 and the like) and returns false. Stateless: runs on any edge thread or node.
   */
  validate(request: WriteRequest, body: Record<string, unknown> | null): boolean;
  /** The state half: applies a write `validate` passed (on the state thread, the leader). */
  apply(request: WriteRequest, body: Record<string, unknown> | null): void;
  /** True when a body of this size and encoding should be handed over raw (to a worker). */
  offload?(sizeBytes: number, encoding: Encoding): boolean;
  /** Takes a raw body that `offload` asked for: not yet inflated, parsed or validated. */
  handleRaw?(request: WriteRequest, bytes: Buffer): void;
  /** apply() reads `rawBody` too (POST /batch: its items' sizes and fingerprints, and its own fingerprint). */
  readonly readsRawBody?: boolean;
  /** The level at which the body carries other bodies, each judged alone (POST /batch: 3; see parseJson). */
  readonly nestedBodyDepth?: number;
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
  /** The state, where this thread holds it (null on an edge thread). */
  workspaces: Workspaces | null;
  /**
   * Where valid writes go when this thread does not apply them itself: the state thread (an edge
   * thread) or the leader (a follower). Null: applied here.
   */
  link: StateLink | null;
  /** The keys as they are now: a key revoked while its request's body was arriving is refused when the body is complete. */
  auth: { workspaceOf(key: string): string | null };
  /** The bytes of bodies this thread holds while they arrive, and their limit. */
  bodies: HeldBodies;
}

/** A request of `env` is answered or aborted: graceful stop waits for none to be in flight. */
export function leaveRequest(env: RequestEnvironment): void {
  if (--env.inFlight === 0 && env.onIdle !== null) {
    const idle = env.onIdle;
    env.onIdle = null;
    idle();
  }
}

/** The edge's side of the hand-off: sends a command for `request`, which it answers later. */
export interface StateLink {
  submit(request: PendingRequest, kind: CommandKind, text: string, bytes: Uint8Array | null): void;
}

export class PendingRequest extends WriteCall {
  readonly res: HttpResponse;
  readonly workspaceName: string;
  private readonly startedAt: number;
  /** The x-service-key it was authenticated with: a batch takes one rate-limit token per item. */
  readonly serviceKey: string;
  private readonly env: RequestEnvironment;
  private aborted = false;
  private done = false;
  private received = 0;
  /** The body's chunks before the last, copied (body-buffer.ts); null until a second chunk comes. */
  private chunks: BodyBuffer | null = null;
  /** Set once the body grew past the limit: the rest is read and thrown away, then 413. */
  private drain: Drain | null = null;
  /** Bytes of env.bodies this request holds: its declared length (taken by the caller), or what came. */
  private heldBytes: number;

  constructor(
    res: HttpResponse,
    route: WriteRoute,
    workspaceName: string,
    param: string,
    startedAt: number,
    limitBytes: number,
    encoding: Encoding,
    env: RequestEnvironment,
    idempotency: IdempotencyClaim | null,
    requestId: string,
    serviceKey: string,
    /**
     * The declared content-length (0: none, chunked), at most limitBytes: the body buffer's first
     * size, already taken from env.bodies by the caller.
     */
    private readonly declaredBytes = 0,
  ) {
    super(route, param, Date.now(), limitBytes, encoding, idempotency, requestId, env.log);
    this.heldBytes = declaredBytes;
    this.res = res;
    this.workspaceName = workspaceName;
    this.startedAt = startedAt;
    this.env = env;
    this.serviceKey = serviceKey;
  }

  /** Only where the state is (a write applied on this thread). */
  get workspace(): Workspace {
    return this.env.workspaces!.get(this.workspaceName);
  }

  /** Called from the uWS route handler. */
  start(): void {
    this.env.inFlight++;
    this.res.onAborted(this.onAborted);
    if (this.route.limit === 'none') {
      this.idempotency?.fingerprint(bodyFingerprint());
      this.dispatch(null, '');
    }
    else this.res.onData(this.onData);
  }

  private readonly onAborted = (): void => {
    this.aborted = true;
    this.releaseBody();
    this.drain?.abort();
    // An aborted request is no longer waited for; its write (if dispatched) still commits.
    if (!this.done) this.leave();
  };

  private leave(): void {
    leaveRequest(this.env);
  }

  /** Gives this request's bytes back to env.bodies (once: every later call gives 0). */
  private releaseBody(): void {
    this.env.bodies.give(this.heldBytes);
    this.heldBytes = 0;
  }

  private readonly onData = (chunk: ArrayBuffer, isLast: boolean): void => {
    if (this.drain !== null) return this.drain.data(chunk.byteLength, isLast);
    if (this.done) return;
    this.received += chunk.byteLength;
    if (this.received > this.limitBytes) {
      // Keep nothing more; read and throw away the rest (drain.ts), then 413 and close.
      this.chunks = null;
      this.releaseBody();
      this.drain = new Drain(this.limitBytes, () => this.answerError(ERRORS.payloadTooLarge, undefined, { close: true }));
      this.drain.data(0, isLast);
      return;
    }
    if (!isLast && this.received > this.heldBytes) {
      // More than it declared (chunked): taken as it comes, or refused past the thread's limit
      // (503 once the rest is read and thrown away, the connection closed).
      if (!this.env.bodies.take(this.received - this.heldBytes, this.heldBytes)) {
        this.chunks = null;
        this.releaseBody();
        const message = bodiesHeldMessage(this.env.bodies.maxBytes);
        this.drain = new Drain(this.limitBytes, () => this.answerError(ERRORS.serviceUnavailable, message, { close: true, header: ['retry-after', '1'] }));
        this.drain.data(0, isLast);
        return;
      }
      this.heldBytes = this.received;
    }
    if (isLast) this.releaseBody();
    if (!isLast) {
      // uWS reuses the chunk's memory after we return: copy it.
      (this.chunks ??= new BodyBuffer(this.declaredBytes, this.limitBytes)).append(chunk);
      return;
    }
    if (this.route.offload?.(this.received, this.encoding) === true) {
      // Handed to another thread: the bytes must be ours (a copy of a single chunk; a concat of
      // several is a fresh buffer already).
      const own = this.chunks === null ? Buffer.from(chunk.slice(0)) : this.whole(chunk);
      this.chunks = null;
      return this.dispatchRaw(own);
    }
    // The last chunk is consumed synchronously below, so a view of it is enough.
    const whole = this.chunks === null ? Buffer.from(chunk) : this.whole(chunk);
    this.chunks = null;
    const inflated = inflateBody(whole, this.encoding, this.limitBytes);
    if (!inflated.ok) {
      if (inflated.error === 'tooLarge') this.answerError(ERRORS.payloadTooLarge, inflated.message, { close: true });
      else this.answerError(ERRORS.malformedJson, inflated.message);
      return;
    }
    // The fingerprint is of the decoded body: a retry sent gzip'd or not is the same request. A
    // route that reads the raw body (a batch) takes its own, where it is applied.
    if (this.route.readsRawBody !== true) this.idempotency?.fingerprint(bodyFingerprint(inflated.raw));
    const parsed = parseJsonObject(inflated.raw, this.route.nestedBodyDepth);
    if (!parsed.ok) return this.answerError(ERRORS.malformedJson, parsed.message);
    this.rawBody = inflated.raw;
    this.rawSlices = parsed.slices;
    try {
      this.dispatch(parsed.body, parsed.text);
    } finally {
      this.rawBody = null;
      this.rawSlices = null;
    }
  };

  /** The body: the chunks so far and the last one, in one buffer of ours. */
  private whole(last: ArrayBuffer): Buffer {
    const chunks = this.chunks!;
    chunks.append(last);
    return chunks.bytes();
  }

  /**
   * The key was checked when the headers came; a body can take seconds more. A key revoked
   * meanwhile gets 401 and nothing is applied (CONTRACT.md §3; before, a slow upload whose key
   * was revoked 3 s earlier was applied; found by a review).
   */
  private keyRevoked(): boolean {
    return this.env.auth.workspaceOf(this.serviceKey) !== this.workspaceName;
  }

  private dispatchRaw(bytes: Buffer): void {
    const refusal = this.env.gate.refusal();
    if (refusal !== null) return this.refused(refusal);
    if (this.keyRevoked()) return this.answerError(ERRORS.authentication);
    const link = this.env.link;
    if (link !== null) return link.submit(this, 'raw', '', bytes);
    try {
      this.route.handleRaw!(this, bytes);
    } catch (error) {
      this.crashed(error);
    }
  }

  private dispatch(body: Record<string, unknown> | null, text: string | null): void {
    const refusal = this.env.gate.refusal();
    if (refusal !== null) return this.refused(refusal);
    if (this.keyRevoked()) return this.answerError(ERRORS.authentication);
    try {
      if (!this.route.validate(this, body)) return;
      const link = this.env.link;
      if (link === null) this.route.apply(this, body);
      else if (body === null) link.submit(this, 'none', '', null);
      // A route that reads the raw bytes too (a batch) gets them; they must be ours to send.
      else if (this.route.readsRawBody === true) link.submit(this, 'bytes', '', Buffer.from(this.rawBody!));
      else link.submit(this, 'json', text ?? this.rawBody!.toString('utf8'), null);
    } catch (error) {
      if (error instanceof BodyTooDeepError) return this.malformed(error.message);
      this.crashed(error);
    }
  }

  /** The state's answer to the command this request was sent as. */
  answerFromState(answer: Answer): void {
    const options: SendOptions | undefined = answer.header === '' && !answer.close ? undefined : { header: answer.header === '' ? undefined : [answer.header, answer.headerValue], close: answer.close };
    this.answer(answer.status, statusLine(answer.status), answer.body, options);
  }

  protected answer(code: number, statusLine: string, body: string, options?: SendOptions): void {
    if (this.done) return;
    this.done = true;
    this.releaseBody();
    this.route.metrics.observe(code, this.startedAt);
    if (this.env.logRequests) this.log.debug({ reqId: this.requestId, route: this.route.name, status: code, ms: performance.now() - this.startedAt, aborted: this.aborted }, 'request');
    if (this.aborted) return;
    send(this.res, this.requestId, statusLine, body, options);
    this.leave();
  }
}
