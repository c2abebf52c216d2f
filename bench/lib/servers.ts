// Starting the servers a bench measures, each in its own process on a free loopback port.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const ROOT = new URL('../..', import.meta.url).pathname;

/** The node arguments of an npm script of ours that runs `node [flags] <file.js> [args]`. */
export function scriptCommand(name: string): string[] {
  const script = (JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { scripts: Record<string, string> }).scripts[name];
  if (script === undefined) throw new Error(`package.json has no script "${name}"`);
  const words = script.split(/\s+/);
  return words.slice(words.indexOf('node') + 1);
}

/**
 * The node arguments `npm start` runs the server with (package.json's start script: the compiled
 * build), so that benches and tests measure and test exactly what operators run. With `script`,
 * the same node flags run another compiled file (a yardstick).
 */
export function serverCommand(script?: string): string[] {
  // BENCH_SERVER_NODE_ARGS adds node flags to every server a bench starts, for profiling:
  // `BENCH_SERVER_NODE_ARGS='--cpu-prof --cpu-prof-dir=prof' npm run bench:batch` (node refuses
  // --cpu-prof in NODE_OPTIONS).
  const extra = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(/\s+/).filter((word) => word !== '');
  const words = [...extra, ...scriptCommand('start')];
  const main = words.findIndex((word) => word.endsWith('.js'));
  return script === undefined ? words : [...words.slice(0, main), script];
}
export const BENCH_KEY = 'bench-key-0123456789abcdef';

export interface RunningServer {
  url: string;
  child: ChildProcess;
  dataDir: string | null;
  /** Every JSON log line the server wrote up to and including "listening". */
  startupLogs: Array<Record<string, unknown>>;
  /** Calls `listener` with every JSON log line the server writes from now on. */
  onLog(listener: (entry: Record<string, unknown>) => void): void;
  stop(): Promise<void>;
}

function waitForPort(
  child: ChildProcess,
  name: string,
  listeners: Array<(entry: Record<string, unknown>) => void>,
  startupLogs: Array<Record<string, unknown>>,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    let listening = false;
    lines.on('line', (line) => {
      let parsed: Record<string, unknown> | null = null;
      try {
        parsed = JSON.parse(line) as Record<string, unknown>;
      } catch {
        // not a JSON log line
      }
      if (parsed === null) return;
      if (!listening) startupLogs.push(parsed);
      for (const listener of listeners) listener(parsed);
      if (parsed.msg === 'listening' && typeof parsed.port === 'number') {
        listening = true;
        resolve(parsed.port);
      }
    });
    child.once('exit', (code) => reject(new Error(`${name} exited (${code}) before listening`)));
  });
}

let buildChecked = false;

/**
 * The benches run the compiled build (as `npm start` does): one run after a source edit without
 * `npm run build` measured the old code without a word (a review of the benches). Refused when
 * a file under src/ is newer than dist/src/main.js.
 */
export function assertBuildCurrent(): void {
  if (buildChecked) return;
  const builtMs = statSync(`${ROOT}dist/src/main.js`).mtimeMs;
  for (const file of readdirSync(`${ROOT}src`, { recursive: true }) as string[]) {
    if (statSync(join(`${ROOT}src`, file)).mtimeMs > builtMs) throw new Error(`src/${file} is newer than the build (dist/): run \`npm run build\` first`);
  }
  buildChecked = true;
}

async function start(name: string, script: string | undefined, env: NodeJS.ProcessEnv, dataDir: string | null): Promise<RunningServer> {
  assertBuildCurrent();
  const child = spawn(process.execPath, serverCommand(script), {
    cwd: ROOT,
    env: { ...process.env, ...env, HOST: '127.0.0.1', PORT: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const listeners: Array<(entry: Record<string, unknown>) => void> = [];
  const startupLogs: Array<Record<string, unknown>> = [];
  const port = await waitForPort(child, name, listeners, startupLogs);
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    dataDir,
    startupLogs,
    onLog: (listener) => listeners.push(listener),
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      if (dataDir !== null) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * intake as `npm start` runs it, on a fresh data directory (removed by stop()) unless `dataDir`
 * is given (then kept).
 */
export function startIntake(extraEnv: NodeJS.ProcessEnv = {}, dataDir?: string): Promise<RunningServer> {
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'intake-bench-'));
  const env = { DATA_DIR: dir, SERVICE_KEYS: BENCH_KEY, LOG_LEVEL: 'info', ...extraEnv };
  return start('intake', undefined, env, dataDir === undefined ? dir : null);
}

export function startBareUws(): Promise<RunningServer> {
  return start('bare-uws', 'dist/bench/bare-uws.js', {}, null);
}

/** The bare server plus group-committed LMDB writes, one commit in flight (its own data directory). */
export function startBareUwsLmdb(): Promise<RunningServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'bare-lmdb-'));
  return start('bare-uws-lmdb', 'dist/bench/bare-uws-lmdb.js', { DATA_DIR: dataDir }, dataDir);
}

/**
 * Polls http://127.0.0.1:`port`/readyz every 5 ms until it answers 200 and resolves with the ms
 * since `startedAt` (a performance.now() reading: the spawn); rejects once `giveUpMs` have passed.
 */
export async function untilReady(port: number, startedAt: number, giveUpMs: number): Promise<number> {
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200) return performance.now() - startedAt;
    } catch {
      // not listening yet
    }
    if (performance.now() - startedAt > giveUpMs) throw new Error(`no /readyz 200 within ${giveUpMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
