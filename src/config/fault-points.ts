// Fault points for crash tests. With INTAKE_TEST_SIGKILL_AT=<name> in its environment the process
// SIGKILLs itself when it reaches the point of that name: a test can then crash it exactly
// between two writes, as a power cut could, which no kill sent from outside can time. Never set
// in production; unset, a point costs one string comparison.
const armedPoint = process.env.INTAKE_TEST_SIGKILL_AT ?? '';

export function faultPoint(name: string): void {
  if (armedPoint === name) process.kill(process.pid, 'SIGKILL');
}
