// Starting a worker thread on one of our modules, whether we run as TypeScript (tsx) or as the
// compiled JavaScript: the module's name takes the running code's own extension, and the thread
// starts through thread-entry.cjs (see there why).
import { Worker, type WorkerOptions } from 'node:worker_threads';

const OWN_EXTENSION = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
const THREAD_ENTRY = new URL('./thread-entry.cjs', import.meta.url);

/** URL of module `path` (relative to `base`, without extension) as this build names it. */
export function moduleUrl(path: string, base: string): string {
  return new URL(path + OWN_EXTENSION, base).href;
}

/** Starts a thread running `entry` (a moduleUrl()); it reads `workerData.entry`. */
export function startThread(entry: string, workerData: Record<string, unknown>, options: Omit<WorkerOptions, 'workerData'> = {}): Worker {
  return new Worker(THREAD_ENTRY, { ...options, workerData: { ...workerData, entry } });
}
