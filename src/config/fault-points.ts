// Fault points for crash tests. Never set in production; unset, a point costs one string
// comparison.
// - INTAKE_TEST_SIGKILL_AT=<name>: the process SIGKILLs itself when it reaches the point of that
//   name, so a test can crash it exactly between two writes, as a power cut could, which no kill
//   sent from outside can time.
// - INTAKE_TEST_THROW_ONCE=<name>:<file>[,<name>:<file>...]: the first thread to reach the point
//   of that name (while <file> does not exist: it creates it) throws, uncaught: a stand-in for a
//   bug, once per test and point (once per file: a point listed with three files fires 3 times).
// - INTAKE_TEST_BLOCK_ONCE=<name>:<ms>:<file>: the first thread to reach the point of that name
//   (while <file> does not exist: it creates it) blocks for <ms>, its event loop stuck: a stand-in
//   for a synchronous call that hangs (a stalled disk), once per test.
// - INTAKE_TEST_FAIL_FOR=<name>:<ms>: from the first time this process reaches the point of that
//   name, it throws there for <ms> (a stand-in for a connection that keeps failing).
// - INTAKE_TEST_STALL_ONCE=<name>:<ms>:<file>: the first time a thread reaches the point of that
//   name (while <file> does not exist: it creates it), the caller waits <ms> there, its event
//   loop free (a stand-in for an fsync that stalls).
import { existsSync, writeFileSync } from 'node:fs';

const killPoint = process.env.INTAKE_TEST_SIGKILL_AT ?? '';
const throwOnce = process.env.INTAKE_TEST_THROW_ONCE ?? '';
const blockOnce = process.env.INTAKE_TEST_BLOCK_ONCE ?? '';
const failFor = process.env.INTAKE_TEST_FAIL_FOR ?? '';
const stallOnce = process.env.INTAKE_TEST_STALL_ONCE ?? '';
/** performance.now() until which the INTAKE_TEST_FAIL_FOR point fails (null: not reached yet). */
let failingUntilMs: number | null = null;

export function faultPoint(name: string): void {
  if (killPoint === name) process.kill(process.pid, 'SIGKILL');
}

/** Whether INTAKE_TEST_THROW_ONCE names this point and it has not fired yet (it fires now): the caller throws what it must. */
export function throwsNow(name: string): boolean {
  if (throwOnce === '') return false;
  // A name listed with n files fires n times (the first time each file is claimed).
  return throwOnce.split(',').some((p) => p.startsWith(`${name}:`) && claimMarker(p.slice(name.length + 1)));
}

/** Throws, outside any promise, if INTAKE_TEST_THROW_ONCE names this point and has not fired yet. */
export function throwPointOnce(name: string): void {
  if (!throwsNow(name)) return;
  setImmediate(() => {
    throw new Error(`test fault: ${name}`);
  });
}

/** Throws here and now (the caller's promise rejects) if INTAKE_TEST_THROW_ONCE names this point and has not fired yet. */
export function throwPointOnceHere(name: string): void {
  if (throwsNow(name)) throw new Error(`test fault: ${name}`);
}

/** Creates `marker`; false if it exists (the point fired already, maybe in another thread). */
function claimMarker(marker: string): boolean {
  if (existsSync(marker)) return false;
  try {
    writeFileSync(marker, '', { flag: 'wx' });
    return true;
  } catch {
    return false; // another thread reached it first, between the check and the create
  }
}

/** Blocks this thread (sleeps, its event loop stuck) if INTAKE_TEST_BLOCK_ONCE names this point and has not fired yet. */
export function blockPointOnce(name: string): void {
  if (!blockOnce.startsWith(`${name}:`)) return;
  const rest = blockOnce.slice(name.length + 1);
  const colon = rest.indexOf(':');
  const ms = Number(rest.slice(0, colon));
  if (colon < 0 || !Number.isFinite(ms) || !claimMarker(rest.slice(colon + 1))) return;
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The ms the caller waits here if INTAKE_TEST_STALL_ONCE names this point and has not fired yet (it fires now), else 0. */
export function stallPointOnce(name: string): number {
  if (!stallOnce.startsWith(`${name}:`)) return 0;
  const rest = stallOnce.slice(name.length + 1);
  const colon = rest.indexOf(':');
  const ms = Number(rest.slice(0, colon));
  return colon < 0 || !Number.isFinite(ms) || !claimMarker(rest.slice(colon + 1)) ? 0 : ms;
}

/** Throws (the caller's promise rejects) while INTAKE_TEST_FAIL_FOR's time for this point runs. */
export function failPointFor(name: string): void {
  if (!failFor.startsWith(`${name}:`)) return;
  const now = performance.now();
  failingUntilMs ??= now + Number(failFor.slice(name.length + 1));
  if (now < failingUntilMs) throw new Error(`test fault: ${name}`);
}
