// Whether HOST:PORT is free, asked before the HTTP server listens. uWS listens with SO_REUSEPORT
// (edge threads share the port that way), so a second intake started on a port already in use
// listened beside the first without an error, and the kernel split the connections between the
// two: clients met two servers, each with its own keys and data. A plain listen (no
// SO_REUSEPORT) fails on a port any socket listens on; it is closed again at once.
import { createServer } from 'node:net';
import { holdMachineLock } from '../config/machine-lock.ts';
import { StartupError } from '../config/startup-error.ts';

/** Resolves when HOST:PORT can be listened on; port 0 (the kernel picks one) checks the host alone. */
export function checkPortFree(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => {
      const why = error.code === 'EADDRINUSE' ? 'the port is in use (another intake, or another program)' : error.message;
      reject(new StartupError(`cannot listen on ${host}:${port}: ${why}`));
    });
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve()));
  });
}

/**
 * Holds PORT for this process from now on (config/machine-lock.ts): the probe above passes for a second intake started while
 * the first is still recovering (it listens only after), and both then listened; this one does
 * not. The lock is the port's alone, whatever HOST: named after HOST too, `127.0.0.1` and
 * `0.0.0.0` (or `localhost`) took two locks, and two intakes started together both listened on
 * one port through SO_REUSEPORT, loopback clients meeting one and the others the other (found
 * by a review). Port 0 is never shared.
 */
export async function lockPort(host: string, port: number): Promise<void> {
  if (port === 0) return;
  try {
    await holdMachineLock(`port\n${port}`);
  } catch (error) {
    const e = error as NodeJS.ErrnoException;
    const why = e.code === 'EADDRINUSE' ? `another intake process on this machine uses port ${port} (one intake per port, whatever its HOST)` : e.message;
    throw new StartupError(`cannot listen on ${host}:${port}: ${why}`);
  }
}
