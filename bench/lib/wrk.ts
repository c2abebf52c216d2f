// wrk (Debian's package), a lighter load generator than autocannon: one thread in C leaves more
// of the two cores to the server, so its throughput measures the server more than the client.
// Installed with apt-get when it is missing (Debian's package; needs root).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianBinary } from './debian-package.ts';

/** wrk is installed with apt-get when it is missing; false only when that is not possible (not root). */
export function wrkInstalled(): boolean {
  try {
    ensureDebianBinary('wrk', 'wrk');
    return true;
  } catch (error) {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    return false;
  }
}

export interface WrkResult {
  requestsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  requests: number;
  /** Answers other than 2xx or 3xx (wrk's own count). */
  non2xx: number;
  /** Socket errors: connect, read, write and timeouts (a timed-out request is in neither the count nor the latencies). */
  errors: number;
}

const toMs = (value: string): number => {
  const m = /^([0-9.]+)(us|ms|s)$/.exec(value);
  if (m === null) return Number.NaN;
  return Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1);
};

/** The sum of wrk's "Socket errors: connect A, read B, write C, timeout D" line, 0 without one. */
function socketErrors(out: string): number {
  const m = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return m === null ? 0 : m.slice(1, 5).reduce((sum, n) => sum + Number(n), 0);
}

/** POSTs `body` to `url` with `headers` from `connections` connections on one wrk thread. */
export function runWrk(url: string, body: string, headers: Record<string, string>, connections: number, seconds: number): WrkResult {
  const dir = mkdtempSync(join(tmpdir(), 'wrk-'));
  const script = join(dir, 'post.lua');
  writeFileSync(
    script,
    [
      'wrk.method = "POST"',
      `wrk.body = ${JSON.stringify(body)}`,
      ...Object.entries(headers).map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`),
    ].join('\n'),
  );
  const out = execFileSync('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, url], { encoding: 'utf8' });
  const percentile = (p: string) => toMs(new RegExp(`^\\s+${p}%\\s+(\\S+)`, 'm').exec(out)?.[1] ?? '');
  return {
    requestsPerSec: Number(/Requests\/sec:\s+([0-9.]+)/.exec(out)?.[1] ?? NaN),
    p50Ms: percentile('50'),
    p99Ms: percentile('99'),
    maxMs: toMs(/^\s+Latency\s+\S+\s+\S+\s+(\S+)/m.exec(out)?.[1] ?? ''),
    requests: Number(/([0-9]+) requests in/.exec(out)?.[1] ?? NaN),
    // wrk prints these lines only when not zero. (A Lua `response` counter read in `done` was
    // always 0: `done` runs in another Lua state than the thread's; found by a review.)
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0),
    errors: socketErrors(out),
  };
}
