// A workspace's devices by did, in 64 Maps instead of one. One Map of a million devices is one
// hash table of 29 MB (a large object with two million pointers): every full GC that marks it
// pushes them onto V8's marking worklists at once, and glibc malloc keeps those worklists'
// memory afterwards in its arenas (a standalone test, a million entries and three full GCs: 31 to
// 38 MB of malloc'd memory, none of it in the JS heap). 64 tables of ~16,000 devices each cost
// the same per device and are marked one after the other (13 MB in the same test). The shard is
// the index of the did's first character in nanoid's alphabet (ids are 21 random characters of
// it), so devices spread evenly; any other did (a client's typo) still has exactly one shard.
import { urlAlphabet } from 'nanoid';
import type { DeviceActor } from './device-actor.ts';

const SHARDS = 64;
const SHARD_OF = new Uint8Array(128);
for (let i = 0; i < urlAlphabet.length; i++) SHARD_OF[urlAlphabet.charCodeAt(i)] = i % SHARDS;

export class DeviceMap {
  private readonly shards: Array<Map<string, DeviceActor>> = Array.from({ length: SHARDS }, () => new Map());
  private count = 0;

  private shard(did: string): Map<string, DeviceActor> {
    return this.shards[SHARD_OF[did.charCodeAt(0) & 127]!]!;
  }

  get size(): number {
    return this.count;
  }

  get(did: string): DeviceActor | undefined {
    return this.shard(did).get(did);
  }

  has(did: string): boolean {
    return this.shard(did).has(did);
  }

  set(did: string, device: DeviceActor): this {
    const shard = this.shard(did);
    const size = shard.size;
    shard.set(did, device);
    this.count += shard.size - size;
    return this;
  }

  clear(): void {
    for (const shard of this.shards) shard.clear();
    this.count = 0;
  }

  /** Live like a Map's: devices added to a shard not reached yet are visited too. */
  *values(): Generator<DeviceActor, void, undefined> {
    for (const shard of this.shards) yield* shard.values();
  }
}
