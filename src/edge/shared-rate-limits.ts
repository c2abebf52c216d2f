// Rate limits shared by every HTTP edge thread (issue 21, CONTRACT.md §9). The same token bucket
// per service key as RateLimits (src/http/rate-limits.ts), but its buckets live in a
// SharedArrayBuffer that the main thread creates (SharedRateLimits.create) and hands to each
// edge thread (workerData), which wraps it with SharedRateLimits.attach. §9 says the limit is per
// key: a key whose connections land on two threads must get the same total rate as on one, so
// the threads share one bucket per key rather than each holding its own (N times the rate) or a
// 1/N share (a key on one connection would get 1/N of its rate).
//
// Layout (all offsets in bytes; little fields first so every view is naturally aligned):
//   header, 64 bytes:
//     Int32   [0]     MAGIC: attach() refuses a buffer that is not ours
//     Int32   [1]     slot count (a power of two)
//     Float64 [8]     perSecond as configured
//     Float64 [16]    burst (tokens)
//     BigInt64[24]    limited: requests refused, all threads and keys together (Atomics.add)
//   slot i, 32 bytes at 64 + 32 * i:
//     BigInt64 +0     key fingerprint (two 32-bit hashes of the key); 0 = free slot
//     Int32    +8     lock: 0 free, 1 held
//     Int32    +12    used: 0 until the key's first take(), whose bucket starts full
//     Float64  +16    tokens
//     Float64  +24    atMs: the shared clock at the last refill
// A thread claims a free slot for a key by one compare-and-set of the fingerprint; the bucket
// behind it needs no initialising that another thread could see half-done, since "used" 0 (a
// zeroed slot) means a full bucket, and the first take() under the lock fills it in.
// 32 bytes a slot: the default 65,536 slots are 2 MiB, once for the process (not per thread).

const MAGIC = 0x53524c31; // 'SRL1'
const HEADER_BYTES = 64;
const SLOT_BYTES = 32;
/** Slots when create() is given no maxKeys: far more than the keys one deployment configures. */
export const DEFAULT_MAX_KEYS = 65_536;
/** At most 2^20 slots (32 MiB): a bound on the buffer whatever the setting says. */
const MAX_SLOTS = 1 << 20;
/** Slot indexes this thread remembers per key (skips hashing and probing); cleared when full. */
const LOCAL_CACHE_MAX_KEYS = 16_384;
/** Lock attempts spent spinning before sleeping between attempts (see lock()). */
const SPINS_BEFORE_SLEEP = 1_000;
const SLEEP_MS = 0.05;
/** A lock held this long is taken over (see lock()). */
const STALLED_LOCK_MS = 100;

// Int32 / Float64 / BigInt64 indexes of the header fields and of the fields within a slot.
const I32_MAGIC = 0;
const I32_SLOTS = 1;
const F64_PER_SECOND = 1;
const F64_BURST = 2;
const I64_LIMITED = 3;
const SLOT_I32 = SLOT_BYTES / 4;
const SLOT_F64 = SLOT_BYTES / 8;
const HEADER_I32 = HEADER_BYTES / 4;
const HEADER_F64 = HEADER_BYTES / 8;
const LOCK_I32 = 2;
const USED_I32 = 3;
const TOKENS_F64 = 2;
const AT_F64 = 3;

/** The process's monotonic clock (CLOCK_MONOTONIC), in ms. */
function monotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/**
 * Where this thread's performance.now() starts on the process's monotonic clock, in ms: measured
 * once, as the reading with the tightest bracket of a few (error well under 1 µs).
 */
function measurePerformanceOriginMs(): number {
  let bestGapMs = Infinity;
  let originMs = 0;
  for (let i = 0; i < 8; i++) {
    const beforeMs = monotonicMs();
    const nowMs = performance.now();
    const afterMs = monotonicMs();
    if (afterMs - beforeMs < bestGapMs) {
      bestGapMs = afterMs - beforeMs;
      originMs = (beforeMs + afterMs) / 2 - nowMs;
    }
  }
  return originMs;
}

/**
 * A clock in ms that all threads of this process share. Each thread's performance.now() has its
 * own origin, and performance.timeOrigin does not make up for it (in Node 20 it is the process's,
 * the same in every thread, while the workers' performance.now() starts tens of µs later), so
 * timeOrigin + now() disagrees between threads. The monotonic clock behind process.hrtime() is one
 * for the process and never steps with the wall clock, but reading it (a BigInt) costs more than
 * performance.now(): each thread reads performance.now() plus its origin on that clock, measured
 * once at module load.
 */
const performanceOriginMs = measurePerformanceOriginMs();
export function sharedClockMs(): number {
  return performanceOriginMs + performance.now();
}

/** 32-bit finaliser (MurmurHash3 fmix32): spreads every input bit over the whole result. */
function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

export class SharedRateLimits {
  /** The memory every thread shares: hand it to a worker (workerData) for attach(). */
  readonly buffer: SharedArrayBuffer;
  /** The bucket size: the most tokens one request (a batch: one per item) can ever take. */
  readonly burst: number;
  /** Slots in the table: keys beyond it share a bucket with another key (see slotOf()). */
  readonly maxKeys: number;
  private readonly perMs: number;
  private readonly mask: number;
  private readonly i32: Int32Array;
  private readonly f64: Float64Array;
  private readonly i64: BigInt64Array;
  private readonly clockMs: () => number;
  /** key -> slot index, this thread's memo; bounded by LOCAL_CACHE_MAX_KEYS. */
  private readonly slotByKey = new Map<string, number>();

  /**
   * On the main thread: a new table of `maxKeys` buckets (rounded up to a power of two, at most
   * 2^20), RATE_LIMIT_PER_SECOND and RATE_LIMIT_BURST as RateLimits takes them (burst 0: one
   * second's worth, at least 1). `clockMs` is for tests; every thread must use the same clock.
   */
  static create(perSecond: number, burst: number, maxKeys = DEFAULT_MAX_KEYS, clockMs: () => number = sharedClockMs): SharedRateLimits {
    if (!Number.isFinite(perSecond) || perSecond < 0) throw new RangeError(`rate limit per second must be a finite number >= 0, not ${perSecond}`);
    if (!Number.isFinite(burst) || burst < 0) throw new RangeError(`rate limit burst must be a finite number >= 0, not ${burst}`);
    if (!Number.isInteger(maxKeys) || maxKeys < 1 || maxKeys > MAX_SLOTS) throw new RangeError(`maxKeys must be an integer from 1 to ${MAX_SLOTS}, not ${maxKeys}`);
    let slots = 1;
    while (slots < maxKeys) slots *= 2;
    const buffer = new SharedArrayBuffer(HEADER_BYTES + slots * SLOT_BYTES);
    const i32 = new Int32Array(buffer);
    const f64 = new Float64Array(buffer);
    i32[I32_SLOTS] = slots;
    f64[F64_PER_SECOND] = perSecond;
    f64[F64_BURST] = burst > 0 ? burst : Math.max(1, perSecond);
    // Written last, and atomically: a buffer with the magic has its whole header.
    Atomics.store(i32, I32_MAGIC, MAGIC);
    return new SharedRateLimits(buffer, clockMs);
  }

  /** In a worker thread: the table the main thread created, read from its header. */
  static attach(buffer: SharedArrayBuffer, clockMs: () => number = sharedClockMs): SharedRateLimits {
    return new SharedRateLimits(buffer, clockMs);
  }

  private constructor(buffer: SharedArrayBuffer, clockMs: () => number) {
    if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength < HEADER_BYTES) throw new TypeError('not a SharedRateLimits buffer');
    this.buffer = buffer;
    this.i32 = new Int32Array(buffer);
    this.f64 = new Float64Array(buffer);
    this.i64 = new BigInt64Array(buffer);
    const slots = this.i32[I32_SLOTS]!;
    if (Atomics.load(this.i32, I32_MAGIC) !== MAGIC || slots < 1 || slots > MAX_SLOTS || (slots & (slots - 1)) !== 0 || buffer.byteLength !== HEADER_BYTES + slots * SLOT_BYTES) {
      throw new TypeError('not a SharedRateLimits buffer');
    }
    this.maxKeys = slots;
    this.mask = slots - 1;
    this.perMs = this.f64[F64_PER_SECOND]! / 1000;
    this.burst = this.f64[F64_BURST]!;
    this.clockMs = clockMs;
  }

  get enabled(): boolean {
    return this.perMs > 0;
  }

  /**
   * Requests refused since start, all keys and all threads together (one atomic counter in the
   * buffer, so /metrics can read it from any thread). Like RateLimits.limited it names no key.
   */
  get limited(): number {
    return Number(Atomics.load(this.i64, I64_LIMITED));
  }

  /**
   * Takes `count` tokens for `key` (all or none); returns 0 when the request may go on, else the
   * whole seconds (at least 1) until that many will be there, for Retry-After.
   * `_now` is ignored: callers pass their own thread's performance.now(), whose origin differs
   * from thread to thread; the buckets are timed by sharedClockMs(), common to all threads. The
   * parameter stays so that this class and RateLimits take the same calls.
   */
  take(key: string, _now: number, count = 1): number {
    const slot = this.slotOf(key, true);
    const lockAt = slot * SLOT_I32 + HEADER_I32 + LOCK_I32;
    const usedAt = slot * SLOT_I32 + HEADER_I32 + USED_I32;
    const tokensAt = slot * SLOT_F64 + HEADER_F64 + TOKENS_F64;
    const atAt = slot * SLOT_F64 + HEADER_F64 + AT_F64;
    // Read before the lock, so as not to hold it for the clock's ~50 ns.
    const nowMs = this.clockMs();
    this.lock(lockAt);
    // The critical section: a few loads, float operations and stores; no allocation (so no GC
    // can pause it) and no call. The arithmetic is RateLimits.take()'s, operation for operation,
    // so that both give the same answers to the last bit.
    let tokens: number;
    if (this.i32[usedAt] === 0) {
      this.i32[usedAt] = 1;
      tokens = this.burst;
      this.f64[atAt] = nowMs;
    } else {
      // Time in the bucket never goes back: another thread may have stamped it later on the
      // clock than our reading (it read the clock after us but took the lock first, or its
      // origin was measured a fraction of a µs off). So no interval is refilled twice.
      const lastMs = this.f64[atAt]!;
      tokens = this.f64[tokensAt]!;
      if (nowMs > lastMs) {
        tokens = Math.min(this.burst, tokens + (nowMs - lastMs) * this.perMs);
        this.f64[atAt] = nowMs;
      }
    }
    let retryAfterSeconds = 0;
    if (tokens >= count) tokens -= count;
    else retryAfterSeconds = Math.max(1, Math.ceil((count - tokens) / this.perMs / 1000));
    this.f64[tokensAt] = tokens;
    Atomics.store(this.i32, lockAt, 0);
    if (retryAfterSeconds !== 0) Atomics.add(this.i64, I64_LIMITED, 1n);
    return retryAfterSeconds;
  }

  /** Gives back tokens taken for a request that was then refused (nothing of it was applied). */
  refund(key: string, count: number): void {
    const slot = this.slotOf(key, false);
    if (slot < 0) return;
    const lockAt = slot * SLOT_I32 + HEADER_I32 + LOCK_I32;
    const usedAt = slot * SLOT_I32 + HEADER_I32 + USED_I32;
    const tokensAt = slot * SLOT_F64 + HEADER_F64 + TOKENS_F64;
    this.lock(lockAt);
    // A slot not yet used is a full bucket: nothing to give back.
    if (this.i32[usedAt] !== 0) this.f64[tokensAt] = Math.min(this.burst, this.f64[tokensAt]! + count);
    Atomics.store(this.i32, lockAt, 0);
  }

  /**
   * A spin lock on one slot's lock word. Spinning suits it: the lock is held for the few
   * instructions of take() or refund() (tens of ns), far less than putting a thread to sleep and
   * waking it would cost, and only threads serving the same key at the same moment ever meet on
   * it. Bounded all the same: after SPINS_BEFORE_SLEEP attempts (the holder was descheduled by
   * the OS, say) the thread sleeps SLEEP_MS between attempts, and a lock still held after
   * STALLED_LOCK_MS is taken over: its holder is presumed gone (a worker terminated inside the
   * critical section would otherwise leave its key locked for good and every thread serving that
   * key stuck). Were the holder only that slow, the worst is one refill or take computed twice,
   * a few tokens too many for that key once; never a hang.
   */
  private lock(lockAt: number): void {
    if (Atomics.compareExchange(this.i32, lockAt, 0, 1) === 0) return;
    let attempts = 0;
    let stalledAtMs = 0;
    while (Atomics.compareExchange(this.i32, lockAt, 0, 1) !== 0) {
      if (++attempts < SPINS_BEFORE_SLEEP) continue;
      const nowMs = monotonicMs();
      if (stalledAtMs === 0) stalledAtMs = nowMs + STALLED_LOCK_MS;
      else if (nowMs >= stalledAtMs) return; // taken over: the word still says held, by us now
      Atomics.wait(this.i32, lockAt, 1, SLEEP_MS);
    }
  }

  /**
   * The slot of `key`: the one whose fingerprint is the key's, found by linear probing from the
   * slot its hash names, over the whole table at most. With `claim`, the first free slot on the
   * way becomes the key's by compare-and-set of its fingerprint; two threads looking for the same
   * key walk the same slots, so whichever wins the free slot, the other finds the key there:
   * they agree without talking. Slots are never freed (keys are service keys that
   * authenticated, bounded by the keys configured), so a key once placed stays where it is.
   * When every slot holds another key, the key shares the slot its hash names: it is limited
   * together with that slot's key (one bucket for both), never unlimited and never an error.
   * Two keys with the same 64-bit fingerprint share a bucket the same way (odds about n²/2^65).
   * Without `claim` (refund), -1 when the key has no slot.
   */
  private slotOf(key: string, claim: boolean): number {
    const cached = this.slotByKey.get(key);
    if (cached !== undefined) return cached;
    // Two independent 32-bit hashes of the UTF-16 code units (FNV-1a and a multiplicative one,
    // each finished by mix32): the first names the home slot, both make the fingerprint.
    let h1 = 0x811c9dc5;
    let h2 = 0x9747b28c ^ key.length;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995);
      h2 ^= h2 >>> 15;
    }
    h1 = mix32(h1);
    h2 = mix32(h2);
    let fingerprint = (BigInt(h1) << 32n) | BigInt(h2);
    fingerprint = BigInt.asIntN(64, fingerprint);
    if (fingerprint === 0n) fingerprint = 1n; // 0 marks a free slot
    const home = h1 & this.mask;
    let found = -1;
    for (let probe = 0; probe <= this.mask; probe++) {
      const slot = (home + probe) & this.mask;
      const at = (HEADER_BYTES + slot * SLOT_BYTES) / 8;
      let held = Atomics.load(this.i64, at);
      if (held === 0n) {
        if (!claim) return -1; // the key would be here: it never took a token
        held = Atomics.compareExchange(this.i64, at, 0n, fingerprint);
        if (held === 0n) held = fingerprint; // ours now
      }
      if (held === fingerprint) {
        found = slot;
        break;
      }
    }
    if (found < 0) found = home; // full: share the home slot's bucket
    if (this.slotByKey.size >= LOCAL_CACHE_MAX_KEYS) this.slotByKey.clear();
    this.slotByKey.set(key, found);
    return found;
  }
}
