// autocannon, programmatic, with its progress display on stderr; a fixed rate goes through paced.ts.
import autocannon from 'autocannon';
import { pacedLoad } from './paced.ts';

export interface LoadResult {
  requestsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
  total: number;
}

export interface LoadOptions {
  url: string;
  path: string;
  method?: 'POST' | 'DELETE' | 'GET';
  body?: string;
  headers?: Record<string, string>;
  connections: number;
  durationSec: number;
  title: string;
}

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: options.url + options.path,
        method: options.method ?? 'POST',
        body: options.body,
        headers: { 'content-type': 'application/json', ...options.headers },
        connections: options.connections,
        duration: options.durationSec,
        title: options.title,
      },
      (error, done) => (error ? reject(error) : resolve(done)),
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
  return {
    requestsPerSec: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    total: result.requests.total,
  };
}

export interface TrackLatency {
  requests: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
  seconds: number;
}

/**
 * Track events for the devices `dids` (round robin) at `connections`, for `until` seconds or
 * until the promise `until` settles.
 */
export function trackEventLoad(url: string, key: string, dids: readonly string[], connections: number, until: number | Promise<unknown>): Promise<TrackLatency> {
  let i = 0;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url,
        connections,
        duration: typeof until === 'number' ? until : 600,
        headers: { 'x-service-key': key, 'content-type': 'application/json' },
        requests: [
          {
            method: 'POST',
            path: '/msv_cevt',
            setupRequest: (req) => ({
              ...req,
              body: JSON.stringify({ did: dids[i % dids.length], name: 'product_view', timestamp: 1_700_000_000_000, info: [{ name: 'sku', value: `p${i++ % 1000}`, type: 'string' }] }),
            }),
          },
        ],
      },
      (error, r) =>
        error
          ? reject(error)
          : resolve({ requests: r.requests.total, p50: r.latency.p50, p99: r.latency.p99, max: r.latency.max, non2xx: r.non2xx, seconds: (performance.now() - started) / 1000 }),
    );
    if (typeof until !== 'number') void until.then(() => instance.stop());
  });
}

/** The track event body the cluster, forwarding and edge benches send: device `did`, request number `i`. */
export function trackBody(did: string, i: number): string {
  return JSON.stringify({ did, name: 'product_view', timestamp: 1_700_000_000_000 + i, info: [{ name: 'sku', value: `p${i % 10_000}`, type: 'string' }, { name: 'qty', value: 1 + (i % 3), type: 'integer' }] });
}

/** Bodies built before a run and sent round robin (building them per request loads the client). */
const POOL_SIZE = 4096;

export interface PooledRun {
  requests: number;
  rps: number;
  /** Answers other than 200, and connection errors. */
  unexpected: number;
  p50: number;
  p99: number;
}

/**
 * POSTs `request(i)` (path and body, pooled) at `rate`/s, steadily (paced.ts), or as fast as it
 * goes with autocannon (`rate` null), for `secs` from `connections` connections.
 */
export function pooledLoad(url: string, key: string, request: (i: number) => { path: string; body: string }, connections: number, rate: number | null, secs: number, title: string): Promise<PooledRun> {
  if (rate !== null) {
    // A steady rate (paced.ts): autocannon's overallRate sends each second's quota in a burst.
    process.stderr.write(`${title}: ${rate}/s for ${secs} s, paced\n`);
    return pacedLoad({ url, headers: { 'x-service-key': key, 'content-type': 'application/json' }, connections, ratePerSec: rate, seconds: secs, request: (i) => {
      const { path, body } = request(i);
      return { path, body: Buffer.from(body) };
    } }).then((r) => ({ requests: r.requests, rps: r.rps, unexpected: r.requests - (r.statuses.get(200) ?? 0) + r.errors, p50: r.p50, p99: r.p99 }));
  }
  const pool = Array.from({ length: POOL_SIZE }, (_, i) => {
    const { path, body } = request(i);
    return { path, body: Buffer.from(body) };
  });
  let i = 0;
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url,
        connections,
        duration: secs,
        ...(rate === null ? {} : { overallRate: rate }),
        title,
        headers: { 'x-service-key': key, 'content-type': 'application/json' },
        requests: [{ method: 'POST', setupRequest: (req) => ({ ...req, ...pool[i++ % POOL_SIZE]! }) }],
      },
      (error, r) => {
        if (error) return reject(error);
        const stats = (r as unknown as { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats ?? {};
        const ok = stats['200']?.count ?? 0;
        resolve({ requests: r.requests.total, rps: r.requests.average, unexpected: r.requests.total - ok + r.errors, p50: r.latency.p50, p99: r.latency.p99 });
      },
    );
    autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  });
}

/** Track events for the devices `dids`, round robin (pooledLoad). */
export function trackLoad(url: string, key: string, dids: readonly string[], connections: number, rate: number | null, secs: number, title: string): Promise<PooledRun> {
  return pooledLoad(url, key, (i) => ({ path: '/msv_cevt', body: trackBody(dids[i % dids.length]!, i) }), connections, rate, secs, title);
}
