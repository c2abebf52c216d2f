// The data directory: made when missing, and held by one intake server at a time.
//
// Why a lock: LMDB lets several processes open one environment, and two servers on one DATA_DIR
// each keep their own idea of where the journal ends, so each writes its batches over the
// other's: writes answered 200 were lost (seen: 10 answered 200, 6 in the journal). The lock is
// an abstract Unix socket (Linux) named after the directory's real path: the kernel releases it
// when the process ends, however it ends (SIGKILL included), so a crash never leaves a stale
// lock behind, and no file in the directory is needed. It guards one host (one network
// namespace): two machines, or two containers with their own network, sharing one volume are
// not seen (README, Operations).
import { mkdirSync, realpathSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { holdMachineLock, machineLockHeld } from '../config/machine-lock.ts';
import { StartupError } from '../config/startup-error.ts';

/** A data directory that cannot be used: the message says why (a one-line start failure). */
export class DataDirError extends StartupError {}

/** Directory levels made at most for one DATA_DIR (a bound on the walk up). */
const MAX_NEW_LEVELS = 64;

/**
 * Makes `dir` and its missing parents. Not mkdirSync's `recursive`: in Node 20 it loops forever
 * when a parent exists but refuses the child with ENOENT (`/proc/x`: DATA_DIR=/proc/x hung the
 * start with no output).
 */
export function ensureDirectory(dir: string, levels = MAX_NEW_LEVELS): void {
  try {
    mkdirSync(dir);
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      if (!statSync(dir).isDirectory()) throw new DataDirError(`${dir} exists and is not a directory`);
      return;
    }
    const parent = dirname(dir);
    if (code !== 'ENOENT' || parent === dir || levels <= 0) throw new DataDirError(`cannot create the data directory ${dir}: ${(error as Error).message}`);
    ensureDirectory(parent, levels - 1);
  }
  // The parent exists now: one more try, whose failure is final.
  try {
    mkdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST' && statSync(dir).isDirectory()) return;
    throw new DataDirError(`cannot create the data directory ${dir}: ${(error as Error).message}`);
  }
}

export interface DataDirLock {
  release(): void;
}

/** The name of `dir`'s lock (its real path: two spellings of one directory are one lock). */
function lockOf(dir: string): string {
  return `data directory\n${realpathSync(dir)}`;
}

/** Whether another process (a server) holds `dir`, asked without taking it (machineLockHeld). */
export function dataDirInUse(dir: string): Promise<boolean> {
  return machineLockHeld(lockOf(dir));
}

/**
 * Takes `dir` (which exists) for this process; rejects with DataDirError when another process
 * holds it. Held until release() or the end of the process.
 */
export async function lockDataDir(dir: string): Promise<DataDirLock> {
  try {
    return { release: await holdMachineLock(lockOf(dir)) };
  } catch (error) {
    const e = error as NodeJS.ErrnoException;
    throw e.code === 'EADDRINUSE'
      ? new DataDirError(`the data directory ${dir} is in use by another intake process on this machine (one process per data directory)`)
      : new DataDirError(`cannot lock the data directory ${dir}: ${e.message}`);
  }
}
