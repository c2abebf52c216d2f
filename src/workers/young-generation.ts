// `npm start` caps the main thread's young generation at 4 MB semi-spaces (memory per device: see
// README, Performance, Memory). A V8 flag is process-wide, and a new thread's heap reads it when
// the thread starts (Node's resourceLimits do not override it), so the mapping workers and the
// delivery worker would get the cap too: a 100,000-id mapping task took 96–110 ms on the worker
// instead of 31–37 ms (issue 19). The main heap is configured already when this runs, so setting
// the flag back to V8's default (16 MB on 64-bit) here gives threads started afterwards their
// usual young generation and leaves the main thread's cap in place.
import v8 from 'node:v8';

const WORKER_MAX_SEMI_SPACE_MB = 16;

/** Call before any worker thread starts. */
export function defaultYoungGenerationForWorkers(): void {
  v8.setFlagsFromString(`--max-semi-space-size=${WORKER_MAX_SEMI_SPACE_MB}`);
}
