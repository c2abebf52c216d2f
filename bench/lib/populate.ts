// Filling a running server with data through its HTTP API (autocannon, fixed request counts),
// for the benches that need a big state: devices, products in collections, events.
import autocannon from 'autocannon';
import { LAUNCH_BODY, LAUNCH_INFO } from './bodies.ts';

export interface Target {
  url: string;
  key: string;
}

interface Step {
  path: string;
  body: (i: number) => string;
}

/** Progress on stderr (off for tests). */
let showProgress = true;
export function quiet(): void {
  showProgress = false;
}

/** Sends `amount` POSTs at `connections` concurrency; fails unless every answer is 2xx. */
async function send(target: Target, title: string, amount: number, step: Step, connections = 128): Promise<number> {
  let i = 0;
  const started = performance.now();
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: target.url,
        connections,
        amount,
        title,
        headers: { 'x-service-key': target.key, 'content-type': 'application/json' },
        requests: [{ method: 'POST', path: step.path, setupRequest: (req) => ({ ...req, body: step.body(i++) }) }],
      },
      (error, done) => (error ? reject(error) : resolve(done)),
    );
    if (showProgress) autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${title}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  const seconds = (performance.now() - started) / 1000;
  if (showProgress) process.stderr.write(`${title}: ${amount} in ${seconds.toFixed(1)} s (${Math.round(amount / seconds)}/s)\n`);
  return seconds;
}

export function launchDevices(target: Target, count: number): Promise<number> {
  return send(target, `${count} app launches`, count, { path: '/mcrs_appl_v1', body: () => LAUNCH_BODY });
}

/** A few devices to send events for (their dids). */
export async function someDevices(target: Target, count: number): Promise<string[]> {
  const dids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${target.url}/mcrs_appl_v1`, {
      method: 'POST',
      headers: { 'x-service-key': target.key, 'content-type': 'application/json' },
      body: JSON.stringify({ timestamp: 1_700_000_000_000, info: LAUNCH_INFO }),
    });
    dids.push(((await res.json()) as { did: string }).did);
  }
  return dids;
}

/** Products `${prefix}0` .. `${prefix}${count - 1}`. */
export function createProducts(target: Target, count: number, prefix = 'p'): Promise<number> {
  return send(target, `${count} products`, count, {
    path: '/product',
    body: (i) => JSON.stringify({ id: `${prefix}${i}`, name: `Product ${i}`, price: (i % 500) + 0.99, originalHigherPrice: (i % 500) + 5, status: 'inStock', url: `https://shop.example/p/${i}`, image: `https://cdn.example/p/${i}.jpg` }),
  });
}

export async function productsInCollections(target: Target, products: number, collections: number): Promise<void> {
  await createProducts(target, products);
  await send(target, `${collections} collections`, collections, {
    path: '/collection',
    body: (i) => JSON.stringify({ id: `c${i}`, name: `Collection ${i}`, url: `https://shop.example/c/${i}` }),
  });
  const perCollection = Math.floor(products / collections);
  let c = 0;
  // Each collection gets its own slice of products; the path varies, so send these with fetch.
  const queue = Array.from({ length: collections }, (_, k) => k);
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let k = queue.shift(); k !== undefined; k = queue.shift()) {
        const ids = Array.from({ length: perCollection }, (_, j) => `p${k * perCollection + j}`);
        const res = await fetch(`${target.url}/collection/c${k}/products/add`, {
          method: 'POST',
          headers: { 'x-service-key': target.key, 'content-type': 'application/json' },
          body: JSON.stringify({ products: ids }),
        });
        if (res.status !== 200) throw new Error(`mapping add c${k}: ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        c++;
      }
    }),
  );
  process.stderr.write(`${c} collections mapped, ${perCollection} products each\n`);
}

export function trackEvents(target: Target, count: number, dids: readonly string[]): Promise<number> {
  return send(target, `${count} track events`, count, {
    path: '/msv_cevt',
    body: (i) =>
      JSON.stringify({
        did: dids[i % dids.length],
        name: 'product_view',
        timestamp: 1_700_000_000_000 + i,
        info: [
          { name: 'sku', value: `p${i % 100_000}`, type: 'string' },
          { name: 'qty', value: 1 + (i % 3), type: 'integer' },
        ],
      }),
  });
}
