// Starting a worker thread on one of our modules, whether we run as the compiled JavaScript
// (`npm start`, the tests) or as TypeScript under tsx (development): the module's name takes the
// running code's own extension, and under tsx the thread starts through thread-entry.cjs (see
// there why); compiled modules are started directly.
import { Worker, type WorkerOptions } from 'node:worker_threads';

const OWN_EXTENSION = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
const THREAD_ENTRY = new URL('./thread-entry.cjs', import.meta.url);

/**
 * True in the bundles `npm run build` makes (esbuild's --define): the server's main module and
 * each thread's entry module are then one file each, side by side in dist/src/ (main.js,
 * edge-thread.js, delivery-worker.js, mapping-task.js), and import.meta.url is the bundle's.
 */
declare const INTAKE_BUNDLED: boolean | undefined;
const BUNDLED = typeof INTAKE_BUNDLED === 'boolean' && INTAKE_BUNDLED;

/** URL of module `path` (relative to `base`, without extension) as this build names it. */
export function moduleUrl(path: string, base: string): string {
  if (BUNDLED) return new URL(`./${path.slice(path.lastIndexOf('/') + 1)}.js`, import.meta.url).href;
  return new URL(path + OWN_EXTENSION, base).href;
}

/** Starts a thread running `entry` (a moduleUrl()). */
export function startThread(entry: string, workerData: Record<string, unknown>, options: Omit<WorkerOptions, 'workerData'> = {}): Worker {
  const data = { ...workerData, entry };
  return OWN_EXTENSION === '.js' ? new Worker(new URL(entry), { ...options, workerData: data }) : new Worker(THREAD_ENTRY, { ...options, workerData: data });
}
