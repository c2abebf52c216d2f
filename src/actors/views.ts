// Plain JSON views of the actors' state, one object per entity: what `export` prints.
//
// Entities come sorted by id, not in the order of the maps that hold them. A map's order is its
// insertion history, and that history differs between two copies of the same state: a snapshot
// writes an entity that changed during its walk ahead of its turn (copy-on-write), and loads
// customers as devices link to them, so the same journal exported after a restart printed the
// same lines in another order (found by a review, 2026-11-29), and a follower could differ from
// its leader. Sorted, the same state prints the same bytes.
import { attributesToJson } from './attributes.ts';
import type { CatalogActor } from './catalog-actor.ts';
import type { DeviceActor } from './device-actor.ts';
import type { Workspace, Workspaces } from './workspace.ts';

/** `items` sorted by `id` in JavaScript's string order (UTF-16 code units), as `Array.prototype.sort` compares. */
export function sortedById<T>(items: Iterable<T>, id: (item: T) => string): T[] {
  return [...items].sort((a, b) => {
    const x = id(a);
    const y = id(b);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}

/** The workspaces by name. */
export function sortedWorkspaces(workspaces: Workspaces): Workspace[] {
  return sortedById(workspaces.all(), (ws) => ws.name);
}

export function deviceView(workspace: string, device: DeviceActor): Record<string, unknown> {
  return {
    workspace,
    did: device.did,
    sid: device.sid,
    loggedOut: device.loggedOut,
    customer: device.customerId,
    profile: device.profile,
    pushTokens: device.tokens ?? {},
    ...(device.anonymous !== null ? { anonymousAttributes: attributesToJson(device.anonymous) } : {}),
  };
}

export function* deviceViews(ws: Workspace): Generator<Record<string, unknown>> {
  for (const device of sortedById(ws.devices.values(), (d) => d.did)) yield deviceView(ws.name, device);
}

/** Customers by id, each with its devices' ids in order. */
export function* customerViews(ws: Workspace): Generator<Record<string, unknown>> {
  const devicesOf = new Map<string, string[]>();
  for (const device of ws.devices.values()) {
    const id = device.customerId;
    if (id === null) continue;
    let list = devicesOf.get(id);
    if (list === undefined) devicesOf.set(id, (list = []));
    list.push(device.did);
  }
  for (const customer of sortedById(ws.customers.values(), (c) => c.id)) {
    yield {
      workspace: ws.name,
      id: customer.id,
      attributes: attributesToJson(customer.attributes),
      devices: sortedById(devicesOf.get(customer.id) ?? [], (did) => did),
    };
  }
}

export function* productViews(workspace: string, catalog: CatalogActor): Generator<Record<string, unknown>> {
  for (const product of sortedById(catalog.products.values(), (p) => p.id)) yield { workspace, id: product.id, ...product.fields };
}

/** Collections by id; a collection's members stay in the order they were added (that order is state the journal fixes). */
export function* collectionViews(workspace: string, catalog: CatalogActor): Generator<Record<string, unknown>> {
  for (const collection of sortedById(catalog.collections.values(), (c) => c.id)) {
    yield { workspace, id: collection.id, ...collection.fields, products: [...collection.members] };
  }
}
