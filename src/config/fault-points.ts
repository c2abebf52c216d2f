// Fault points for crash tests. Never set in production; unset, a point costs one string
// comparison.
// - INTAKE_TEST_SIGKILL_AT=<name>: the process SIGKILLs itself when it reaches the point of that
//   name, so a test can crash it exactly between two writes, as a power cut could, which no kill
//   sent from outside can time.
// - INTAKE_TEST_THROW_ONCE=<name>:<file>: the first thread to reach the point of that name (while
//   <file> does not exist: it creates it) throws, uncaught: a stand-in for a bug, once per test.
import { existsSync, writeFileSync } from 'node:fs';

const killPoint = process.env.INTAKE_TEST_SIGKILL_AT ?? '';
const throwOnce = process.env.INTAKE_TEST_THROW_ONCE ?? '';

export function faultPoint(name: string): void {
  if (killPoint === name) process.kill(process.pid, 'SIGKILL');
}

/** Throws, outside any promise, if INTAKE_TEST_THROW_ONCE names this point and has not fired yet. */
export function throwPointOnce(name: string): void {
  if (!throwOnce.startsWith(`${name}:`)) return;
  const marker = throwOnce.slice(name.length + 1);
  if (existsSync(marker)) return;
  try {
    writeFileSync(marker, '', { flag: 'wx' });
  } catch {
    return; // another thread reached it first, between the check and the create
  }
  setImmediate(() => {
    throw new Error(`test fault: ${name}`);
  });
}
