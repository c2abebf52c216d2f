// The CLIs that read a data directory refuse one that holds no intake data: opening it would
// make an empty store, and a typo in DATA_DIR then looked like an empty journal ("no hole",
// an empty export, no keys), with status 0.
import { closeSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { STORE_FILE, storeExists } from '../journal/store.ts';

/** LMDB's meta page magic, 0xBEEFC0DE, as stored (little-endian) near the start of the file. */
const LMDB_MAGIC = Buffer.from([0xde, 0xc0, 0xef, 0xbe]);
const HEADER_BYTES = 64;

/** Why the store file cannot be LMDB's (empty, or no magic where LMDB writes it), or null. */
function notLmdb(dataDir: string): string | null {
  let head: Buffer;
  try {
    const fd = openSync(join(dataDir, STORE_FILE), 'r');
    try {
      head = Buffer.alloc(HEADER_BYTES);
      head = head.subarray(0, readSync(fd, head, 0, HEADER_BYTES, 0));
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    return `cannot read ${STORE_FILE}: ${(error as Error).message}`;
  }
  if (head.length === 0) return `its ${STORE_FILE} is empty`;
  return head.includes(LMDB_MAGIC) ? null : `its ${STORE_FILE} is not an LMDB file (damaged, or not intake's)`;
}

/**
 * True when `dataDir` holds intake's data; otherwise says so on stderr, as `cli`, and returns
 * false (exit 2). A store file that is empty or not LMDB is refused before LMDB opens it: opening
 * a foreign file crashed the process (SIGSEGV), and an empty one was silently made into an empty
 * store, by tools meant to read (found by a review).
 */
export function requireStore(cli: string, dataDir: string): boolean {
  if (!storeExists(dataDir)) {
    process.stderr.write(`${cli}: ${dataDir} holds no intake data (set DATA_DIR or --data-dir to the server's data directory)\n`);
    return false;
  }
  const why = notLmdb(dataDir);
  if (why === null) return true;
  process.stderr.write(`${cli}: ${dataDir} holds no readable intake data: ${why}\n`);
  return false;
}
