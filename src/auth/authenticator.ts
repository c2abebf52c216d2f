// Resolves x-service-key to a workspace on every request. Keys from SERVICE_KEYS are held as
// given; stored keys by hash. A bounded cache of recently seen keys spares most requests the
// sha256; it is dropped whenever the stored keys change, so a revocation takes effect at once.
import type { Store } from '../journal/store.ts';
import { hashKey, keysVersion, storedKeys } from './key-store.ts';

const CACHE_MAX_KEYS = 10_000;
const MAX_KEY_LENGTH = 256;
/** A cached answer for a key that matches no active key ('' is never a workspace name). */
const UNKNOWN = '';

export class Authenticator {
  private readonly store: Store;
  private readonly envKeys: Map<string, string>;
  /** sha256 → workspace, active stored keys only. */
  private storedByHash = new Map<string, string>();
  /**
   * Recently seen keys → their workspace, or UNKNOWN: a client stuck on a wrong key (the usual
   * 401 flood) then costs a map lookup, not a sha256 per request. Dropped on every key change.
   */
  private cache = new Map<string, string>();
  private version = -1;
  private timer: NodeJS.Timeout | null = null;

  constructor(store: Store, envKeys: Map<string, string>) {
    this.store = store;
    this.envKeys = envKeys;
    this.reload();
  }

  /** The workspace of `key`, or null for a missing, unknown or revoked key. */
  workspaceOf(key: string): string | null {
    if (key === '' || key.length > MAX_KEY_LENGTH) return null;
    const fromEnv = this.envKeys.get(key);
    if (fromEnv !== undefined) return fromEnv;
    const cached = this.cache.get(key);
    if (cached !== undefined) return cached === UNKNOWN ? null : cached;
    const workspace = this.storedByHash.get(hashKey(key));
    if (this.cache.size >= CACHE_MAX_KEYS) this.cache = new Map();
    this.cache.set(key, workspace ?? UNKNOWN);
    return workspace ?? null;
  }

  get hasAnyKey(): boolean {
    return this.envKeys.size > 0 || storedKeys(this.store).length > 0;
  }

  /** Re-reads the stored keys when their version changed (another process ran the keys CLI). */
  reload(): void {
    this.store.root.resetReadTxn();
    const version = keysVersion(this.store);
    if (version === this.version) return;
    const byHash = new Map<string, string>();
    for (const k of storedKeys(this.store)) if (k.revokedAt === null) byHash.set(k.hash, k.workspace);
    this.storedByHash = byHash;
    this.cache = new Map();
    this.version = version;
  }

  /** Polls for key changes; CONTRACT.md §1 asks for a change to count within 1 s. */
  watch(intervalMs: number): void {
    this.timer = setInterval(() => this.reload(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
