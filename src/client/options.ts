// createClient's options, their defaults and their checks. Limits carry their unit in their name.
import { MIN_ATTEMPT_MS } from './retry-policy.ts';

export interface ClientOptions {
  /** The server's base URL, e.g. http://127.0.0.1:8080 */
  url: string;
  /** The workspace's service key (sent as x-service-key). */
  serviceKey: string;
  /** A batch is sent once it holds this many writes (default 100; the server takes at most BATCH_MAX_ITEMS, 1,000 by default). */
  maxBatchItems?: number;
  /** ... or this many bytes of JSON (default 500 KB; the server takes BATCH_BODY_LIMIT_BYTES, 4 MiB by default). */
  maxBatchBytes?: number;
  /** ... or when its oldest write has waited this long (default 1000 ms). */
  flushIntervalMs?: number;
  /**
   * Batches in flight at once (default 1). With 1, writes are applied in the order they were
   * called, across batches and retries, with one exception: a write answered 5xx inside a batch
   * whose later items were applied (a failed item does not stop the rest, CONTRACT.md §13) is
   * retried after them. More is faster, but batches may then overtake each other.
   */
  maxConcurrentBatches?: number;
  /** Writes held (queued or in flight, not yet settled) before new ones are refused with QueueFullError (default 10,000). */
  maxQueueItems?: number;
  /** Bytes of JSON held before new writes are refused (default 16 MiB). */
  maxQueueBytes?: number;
  /** Request bodies of at least this many bytes are sent gzip'd (default 16 KiB; 0: always; Infinity: never). */
  gzipThresholdBytes?: number;
  /** One attempt (send and read the answer) gives up after this long (default 30,000 ms). */
  requestTimeoutMs?: number;
  /**
   * An answer is read up to this many bytes (default 64 MiB; a batch of 1,000 writes is answered
   * in some hundred KB). A longer one (not intake at `url`, or a broken proxy) is cut off and the
   * writes it answered fail with IntakeUnavailableError, not retried: it may have applied them.
   */
  maxAnswerBytes?: number;
  /** First retry waits up to this long (full jitter), doubling each retry (default 100 ms). */
  retryBaseDelayMs?: number;
  /** No computed backoff waits longer than this (default 10,000 ms). */
  retryMaxDelayMs?: number;
  /** A server's Retry-After is honoured up to this long (default 30,000 ms). */
  retryAfterMaxMs?: number;
  /**
   * A batch not settled within this long fails its writes with IntakeUnavailableError (default
   * 120,000 ms): counted from when it was ready to leave (taken from the queue, or once its oldest
   * write had waited flushIntervalMs, if sooner), or from the last write of this client the server
   * settled if that is later (batchDeadlineAtMs); then moved on by each write of the batch's own
   * the server settles (sendBatch).
   */
  retryDeadlineMs?: number;
  /** Called once per retry, for logs and metrics. */
  onRetry?: (info: RetryInfo) => void;
}

export interface RetryInfo {
  attempt: number;
  delayMs: number;
  /** HTTP status that caused the retry, or null for a network error or a timeout. */
  status: number | null;
  error: unknown;
  items: number;
}

export type ResolvedOptions = Required<Omit<ClientOptions, 'onRetry'>> & Pick<ClientOptions, 'onRetry'>;

export const DEFAULTS = {
  maxBatchItems: 100,
  maxBatchBytes: 500 * 1000,
  flushIntervalMs: 1000,
  maxConcurrentBatches: 1,
  maxQueueItems: 10_000,
  maxQueueBytes: 16 * 1024 * 1024,
  gzipThresholdBytes: 16 * 1024,
  requestTimeoutMs: 30_000,
  maxAnswerBytes: 64 * 1024 * 1024,
  retryBaseDelayMs: 100,
  retryMaxDelayMs: 10_000,
  retryAfterMaxMs: 30_000,
  retryDeadlineMs: 120_000,
} as const;

function positive(name: string, value: number, allowZero = false, allowInfinity = false): number {
  const ok = (Number.isFinite(value) || (allowInfinity && value === Infinity)) && (allowZero ? value >= 0 : value > 0);
  if (!ok) throw new TypeError(`intake client: ${name} must be a ${allowZero ? 'non-negative' : 'positive'} number, got ${String(value)}`);
  return value;
}

/**
 * A URL fetch can send to: parsed as fetch parses it, without credentials (fetch refuses them).
 * Checked here, so that a mistyped URL throws at createClient instead of every write being
 * retried for its whole deadline as a network error and then said to have maybe been applied
 * (found by a review: a port out of range, credentials in the URL).
 */
function checkedUrl(value: unknown): string {
  let url: URL;
  try {
    if (typeof value !== 'string') throw new TypeError('not a string');
    url = new URL(value);
  } catch {
    throw new TypeError('intake client: url must be an http(s) URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError('intake client: url must be an http(s) URL');
  if (url.username !== '' || url.password !== '') throw new TypeError('intake client: url must not hold credentials (the service key goes in serviceKey)');
  return value as string;
}

/** What a header value may hold (RFC 9110 field-value, as fetch checks it): no control characters, no spaces at the ends. */
const HEADER_VALUE = /^[^\x00-\x08\x0a-\x1f\x7f\s](?:[^\x00-\x08\x0a-\x1f\x7f]*[^\x00-\x08\x0a-\x1f\x7f\s])?$/;

/** The longest wait setTimeout keeps (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export function resolveOptions(options: ClientOptions): ResolvedOptions {
  checkedUrl(options.url);
  if (typeof options.serviceKey !== 'string' || options.serviceKey === '') throw new TypeError('intake client: serviceKey is required');
  if (!HEADER_VALUE.test(options.serviceKey)) throw new TypeError('intake client: serviceKey must be a valid header value (no control characters, no spaces at the ends)');
  const o = { ...DEFAULTS, ...stripUndefined(options) } as ResolvedOptions;
  o.url = options.url.replace(/\/+$/, '');
  positive('maxBatchItems', o.maxBatchItems);
  positive('maxBatchBytes', o.maxBatchBytes);
  positive('flushIntervalMs', o.flushIntervalMs, true);
  positive('maxConcurrentBatches', o.maxConcurrentBatches);
  positive('maxQueueItems', o.maxQueueItems);
  positive('maxQueueBytes', o.maxQueueBytes);
  positive('gzipThresholdBytes', o.gzipThresholdBytes, true, true);
  positive('requestTimeoutMs', o.requestTimeoutMs);
  positive('maxAnswerBytes', o.maxAnswerBytes);
  positive('retryBaseDelayMs', o.retryBaseDelayMs, true);
  positive('retryMaxDelayMs', o.retryMaxDelayMs, true);
  positive('retryAfterMaxMs', o.retryAfterMaxMs, true);
  positive('retryDeadlineMs', o.retryDeadlineMs, true);
  // setTimeout takes at most 2^31 - 1 ms and turns a longer wait into 1 ms: a flushIntervalMs of a
  // month re-armed its timer every millisecond (a review).
  for (const name of ['flushIntervalMs', 'requestTimeoutMs', 'retryBaseDelayMs', 'retryMaxDelayMs', 'retryAfterMaxMs'] as const) {
    if (o[name] > MAX_TIMER_MS) throw new TypeError(`intake client: ${name} must be at most ${MAX_TIMER_MS} (Node's longest timer), got ${o[name]}`);
  }
  // Below the shortest attempt, no write would ever be sent.
  if (o.retryDeadlineMs < MIN_ATTEMPT_MS) throw new TypeError(`intake client: retryDeadlineMs must be at least ${MIN_ATTEMPT_MS} (no attempt starts with less left), got ${o.retryDeadlineMs}`);
  return o;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
