// The CLIs that read a data directory refuse one that holds no intake data: opening it would
// make an empty store, and a typo in DATA_DIR then looked like an empty journal ("no hole",
// an empty export, no keys), with status 0.
import { storeExists } from '../journal/store.ts';

/** True when `dataDir` holds intake's data; otherwise says so on stderr, as `cli`, and returns false (exit 2). */
export function requireStore(cli: string, dataDir: string): boolean {
  if (storeExists(dataDir)) return true;
  process.stderr.write(`${cli}: ${dataDir} holds no intake data (set DATA_DIR or --data-dir to the server's data directory)\n`);
  return false;
}
