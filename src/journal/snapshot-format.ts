// How a snapshot's entities are written: a snapshot is a sequence of chunks, each a msgpack array
// of entries. Workspace names and launch profiles are written once and referred to by number
// (profiles are shared by many devices, in memory and on disk). An entry that refers to a
// workspace or profile always comes after the entry that defines it.
import type { AttributeBag, AttributeValue } from '../actors/attributes.ts';
import { CatalogCollection, CatalogProduct } from '../actors/catalog-actor.ts';
import type { TrackedEntity } from '../actors/change-tracker.ts';
import { Customer } from '../actors/customer.ts';
import { DeviceActor, type PushTokens } from '../actors/device-actor.ts';
import { ENTRY_BYTES } from '../idempotency/key-table.ts';
import type { LaunchInfoValue } from '../schemas/endpoints.ts';

export const ENTRY_WORKSPACE = 0;
export const ENTRY_PROFILE = 1;
export const ENTRY_DEVICE = 2;
export const ENTRY_CUSTOMER = 3;
export const ENTRY_PRODUCT = 4;
export const ENTRY_COLLECTION = 5;
/** Remembered Idempotency-Keys: key-table.ts's packed entries, in insertion order. */
export const ENTRY_KEYS = 6;

type Attributes = Array<[name: string, type: AttributeValue['type'], value: AttributeValue['value']]>;

export type Entry =
  | [typeof ENTRY_WORKSPACE, ws: number, name: string]
  | [typeof ENTRY_PROFILE, profile: number, info: LaunchInfoValue]
  | [typeof ENTRY_DEVICE, ws: number, did: string, sid: string, profile: number, customer: string | null, loggedOut: 0 | 1, tokens: PushTokens | null, anonymous: Attributes | null]
  | [typeof ENTRY_CUSTOMER, ws: number, id: string, attributes: Attributes]
  | [typeof ENTRY_PRODUCT, ws: number, id: string, fields: Record<string, unknown>]
  | [typeof ENTRY_COLLECTION, ws: number, id: string, fields: Record<string, unknown>, members: string[]]
  | [typeof ENTRY_KEYS, entries: Uint8Array];

export interface EntityCounts {
  devices: number;
  customers: number;
  products: number;
  collections: number;
  profiles: number;
  idempotencyKeys: number;
}

export function attributesToEntries(bag: AttributeBag): Attributes {
  const out: Attributes = [];
  for (const [name, { type, value }] of bag) out.push([name, type, value]);
  return out;
}

/** Turns entities into entries, defining workspaces and profiles on first use. */
export class SnapshotEncoder {
  private readonly workspaces = new Map<string, number>();
  private readonly profiles = new Map<LaunchInfoValue, number>();
  private entries: Entry[] = [];
  readonly counts: EntityCounts = { devices: 0, customers: 0, products: 0, collections: 0, profiles: 0, idempotencyKeys: 0 };

  get pending(): number {
    return this.entries.length;
  }

  add(workspace: string, entity: TrackedEntity): void {
    let ws = this.workspaces.get(workspace);
    if (ws === undefined) {
      ws = this.workspaces.size;
      this.workspaces.set(workspace, ws);
      this.entries.push([ENTRY_WORKSPACE, ws, workspace]);
    }
    if (entity instanceof DeviceActor) {
      let profile = this.profiles.get(entity.profile);
      if (profile === undefined) {
        profile = this.profiles.size;
        this.profiles.set(entity.profile, profile);
        this.entries.push([ENTRY_PROFILE, profile, entity.profile]);
        this.counts.profiles++;
      }
      this.entries.push([
        ENTRY_DEVICE,
        ws,
        entity.did,
        entity.sid,
        profile,
        entity.customerId,
        entity.loggedOut ? 1 : 0,
        entity.tokens === null ? null : { ...entity.tokens },
        entity.anonymous === null ? null : attributesToEntries(entity.anonymous),
      ]);
      this.counts.devices++;
    } else if (entity instanceof Customer) {
      this.entries.push([ENTRY_CUSTOMER, ws, entity.id, attributesToEntries(entity.attributes)]);
      this.counts.customers++;
    } else if (entity instanceof CatalogProduct) {
      this.entries.push([ENTRY_PRODUCT, ws, entity.id, { ...entity.fields }]);
      this.counts.products++;
    } else if (entity instanceof CatalogCollection) {
      this.entries.push([ENTRY_COLLECTION, ws, entity.id, { ...entity.fields }, [...entity.members]]);
      this.counts.collections++;
    }
  }

  /** A slice of remembered Idempotency-Keys (ENTRY_BYTES each). */
  addKeys(entries: Uint8Array): void {
    this.entries.push([ENTRY_KEYS, entries]);
    this.counts.idempotencyKeys += entries.byteLength / ENTRY_BYTES;
  }

  /** The entries added since the last take. */
  take(): Entry[] {
    const taken = this.entries;
    this.entries = [];
    return taken;
  }
}
