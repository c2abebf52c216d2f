// GET /metrics and GET /cluster need no key, and each one costs work on the state thread (every
// edge thread's share of the metrics serialised and summed; a query to PostgreSQL). A flood of
// them was a flood of that work: 5,000 scrapes on 500 connections held a write for 3.8 s with one
// thread, 6.3 s with two edge threads and 7.2 s with four (found by a review, 2026-11-29).
// Wrapped here, one runs at a time and every request that arrives while it runs gets its result:
// a scrape answered a few ms after the figures were read, which a Prometheus counter or the
// cluster's status allows. It
// starts on the next turn (setImmediate), not at once: one thread's scrape finishes within the
// turn it starts in, so it never overlapped the next request, and 5,000 scrapes still cost 5,000
// serialisations; every request read in the same turn now shares one, whose figures are read
// after the last of them arrived (one that arrives while it runs gets figures read just before).

/** `produce`, run at most once at a time: calls while it runs share its result (or its error). */
export function sharedInFlight<T>(produce: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  return () => {
    if (running === null) {
      const started = new Promise<void>((resolve) => setImmediate(resolve)).then(produce);
      running = started;
      const clear = () => {
        if (running === started) running = null;
      };
      started.then(clear, clear);
    }
    return running;
  };
}
