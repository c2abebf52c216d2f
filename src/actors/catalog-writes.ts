// Live catalog writes. Each goes through its workspace catalog actor's mailbox, so catalog writes
// are applied strictly in arrival order, even when a mapping request's body is still being parsed
// by a worker (it holds its place in line) or is being applied in slices (it holds the actor).
// The reference checks run when a write's turn comes, against the state all earlier writes left.
import { MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type { Collection, Product } from '../schemas/endpoints.ts';
import { SUCCESS_BODY, type Acceptor, type Reply } from './acceptor.ts';
import type { CatalogProduct } from './catalog-actor.ts';
import type { CatalogJob } from './catalog-mailbox.ts';
import { journalProducts } from '../journal/packed-ids.ts';
import { distinctIds, type MappingIds } from './mapping-ids.ts';
import type { Workspace } from './workspace.ts';

/**
 * Ids handled per event-loop turn by a big mapping (a few milliseconds of work); a mapping of at
 * most this many ids is applied in one go.
 */
export const MAPPING_SLICE_IDS = 1024;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

export class CatalogWrites {
  constructor(private readonly acceptor: Acceptor) {}

  /** Runs `job` in the catalog's turn, unless the write is a retry answered from the first one. */
  private inTurn(ws: Workspace, reply: Reply, job: CatalogJob): void {
    ws.catalog.mailbox.submit(() => (this.acceptor.retried(reply) ? undefined : job()), (error) => reply.crashed(error));
  }

  /** For a mapping whose body came back from a worker (its fingerprint set): in its turn already. */
  retried(reply: Reply): boolean {
    return this.acceptor.retried(reply);
  }

  productUpsert(ws: Workspace, body: Product, at: number, reply: Reply): void {
    this.inTurn(ws, reply, () => {
      const problems = ws.catalog.checkProductUpsert(body);
      if (problems !== null) return this.acceptor.refuse(problems, reply);
      this.acceptor.accept({ kind: 'product_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
    });
  }

  /** Deleting is idempotent: a retried delete answers 200 too. */
  productDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.inTurn(ws, reply, () => this.acceptor.accept({ kind: 'product_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY));
  }

  collectionUpsert(ws: Workspace, body: Collection, at: number, reply: Reply): void {
    this.inTurn(ws, reply, () => {
      const problems = ws.catalog.checkCollectionUpsert(body);
      if (problems !== null) return this.acceptor.refuse(problems, reply);
      this.acceptor.accept({ kind: 'collection_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
    });
  }

  collectionDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.inTurn(ws, reply, () => this.acceptor.accept({ kind: 'collection_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY));
  }

  /** A mapping whose body was parsed and validated on this thread. */
  mapping(ws: Workspace, collectionId: string, add: boolean, products: readonly string[], at: number, reply: Reply): void {
    const mapping = distinctIds(products);
    this.inTurn(ws, reply, () => this.applyMapping(ws, collectionId, add, mapping, at, reply));
  }

  /**
   * Takes the place in line of a mapping whose body is still being parsed elsewhere (a worker);
   * the returned function gives it its job once the body is ready.
   */
  reserve(ws: Workspace, reply: Reply): (job: CatalogJob) => void {
    return ws.catalog.mailbox.reserve((error) => reply.crashed(error));
  }

  /** Within the catalog's turn: the mapping's checks, then its change; sliced when it is big. */
  applyMapping(ws: Workspace, collectionId: string, add: boolean, mapping: MappingIds, at: number, reply: Reply): void | Promise<void> {
    const noCollection = ws.catalog.checkCollection(collectionId);
    if (noCollection !== null) return this.acceptor.refuse(noCollection, reply);
    if (mapping.ids.length > MAPPING_SLICE_IDS) return this.applyMappingInSlices(ws, collectionId, add, mapping, at, reply);
    if (add) {
      const missing: ValidationDetail[] = [];
      ws.catalog.missingProducts(mapping, 0, mapping.ids.length, missing);
      if (missing.length > 0) return this.acceptor.refuse(missing, reply);
    }
    this.acceptor.accept(
      { kind: add ? 'collection_products_add' : 'collection_products_remove', workspace: ws.name, at, data: { id: collectionId, products: mapping.ids } },
      reply,
      SUCCESS_BODY,
    );
  }

  /**
   * A big mapping, a slice of ids per turn so other clients are served in between. It stays
   * atomic: the existence check finishes before anything changes, the new member set is built
   * beside the live one and swapped in at once, and the catalog's other writes wait meanwhile.
   */
  private async applyMappingInSlices(ws: Workspace, collectionId: string, add: boolean, mapping: MappingIds, at: number, reply: Reply): Promise<void> {
    const catalog = ws.catalog;
    const { ids } = mapping;
    // Adds look every product up once: the check keeps what it found for the staging.
    const found: CatalogProduct[] = [];
    if (add) {
      const missing: ValidationDetail[] = [];
      for (let from = 0; from < ids.length && missing.length < MAX_DETAILS; from += MAPPING_SLICE_IDS) {
        catalog.findProducts(mapping, from, Math.min(ids.length, from + MAPPING_SLICE_IDS), found, missing);
        await nextTurn();
      }
      if (missing.length > 0) return this.acceptor.refuse(missing, reply);
    }
    let leaving: Set<string> | null = null;
    if (!add) {
      leaving = new Set();
      for (let i = 0; i < ids.length; i++) {
        leaving.add(ids[i]!);
        if (i % MAPPING_SLICE_IDS === MAPPING_SLICE_IDS - 1) await nextTurn();
      }
    }
    const staged = catalog.stageMembership(catalog.collections.get(collectionId)!);
    while (!staged.copyMembers(MAPPING_SLICE_IDS, leaving)) await nextTurn();
    for (let i = 0; i < found.length; i++) {
      staged.add(found[i]!);
      if (i % MAPPING_SLICE_IDS === MAPPING_SLICE_IDS - 1) await nextTurn();
    }
    const failure = this.acceptor.journal.failed;
    if (failure !== null) {
      staged.abort();
      return reply.failed(failure);
    }
    staged.commit();
    // Ids a worker already encoded go into the record as those bytes (packed-ids.ts).
    const products = mapping.packed !== undefined ? journalProducts(mapping.packed) : ids;
    this.acceptor.journalApplied(
      { kind: add ? 'collection_products_add' : 'collection_products_remove', workspace: ws.name, at, data: { id: collectionId, products } },
      reply,
      SUCCESS_BODY,
    );
  }
}
