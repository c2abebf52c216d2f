// Starts the real server as `npm start` does (the compiled build, dist/src/main.js) as a child
// process on an ephemeral port, with a real LMDB in a temporary directory, and talks HTTP to it.
// Nothing of ours is mocked.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, isIPv6 } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { scriptCommand, serverCommand } from '../../bench/lib/servers.ts';

export const ROOT = new URL('../..', import.meta.url).pathname;
export const KEY_A = 'test-key-workspace-a-0123456789';
export const KEY_B = 'test-key-workspace-b-0123456789';
export const DEFAULT_KEYS = `ws-a:${KEY_A},ws-b:${KEY_B}`;

export interface Response<T = unknown> {
  status: number;
  headers: Headers;
  text: string;
  body: T;
}

export interface RequestOptions {
  key?: string | null;
  headers?: Record<string, string>;
  method?: string;
  /** A raw body (string or bytes) instead of JSON.stringify(body). */
  raw?: string | Uint8Array;
  /** Give up after this long (a frozen server never answers). */
  timeoutMs?: number;
}

export interface TestServer {
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly child: ChildProcess;
  /** Everything the server wrote to stderr so far. */
  stderr(): string;
  /** Every stdout line so far (JSON logs). */
  logs(): string[];
  /** Resolves with the first log line matching `match`, waiting up to `timeoutMs` for it. */
  waitForLog(match: (line: string) => boolean, timeoutMs?: number): Promise<string>;
  request<T = any>(path: string, body?: unknown, options?: RequestOptions): Promise<Response<T>>;
  post<T = any>(path: string, body: unknown, key?: string | null): Promise<Response<T>>;
  del<T = any>(path: string, key?: string | null): Promise<Response<T>>;
  /** SIGTERM and wait for exit; resolves to the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
}

export interface StartOptions {
  dataDir?: string;
  env?: Record<string, string>;
  /** SERVICE_KEYS; null starts without any (first-start behaviour). */
  serviceKeys?: string | null;
  args?: string[];
  /** A command the server runs under, e.g. ['prlimit', '--fsize=600000']. */
  wrap?: string[];
}

const tempDirs: string[] = [];
process.on('exit', () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

export function tempDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'intake-test-'));
  tempDirs.push(dir);
  return dir;
}

export async function startServer(options: StartOptions = {}): Promise<TestServer> {
  const dataDir = options.dataDir ?? tempDataDir();
  const env: NodeJS.ProcessEnv = { ...process.env, HOST: '127.0.0.1', PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'info', ...options.env };
  if (options.serviceKeys === null) delete env.SERVICE_KEYS;
  else env.SERVICE_KEYS = options.serviceKeys ?? DEFAULT_KEYS;
  const command = [...(options.wrap ?? []), process.execPath, ...serverCommand(), ...(options.args ?? [])];
  const child = spawn(command[0]!, command.slice(1), {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const logs: string[] = [];
  // 'close' comes after the process exited AND its output was read to the end.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not listen within 20 s; stderr: ${stderr}`)), 20_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === 'listening' && typeof entry.port === 'number') {
          clearTimeout(timer);
          resolve(entry.port);
        }
      } catch {
        // not JSON
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}) before listening; stderr: ${stderr}`));
    });
  });
  // An IPv6 HOST (not the wildcard ::) listens there only.
  const host = env.HOST ?? '127.0.0.1';
  const url = isIPv6(host) && host !== '::' ? `http://[${host}]:${port}` : `http://127.0.0.1:${port}`;

  const request = async <T>(path: string, body?: unknown, opts: RequestOptions = {}): Promise<Response<T>> => {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    const key = opts.key === undefined ? KEY_A : opts.key;
    if (key !== null) headers['x-service-key'] = key;
    let payload: string | Uint8Array | undefined;
    if (opts.raw !== undefined) payload = opts.raw;
    else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] ??= 'application/json';
    }
    const signal = opts.timeoutMs === undefined ? undefined : AbortSignal.timeout(opts.timeoutMs);
    const send = () => fetch(url + path, { method: opts.method ?? (payload === undefined ? 'GET' : 'POST'), headers, body: payload as BodyInit | undefined, signal });
    let res: globalThis.Response;
    try {
      res = await send();
    } catch (error) {
      // A pooled keep-alive connection the server closed after 10 s idle (uWS) while this
      // process could not see it: exportLines() runs the CLI with spawnSync, which holds this
      // event loop, on a loaded machine for more than those 10 s. The request went into a closed
      // socket and was not read; sent again once, on a new connection.
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      if (cause?.code !== 'UND_ERR_SOCKET' || cause.message !== 'other side closed') throw error;
      res = await send();
    }
    const text = await res.text();
    let parsed: unknown = undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, text, body: parsed as T };
  };

  return {
    url,
    port,
    dataDir,
    child,
    stderr: () => stderr,
    logs: () => logs,
    async waitForLog(match, timeoutMs = 2000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = logs.find(match);
        if (found !== undefined) return found;
        if (Date.now() > deadline) throw new Error('no matching log line');
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    request,
    post: (path, body, key) => request(path, body, { key }),
    del: (path, key) => request(path, undefined, { key, method: 'DELETE' }),
    async stop() {
      if (child.exitCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      return exited;
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** The node arguments of `npm run export` / `npm run keys` (the compiled CLI), with `nodeFlags` first. */
export function cliCommand(script: 'export' | 'keys' | 'journal', nodeFlags: string[] = []): string[] {
  return [...nodeFlags, ...scriptCommand(script)];
}

/** Runs an npm CLI script (export, keys, journal) the way an operator does, against `dataDir` (and `env`). */
export function runCli(script: 'export' | 'keys' | 'journal', args: string[], dataDir: string, env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [...cliCommand(script), ...args], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, ...env },
    encoding: 'utf8',
    maxBuffer: 1024 * 1024 * 1024,
  });
  if (result.error) throw result.error;
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** `npm run export -- <what>` parsed into objects. */
export function exportLines<T = any>(dataDir: string, what: string, ...args: string[]): T[] {
  const { status, stdout, stderr } = runCli('export', [what, ...args], dataDir);
  if (status !== 0) throw new Error(`export ${what} failed (${status}): ${stderr}`);
  return stdout
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as T);
}

/** Sends raw bytes on one socket and collects everything until the server closes or `waitMs` passes. */
export function rawExchange(port: number, chunks: Array<string | Buffer>, waitMs = 1000, gapMs = 0): Promise<{ data: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    let settled = false;
    const finish = (): void => {
      if (settled) return;
      settled = true;
      socket.destroy();
      resolve({ data, closed });
    };
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (data += d));
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.on('error', (error) => {
      if (!settled) reject(error);
    });
    socket.on('connect', async () => {
      for (const chunk of chunks) {
        socket.write(chunk);
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
      }
      setTimeout(finish, waitMs);
    });
  });
}

/** Splits a stream of HTTP/1.1 responses (with content-length bodies) into status + body. */
export function parseResponses(data: string): Array<{ status: number; headers: Record<string, string>; body: string }> {
  const out: Array<{ status: number; headers: Record<string, string>; body: string }> = [];
  let rest = data;
  while (rest.startsWith('HTTP/1.1 ')) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd === -1) break;
    const [statusLine, ...headerLines] = rest.slice(0, headEnd).split('\r\n');
    const headers: Record<string, string> = {};
    for (const line of headerLines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = Number(headers['content-length'] ?? 0);
    const bodyStart = headEnd + 4;
    out.push({ status: Number(statusLine!.split(' ')[1]), headers, body: rest.slice(bodyStart, bodyStart + length) });
    rest = rest.slice(bodyStart + length);
  }
  return out;
}

export const LAUNCH_INFO = {
  appVersionCode: 42,
  appVersionName: '4.2.0',
  sdkVersion: 7,
  firstTime: true,
  deviceType: 'phone',
  deviceManufacturer: 'samsung',
  deviceModel: 'SM-G991B',
  deviceCarrier: '',
  osName: 'Android',
  osVersion: '14',
  platform: 'ANDROID',
  language: 'en-GB',
};

export const T0 = 1_700_000_000_000;

/** App launch; returns the did and sid. */
export async function launch(server: TestServer, did?: string | null, key: string = KEY_A, info: object = LAUNCH_INFO): Promise<{ did: string; sid: string }> {
  const body: Record<string, unknown> = { timestamp: T0, info };
  if (did !== undefined) body.did = did;
  const res = await server.post<{ did: string; sid: string }>('/mcrs_appl_v1', body, key);
  if (res.status !== 200) throw new Error(`launch failed: ${res.status} ${res.text}`);
  return res.body;
}

/** Every write endpoint as /openapi.json names it: path (OpenAPI template) and method. */
export const WRITE_OPERATIONS: ReadonlyArray<readonly [string, 'post' | 'delete']> = [
  ['/mcrs_appl_v1', 'post'],
  ['/msv_cevt', 'post'],
  ['/msv_cs_id', 'post'],
  ['/logout', 'post'],
  ['/mpush_token', 'post'],
  ['/product', 'post'],
  ['/product/{id}', 'delete'],
  ['/collection', 'post'],
  ['/collection/{id}', 'delete'],
  ['/collection/{id}/products/add', 'post'],
  ['/collection/{id}/products/remove', 'post'],
];
