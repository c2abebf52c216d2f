// Which stop signal is a second one, for the commands people stop with Ctrl-C (`npm run import`,
// `npm run export -- --follow`, `npm run cluster:local`): there a second signal quits at once.
// `npm run` forwards SIGINT and SIGTERM to its script, and a Ctrl-C at the terminal reaches the
// script directly too (the whole foreground process group gets it): one Ctrl-C arrives twice,
// within milliseconds. Counted as two, it quit the import with no summary (a review), and killed
// every cluster:local node with SIGKILL instead of stopping them (found 2026-11-29 by sending
// SIGINT to the process group, as a terminal does).

/** A repeat of the first signal within this long is its forwarded copy, not a second Ctrl-C. */
export const DUPLICATE_SIGNAL_MS = 500;

export class StopSignals {
  private first: { signal: string; atMs: number } | null = null;

  /** 'first' for the first stop, 'copy' for the forwarded copy of it, 'again' for a real second signal. */
  seen(signal: string, atMs: number = performance.now()): 'first' | 'copy' | 'again' {
    if (this.first === null) {
      this.first = { signal, atMs };
      return 'first';
    }
    return signal === this.first.signal && atMs - this.first.atMs < DUPLICATE_SIGNAL_MS ? 'copy' : 'again';
  }
}
