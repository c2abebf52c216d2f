// The bytes of request bodies one HTTP thread holds while they arrive, and their limit
// (BODIES_HELD_MAX_BYTES). Each body is held to its route's limit (up to 16 MiB for a mapping),
// but nothing bounded them together: 40 connections each sending a 16 MiB mapping slowly held
// 640 MB for as long as they kept sending (found by a review, 2026-11-30). A body is counted
// from its declared content-length when its head comes (refused then, before it is read), or
// chunk by chunk when it declares none; it is given back once it is complete, answered or aborted.

export class HeldBodies {
  private heldBytes = 0;

  constructor(readonly maxBytes: number) {}

  /** Bytes held now. */
  get bytes(): number {
    return this.heldBytes;
  }

  /**
   * Takes `bytes` more for a body that holds `ownBytes` already; false, taking nothing, when that
   * would pass the limit. A body is always taken while no other is held, so a limit below a route's own body limit slows such
   * bodies down to one at a time, but never refuses them for good.
   */
  take(bytes: number, ownBytes = 0): boolean {
    if (bytes > 0 && this.heldBytes > ownBytes && this.heldBytes + bytes > this.maxBytes) return false;
    this.heldBytes += bytes;
    return true;
  }

  give(bytes: number): void {
    this.heldBytes -= bytes;
  }
}

/** The 503's message: the client sends again after Retry-After. */
export function bodiesHeldMessage(maxBytes: number): string {
  return `this server is receiving ${maxBytes} bytes of request bodies already (BODIES_HELD_MAX_BYTES): retry shortly`;
}
