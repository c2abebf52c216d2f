// One catalog actor per workspace: the only owner of its products, collections and memberships.
// `check*` methods are the reference checks of live writes (they read, never change); `apply*`
// methods are the only mutations, shared by live writes and journal replay.
import { detail, MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type { Collection, Product } from '../schemas/endpoints.ts';

export type ProductState = { id: string } & Record<string, unknown>;

export interface CollectionState {
  id: string;
  fields: Record<string, unknown>;
  members: Set<string>;
}

/** Sets each present field, removes each field sent as null, keeps absent ones. */
function mergeFields(target: Record<string, unknown>, body: Record<string, unknown>): void {
  for (const key of Object.keys(body)) {
    const value = body[key];
    if (value === null) delete target[key];
    else target[key] = value;
  }
}

/** Ids in order of first occurrence, each once. */
export function distinctIds(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

export class CatalogActor {
  readonly products = new Map<string, ProductState>();
  readonly collections = new Map<string, CollectionState>();
  /** product id → ids of the collections it belongs to (so deleting a product is not a scan). */
  private readonly memberOf = new Map<string, Set<string>>();

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
      product = { id: body.id };
      this.products.set(body.id, product);
    }
    mergeFields(product, body as Record<string, unknown>);
  }

  applyProductDelete(id: string): void {
    if (!this.products.delete(id)) return;
    const collections = this.memberOf.get(id);
    if (collections === undefined) return;
    for (const collectionId of collections) this.collections.get(collectionId)?.members.delete(id);
    this.memberOf.delete(id);
  }

  applyCollectionUpsert(body: Collection): void {
    let collection = this.collections.get(body.id);
    if (collection === undefined) {
      collection = { id: body.id, fields: {}, members: new Set() };
      this.collections.set(body.id, collection);
    }
    const { id: _id, ...fields } = body;
    mergeFields(collection.fields, fields);
  }

  applyCollectionDelete(id: string): void {
    const collection = this.collections.get(id);
    if (collection === undefined) return;
    for (const productId of collection.members) {
      const of = this.memberOf.get(productId);
      if (of === undefined) continue;
      of.delete(id);
      if (of.size === 0) this.memberOf.delete(productId);
    }
    this.collections.delete(id);
  }

  /** Adds the products that exist (all of them on a live write, checked just before). */
  applyMappingAdd(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    for (const productId of products) {
      if (!this.products.has(productId) || collection.members.has(productId)) continue;
      collection.members.add(productId);
      let of = this.memberOf.get(productId);
      if (of === undefined) this.memberOf.set(productId, (of = new Set()));
      of.add(collectionId);
    }
  }

  applyMappingRemove(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    for (const productId of products) {
      if (!collection.members.delete(productId)) continue;
      const of = this.memberOf.get(productId);
      if (of === undefined) continue;
      of.delete(collectionId);
      if (of.size === 0) this.memberOf.delete(productId);
    }
  }
}
