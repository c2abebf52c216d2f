// One catalog actor per workspace: the only owner of its products, collections and memberships.
// `check*` methods are the reference checks of live writes (they read, never change); `apply*`
// methods are the only mutations, shared by live writes and journal replay, and each tells the
// change tracker before it changes or deletes an entity (change-tracker.ts).
import { detail, MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type { Collection, Product } from '../schemas/endpoints.ts';
import { CatalogMailbox } from './catalog-mailbox.ts';
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
  /**
   * Ids of the collections holding this product, so deleting it is not a scan: one string for
   * the usual single collection, a Set from the second on (derived state, never snapshotted).
   */
  memberOf: string | Set<string> | null = null;
  snapEpoch: number;

  constructor(id: string, epoch: number) {
    this.id = id;
    this.snapEpoch = epoch;
  }

  link(collectionId: string): void {
    const of = this.memberOf;
    if (of === null) this.memberOf = collectionId;
    else if (typeof of === 'string') {
      if (of !== collectionId) this.memberOf = new Set([of, collectionId]);
    } else of.add(collectionId);
  }

  unlink(collectionId: string): void {
    const of = this.memberOf;
    if (of === collectionId) this.memberOf = null;
    else if (of !== null && typeof of !== 'string') of.delete(collectionId);
  }

  collectionIds(): Iterable<string> {
    const of = this.memberOf;
    return of === null ? [] : typeof of === 'string' ? [of] : of;
  }
}

export class CatalogCollection {
  readonly id: string;
  readonly fields: Record<string, unknown> = {};
  /** Member product ids, in the order they were added (replaced whole by a staged change). */
  members = new Set<string>();
  snapEpoch: number;

  constructor(id: string, epoch: number) {
    this.id = id;
    this.snapEpoch = epoch;
  }
}

export class CatalogActor {
  /** Catalog messages run through here, one at a time, in arrival order (catalog-mailbox.ts). */
  readonly mailbox = new CatalogMailbox();
  readonly products = new Map<string, CatalogProduct>();
  readonly collections = new Map<string, CatalogCollection>();
  /** @internal for StagedMembership */
  readonly tracker: ChangeTracker;

  /**
   * Bumped by clear(): a job that awaits between slices (a big mapping) holds objects of the
   * state it started on, and must not go on with them once the state was rebuilt.
   */
  private generationNow = 0;

  constructor(tracker: ChangeTracker) {
    this.tracker = tracker;
  }

  get generation(): number {
    return this.generationNow;
  }

  /** Drops every product and collection (the maps stay: see Workspace.clear()). */
  clear(): void {
    this.products.clear();
    this.collections.clear();
    this.generationNow++;
  }

  /** Creating needs a name (CONTRACT.md §5). */
  checkProductUpsert(body: Product): ValidationDetail[] | null {
    return this.products.has(body.id) || body.name !== undefined ? null : [detail.required(['name'])];
  }

  checkCollectionUpsert(body: Collection): ValidationDetail[] | null {
    return this.collections.has(body.id) || body.name !== undefined ? null : [detail.required(['name'])];
  }

  /** Add: every listed product must exist; one detail per distinct missing id, at the index of its first occurrence. */
  missingProducts(ids: readonly string[], firstIndex: ArrayLike<number>, found: ValidationDetail[]): void {
    for (let i = 0; i < ids.length && found.length < MAX_DETAILS; i++) {
      const id = ids[i]!;
      if (!this.products.has(id)) found.push(detail.productNotFound(firstIndex[i]!, id));
    }
  }

  /** Add and remove: the collection must exist (checked before any product). */
  checkCollection(collectionId: string): ValidationDetail[] | null {
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
    for (const collectionId of product.collectionIds()) {
      const collection = this.collections.get(collectionId);
      if (collection === undefined) continue;
      this.tracker.beforeChange(collection);
      collection.members.delete(id);
    }
    product.memberOf = null;
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
    for (const productId of collection.members) this.products.get(productId)?.unlink(id);
    this.collections.delete(id);
  }

  /** Adds the products that exist (all of them on a live write, checked just before). */
  applyMappingAdd(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    this.tracker.beforeChange(collection);
    for (const productId of products) {
      const product = this.products.get(productId);
      if (product === undefined || collection.members.has(productId)) continue;
      // The product's own id string: request strings may be slices of a much larger one.
      collection.members.add(product.id);
      product.link(collectionId);
    }
  }

  applyMappingRemove(collectionId: string, products: readonly string[]): void {
    const collection = this.collections.get(collectionId);
    if (collection === undefined) return;
    this.tracker.beforeChange(collection);
    for (const productId of products) {
      if (collection.members.delete(productId)) this.products.get(productId)?.unlink(collectionId);
    }
  }

  /**
   * A membership change too big for one event-loop turn, built beside the live member set and
   * swapped in at once by commit(): nothing observes a half-applied request. The back-links it
   * adds or removes along the way are only read by catalog writes, which wait in the mailbox.
   */
  stageMembership(collection: CatalogCollection): StagedMembership {
    return new StagedMembership(this, collection);
  }

  /** After loading a snapshot: the products' back-links to their collections. */
  relinkMembers(): void {
    for (const collection of this.collections.values()) {
      for (const productId of collection.members) this.products.get(productId)?.link(collection.id);
    }
  }
}

/**
 * A membership change built beside the live member set, in steps small enough for one turn each:
 * a remove first names the products that leave (remove()), then the members that stay are copied
 * (copyMembers(); nothing to copy when every member leaves), then an add appends its products
 * (add()). The live set is not touched until commit(). Per id, only the staged set and a remove's
 * list of leaving ids are kept (the staged set's first `kept` entries are the copied members, the
 * rest the added ones: that is all abortSome() needs to undo the back-links).
 */
export class StagedMembership {
  private readonly next = new Set<string>();
  private readonly old: IterableIterator<string>;
  private copying = false;
  private copied = false;
  /** Members copied from the live set: the first `kept` entries of `next`. */
  private kept = 0;
  /** Ids of the members a remove takes out (unlinked already), and as a set once copying starts. */
  private readonly leaving: string[] = [];
  private leavingSet: Set<string> | null = null;
  private undo: Iterator<string> | null = null;
  private undoPhase = 0;
  private undoIndex = 0;

  constructor(
    private readonly catalog: CatalogActor,
    private readonly collection: CatalogCollection,
  ) {
    this.old = collection.members.values();
  }

  /** Remove, before any copying: takes `product` out if it is a member (unlinks it now). */
  remove(product: CatalogProduct): void {
    if (this.copying) throw new Error('StagedMembership.remove after copyMembers started');
    if (!this.collection.members.has(product.id)) return;
    product.unlink(this.collection.id);
    this.leaving.push(product.id);
  }

  /** Copies up to `count` current members, but the leaving ones; true when all are copied. */
  copyMembers(count: number): boolean {
    this.copying = true;
    if (this.copied) return true;
    const leaving = this.leaving;
    // Every member leaves (ids are distinct, and each was a member): nothing to copy.
    if (leaving.length === this.collection.members.size) return (this.copied = true);
    if (leaving.length > 0 && (this.leavingSet === null || this.leavingSet.size < leaving.length)) {
      const set = (this.leavingSet ??= new Set());
      for (let i = set.size, end = Math.min(leaving.length, set.size + count); i < end; i++) set.add(leaving[i]!);
      return false;
    }
    const leavingSet = this.leavingSet;
    for (let i = 0; i < count; i++) {
      const step = this.old.next();
      if (step.done === true) return (this.copied = true);
      const productId = step.value;
      if (leavingSet !== null && leavingSet.has(productId)) continue;
      this.next.add(productId);
      this.kept++;
    }
    return false;
  }

  /** Adds an existing product (after all members were copied). */
  add(product: CatalogProduct): void {
    if (!this.copied) throw new Error('StagedMembership.add before copyMembers finished');
    const size = this.next.size;
    this.next.add(product.id);
    if (this.next.size !== size) product.link(this.collection.id);
  }

  /** Makes the staged set the collection's members, in one step. */
  commit(): void {
    this.catalog.tracker.beforeChange(this.collection);
    this.collection.members = this.next;
  }

  /**
   * Undoes the back-links of a change that will not be committed, up to `count` ids per call;
   * true when done: unlinks the added products, then links the leaving ones back.
   */
  abortSome(count: number): boolean {
    const { products } = this.catalog;
    const id = this.collection.id;
    for (let n = 0; n < count; n++) {
      if (this.undo === null) {
        if (this.undoPhase === 0) this.undo = this.next.values();
        else if (this.undoPhase === 1) this.undo = this.leaving.values();
        else return true;
      }
      const step = this.undo.next();
      if (step.done === true) {
        this.undo = null;
        this.undoPhase++;
        continue;
      }
      if (this.undoPhase === 0) {
        if (this.undoIndex++ >= this.kept) products.get(step.value)?.unlink(id);
      } else products.get(step.value)?.link(id);
    }
    return false;
  }
}
