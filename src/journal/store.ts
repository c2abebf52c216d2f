// The LMDB environment: one file under DATA_DIR holding the journal, the key store and metadata.
// lmdb-js defaults are kept on purpose: with overlappingSync on and separateFlushed off, a write's
// promise resolves only after its commit is fsync'd, and each flush overlaps the next commit.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { JournalRecord } from './records.ts';

export interface StoredKey {
  workspace: string;
  /** The key's first 12 characters, in plain text for `keys list` and `keys revoke`. */
  prefix: string;
  createdAt: number;
  revokedAt: number | null;
}

export interface Store {
  root: RootDatabase;
  /** Batch key (seq of its first record) → the batch's records. */
  journal: Database<JournalRecord[], number>;
  /** sha256(key) hex → key metadata. */
  keys: Database<StoredKey, string>;
  /** Small values: `keysVersion` (bumped on every key change). */
  meta: Database<number, string>;
  close(): Promise<void>;
}

export const STORE_FILE = 'intake.mdb';

export function openStore(dataDir: string): Store {
  mkdirSync(dataDir, { recursive: true });
  const root = open({ path: join(dataDir, STORE_FILE), maxDbs: 8 });
  const journal = root.openDB<JournalRecord[], number>({ name: 'journal' });
  const keys = root.openDB<StoredKey, string>({ name: 'keys' });
  const meta = root.openDB<number, string>({ name: 'meta' });
  return {
    root,
    journal,
    keys,
    meta,
    close: () => root.close(),
  };
}
