// When to retry and how long to wait. Retried: network errors and timeouts, 408, 429, and 5xx
// except 501 and 505 (those say the server will never do it). Every other answer is final.

export function isRetryableStatus(status: number): boolean {
  if (status === 408 || status === 429) return true;
  return status >= 500 && status <= 599 && status !== 501 && status !== 505;
}

/** Retry-After in ms: delta-seconds or an HTTP date; null when absent or unreadable. */
export function parseRetryAfterMs(value: string | null, nowMs = Date.now()): number | null {
  if (value === null) return null;
  const text = value.trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  // Only the HTTP-date forms RFC 9110 names: Date.parse alone reads "0.5", "1.5" or "-5" as dates
  // in 2001 (a wait of 0 ms in place of the backoff, so retries without pause until the deadline).
  let date = Number.NaN;
  if (IMF_FIXDATE.test(text) || RFC850_DATE.test(text)) date = Date.parse(text);
  else if (ASCTIME_DATE.test(text)) date = Date.parse(`${text} GMT`); // asctime has no zone: it is GMT
  return Number.isNaN(date) ? null : Math.max(0, date - nowMs);
}

/** Sun, 06 Nov 1994 08:49:37 GMT */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
/** Sunday, 06-Nov-94 08:49:37 GMT (obsolete) */
const RFC850_DATE = /^[A-Z][a-z]+, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/;
/** Sun Nov  6 08:49:37 1994 (obsolete) */
const ASCTIME_DATE = /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/;

export interface BackoffSettings {
  retryBaseDelayMs: number;
  retryMaxDelayMs: number;
  retryAfterMaxMs: number;
}

/**
 * The wait before retry number `attempt` (1 for the first retry). Full jitter (a random wait up
 * to the exponential bound) so that many clients failing together do not come back together.
 * A server's Retry-After wins over the computed wait, up to `retryAfterMaxMs`: the server knows
 * when it can take more (a rate limit's refill, a busy queue). Not a Retry-After of 0 (or a date
 * already past): the computed wait then, or a proxy answering 503 with `Retry-After: 0` would
 * get retries without pause until the deadline (a review).
 */
export function retryDelayMs(attempt: number, retryAfterMs: number | null, s: BackoffSettings, random: () => number = Math.random): number {
  if (retryAfterMs !== null && retryAfterMs > 0) return Math.min(retryAfterMs, s.retryAfterMaxMs);
  const bound = Math.min(s.retryMaxDelayMs, s.retryBaseDelayMs * 2 ** Math.min(attempt - 1, 30));
  return Math.round(bound * random());
}

/**
 * No attempt starts with less than this left before its deadline. One cut short by its timeout
 * before it could even connect counts as "may have been applied" (the abort cannot say how far it
 * got), so writes that waited out the deadline behind an unreachable server were reported as
 * maybe applied after a last attempt of a millisecond or two.
 */
export const MIN_ATTEMPT_MS = 50;
