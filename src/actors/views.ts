// Plain JSON views of the actors' state, one object per entity: what `export` prints.
import { attributesToJson } from './attributes.ts';
import type { CatalogActor } from './catalog-actor.ts';
import type { DeviceActor } from './device-actor.ts';
import type { Workspace } from './workspace.ts';

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

export function* customerViews(ws: Workspace): Generator<Record<string, unknown>> {
  const devicesOf = new Map<string, string[]>();
  for (const device of ws.devices.values()) {
    const id = device.customerId;
    if (id === null) continue;
    let list = devicesOf.get(id);
    if (list === undefined) devicesOf.set(id, (list = []));
    list.push(device.did);
  }
  for (const customer of ws.customers.values()) {
    yield {
      workspace: ws.name,
      id: customer.id,
      attributes: attributesToJson(customer.attributes),
      devices: devicesOf.get(customer.id) ?? [],
    };
  }
}

export function* productViews(workspace: string, catalog: CatalogActor): Generator<Record<string, unknown>> {
  for (const product of catalog.products.values()) yield { workspace, id: product.id, ...product.fields };
}

export function* collectionViews(workspace: string, catalog: CatalogActor): Generator<Record<string, unknown>> {
  for (const collection of catalog.collections.values()) {
    yield { workspace, id: collection.id, ...collection.fields, products: [...collection.members] };
  }
}
