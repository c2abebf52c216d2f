// autocannon, programmatic, with its progress display on stderr.
import autocannon from 'autocannon';

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
