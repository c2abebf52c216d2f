// CONTRACT.md §2: a body refused for its size is read and thrown away before the 413 is sent and
// the connection closed, so that a client still sending receives the 413 instead of a reset (a
// close with unread data in the socket makes the kernel send RST, and the client's write fails
// with EPIPE before it reads the answer). uWS allows no access to a response once it is ended,
// so the answer comes after the drain: when the body is complete, or after `limitBytes` more
// bytes, or after DRAIN_MAX_MS, whichever is first.

/** The longest a refused body is read before the 413 goes out anyway (and the connection closes). */
export const DRAIN_MAX_MS = 5_000;

export class Drain {
  private drained = 0;
  private done = false;
  private readonly timer: NodeJS.Timeout;

  /** `finish` answers (413, close); it runs once, unless abort() came first. */
  constructor(
    private readonly limitBytes: number,
    private readonly finish: () => void,
  ) {
    this.timer = setTimeout(() => this.end(), DRAIN_MAX_MS);
  }

  /** A chunk of the refused body (already counted bytes are not passed again). */
  data(bytes: number, isLast: boolean): void {
    this.drained += bytes;
    if (isLast || this.drained > this.limitBytes) this.end();
  }

  /** The client went away: nothing to answer. */
  abort(): void {
    this.done = true;
    clearTimeout(this.timer);
  }

  private end(): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    this.finish();
  }
}
