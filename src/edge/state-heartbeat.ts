// Whether the state thread still runs its event loop, as its edge threads see it (HTTP_THREADS >
// 1). The edges answer /healthz and /readyz themselves; with nothing more, a state thread stuck
// (a synchronous call that hangs on a stalled disk, a bug that loops) left them answering
// /readyz 200 while every write waited for good, where with HTTP_THREADS=1 /readyz went
// unanswered and a load balancer took the node out. The state thread stamps the shared clock
// into shared memory with its gate poll (every 50 ms, state/edge-threads.ts); an edge reads the
// stamp (no message, no wakeup of the edges), and /readyz says 503 once it is older than STALL_MS.
import { sharedClockMs } from './shared-rate-limits.ts';

/** A state thread silent this long is not ready (well past a GC pause or a big batch's turn). */
export const STALL_MS = 2_000;

export class StateHeartbeat {
  private readonly stamp: BigInt64Array;

  private constructor(readonly buffer: SharedArrayBuffer) {
    this.stamp = new BigInt64Array(buffer);
  }

  /** On the state thread: a new stamp, set to now. */
  static create(): StateHeartbeat {
    const heartbeat = new StateHeartbeat(new SharedArrayBuffer(BigInt64Array.BYTES_PER_ELEMENT));
    heartbeat.beat();
    return heartbeat;
  }

  /** On an edge thread: the state thread's stamp. */
  static attach(buffer: SharedArrayBuffer): StateHeartbeat {
    return new StateHeartbeat(buffer);
  }

  /** The state thread runs: now, in whole ms of the shared clock (one atomic 64-bit store). */
  beat(): void {
    Atomics.store(this.stamp, 0, BigInt(Math.floor(sharedClockMs())));
  }

  /** Why /readyz should answer 503 (the state thread has been silent too long), or null. */
  stalled(): string | null {
    const silentMs = sharedClockMs() - Number(Atomics.load(this.stamp, 0));
    return silentMs > STALL_MS ? `the state thread has not run for ${Math.round(silentMs)} ms; writes wait for it` : null;
  }
}
