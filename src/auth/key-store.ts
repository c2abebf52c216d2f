// Service keys: only sha256(key) and the key's first 12 characters are ever stored. Where they
// are stored is a KeySource: LMDB on a single node (LmdbKeys, here), PostgreSQL in cluster mode
// (src/cluster/pg-keys.ts). The rules (names, prefixes, what revoke accepts, the first start)
// are written once, below, for both; the CLI and the server share them. Each change bumps the
// source's version in the same transaction, which running servers poll (CONTRACT.md §1, §12).
import { createHash } from 'node:crypto';
import { customAlphabet } from 'nanoid';
import type { Store, StoredKey } from '../journal/store.ts';

export const KEY_PREFIX_LENGTH = 12;
/**
 * Letters, digits, "_", "-", and dots between them (never first, last or doubled): the name is
 * also the middle of a NATS subject (`intake.<workspace>.<kind>`), which allows no empty token.
 */
export const WORKSPACE_NAME = /^(?=.{1,64}$)[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
const KEY_VERSION = 'keysVersion';

// Alphanumeric only, so a key is easy to copy and never contains the ':' or ',' of SERVICE_KEYS.
const newKey = customAlphabet('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz', 40);

export class KeyError extends Error {}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** A stored key as a KeySource lists it: its record and the sha256 it is found by. */
export type KeyRecord = StoredKey & { hash: string };

/** Where stored keys live. Every change bumps `version()` in the same transaction. */
export interface KeySource {
  /** Changes whenever a key is added or revoked; cheap, read every 500 ms by each server (main.ts KEYS_POLL_MS). */
  version(): Promise<number>;
  /** Every stored key, revoked ones too, oldest first. */
  list(): Promise<KeyRecord[]>;
  /**
   * Stores a new key. With `onlyIfNone` it does so only if no key is stored at all, checked in
   * the same transaction (under a lock, where several processes may try at once): false if one is.
   */
  add(key: KeyRecord, onlyIfNone: boolean): Promise<boolean>;
  /** Revokes the key with this hash at `at`; null when there is no such active key (any more). */
  revoke(hash: string, at: number): Promise<StoredKey | null>;
  /** Releases what the source holds (a connection); the LMDB store stays its owner's to close. */
  close(): Promise<void>;
}

/** Throws KeyError unless `workspace` is a valid workspace name. */
export function checkWorkspaceName(workspace: string): void {
  if (!WORKSPACE_NAME.test(workspace)) {
    throw new KeyError(`workspace name must be 1 to 64 letters, digits, "_", "-" and "." (a dot only between two of the others)`);
  }
}

function newRecord(workspace: string): { key: string; record: KeyRecord } {
  checkWorkspaceName(workspace);
  const key = newKey();
  return { key, record: { hash: hashKey(key), workspace, prefix: key.slice(0, KEY_PREFIX_LENGTH), createdAt: Date.now(), revokedAt: null } };
}

/** Creates a key for `workspace` and returns it; this is the only time the key is visible. */
export async function createKey(source: KeySource, workspace: string): Promise<string> {
  const { key, record } = newRecord(workspace);
  await source.add(record, false);
  return key;
}

/**
 * The first start: creates a key for `workspace` only if no key is stored at all (revoked ones
 * count), and returns it; null when one is (another process was first).
 */
export async function createFirstKey(source: KeySource, workspace: string): Promise<string | null> {
  const { key, record } = newRecord(workspace);
  return (await source.add(record, true)) ? key : null;
}

/** Revokes the one active key whose first characters are `prefix` (8 to 12 characters). */
export async function revokeKey(source: KeySource, prefix: string): Promise<StoredKey> {
  if (prefix.length < 8 || prefix.length > KEY_PREFIX_LENGTH) {
    throw new KeyError(`a prefix has 8 to ${KEY_PREFIX_LENGTH} characters`);
  }
  const matches = (await source.list()).filter((k) => k.revokedAt === null && k.prefix.startsWith(prefix));
  if (matches.length === 0) throw new KeyError(`no active key starts with "${prefix}"`);
  if (matches.length > 1) throw new KeyError(`"${prefix}" is ambiguous: ${matches.length} active keys start with it`);
  const revoked = await source.revoke(matches[0]!.hash, Date.now());
  // Revoked by someone else between the list and now.
  if (revoked === null) throw new KeyError(`no active key starts with "${prefix}"`);
  return revoked;
}

/** Every key stored in LMDB, oldest first. */
export function storedKeys(store: Store): KeyRecord[] {
  const out: KeyRecord[] = [];
  for (const { key, value } of store.keys.getRange()) out.push({ ...value, hash: key });
  return out.sort((a, b) => a.createdAt - b.createdAt);
}

/** Keys in the node's own LMDB (single node): `keys` by hash, the version in `meta`. */
export class LmdbKeys implements KeySource {
  constructor(private readonly store: Store) {}

  async version(): Promise<number> {
    // A read transaction kept open would not see what another process (the CLI) committed.
    this.store.root.resetReadTxn();
    return this.currentVersion();
  }

  async list(): Promise<KeyRecord[]> {
    return storedKeys(this.store);
  }

  async add(key: KeyRecord, onlyIfNone: boolean): Promise<boolean> {
    const { hash, ...record } = key;
    // LMDB write transactions are serialized across processes: the check cannot race.
    return this.store.root.transaction(() => {
      if (onlyIfNone && this.hasAny()) return false;
      this.store.keys.putSync(hash, record);
      this.bump();
      return true;
    });
  }

  async revoke(hash: string, at: number): Promise<StoredKey | null> {
    return this.store.root.transaction(() => {
      const current = this.store.keys.get(hash);
      if (current === undefined || current.revokedAt !== null) return null;
      const revoked: StoredKey = { ...current, revokedAt: at };
      this.store.keys.putSync(hash, revoked);
      this.bump();
      return revoked;
    });
  }

  async close(): Promise<void> {}

  private hasAny(): boolean {
    for (const _ of this.store.keys.getKeys({ limit: 1 })) return true;
    return false;
  }

  private currentVersion(): number {
    return this.store.meta.get(KEY_VERSION) ?? 0;
  }

  private bump(): void {
    this.store.meta.putSync(KEY_VERSION, this.currentVersion() + 1);
  }
}

/** The longest key a request may carry (longer: 401 whatever it is). */
export const MAX_SERVICE_KEY_LENGTH = 256;

/** Parses SERVICE_KEYS: "ws1:key1,ws2:key2"; a bare key belongs to workspace "default". */
export function parseServiceKeys(raw: string): Map<string, string> {
  const keys = new Map<string, string>();
  for (const part of raw.split(',')) {
    const entry = part.trim();
    if (entry === '') continue;
    const colon = entry.indexOf(':');
    const workspace = colon === -1 ? 'default' : entry.slice(0, colon);
    const key = colon === -1 ? entry : entry.slice(colon + 1);
    if (!WORKSPACE_NAME.test(workspace)) throw new KeyError(`SERVICE_KEYS: bad workspace name "${workspace}"`);
    if (key === '') throw new KeyError(`SERVICE_KEYS: empty key for workspace "${workspace}"`);
    // A key that can never arrive as it is written would only ever meet 401: refused at start.
    // An HTTP header value loses its leading and trailing spaces, and a key over the length
    // limit is refused whatever it is (authenticator.ts).
    if (key.length > MAX_SERVICE_KEY_LENGTH || !/^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(key)) {
      throw new KeyError(`SERVICE_KEYS: the key for workspace "${workspace}" must be 1 to ${MAX_SERVICE_KEY_LENGTH} printable ASCII characters, not starting or ending with a space`);
    }
    const other = keys.get(key);
    if (other !== undefined && other !== workspace) throw new KeyError(`SERVICE_KEYS: one key is given for two workspaces, "${other}" and "${workspace}"`);
    keys.set(key, workspace);
  }
  return keys;
}
