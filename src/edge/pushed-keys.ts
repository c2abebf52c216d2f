// An edge thread's key source: the stored keys as the main thread last read them (from LMDB, or
// PostgreSQL in cluster mode) and posted. The edge's Authenticator reads them from here, so a key
// change reaches every thread with the main thread's next poll (CONTRACT.md §1: within 1 s). Keys
// are only ever added or revoked on the main thread's source (`npm run keys`), never here.
import type { KeyRecord, KeySource } from '../auth/key-store.ts';
import type { StoredKey } from '../journal/store.ts';

export class PushedKeys implements KeySource {
  private keys: KeyRecord[];
  private changes = 0;

  constructor(keys: KeyRecord[]) {
    this.keys = keys;
  }

  set(keys: KeyRecord[]): void {
    this.keys = keys;
    this.changes++;
  }

  version(): Promise<number> {
    return Promise.resolve(this.changes);
  }

  list(): Promise<KeyRecord[]> {
    return Promise.resolve(this.keys);
  }

  add(): Promise<boolean> {
    return Promise.reject(new Error('an edge thread stores no keys'));
  }

  revoke(): Promise<StoredKey | null> {
    return Promise.reject(new Error('an edge thread stores no keys'));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
