// A workspace's state: its device actors, its customers and its catalog actor. Workspaces share
// nothing: a did or a product id means something only inside its workspace (CONTRACT.md §3).
import { CatalogActor } from './catalog-actor.ts';
import { NO_TRACKING, type ChangeTracker } from './change-tracker.ts';
import { Customer } from './customer.ts';
import { DeviceMap } from './device-map.ts';

export class Workspace {
  readonly name: string;
  readonly devices = new DeviceMap();
  readonly customers = new Map<string, Customer>();
  readonly catalog: CatalogActor;
  readonly tracker: ChangeTracker;

  constructor(name: string, tracker: ChangeTracker) {
    this.name = name;
    this.tracker = tracker;
    this.catalog = new CatalogActor(tracker);
  }

  /**
   * Drops every device, customer, product and collection (the object stays, so requests that
   * hold it see the emptied state). Cluster mode: see Workspaces.clear().
   */
  clear(): void {
    this.devices.clear();
    this.customers.clear();
    this.catalog.clear();
  }

  customer(id: string): Customer {
    let customer = this.customers.get(id);
    if (customer === undefined) {
      customer = new Customer(id, this.tracker.epoch);
      this.customers.set(id, customer);
    }
    return customer;
  }
}

export type TrackerFactory = (workspace: string) => ChangeTracker;

export class Workspaces {
  private readonly byName = new Map<string, Workspace>();
  private readonly trackerFor: TrackerFactory;

  constructor(trackerFor: TrackerFactory = () => NO_TRACKING) {
    this.trackerFor = trackerFor;
  }

  get(name: string): Workspace {
    let ws = this.byName.get(name);
    if (ws === undefined) {
      ws = new Workspace(name, this.trackerFor(name));
      this.byName.set(name, ws);
    }
    return ws;
  }

  /**
   * Empties every workspace, before the state is rebuilt from the journal: a cluster leader that
   * stepped down drops the writes it applied that the cluster's journal may not hold. Workspace
   * objects are kept, not replaced: a request or a queued catalog job holding one then works on
   * the live state, never on a detached copy.
   */
  clear(): void {
    for (const ws of this.byName.values()) ws.clear();
  }

  all(): IterableIterator<Workspace> {
    return this.byName.values();
  }
}
