// Rate limits (CONTRACT.md §9): a token bucket per service key, RATE_LIMIT_PER_SECOND tokens a
// second up to RATE_LIMIT_BURST, checked right after the key is known, so a limited request
// costs a map lookup and a subtraction. Off while RATE_LIMIT_PER_SECOND is 0. Buckets exist only
// for keys that authenticated, so their number is bounded by the keys there are.

interface Bucket {
  tokens: number;
  /** performance.now() of the last refill. */
  at: number;
}

/** A rate limiter: RateLimits here, or SharedRateLimits across edge threads (edge/shared-rate-limits.ts). */
export interface RateLimiter {
  readonly enabled: boolean;
  readonly burst: number;
  /** Requests refused since start (all threads). */
  readonly limited: number;
  take(key: string, now: number, count?: number): number;
  refund(key: string, count: number): void;
}

export class RateLimits implements RateLimiter {
  private readonly perMs: number;
  /** The bucket size: the most tokens one request (a batch: one per item) can ever take. */
  readonly burst: number;
  private readonly buckets = new Map<string, Bucket>();
  /**
   * Requests refused since start, all keys together: /metrics needs no key, so it must not say
   * which workspace (or key) is being limited (CONTRACT.md §3). The logs, which are not public,
   * carry the workspace of a refused request at debug level.
   */
  limited = 0;

  constructor(perSecond: number, burst: number) {
    this.perMs = perSecond / 1000;
    this.burst = burst > 0 ? burst : Math.max(1, perSecond);
  }

  get enabled(): boolean {
    return this.perMs > 0;
  }

  /**
   * Takes `count` tokens for `key` (all or none); returns 0 when the request may go on, else the
   * whole seconds (at least 1) until that many will be there, for Retry-After.
   */
  take(key: string, now: number, count = 1): number {
    let bucket = this.buckets.get(key);
    if (bucket === undefined) {
      bucket = { tokens: this.burst, at: now };
      this.buckets.set(key, bucket);
    } else {
      bucket.tokens = Math.min(this.burst, bucket.tokens + (now - bucket.at) * this.perMs);
      bucket.at = now;
    }
    if (bucket.tokens >= count) {
      bucket.tokens -= count;
      return 0;
    }
    this.limited++;
    return Math.max(1, Math.ceil((count - bucket.tokens) / this.perMs / 1000));
  }

  /** Gives back tokens taken for a request that was then refused (nothing of it was applied). */
  refund(key: string, count: number): void {
    const bucket = this.buckets.get(key);
    if (bucket !== undefined) bucket.tokens = Math.min(this.burst, bucket.tokens + count);
  }
}
