// The copy-on-write contract between the actors and a snapshot in progress. A snapshot is the
// state at one journal position P, written in slices while requests keep changing the state.
// Every actor method that changes or deletes an entity first calls `beforeChange(entity)`: if a
// snapshot is running and has not written that entity yet, it writes it now, as it was at P.
// Entities created while a snapshot runs carry its epoch, which tells it to leave them out.
import type { CatalogCollection, CatalogProduct } from './catalog-actor.ts';
import type { Customer } from './customer.ts';
import type { DeviceActor } from './device-actor.ts';

export type TrackedEntity = DeviceActor | Customer | CatalogProduct | CatalogCollection;

export interface ChangeTracker {
  /** The epoch stamped on new entities: equal to a running snapshot's, so it skips them. */
  readonly epoch: number;
  beforeChange(entity: TrackedEntity): void;
}

/** For state no snapshot will ever see (tests of pure parts, one-off exports). */
export const NO_TRACKING: ChangeTracker = { epoch: 0, beforeChange() {} };
