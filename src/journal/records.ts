// The journal's record format: one record per accepted write, in acceptance order.
// `seq` is not stored in the record: a batch is stored under the seq of its first record, and
// record i of that batch has seq = key + i.
import type {
  AppLaunch,
  Collection,
  Identify,
  Logout,
  Product,
  PushToken,
  TrackEvent,
} from '../schemas/endpoints.ts';

interface Base<K extends string, D> {
  kind: K;
  workspace: string;
  /** Server receive time, Unix ms. */
  at: number;
  /** The validated request body (timestamps as numbers), or the id for deletes and mappings. */
  data: D;
  /**
   * Written with an Idempotency-Key: the hash of its scope (12 bytes) and of the body (8 bytes),
   * so that a restart knows the key exactly as a crash leaves the write (idempotency/key-table.ts).
   * Never exported. The first and the last journaled item of a batch sent with an
   * Idempotency-Key header carry the batch's key too, 20 bytes more.
   */
  idem?: Uint8Array;
  /**
   * On the last journaled item of a batch sent with an Idempotency-Key header: the batch's
   * results, packed (idempotency/batch-answer-record.ts), for a retry after a restart or a leader
   * change. Never exported.
   */
  answer?: string;
}

/** Device records carry the device, its session and its customer at the time of the write. */
interface DeviceBase<K extends string, D> extends Base<K, D> {
  did: string;
  sid: string;
  customer: string | null;
}

export type AppLaunchRecord = DeviceBase<'app_launch', AppLaunch>;
export type EventRecord = DeviceBase<'event', TrackEvent>;
export type IdentifyRecord = DeviceBase<'identify', Identify>;
export type LogoutRecord = DeviceBase<'logout', Logout>;
export type PushTokenRecord = DeviceBase<'push_token', PushToken>;
export type ProductUpsertRecord = Base<'product_upsert', Product>;
export type ProductDeleteRecord = Base<'product_delete', { id: string }>;
export type CollectionUpsertRecord = Base<'collection_upsert', Collection>;
export type CollectionDeleteRecord = Base<'collection_delete', { id: string }>;
/** `products` is de-duplicated, in order of first occurrence. */
export type MappingAddRecord = Base<'collection_products_add', { id: string; products: string[] }>;
export type MappingRemoveRecord = Base<'collection_products_remove', { id: string; products: string[] }>;

export type DeviceRecord = AppLaunchRecord | EventRecord | IdentifyRecord | LogoutRecord | PushTokenRecord;
export type CatalogRecord =
  | ProductUpsertRecord
  | ProductDeleteRecord
  | CollectionUpsertRecord
  | CollectionDeleteRecord
  | MappingAddRecord
  | MappingRemoveRecord;
export type JournalRecord = DeviceRecord | CatalogRecord;
export type RecordKind = JournalRecord['kind'];

export const RECORD_KINDS: readonly RecordKind[] = [
  'app_launch',
  'event',
  'identify',
  'logout',
  'push_token',
  'product_upsert',
  'product_delete',
  'collection_upsert',
  'collection_delete',
  'collection_products_add',
  'collection_products_remove',
];
