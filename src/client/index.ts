// intake/client: a typed client for intake's 11 write endpoints, batched through POST /batch,
// with safe retries (an Idempotency-Key per write, kept across retries). Node 20, no dependency.
export { createClient, type IntakeClient } from './client.ts';
export {
  ClientClosedError,
  describeError,
  IntakeError,
  IntakeProtocolError,
  IntakeRequestError,
  IntakeUnavailableError,
  IntakeValidationError,
  QueueFullError,
  type WriteIdentity,
} from './errors.ts';
export { DEFAULTS, type ClientOptions, type RetryInfo } from './options.ts';
export { isRetryableStatus, parseRetryAfterMs, retryDelayMs } from './retry-policy.ts';
export type { QueueStats } from './write-queue.ts';
export type * from './types.ts';
