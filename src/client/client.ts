// createClient: one typed method per endpoint of the spec. Every write goes into the queue and
// leaves in a POST /batch; its promise settles with that write's own answer.
import { randomBytes } from 'node:crypto';
import { validIdempotencyKey } from '../http/printable.ts';
import { resolveOptions, type ClientOptions } from './options.ts';
import type {
  AppLaunch,
  Collection,
  Identify,
  LaunchAnswer,
  Logout,
  Mapping,
  Product,
  PushToken,
  SuccessAnswer,
  TrackEvent,
  WriteMethod,
  WriteOptions,
} from './types.ts';
import { WriteQueue, type QueueStats } from './write-queue.ts';

export interface IntakeClient {
  /** POST /mcrs_appl_v1: resolves with the device's did (new when none usable was sent) and a new sid. */
  appLaunch(body: AppLaunch, options?: WriteOptions): Promise<LaunchAnswer>;
  /** POST /msv_cevt */
  trackEvent(body: TrackEvent, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /msv_cs_id */
  identify(body: Identify, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /logout */
  logout(body: Logout, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /mpush_token */
  pushToken(body: PushToken, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /product (merge-upsert) */
  upsertProduct(body: Product, options?: WriteOptions): Promise<SuccessAnswer>;
  /** DELETE /product/:id */
  deleteProduct(id: string, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /collection (merge-upsert) */
  upsertCollection(body: Collection, options?: WriteOptions): Promise<SuccessAnswer>;
  /** DELETE /collection/:id */
  deleteCollection(id: string, options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /collection/:id/products/add: the collection and every product must exist. */
  addProductsToCollection(collectionId: string, products: Mapping['products'], options?: WriteOptions): Promise<SuccessAnswer>;
  /** POST /collection/:id/products/remove */
  removeProductsFromCollection(collectionId: string, products: Mapping['products'], options?: WriteOptions): Promise<SuccessAnswer>;
  /** Sends every queued write now; resolves once all of them are settled (it never rejects). */
  flush(): Promise<void>;
  /** Refuses new writes (ClientClosedError), sends what is queued, resolves once all is settled. */
  close(): Promise<void>;
  /** How much the queue holds now. */
  stats(): QueueStats;
}

/**
 * `:id` in a path, percent-encoded as in a URL (the server decodes it). An unpaired surrogate
 * becomes U+FFFD first, as it does in a body (README "Strings"): `deleteProduct('a\ud800')`
 * deletes what `upsertProduct({id: 'a\ud800'})` made. encodeURIComponent throws a URIError on
 * one, which left the method throwing instead of returning a rejected promise (a review).
 */
const segment = (id: string) => encodeURIComponent(id.replace(/\p{Surrogate}/gu, '\ufffd'));

export function createClient(clientOptions: ClientOptions): IntakeClient {
  const options = resolveOptions(clientOptions);
  const queue = new WriteQueue(options);
  // The keys this client makes: a random 128-bit prefix of its own and a counter. As unique as
  // a random UUID per write (two clients share a prefix with a probability of 2^-128, and each
  // createClient() draws a new one), for a tenth of the garbage: randomUUID's string, pieced
  // together from hex pairs, was 580 of the 2,400 bytes the client allocated per write (profiled
  // 2026-11-30). Until then every write had a UUID.
  const keyPrefix = randomBytes(16).toString('base64url');
  let keyCount = 0;
  const nextKey = (): string => `${keyPrefix}.${(keyCount++).toString(36)}`;
  const write = <T>(method: WriteMethod, path: string, body: unknown, writeOptions: WriteOptions | undefined): Promise<T> => {
    const key = writeOptions?.idempotencyKey;
    // A key the server would not take is refused here: an empty one means "no key" to the server
    // (CONTRACT.md §10), so a retry after a lost answer would apply the write twice (a review).
    if (key !== undefined && !validIdempotencyKey(key)) return Promise.reject(new TypeError(`idempotencyKey must be 1 to 255 printable ASCII characters without spaces (0x21-0x7E), got ${JSON.stringify(key.slice(0, 300))}`));
    // The key is made here, once: every retry of this write, in any batch, carries the same one.
    return queue.enqueue<T>(method, path, body, key ?? nextKey());
  };

  return {
    appLaunch: (body, o) => write<LaunchAnswer>('POST', '/mcrs_appl_v1', body, o),
    trackEvent: (body, o) => write<SuccessAnswer>('POST', '/msv_cevt', body, o),
    identify: (body, o) => write<SuccessAnswer>('POST', '/msv_cs_id', body, o),
    logout: (body, o) => write<SuccessAnswer>('POST', '/logout', body, o),
    pushToken: (body, o) => write<SuccessAnswer>('POST', '/mpush_token', body, o),
    upsertProduct: (body, o) => write<SuccessAnswer>('POST', '/product', body, o),
    deleteProduct: (id, o) => write<SuccessAnswer>('DELETE', `/product/${segment(id)}`, undefined, o),
    upsertCollection: (body, o) => write<SuccessAnswer>('POST', '/collection', body, o),
    deleteCollection: (id, o) => write<SuccessAnswer>('DELETE', `/collection/${segment(id)}`, undefined, o),
    addProductsToCollection: (id, products, o) => write<SuccessAnswer>('POST', `/collection/${segment(id)}/products/add`, { products }, o),
    removeProductsFromCollection: (id, products, o) => write<SuccessAnswer>('POST', `/collection/${segment(id)}/products/remove`, { products }, o),
    flush: () => queue.flush(),
    close: () => queue.close(),
    stats: () => queue.stats(),
  };
}
