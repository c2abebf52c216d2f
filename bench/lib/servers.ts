// Starting the servers a bench measures, each in its own process on a free loopback port.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const ROOT = new URL('../..', import.meta.url).pathname;
export const BENCH_KEY = 'bench-key-0123456789abcdef';

export interface RunningServer {
  url: string;
  child: ChildProcess;
  dataDir: string | null;
  stop(): Promise<void>;
}

function waitForPort(child: ChildProcess, name: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === 'listening' && typeof entry.port === 'number') resolve(entry.port);
      } catch {
        // not a JSON log line
      }
    });
    child.once('exit', (code) => reject(new Error(`${name} exited (${code}) before listening`)));
  });
}

async function start(name: string, script: string, env: NodeJS.ProcessEnv, dataDir: string | null): Promise<RunningServer> {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    cwd: ROOT,
    env: { ...process.env, ...env, HOST: '127.0.0.1', PORT: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await waitForPort(child, name);
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    dataDir,
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

/** intake as `npm start` runs it, on a fresh data directory. */
export function startIntake(extraEnv: NodeJS.ProcessEnv = {}): Promise<RunningServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'intake-bench-'));
  return start('intake', 'src/main.ts', { DATA_DIR: dataDir, SERVICE_KEYS: BENCH_KEY, LOG_LEVEL: 'info', ...extraEnv }, dataDir);
}

export function startBareUws(): Promise<RunningServer> {
  return start('bare-uws', 'bench/bare-uws.ts', {}, null);
}
