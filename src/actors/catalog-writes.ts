// Live catalog writes. Each goes through its workspace catalog actor's mailbox, so catalog writes
// are applied strictly in arrival order, even when a mapping request's body is still being parsed
// by a worker (it holds its place in line) or is being applied in slices (it holds the actor).
// The reference checks run when a write's turn comes, against the state all earlier writes left.
import { detail, MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type { Collection, Product } from '../schemas/endpoints.ts';
import { SUCCESS_BODY, type Acceptor, type Reply } from './acceptor.ts';
import type { CatalogJob } from './catalog-mailbox.ts';
import { journalProducts } from '../journal/packed-ids.ts';
import { NotLeadingError } from '../journal/journal.ts';
import { distinctIds, type MappingIds } from './mapping-ids.ts';
import type { Workspace } from './workspace.ts';

/**
 * Ids handled per event-loop turn by a big mapping (a few milliseconds of work); a mapping of at
 * most this many ids is applied in one go.
 */
export const MAPPING_SLICE_IDS = 1024;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * While other writes are being journaled, a big mapping takes at most a tenth of the main thread:
 * after every MAPPING_BUSY_MS of its slices it pauses MAPPING_PAUSE_PER_BUSY times as long (at
 * most MAPPING_MAX_PAUSE_MS). Alone it only yields a turn between slices, as before.
 */
const MAPPING_BUSY_MS = 2;
const MAPPING_PAUSE_PER_BUSY = 9;
const MAPPING_MAX_PAUSE_MS = 50;

/**
 * Paces a big mapping's slices (issue 19). A client looping big mappings sends the next one as
 * soon as one is answered, so every cost of a mapping (this thread's slices, the worker's parse,
 * the garbage of both) grows with how fast it is applied: under track events at 256 connections
 * that took wrk's rate from 24,700 to 10,500 requests/s in one run. Paced, a mapping applied beside
 * other writes takes longer, and those writes keep most of the machine.
 */
class SlicePace {
  private busySince = performance.now();
  private busyMs = 0;
  private seenSeq: number;

  constructor(private readonly journal: { readonly lastAppendedSeq: number }) {
    this.seenSeq = journal.lastAppendedSeq;
  }

  /** Between two slices: a turn for other clients, or a pause once this mapping had its share. */
  async next(): Promise<void> {
    this.busyMs += performance.now() - this.busySince;
    if (this.busyMs >= MAPPING_BUSY_MS) {
      // Other writes were appended since the last pause: the server is busy with them.
      const othersWrote = this.journal.lastAppendedSeq !== this.seenSeq;
      this.seenSeq = this.journal.lastAppendedSeq;
      if (othersWrote) await sleep(Math.min(this.busyMs * MAPPING_PAUSE_PER_BUSY, MAPPING_MAX_PAUSE_MS));
      else await nextTurn();
      this.busyMs = 0;
    } else await nextTurn();
    this.busySince = performance.now();
  }
}

/** The catalog's state was rebuilt while a sliced job waited (CatalogActor.generation). */
class StateRebuilt extends Error {}

/** A catalog write's work in its turn (CatalogWrites.turn). */
type CatalogWrite<T> = (this: CatalogWrites, ws: Workspace, value: T, at: number, reply: Reply) => void;

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

  /**
   * Runs `write(ws, value, at, reply)` in the catalog's turn, unless the write is a retry answered
   * from the first one. With nothing ahead of it in the mailbox it runs at once, as the mailbox
   * would run it then, without the closures and the queue entry a queued write needs (a batch of
   * 1,000 product upserts made 4,000 objects for them).
   */
  private turn<T>(ws: Workspace, reply: Reply, write: CatalogWrite<T>, value: T, at: number): void {
    if (!ws.catalog.mailbox.idle) return this.inTurn(ws, reply, () => write.call(this, ws, value, at, reply));
    try {
      if (!this.acceptor.retried(reply)) write.call(this, ws, value, at, reply);
    } catch (error) {
      reply.crashed(error);
    }
  }

  productUpsert(ws: Workspace, body: Product, at: number, reply: Reply): void {
    this.turn(ws, reply, this.upsertProduct, body, at);
  }

  private upsertProduct(ws: Workspace, body: Product, at: number, reply: Reply): void {
    const problems = ws.catalog.checkProductUpsert(body);
    if (problems !== null) return this.acceptor.refuse(problems, reply);
    this.acceptor.accept({ kind: 'product_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
  }

  /** Deleting is idempotent: a retried delete answers 200 too. */
  productDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.turn(ws, reply, this.deleteProduct, id, at);
  }

  private deleteProduct(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.acceptor.accept({ kind: 'product_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY);
  }

  collectionUpsert(ws: Workspace, body: Collection, at: number, reply: Reply): void {
    this.turn(ws, reply, this.upsertCollection, body, at);
  }

  private upsertCollection(ws: Workspace, body: Collection, at: number, reply: Reply): void {
    const problems = ws.catalog.checkCollectionUpsert(body);
    if (problems !== null) return this.acceptor.refuse(problems, reply);
    this.acceptor.accept({ kind: 'collection_upsert', workspace: ws.name, at, data: body }, reply, SUCCESS_BODY);
  }

  collectionDelete(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.turn(ws, reply, this.deleteCollection, id, at);
  }

  private deleteCollection(ws: Workspace, id: string, at: number, reply: Reply): void {
    this.acceptor.accept({ kind: 'collection_delete', workspace: ws.name, at, data: { id } }, reply, SUCCESS_BODY);
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
    if (mapping.count > MAPPING_SLICE_IDS) return this.applyMappingInSlices(ws, collectionId, add, mapping, at, reply);
    const ids = mapping.list();
    if (add) {
      const missing: ValidationDetail[] = [];
      ws.catalog.missingProducts(ids, mapping.firstIndex, missing);
      if (missing.length > 0) return this.acceptor.refuse(missing, reply);
    }
    this.acceptor.accept(
      { kind: add ? 'collection_products_add' : 'collection_products_remove', workspace: ws.name, at, data: { id: collectionId, products: ids } },
      reply,
      SUCCESS_BODY,
    );
  }

  /**
   * A big mapping, a slice of ids per turn so other clients are served in between. It stays
   * atomic: the new member set is built beside the live one and swapped in at once, an add that
   * names a missing product changes nothing (its back-links are undone), and the catalog's other
   * writes wait meanwhile. An add copies the members first and then looks each product up and
   * stages it in the same step; a remove looks up and unlinks the leaving products, then copies
   * the members that stay (none when every member leaves). Ids are read one slice at a time
   * (mapping-ids.ts), so nothing per id outlives its turn but the staged set.
   */
  private async applyMappingInSlices(ws: Workspace, collectionId: string, add: boolean, mapping: MappingIds, at: number, reply: Reply): Promise<void> {
    try {
      await this.applyMappingSlices(ws, collectionId, add, mapping, at, reply);
    } catch (error) {
      if (!(error instanceof StateRebuilt)) throw error;
      // Nothing to undo: the staged set and the back-links it changed belong to the dropped
      // state. Not applied: the client may send it again (503, Retry-After).
      reply.failed(this.acceptor.journal.failed ?? new NotLeadingError('the state was rebuilt (this node stepped down) while the mapping was applied; nothing was applied'));
    }
  }

  private async applyMappingSlices(ws: Workspace, collectionId: string, add: boolean, mapping: MappingIds, at: number, reply: Reply): Promise<void> {
    const catalog = ws.catalog;
    const { products } = catalog;
    const count = mapping.count;
    const ids = mapping.reader();
    const staged = catalog.stageMembership(catalog.collections.get(collectionId)!);
    const slices = new SlicePace(this.acceptor.journal);
    // A cluster leader that steps down rebuilds its state between two slices (workspaces cleared,
    // the journal recovered): the staged set holds the dropped collection, and went on linking
    // the rebuilt products to it, then unlinked them, or swapped members into the detached
    // object and journaled the add (found by a review). Each slice checks first.
    const generation = catalog.generation;
    const pace = {
      next: async (): Promise<void> => {
        await slices.next();
        if (catalog.generation !== generation) throw new StateRebuilt();
      },
    };
    if (add) {
      while (!staged.copyMembers(MAPPING_SLICE_IDS)) await pace.next();
      const { firstIndex } = mapping;
      const missing: ValidationDetail[] = [];
      for (let from = 0; from < count && missing.length < MAX_DETAILS; from += MAPPING_SLICE_IDS) {
        const to = Math.min(count, from + MAPPING_SLICE_IDS);
        for (let i = from; i < to; i++) {
          const id = ids.next();
          const product = products.get(id);
          if (product === undefined) {
            missing.push(detail.productNotFound(firstIndex[i]!, id));
            if (missing.length >= MAX_DETAILS) break;
          } else if (missing.length === 0) staged.add(product);
        }
        await pace.next();
      }
      if (missing.length > 0) {
        while (!staged.abortSome(MAPPING_SLICE_IDS)) await pace.next();
        return this.acceptor.refuse(missing, reply);
      }
    } else {
      for (let from = 0; from < count; from += MAPPING_SLICE_IDS) {
        const to = Math.min(count, from + MAPPING_SLICE_IDS);
        for (let i = from; i < to; i++) {
          const product = products.get(ids.next());
          if (product !== undefined) staged.remove(product);
        }
        await pace.next();
      }
      while (!staged.copyMembers(MAPPING_SLICE_IDS)) await pace.next();
    }
    const failure = this.acceptor.journal.failed;
    if (failure !== null) {
      while (!staged.abortSome(MAPPING_SLICE_IDS)) await pace.next();
      return reply.failed(failure);
    }
    staged.commit();
    // Ids a worker already encoded go into the record as those bytes (packed-ids.ts).
    const record = mapping.packed !== undefined ? journalProducts(mapping.packed) : mapping.list();
    this.acceptor.journalApplied(
      { kind: add ? 'collection_products_add' : 'collection_products_remove', workspace: ws.name, at, data: { id: collectionId, products: record } },
      reply,
      SUCCESS_BODY,
    );
  }
}
