// A workspace's state: its device actors, its customers and its catalog actor. Workspaces share
// nothing: a did or a product id means something only inside its workspace (CONTRACT.md §3).
import { CatalogActor } from './catalog-actor.ts';
import type { Customer, DeviceActor } from './device-actor.ts';

export class Workspace {
  readonly name: string;
  readonly devices = new Map<string, DeviceActor>();
  readonly customers = new Map<string, Customer>();
  readonly catalog = new CatalogActor();

  constructor(name: string) {
    this.name = name;
  }

  customer(id: string): Customer {
    let customer = this.customers.get(id);
    if (customer === undefined) {
      customer = { id, attributes: new Map() };
      this.customers.set(id, customer);
    }
    return customer;
  }
}

export class Workspaces {
  private readonly byName = new Map<string, Workspace>();

  get(name: string): Workspace {
    let ws = this.byName.get(name);
    if (ws === undefined) {
      ws = new Workspace(name);
      this.byName.set(name, ws);
    }
    return ws;
  }

  all(): IterableIterator<Workspace> {
    return this.byName.values();
  }
}
