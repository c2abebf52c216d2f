// A mixed workload of every kind of write, from several concurrent clients, in which every write
// carries a unique token so that each acknowledged (200) write can be found in the journal
// afterwards. Used by the crash test and bench/crashloop.
import { LAUNCH_INFO } from './bodies.ts';
import { seededRandom } from './random.ts';

export interface WorkloadTarget {
  url: string;
  key: string;
}

/** `${kind}:${token}` of every write answered 200. */
export type Acknowledged = Set<string>;

/** The token a journal record carries, as the workload sets it (see recordToken). */
export function recordToken(record: { kind: string; did?: string; sid?: string; data: any }): string {
  const d = record.data;
  switch (record.kind) {
    case 'app_launch':
      return `app_launch:${record.sid}`;
    case 'event':
      return `event:${d.name}`;
    case 'identify':
      return `identify:${d.info[0].value}`;
    case 'push_token':
      return `push_token:${d.token}`;
    case 'logout':
      return `logout:${record.did}`;
    case 'product_upsert':
      return `product_upsert:${d.description}`;
    case 'product_delete':
      return `product_delete:${d.id}`;
    case 'collection_upsert':
      return `collection_upsert:${d.url}`;
    case 'collection_delete':
      return `collection_delete:${d.id}`;
    default:
      return `${record.kind}:${d.products[0]}`;
  }
}

class Client {
  private n = 0;
  private readonly devices: string[] = [];
  private readonly products: string[] = [];
  private readonly collections: string[] = [];

  constructor(
    private readonly target: WorkloadTarget,
    private readonly name: string,
    private readonly acknowledged: Acknowledged,
    private readonly rnd: () => number,
  ) {}

  private token(): string {
    return `${this.name}-${++this.n}`;
  }

  private async post(path: string, body: unknown, method = 'POST'): Promise<{ status: number; body: any }> {
    const res = await fetch(this.target.url + path, {
      method,
      headers: { 'x-service-key': this.target.key, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text === '' ? null : JSON.parse(text) };
  }

  /** Sends one write; records it when answered 200. Throws when the server is gone. */
  private async write(tokenKey: string, path: string, body: unknown, method = 'POST'): Promise<any> {
    const res = await this.post(path, body, method);
    if (res.status === 200) this.acknowledged.add(tokenKey);
    return res.status === 200 ? res.body : null;
  }

  private pick<T>(list: T[]): T | undefined {
    return list.length === 0 ? undefined : list[Math.floor(this.rnd() * list.length)];
  }

  async step(): Promise<void> {
    const t = this.token();
    const did = this.pick(this.devices);
    const r = this.rnd();
    if (r < 0.1 || did === undefined) {
      const res = await this.post('/mcrs_appl_v1', { timestamp: 1_700_000_000_000, info: { ...LAUNCH_INFO, appVersionName: t.slice(-8) }, ...(did && this.rnd() < 0.3 ? { did } : {}) });
      if (res.status === 200) {
        this.acknowledged.add(`app_launch:${res.body.sid}`);
        if (!this.devices.includes(res.body.did)) this.devices.push(res.body.did);
      }
    } else if (r < 0.4) await this.write(`event:${t}`, '/msv_cevt', { did, name: t, timestamp: 1_700_000_000_000, info: [{ name: 'n', value: this.n, type: 'long' }] });
    else if (r < 0.48) {
      const customer = this.rnd() < 0.7 ? { clientCustomerId: `${this.name}-c${Math.floor(this.rnd() * 5)}` } : {};
      await this.write(`identify:${t}`, '/msv_cs_id', { did, ...customer, timestamp: 1_700_000_000_000, info: [{ name: this.rnd() < 0.5 ? 'email' : 'tier', value: t, type: 'string' }] });
    } else if (r < 0.54) await this.write(`push_token:${t}`, '/mpush_token', { did, type: this.rnd() < 0.5 ? 'fcm' : 'apns', token: t, timestamp: 1_700_000_000_000 });
    else if (r < 0.56) {
      this.devices.splice(this.devices.indexOf(did), 1);
      await this.write(`logout:${did}`, '/logout', { did });
    } else if (r < 0.72) {
      const id = this.rnd() < 0.5 || this.products.length === 0 ? `${t}-p` : this.pick(this.products)!;
      if (await this.write(`product_upsert:${t}`, '/product', { id, name: `Product ${id}`, description: t, price: this.n })) {
        if (!this.products.includes(id)) this.products.push(id);
      }
    } else if (r < 0.76 && this.products.length > 2) {
      const id = this.products.splice(Math.floor(this.rnd() * this.products.length), 1)[0]!;
      await this.write(`product_delete:${id}`, `/product/${encodeURIComponent(id)}`, undefined, 'DELETE');
    } else if (r < 0.84) {
      const id = this.rnd() < 0.4 || this.collections.length === 0 ? `${t}-c` : this.pick(this.collections)!;
      if (await this.write(`collection_upsert:${t}`, '/collection', { id, name: `Collection ${id}`, url: t })) {
        if (!this.collections.includes(id)) this.collections.push(id);
      }
    } else if (r < 0.86 && this.collections.length > 2) {
      const id = this.collections.splice(Math.floor(this.rnd() * this.collections.length), 1)[0]!;
      await this.write(`collection_delete:${id}`, `/collection/${encodeURIComponent(id)}`, undefined, 'DELETE');
    } else {
      const collection = this.pick(this.collections);
      if (collection === undefined) return;
      // A fresh product first: its id makes the mapping record unique.
      const fresh = `${t}-m`;
      if (!(await this.write(`product_upsert:${t}-m`, '/product', { id: fresh, name: fresh, description: `${t}-m` }))) return;
      this.products.push(fresh);
      const others = Array.from({ length: Math.floor(this.rnd() * 4) }, () => this.pick(this.products)!);
      if (this.rnd() < 0.75) await this.write(`collection_products_add:${fresh}`, `/collection/${encodeURIComponent(collection)}/products/add`, { products: [fresh, ...others] });
      else await this.write(`collection_products_remove:${fresh}`, `/collection/${encodeURIComponent(collection)}/products/remove`, { products: [fresh, ...others] });
    }
  }
}


/**
 * Runs `clients` concurrent clients until `stop()` is called or the server goes away. Resolves
 * when every client has stopped. Writes answered 200 are added to `acknowledged`.
 */
export function runWorkload(target: WorkloadTarget, clients: number, acknowledged: Acknowledged, seed: number): { stop(): void; done: Promise<void> } {
  let stopped = false;
  const loops = Array.from({ length: clients }, async (_, i) => {
    const client = new Client(target, `s${seed}w${i}`, acknowledged, seededRandom(seed * 1000 + i));
    while (!stopped) {
      try {
        await client.step();
      } catch {
        return; // connection refused or reset: the server is gone
      }
    }
  });
  return {
    stop() {
      stopped = true;
    },
    done: Promise.all(loops).then(() => undefined),
  };
}
