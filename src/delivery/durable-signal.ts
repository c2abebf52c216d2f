// The journal's durable position, shared from the main thread with the delivery worker through
// a SharedArrayBuffer: the main thread publishes each new position (one store and a notify per
// commit), the worker reads it without a message round trip and sleeps until it grows.

type WaitAsync = (array: Int32Array, index: number, value: number, timeoutMs: number) => { async: false; value: string } | { async: true; value: Promise<string> };
// Node 20 has Atomics.waitAsync; TypeScript's ES2022 library does not declare it.
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

export class DurableSignal {
  readonly buffer: SharedArrayBuffer;
  /** Bumped on every publish and wake: what waiters sleep on. */
  private readonly generation: Int32Array;
  private readonly seq: Float64Array;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(16)) {
    this.buffer = buffer;
    this.generation = new Int32Array(buffer, 0, 1);
    this.seq = new Float64Array(buffer, 8, 1);
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
