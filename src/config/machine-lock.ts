// A lock held by this process for as long as it lives, on this machine: an abstract Unix socket
// (Linux) whose name says what it guards. The kernel drops it when the process ends, however it
// ends (SIGKILL included), so a crash never leaves a stale lock, and nothing is written to disk.
// It guards one machine (one network namespace). Used for the data directory
// (journal/data-dir.ts) and for HOST:PORT (http/port-check.ts).
import { createHash } from 'node:crypto';
import { createServer } from 'node:net';

/**
 * Takes the lock named `what` (any text: it is hashed, since an abstract name holds at most
 * 107 bytes). Resolves to its release; rejects with the listen error, `code` EADDRINUSE when
 * another process holds it.
 */
export function holdMachineLock(what: string): Promise<() => void> {
  const name = `\0intake-lock-${createHash('sha256').update(what).digest('hex')}`;
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
