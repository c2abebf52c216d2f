// The journal's durable position, shared from the main thread with the delivery worker through
// a SharedArrayBuffer: the main thread publishes each new position (one store and a notify per
// commit), the worker reads it without a message round trip and sleeps until it grows. The
// same buffer carries the worker's heartbeat back: a counter it bumps on a timer, which the
// main thread watches (delivery.ts) to notice a worker whose event loop no longer turns.

type WaitAsync = (array: Int32Array, index: number, value: number, timeoutMs: number) => { async: false; value: string } | { async: true; value: Promise<string> };
// Node 20 has Atomics.waitAsync; TypeScript's ES2022 library does not declare it.
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

/** How often the worker beats (and the main thread looks): often enough for the stall timeout. */
export function heartbeatMs(stallTimeoutMs: number): number {
  return Math.max(10, Math.min(1_000, Math.floor(stallTimeoutMs / 4)));
}

export class DurableSignal {
  readonly buffer: SharedArrayBuffer;
  /** Bumped on every publish and wake: what waiters sleep on. */
  private readonly generation: Int32Array;
  private readonly seq: Float64Array;
  /** The worker's heartbeat counter. */
  private readonly heartbeat: Int32Array;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(24)) {
    this.buffer = buffer;
    this.generation = new Int32Array(buffer, 0, 1);
    this.seq = new Float64Array(buffer, 8, 1);
    this.heartbeat = new Int32Array(buffer, 16, 1);
  }

  /** The worker: "my event loop still turns". */
  beat(): void {
    Atomics.add(this.heartbeat, 0, 1);
  }

  /** The main thread: how many beats so far (it only looks for a change). */
  get beats(): number {
    return Atomics.load(this.heartbeat, 0);
  }

  /** Every record up to this seq is durable. */
  get value(): number {
    return this.seq[0]!;
  }

  publish(seq: number): void {
    this.seq[0] = seq;
    this.wake();
  }

  /** Wakes every waiter (e.g. to make it see a stop request). */
  wake(): void {
    Atomics.add(this.generation, 0, 1);
    Atomics.notify(this.generation, 0);
  }

  /** Resolves once the position is past `seq`, on a wake(), or after `timeoutMs`. */
  async waitBeyond(seq: number, timeoutMs: number): Promise<void> {
    const generation = Atomics.load(this.generation, 0);
    if (this.value > seq) return;
    const result = waitAsync(this.generation, 0, generation, timeoutMs);
    if (result.async) await result.value;
  }
}

/**
 * The main thread's side of the heartbeat: calls `silent` once when `signal`'s beats stop for
 * `timeoutMs` (the first beats may take `startupMs` longer: a worker loads its modules first).
 * Returns a function that stops watching.
 */
export function watchHeartbeat(signal: DurableSignal, timeoutMs: number, startupMs: number, silent: (silentMs: number) => void): () => void {
  let beats = signal.beats;
  let lastBeatAt = performance.now() + startupMs;
  const timer = setInterval(() => {
    const now = performance.now();
    if (signal.beats !== beats) {
      beats = signal.beats;
      lastBeatAt = now;
      return;
    }
    if (now - lastBeatAt < timeoutMs) return;
    clearInterval(timer);
    silent(Math.round(now - lastBeatAt));
  }, heartbeatMs(timeoutMs));
  timer.unref();
  return () => clearInterval(timer);
}

