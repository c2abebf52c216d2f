// What a caller's promise rejects with. Every error names the write (method, path, key) so that
// a caller can log it or send the same write again later with the same key.
import type { ValidationDetail } from './types.ts';

export interface WriteIdentity {
  method: string;
  path: string;
  idempotencyKey: string;
}

/** Base class: `code` is stable for programs, `message` for people. */
export class IntakeError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** 422: the write was refused and changed nothing; `details` are the server's Joi-style details. */
export class IntakeValidationError extends IntakeError {
  readonly status = 422;
  constructor(
    readonly write: WriteIdentity | null,
    readonly details: ValidationDetail[],
  ) {
    const first = details[0];
    super('INTAKE_VALIDATION', `${write ? `${write.method} ${write.path}: ` : ''}422 ValidationError${first ? `: ${first.message}` : ''}${details.length > 1 ? ` (+${details.length - 1} more)` : ''}`);
  }
}

/**
 * Any other answer that is final (not retried): 400, 401, 404, 405, 413 of a single write, 415,
 * 501, 505, or another 4xx. Nothing was applied. `type` is the server's error type when it sent one.
 */
export class IntakeRequestError extends IntakeError {
  constructor(
    readonly write: WriteIdentity | null,
    readonly status: number,
    readonly type: string | null,
    readonly body: unknown,
    /**
     * A redirect's Location (a 3xx; null otherwise). Never followed: the url is meant to be the
     * server itself, and following one sent the service key to wherever it pointed.
     */
    readonly location: string | null = null,
  ) {
    const text = typeof body === 'object' && body !== null && typeof (body as { message?: unknown }).message === 'string' ? (body as { message: string }).message : '';
    const redirect = status >= 300 && status < 400 ? `: a redirect to ${location ?? '(no Location)'}, not followed (set url to the server's own address)` : '';
    super('INTAKE_REQUEST', `${write ? `${write.method} ${write.path}: ` : ''}${status}${type ? ` ${type}` : ''}${text ? `: ${text}` : ''}${redirect}`);
  }
}

/**
 * Retries ran out (the total deadline passed, or the next wait would end after it), or a final
 * answer that does not judge the write itself (a redirect, a 401, a whole batch refused) came
 * after an attempt that may have reached the server. The write MAY HAVE BEEN APPLIED (an answer
 * can be lost after the server committed): send it again with the same `write.idempotencyKey`
 * and the server applies it at most once. `lastStatus` is the last HTTP status answered in any
 * attempt (null: none answered); `cause` is the last attempt's network error or timeout, if it
 * ended with one, or the final answer's IntakeRequestError.
 */
export class IntakeUnavailableError extends IntakeError {
  constructor(
    readonly write: WriteIdentity | null,
    readonly attempts: number,
    readonly lastStatus: number | null,
    cause: unknown,
    /**
     * False only when no attempt reached the server: every one failed to connect (refused, no
     * such host, unreachable), so nothing can have been applied.
     */
    readonly mayHaveBeenApplied: boolean = true,
  ) {
    const error = cause === null || cause === undefined ? null : `last error: ${describeError(cause)}`;
    const why = [lastStatus !== null ? `last answer ${lastStatus}` : null, error].filter((part) => part !== null).join(', ');
    const outcome = mayHaveBeenApplied ? 'it may or may not have been applied, retry with the same Idempotency-Key' : 'it was not applied: no attempt reached the server';
    const gaveUp =
      attempts === 0
        ? 'gave up before sending it (less than 50 ms was left of its retryDeadlineMs)'
        : `gave up after ${attempts} attempt(s) (${why})`;
    super('INTAKE_UNAVAILABLE', `${write ? `${write.method} ${write.path}: ` : ''}${gaveUp}; ${outcome}`, { cause });
  }
}

/** An error's message, with the system error code fetch hides in its cause ("fetch failed (ECONNREFUSED)"). */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error.cause as { code?: unknown } | undefined)?.code ?? (error as { code?: unknown }).code;
  return typeof code === 'string' && !error.message.includes(code) ? `${error.message} (${code})` : error.message;
}

/**
 * Whether a failed attempt's error says it never reached the server (so it applied nothing): a
 * name that did not resolve, a connect that failed, or undici's connect timeout. Only the
 * connect's and the lookup's own errors count: EHOSTUNREACH on an established connection (an
 * ICMP error, then a retransmission timeout) may follow a request the server received.
 */
export function neverConnected(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown; syscall?: unknown } } | null)?.cause;
  if (cause === undefined || cause === null) return false;
  if (cause.code === 'UND_ERR_CONNECT_TIMEOUT') return true;
  return cause.syscall === 'connect' || cause.syscall === 'getaddrinfo';
}

/**
 * Whether a failed attempt's error says the server closed the connection while the body was
 * still being sent (EPIPE on the write). That is what a server does with a body too large for it:
 * it reads and throws away up to its limit again, answers 413 and closes (CONTRACT §2), and a
 * body bigger than that meets a closed socket before the 413 is read.
 */
export function cutOffWhileSending(error: unknown): boolean {
  let cause = (error as { cause?: unknown } | null)?.cause;
  // fetch's TypeError holds the socket's error as its cause; a level or two deeper in some undici paths.
  for (let depth = 0; depth < 3 && typeof cause === 'object' && cause !== null; depth++) {
    if ((cause as { code?: unknown }).code === 'EPIPE') return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}

/** The server answered something the client cannot read (not the batch protocol). */
export class IntakeProtocolError extends IntakeError {
  constructor(message: string) {
    super('INTAKE_PROTOCOL', message);
  }
}

/** The in-memory queue is full: the write was not queued. Wait for earlier writes (or flush()) and send it again. */
export class QueueFullError extends IntakeError {
  constructor(limit: 'maxQueueItems' | 'maxQueueBytes', value: number) {
    super('INTAKE_QUEUE_FULL', `the client's queue is full (${limit} = ${value}): the write was not queued; await earlier writes or flush() and send it again`);
  }
}

/** The client was closed: no new writes. */
export class ClientClosedError extends IntakeError {
  constructor() {
    super('INTAKE_CLOSED', 'the client is closed: no new writes are accepted');
  }
}
