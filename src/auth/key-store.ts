// Service keys stored in LMDB: only sha256(key) and the key's first 12 characters are kept.
// The CLI and the server share this module; each change bumps `keysVersion` in the same
// transaction, which the running server polls to pick up changes (CONTRACT.md §1).
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

export function keysVersion(store: Store): number {
  return store.meta.get(KEY_VERSION) ?? 0;
}

export function storedKeys(store: Store): Array<StoredKey & { hash: string }> {
  const out: Array<StoredKey & { hash: string }> = [];
  for (const { key, value } of store.keys.getRange()) out.push({ ...value, hash: key });
  return out.sort((a, b) => a.createdAt - b.createdAt);
}

/** Creates a key for `workspace` and returns it; this is the only time the key is visible. */
export async function createKey(store: Store, workspace: string): Promise<string> {
  if (!WORKSPACE_NAME.test(workspace)) {
    throw new KeyError(`workspace name must be 1 to 64 letters, digits, "_", "-" and "." (a dot only between two of the others)`);
  }
  const key = newKey();
  const record: StoredKey = { workspace, prefix: key.slice(0, KEY_PREFIX_LENGTH), createdAt: Date.now(), revokedAt: null };
  await store.root.transaction(() => {
    store.keys.putSync(hashKey(key), record);
    store.meta.putSync(KEY_VERSION, keysVersion(store) + 1);
  });
  return key;
}

/** Revokes the one active key whose first characters are `prefix` (8 to 12 characters). */
export async function revokeKey(store: Store, prefix: string): Promise<StoredKey> {
  if (prefix.length < 8 || prefix.length > KEY_PREFIX_LENGTH) {
    throw new KeyError(`a prefix has 8 to ${KEY_PREFIX_LENGTH} characters`);
  }
  const matches = storedKeys(store).filter((k) => k.revokedAt === null && k.prefix.startsWith(prefix));
  if (matches.length === 0) throw new KeyError(`no active key starts with "${prefix}"`);
  if (matches.length > 1) throw new KeyError(`"${prefix}" is ambiguous: ${matches.length} active keys start with it`);
  const match = matches[0]!;
  const { hash, ...rest } = match;
  const revoked: StoredKey = { ...rest, revokedAt: Date.now() };
  await store.root.transaction(() => {
    store.keys.putSync(hash, revoked);
    store.meta.putSync(KEY_VERSION, keysVersion(store) + 1);
  });
  return revoked;
}

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
    keys.set(key, workspace);
  }
  return keys;
}
