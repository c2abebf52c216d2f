// An independent model of CONTRACT.md §6, written plainly from the contract (not from the
// actors): given the journal's records in order, the state they produce, in the shape of
// `npm run export`'s state exports. Tests compare the server's state with it.

type Row = Record<string, any>;

export interface ModelState {
  devices: Row[];
  customers: Row[];
  products: Row[];
  collections: Row[];
}

export function modelFromRecords(records: Iterable<Row>): ModelState {
  const devices = new Map<string, Row>();
  const customers = new Map<string, Row>();
  const products = new Map<string, Row>();
  const collections = new Map<string, Row>();
  const key = (ws: string, id: string) => `${ws}\u0000${id}`;
  const merge = (target: Row, info: Row[] | undefined) => {
    for (const { name, value, type } of info ?? []) {
      if (value === null) delete target[name];
      else target[name] = { type, value };
    }
  };
  const setFields = (target: Row, body: Row) => {
    for (const [k, v] of Object.entries(body)) {
      if (k === 'id') continue;
      if (v === null) delete target[k];
      else target[k] = v;
    }
  };

  for (const r of records) {
    const ws = r.workspace as string;
    const d = r.data;
    switch (r.kind) {
      case 'app_launch': {
        const k = key(ws, r.did);
        const device = devices.get(k) ?? { workspace: ws, did: r.did, loggedOut: false, customer: null, pushTokens: {} };
        device.sid = r.sid;
        device.profile = d.info;
        devices.set(k, device);
        break;
      }
      case 'identify': {
        const device = devices.get(key(ws, r.did))!;
        if (d.clientCustomerId !== undefined) {
          device.customer = d.clientCustomerId;
          if (!customers.has(key(ws, d.clientCustomerId))) customers.set(key(ws, d.clientCustomerId), { workspace: ws, id: d.clientCustomerId, attributes: {} });
        }
        if (device.customer !== null) merge(customers.get(key(ws, device.customer))!.attributes, d.info);
        else if (d.info !== undefined && d.info.length > 0) merge((device.anonymousAttributes ??= {}), d.info);
        break;
      }
      case 'push_token':
        devices.get(key(ws, r.did))!.pushTokens[d.type] = d.token;
        break;
      case 'logout':
        devices.get(key(ws, r.did))!.loggedOut = true;
        break;
      case 'product_upsert': {
        const product = products.get(key(ws, d.id)) ?? { workspace: ws, id: d.id };
        setFields(product, d);
        products.set(key(ws, d.id), product);
        break;
      }
      case 'product_delete':
        if (products.delete(key(ws, d.id))) {
          for (const c of collections.values()) if (c.workspace === ws) c.products = c.products.filter((p: string) => p !== d.id);
        }
        break;
      case 'collection_upsert': {
        const collection = collections.get(key(ws, d.id)) ?? { workspace: ws, id: d.id, products: [] };
        setFields(collection, d);
        collections.set(key(ws, d.id), collection);
        break;
      }
      case 'collection_delete':
        collections.delete(key(ws, d.id));
        break;
      case 'collection_products_add': {
        const c = collections.get(key(ws, d.id));
        if (c) for (const p of d.products) if (products.has(key(ws, p)) && !c.products.includes(p)) c.products.push(p);
        break;
      }
      case 'collection_products_remove': {
        const c = collections.get(key(ws, d.id));
        if (c) c.products = c.products.filter((p: string) => !d.products.includes(p));
        break;
      }
    }
  }
  const customerRows = [...customers.values()].map((c) => ({
    ...c,
    devices: [...devices.values()].filter((dv) => dv.workspace === c.workspace && dv.customer === c.id).map((dv) => dv.did),
  }));
  return {
    devices: [...devices.values()],
    customers: customerRows,
    products: [...products.values()],
    collections: [...collections.values()],
  };
}

/** Rows in a stable order with their keys sorted, for deepEqual between model and export. */
export function canonical(state: ModelState): ModelState {
  const sortKeys = (value: any): any => {
    if (Array.isArray(value)) return value.map(sortKeys);
    if (value === null || typeof value !== 'object') return value;
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys(value[k])]));
  };
  const rows = (list: Row[], id: string) =>
    list
      .map((r) => sortKeys(r.devices ? { ...r, devices: [...r.devices].sort() } : r))
      .sort((a, b) => `${a.workspace}/${a[id]}`.localeCompare(`${b.workspace}/${b[id]}`));
  return { devices: rows(state.devices, 'did'), customers: rows(state.customers, 'id'), products: rows(state.products, 'id'), collections: rows(state.collections, 'id') };
}
