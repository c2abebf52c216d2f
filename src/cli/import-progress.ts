// Progress of `npm run import` on stderr: one line redrawn in place on a terminal, plain lines
// every few seconds otherwise (a log file or CI should not fill with carriage returns).

export interface Counts {
  done: number;
  failed: number;
}

const TTY_REDRAW_MS = 200;
const PLAIN_EVERY_MS = 2_000;

const int = (n: number) => Math.round(n).toLocaleString('en-US');

function duration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m} min ${Math.ceil(seconds - m * 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export class Progress {
  private readonly startedMs = Date.now();
  private readonly timer: NodeJS.Timeout;
  private drawn = false;

  constructor(
    private readonly label: string,
    private readonly totalLines: number,
    private readonly counts: () => Counts,
    private readonly out: NodeJS.WriteStream = process.stderr,
  ) {
    this.timer = setInterval(() => this.draw(), out.isTTY ? TTY_REDRAW_MS : PLAIN_EVERY_MS);
    this.timer.unref();
  }

  /** Set while a batch is being retried (why, and which attempt); shown until the next one settles. */
  retrying: string | null = null;

  line(): string {
    const { done, failed } = this.counts();
    const seconds = (Date.now() - this.startedMs) / 1000;
    const rate = seconds > 0 ? done / seconds : 0;
    const eta = rate > 0 ? (this.totalLines - done) / rate : Infinity;
    const pct = this.totalLines > 0 ? Math.floor((100 * done) / this.totalLines) : 100;
    const retrying = this.retrying === null ? '' : `; ${this.retrying}`;
    return `${this.label}: ${int(done)}/${int(this.totalLines)} (${pct}%) done, ${int(failed)} failed, ${int(rate)}/s, ETA ${duration(eta)}${retrying}`;
  }

  private draw(): void {
    if (this.out.isTTY) {
      this.out.write(`\r${this.line()}\x1b[K`);
      this.drawn = true;
    } else this.out.write(`${this.line()}\n`);
  }

  /** Prints `text` on its own line; the progress line goes on below it. */
  note(text: string): void {
    if (this.drawn) this.out.write('\r\x1b[K');
    this.out.write(`${text}\n`);
    this.drawn = false;
  }

  /** Stops redrawing and prints `text` on its own line. */
  finish(text: string): void {
    clearInterval(this.timer);
    if (this.drawn) this.out.write('\r\x1b[K');
    this.out.write(`${text}\n`);
  }

  elapsedSeconds(): number {
    return (Date.now() - this.startedMs) / 1000;
  }
}
