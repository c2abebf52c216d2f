// The LMDB environment: one file under DATA_DIR holding the journal, the key store and metadata.
// lmdb-js defaults are kept on purpose: with overlappingSync on and separateFlushed off, a write's
// promise resolves only after its commit is fsync'd, and each flush overlaps the next commit.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { JournalRecord } from './records.ts';
import type { EntityCounts } from './snapshot-format.ts';
// Registers the msgpack extension of packed id lists, so this process can read such records.
import './packed-ids.ts';
import { decodeRecords, encodeRecords } from './record-bytes.ts';
import { ensureDirectory } from './data-dir.ts';

export interface StoredKey {
  workspace: string;
  /** The key's first 12 characters, in plain text for `keys list` and `keys revoke`. */
  prefix: string;
  createdAt: number;
  revokedAt: number | null;
}

/** A snapshot's description; `completedAt` is set only once every chunk is durable. */
export interface SnapshotMeta {
  id: number;
  /** The journal position the snapshot covers: the state after record `seq`. */
  seq: number;
  startedAt: number;
  completedAt: number | null;
  chunks: number;
  bytes: number;
  entities: EntityCounts;
}

export interface Store {
  root: RootDatabase;
  /** Batch key (seq of its first record) → the batch's records. */
  journal: Database<JournalRecord[], number>;
  /** sha256(key) hex → key metadata. */
  keys: Database<StoredKey, string>;
  /** Small values: `keysVersion` (bumped on every key change), `durableSeq` (journal.ts); `clusterId` (a string: readClusterId). */
  meta: Database<number, string>;
  /** Sink id (e.g. `nats:INTAKE`) → the seq of the last record that sink confirmed. */
  delivery: Database<number, string>;
  /** Snapshot id → its description. */
  snapshots: Database<SnapshotMeta, number>;
  /** [snapshot id, chunk number] → msgpack array of entries (snapshot-format.ts). */
  snapshotChunks: Database<Buffer, [number, number]>;
  close(): Promise<void>;
}

export const STORE_FILE = 'intake.mdb';

/**
 * `meta` key: the identity of the cluster this data directory belongs to (cluster-node.ts), set
 * when a node first joins or creates that cluster. The only string among meta's numbers.
 */
export const CLUSTER_ID_KEY = 'clusterId';

/** The identity of the cluster this data directory belongs to, or null (a single node's, or one made before identities). */
export function readClusterId(store: Store): string | null {
  const value: unknown = (store.meta as Database<unknown, string>).get(CLUSTER_ID_KEY);
  return typeof value === 'string' ? value : null;
}

/** Records that this data directory belongs to cluster `id`; durable once it resolves. */
export async function writeClusterId(store: Store, id: string): Promise<void> {
  await (store.meta as Database<unknown, string>).put(CLUSTER_ID_KEY, id);
}

/** Whether `dataDir` holds intake's data (a tool that only reads must not make an empty store by a typo). */
export function storeExists(dataDir: string): boolean {
  return existsSync(join(dataDir, STORE_FILE));
}

export function openStore(dataDir: string): Store {
  ensureDirectory(dataDir);
  const root = open({ path: join(dataDir, STORE_FILE), maxDbs: 8 });
  // Records are written by record-bytes.ts (why: there), not by lmdb-js's msgpack encoder; its
  // typings do not list the option.
  const journalOptions = { name: 'journal', encoder: { encode: encodeRecords, decode: decodeRecords } };
  const journal = root.openDB<JournalRecord[], number>(journalOptions);
  const keys = root.openDB<StoredKey, string>({ name: 'keys' });
  const meta = root.openDB<number, string>({ name: 'meta' });
  const snapshots = root.openDB<SnapshotMeta, number>({ name: 'snapshots' });
  const snapshotChunks = root.openDB<Buffer, [number, number]>({ name: 'snapshot-chunks', encoding: 'binary' });
  const delivery = root.openDB<number, string>({ name: 'delivery' });
  return {
    root,
    journal,
    keys,
    meta,
    snapshots,
    snapshotChunks,
    delivery,
    close: () => root.close(),
  };
}
