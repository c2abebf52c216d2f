// Resolves x-service-key to a workspace on every request. Keys from SERVICE_KEYS are held as
// given; stored keys (LMDB, or PostgreSQL in cluster mode: a KeySource) by hash, in memory. A
// request never waits on the source: a poll re-reads the keys in the background when their
// version changed, and while the source cannot be read the last keys read stay in force. A
// bounded cache of recently seen keys spares most requests the sha256; it is dropped whenever
// the stored keys change, so a revocation takes effect at once. The cache keeps each key's sha256
// too: a write an edge hands on carries it (keyHashOf), and a cluster leader checks a follower's
// forwarded write by it against its own keys (workspaceOfHash), a map lookup at both ends.
import type { Logger } from '../telemetry/logger.ts';
import { createFirstKey, hashKey, MAX_SERVICE_KEY_LENGTH, type KeyRecord, type KeySource } from './key-store.ts';

const CACHE_MAX_KEYS = 10_000;
/** A cached answer for a key that matches no active key ('' is never a workspace name). */
const UNKNOWN = '';
/** The workspace the first start creates (CONTRACT.md §1). */
const FIRST_WORKSPACE = 'default';

/** A recently seen key: its workspace (UNKNOWN when it matches no active key) and its sha256. */
interface Seen {
  workspace: string;
  hash: string;
}

export class Authenticator {
  private readonly source: KeySource;
  private readonly envKeys: Map<string, string>;
  /** SERVICE_KEYS by sha256 → workspace, and key → sha256 (hashed once, here). */
  private readonly envByHash = new Map<string, string>();
  private readonly envHashes = new Map<string, string>();
  private readonly log: Logger | null;
  /** sha256 → workspace, active stored keys only. */
  private storedByHash = new Map<string, string>();
  /**
   * Recently seen keys → their workspace, or UNKNOWN: a client stuck on a wrong key (the usual
   * 401 flood) then costs a map lookup, not a sha256 per request. Dropped on every key change.
   */
  private cache = new Map<string, Seen>();
  private version = -1;
  private timer: NodeJS.Timeout | null = null;
  /** The reload under way: polls never overlap, however slow the source. */
  private reloading: Promise<boolean> | null = null;
  /** Set while the source cannot be read (logged once, until it can be again). */
  private unreachable = false;
  /** When the stored keys were last read (performance.now()), or null before the first read. */
  private lastReadAtMs: number | null = null;
  /** The first start could not be decided yet (source unreachable): retried on every poll. */
  private firstStartPending: ((key: string) => void) | null = null;
  private stopped = false;
  /** The stored keys last read (revoked ones too), for edge threads (keysChanged). */
  private lastList: KeyRecord[] = [];
  /** Told every stored key whenever they change: the main thread passes them to its edge threads. */
  keysChanged: ((keys: KeyRecord[]) => void) | null = null;

  constructor(source: KeySource, envKeys: Map<string, string>, log: Logger | null = null) {
    this.source = source;
    this.envKeys = envKeys;
    this.log = log;
    for (const [key, workspace] of envKeys) {
      const hash = hashKey(key);
      this.envHashes.set(key, hash);
      this.envByHash.set(hash, workspace);
    }
  }

  /** The stored keys last read. */
  get storedKeys(): KeyRecord[] {
    return this.lastList;
  }

  /** The workspace of `key`, or null for a missing, unknown or revoked key. */
  workspaceOf(key: string): string | null {
    if (key === '' || key.length > MAX_SERVICE_KEY_LENGTH) return null;
    const fromEnv = this.envKeys.get(key);
    if (fromEnv !== undefined) return fromEnv;
    const seen = this.cache.get(key) ?? this.see(key);
    return seen.workspace === UNKNOWN ? null : seen.workspace;
  }

  /** The sha256 (hex) of `key`, as key stores hold it; from the cache for a key just authenticated. */
  keyHashOf(key: string): string {
    return this.envHashes.get(key) ?? (this.cache.get(key) ?? this.see(key)).hash;
  }

  /**
   * The workspace of the key whose sha256 is `hash`, or null for an unknown or revoked one: what
   * workspaceOf(key) answers for that key (SERVICE_KEYS first), for a leader checking a write a
   * follower authenticated with keys that may be stale.
   */
  workspaceOfHash(hash: string): string | null {
    return this.envByHash.get(hash) ?? this.storedByHash.get(hash) ?? null;
  }

  private see(key: string): Seen {
    const hash = hashKey(key);
    const seen: Seen = { workspace: this.storedByHash.get(hash) ?? UNKNOWN, hash };
    if (this.cache.size >= CACHE_MAX_KEYS) this.cache = new Map();
    this.cache.set(key, seen);
    return seen;
  }

  /**
   * Re-reads the stored keys when their version changed (the keys CLI ran, here or on another
   * node). Resolves to false when the source could not be read: the last keys read stay in force.
   */
  reload(): Promise<boolean> {
    this.reloading ??= this.readKeys().finally(() => {
      this.reloading = null;
    });
    return this.reloading;
  }

  /**
   * Reads the stored keys, then the first start (CONTRACT.md §1): with no key in the environment
   * and none stored, creates workspace "default" with one key and hands it to `firstKey` (to
   * print once). The check and the insert are one transaction of the source, so of several
   * nodes starting at once exactly one creates it; when the source cannot be reached now, this
   * is tried again on every poll. Then polls for key changes every `pollMs` (CONTRACT.md §1: a
   * change counts within 1 s).
   */
  async start(pollMs: number, firstKey: (key: string) => void): Promise<void> {
    await this.reload();
    if (this.envKeys.size === 0) {
      this.firstStartPending = firstKey;
      await this.tryFirstStart();
    }
    const tick = (): void => {
      this.timer = setTimeout(() => {
        void this.poll().finally(() => {
          if (!this.stopped) tick();
        });
      }, pollMs);
      this.timer.unref();
    };
    if (!this.stopped) tick();
  }

  /** Stops polling and releases the source (a read under way then fails quietly). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.source.close();
  }

  private async poll(): Promise<void> {
    if (this.firstStartPending !== null) await this.tryFirstStart();
    else await this.reload();
  }

  private async tryFirstStart(): Promise<void> {
    const created = this.firstStartPending;
    if (created === null) return;
    try {
      const key = await createFirstKey(this.source, FIRST_WORKSPACE);
      this.firstStartPending = null;
      if (key !== null) created(key);
    } catch (error) {
      if (!this.stopped) this.unreachableNow(error);
    }
    await this.reload();
  }

  private async readKeys(): Promise<boolean> {
    try {
      // The version first: a change made between the two reads is read again on the next poll.
      const version = await this.source.version();
      if (version !== this.version) {
        const byHash = new Map<string, string>();
        const keys = await this.source.list();
        if (this.stopped) return false;
        for (const k of keys) if (k.revokedAt === null) byHash.set(k.hash, k.workspace);
        this.storedByHash = byHash;
        this.cache = new Map();
        this.version = version;
        this.lastList = keys;
        this.keysChanged?.(keys);
      }
      this.lastReadAtMs = performance.now();
      if (this.unreachable) {
        this.unreachable = false;
        this.log?.info('stored keys can be read again');
      }
      return true;
    } catch (error) {
      if (!this.stopped) this.unreachableNow(error);
      return false;
    }
  }

  /**
   * Milliseconds since the stored keys were last read (the version, and the keys when it moved),
   * Infinity before the first read. A node whose reads fail keeps its last keys; this says how old.
   */
  keysAgeMs(nowMs: number = performance.now()): number {
    return this.lastReadAtMs === null ? Infinity : nowMs - this.lastReadAtMs;
  }

  /** The last read of the stored keys failed (the last keys read stay in force). */
  get keysUnreachable(): boolean {
    return this.unreachable;
  }

  private unreachableNow(error: unknown): void {
    if (this.unreachable) return;
    this.unreachable = true;
    this.log?.error({ err: error }, 'cannot read the stored keys; the last keys read stay in force until they can be read again');
  }
}
