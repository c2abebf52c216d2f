// A request body that arrives in several chunks, copied into one buffer as they come. uWS calls
// onData once per chunk of the wire, whatever its size: keeping a Buffer per chunk cost ~400
// bytes of memory per chunk beyond its bytes, so a 1 MB body sent one byte per chunk (chunked
// encoding) took 500 MB, and a 3 MB mapping sent that way ended the process (heap exhausted; with
// edge threads, a crash), under every body limit (found by a review). Here a body costs at most
// twice its own size, whatever its chunking.

/** The first buffer of a body whose size was not declared (chunked encoding). */
const INITIAL_BYTES = 64 * 1024;

/** A content-length header as a body buffer's first size: 0 when absent or not a size. */
export function declaredBytes(header: string): number {
  const n = Number(header);
  return header !== '' && Number.isSafeInteger(n) && n > 0 ? n : 0;
}

export class BodyBuffer {
  private buffer: Buffer;
  private length = 0;

  /**
   * `expectedBytes`: the declared content-length (0 when none); `limitBytes`: no body kept here is
   * larger (the caller refuses it before), so the buffer never grows past it.
   */
  constructor(
    expectedBytes: number,
    private readonly limitBytes: number,
  ) {
    const first = expectedBytes > 0 ? expectedBytes : INITIAL_BYTES;
    this.buffer = Buffer.allocUnsafe(Math.max(1, Math.min(first, limitBytes)));
  }

  get byteLength(): number {
    return this.length;
  }

  /** Copies `chunk` (uWS reuses its memory once the callback returns). */
  append(chunk: ArrayBuffer): void {
    const n = chunk.byteLength;
    const needed = this.length + n;
    if (needed > this.buffer.length) {
      // Doubling: a body of n bytes is copied O(1) times per byte, in O(log n) allocations.
      const grown = Buffer.allocUnsafe(Math.max(needed, Math.min(this.buffer.length * 2, this.limitBytes)));
      this.buffer.copy(grown, 0, 0, this.length);
      this.buffer = grown;
    }
    this.buffer.set(new Uint8Array(chunk), this.length);
    this.length = needed;
  }

  /** The body so far: a view of this buffer's memory, ours to keep. */
  bytes(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}
