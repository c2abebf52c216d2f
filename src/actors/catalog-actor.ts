// One catalog actor per workspace: the only owner of its products, collections and memberships.
// `check*` methods are the reference checks of live writes (they read, never change); `apply*`
// methods are the only mutations, shared by live writes and journal replay, and each tells the
// change tracker before it changes or deletes an entity (change-tracker.ts).
import { detail, MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type { Collection, Product } from '../schemas/endpoints.ts';
import type { ChangeTracker } from './change-tracker.ts';

/** Sets each present field, removes each field sent as null, keeps absent ones. */
function mergeFields(target: Record<string, unknown>, body: Record<string, unknown>): void {
  for (const key of Object.keys(body)) {
    if (key === 'id') continue;
    const value = body[key];
    if (value === null) delete target[key];
    else target[key] = value;
  }
}

export class CatalogProduct {
  readonly id: string;
  /** Every field but id, as last merged. */
  readonly fields: Record<string, unknown> = {};
  snapEpoch: number;

  constructor(id: string, epoch: number) {
    this.id = id;
    this.snapEpoch = epoch;
  }
}

export class CatalogCollection {
  readonly id: string;
  readonly fields: Record<string, unknown> = {};
  /** Member product ids, in the order they were added. */
  readonly members = new Set<string>();
  snapEpoch: number;

  constructor(id: string, epoch: number) {
    this.id = id;
    this.snapEpoch = epoch;
  }
}

/** Ids in order of first occurrence, each once. */
export function distinctIds(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

export class CatalogActor {
  readonly products = new Map<string, CatalogProduct>();
  readonly collections = new Map<string, CatalogCollection>();
  /** product id → ids of the collections it belongs to (so deleting a product is not a scan). */
  private readonly memberOf = new Map<string, Set<string>>();
  private readonly tracker: ChangeTracker;

  constructor(tracker: ChangeTracker) {
    this.tracker = tracker;
  }

  /** Creating needs a name (CONTRACT.md §5). */
  checkProductUpsert(body: Product): ValidationDetail[] | null {
    return this.products.has(body.id) || body.name !== undefined ? null : [detail.required(['name'])];
  }

  checkCollectionUpsert(body: Collection): ValidationDetail[] | null {
    return this.collections.has(body.id) || body.name !== undefined ? null : [detail.required(['name'])];
  }

  /** Add: the collection and every listed product must exist (one detail per distinct missing id). */
  checkMappingAdd(collectionId: string, products: readonly string[]): ValidationDetail[] | null {
    if (!this.collections.has(collectionId)) return [detail.collectionNotFound(collectionId)];
    let missing: ValidationDetail[] | null = null;
    let reported: Set<string> | null = null;
    for (let i = 0; i < products.length; i++) {
      const id = products[i]!;
      if (this.products.has(id)) continue;
      reported ??= new Set();
      if (reported.has(id)) continue;
      reported.add(id);
      (missing ??= []).push(detail.productNotFound(i, id));
      if (missing.length >= MAX_DETAILS) break;
    }
    return missing;
  }

  /** Remove: only the collection must exist; non-members are ignored. */
  checkMappingRemove(collectionId: string): ValidationDetail[] | null {
    return this.collections.has(collectionId) ? null : [detail.collectionNotFound(collectionId)];
  }

  applyProductUpsert(body: Product): void {
    let product = this.products.get(body.id);
    if (product === undefined) {
      product = new CatalogProduct(body.id, this.tracker.epoch);
      this.products.set(body.id, product);
    } else this.tracker.beforeChange(product);
    mergeFields(product.fields, body as Record<string, unknown>);
  }

  applyProductDelete(id: string): void {
    const product = this.products.get(id);
    if (product === undefined) return;
    this.tracker.beforeChange(product);
    this.products.delete(id);
    const collections = this.memberOf.get(id);
    if (collections === undefined) return;
    for (const collectionId of collections) {
      const collection = this.collections.get(collectionId);
      if (collection === undefined) continue;
      this.tracker.beforeChange(collection);
      collection.members.delete(id);
    }
    this.memberOf.delete(id);
  }

  applyCollectionUpsert(body: Collection): void {
    let collection = this.collections.get(body.id);
    if (collection === undefined) {
      collection = new CatalogCollection(body.id, this.tracker.epoch);
      this.collections.set(body.id, collection);
    } else this.tracker.beforeChange(collection);
    mergeFields(collection.fields, body as Record<string, unknown>);
  }

  applyCollectionDelete(id: string): void {
    const collection = this.collections.get(id);
    if (collection === undefined) return;
    this.tracker.beforeChange(collection);
    for (const productId of collection.members) this.unlink(productId, id);
    this.collections.delete(id);
  }

  /** Adds the products that exist (all of them on a live write, checked just before). */
  applyMappingAdd(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    this.tracker.beforeChange(collection);
    for (const productId of products) {
      if (!this.products.has(productId) || collection.members.has(productId)) continue;
      collection.members.add(productId);
      this.link(productId, collectionId);
    }
  }

  applyMappingRemove(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    this.tracker.beforeChange(collection);
    for (const productId of products) {
      if (collection.members.delete(productId)) this.unlink(productId, collectionId);
    }
  }

  /** Puts a collection read from a snapshot in place (its members' back-links included). */
  restoreCollection(collection: CatalogCollection): void {
    this.collections.set(collection.id, collection);
    for (const productId of collection.members) this.link(productId, collection.id);
  }

  private link(productId: string, collectionId: string): void {
    let of = this.memberOf.get(productId);
    if (of === undefined) this.memberOf.set(productId, (of = new Set()));
    of.add(collectionId);
  }

  private unlink(productId: string, collectionId: string): void {
    const of = this.memberOf.get(productId);
    if (of === undefined) return;
    of.delete(collectionId);
    if (of.size === 0) this.memberOf.delete(productId);
  }
}
