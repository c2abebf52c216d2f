// A lock held by this process for as long as it lives, on this machine: an abstract Unix socket
// (Linux) whose name says what it guards. The kernel drops it when the process ends, however it
// ends (SIGKILL included), so a crash never leaves a stale lock, and nothing is written to disk.
// It guards one machine (one network namespace). Used for the data directory
// (journal/data-dir.ts) and for PORT, whatever the HOST (http/port-check.ts).
import { createHash } from 'node:crypto';
import { connect, createServer } from 'node:net';

/**
 * Takes the lock named `what` (any text: it is hashed, since an abstract name holds at most
 * 107 bytes). Resolves to its release; rejects with the listen error, `code` EADDRINUSE when
 * another process holds it.
 */
export function holdMachineLock(what: string): Promise<() => void> {
  const name = lockName(what);
  return new Promise((resolve, reject) => {
    const lock = createServer((socket) => socket.destroy());
    lock.once('error', reject);
    lock.listen({ path: name }, () => {
      // The lock must not keep a process alive that has nothing else to do.
      lock.unref();
      resolve(() => void lock.close());
    });
  });
}

/**
 * Whether a process holds the lock named `what`, asked without taking it: a connection to its
 * socket is accepted (and closed) only while one listens. Taking the lock to see, and releasing
 * it, made a process that started meanwhile find it held and stop (a server's start beside an
 * export run by cron; found by a review). An error other than "nobody listens" counts as held:
 * the caller then takes the careful path.
 */
export function machineLockHeld(what: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = connect({ path: lockName(what) });
    probe.once('connect', () => {
      probe.destroy();
      resolve(true);
    });
    probe.once('error', (error: NodeJS.ErrnoException) => resolve(error.code !== 'ECONNREFUSED' && error.code !== 'ENOENT'));
  });
}

function lockName(what: string): string {
  return `\0intake-lock-${createHash('sha256').update(what).digest('hex')}`;
}
