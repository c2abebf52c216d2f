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
  non2xx: number;
}

const toMs = (value: string): number => {
  const m = /^([0-9.]+)(us|ms|s)$/.exec(value);
  if (m === null) return Number.NaN;
  return Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1);
};

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
      'local non2xx = 0',
      'response = function(status) if status < 200 or status > 299 then non2xx = non2xx + 1 end end',
      'done = function() io.write(string.format("non2xx %d\\n", non2xx)) end',
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
    non2xx: Number(/^non2xx (\d+)$/m.exec(out)?.[1] ?? NaN),
  };
}
