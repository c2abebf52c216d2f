// Cluster nodes on this machine (npm run cluster:local, bench:cluster): each one intake process as
// `npm start` runs it (the compiled build), on a loopback port of its own that stays the same
// across restarts (haproxy's config names it), with its own data directory, its logs (stdout and
// stderr) appended to a file.
import type { ClusterStatus } from '../../src/cluster/cluster-node.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { assertBuildCurrent, ROOT, serverCommand } from './servers.ts';

export type { ClusterStatus } from '../../src/cluster/cluster-node.ts';

export interface ClusterNodeOptions {
  name: string;
  port: number;
  dataDir: string;
  logFile: string;
  /** CLUSTER_POSTGRES_URL, CLUSTER_NAME and whatever else the node needs (SERVICE_KEYS...). */
  env: Record<string, string>;
  /** Its own process group: a Ctrl-C at the terminal reaches only the parent, which stops it in order. */
  detached?: boolean;
  /** Called with the key a first start prints to stderr (it is kept out of the log file). */
  onFirstStartKey?: (key: string) => void;
}

const FIRST_START_KEY = /^created workspace default, service key: (\S+)$/;

export class LocalClusterNode {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly dataDir: string;
  readonly logFile: string;
  private readonly options: ClusterNodeOptions;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  private readonly log: WriteStream;
  /** Lines of the log file that look like errors (JSON level ≥ 50, or not JSON on stderr). */
  errorLines: string[] = [];
  /** Called when the process ends without stop() or kill() being asked for. */
  onUnexpectedExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | null = null;
  private expectingExit = false;

  constructor(options: ClusterNodeOptions) {
    this.options = options;
    this.name = options.name;
    this.port = options.port;
    this.url = `http://127.0.0.1:${options.port}`;
    this.dataDir = options.dataDir;
    this.logFile = options.logFile;
    mkdirSync(options.dataDir, { recursive: true });
    this.log = createWriteStream(options.logFile, { flags: 'a' });
    process.on('exit', () => this.child?.kill('SIGKILL'));
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts the process (`nodeArgs`: flags for node itself, such as --cpu-prof); resolves once it listens (after recovery and catching up with the cluster). */
  start(extraEnv: Record<string, string> = {}, nodeArgs: readonly string[] = []): Promise<void> {
    if (this.running) return Promise.resolve();
    assertBuildCurrent();
    this.expectingExit = false;
    const child = spawn(process.execPath, [...nodeArgs, ...serverCommand()], {
      cwd: ROOT,
      env: { LOG_LEVEL: 'info', ...process.env, ...this.options.env, ...extraEnv, NODE_NAME: this.name, HOST: '127.0.0.1', PORT: String(this.port), DATA_DIR: this.dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: this.options.detached ?? false,
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    child.once('exit', (code, signal) => {
      this.log.write(`${JSON.stringify({ time: Date.now(), msg: `[cluster-nodes] ${this.name} exited`, code, signal })}\n`);
      if (!this.expectingExit) this.onUnexpectedExit?.(code, signal);
    });
    const errLines = createInterface({ input: child.stderr! });
    errLines.on('line', (line) => {
      const key = FIRST_START_KEY.exec(line);
      if (key !== null) {
        this.log.write(`created workspace default, service key: (printed by cluster:local, not logged)\n`);
        this.options.onFirstStartKey?.(key[1]!);
        return;
      }
      this.log.write(`${line}\n`);
      if (line.trim() !== '') this.errorLines.push(line);
    });
    return new Promise((resolve, reject) => {
      const lines = createInterface({ input: child.stdout! });
      let listening = false;
      lines.on('line', (line) => {
        this.log.write(`${line}\n`);
        let entry: { level?: number; msg?: string } | null = null;
        try {
          entry = JSON.parse(line) as { level?: number; msg?: string };
        } catch {
          return;
        }
        if ((entry.level ?? 0) >= 50) this.errorLines.push(line);
        if (!listening && entry.msg === 'listening') {
          listening = true;
          resolve();
        }
      });
      child.once('exit', (code, signal) => {
        if (!listening) reject(new Error(`${this.name} exited (${code ?? signal}) before listening: see ${this.logFile}`));
      });
    });
  }

  /** Sends `signal` (default SIGKILL, a crash) and waits for the process to end. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (!this.running) return;
    this.expectingExit = true;
    this.child!.kill(signal);
    await this.exited;
  }

  /** Graceful stop (SIGTERM); resolves to the exit code. */
  async stop(): Promise<number | null> {
    if (!this.running) return this.child?.exitCode ?? null;
    this.expectingExit = true;
    this.child!.kill('SIGTERM');
    await this.exited;
    return this.child!.exitCode;
  }

  async status(timeoutMs = 1_000): Promise<ClusterStatus | null> {
    try {
      const res = await fetch(`${this.url}/cluster`, { signal: AbortSignal.timeout(timeoutMs) });
      return res.status === 200 ? ((await res.json()) as ClusterStatus) : null;
    } catch {
      return null;
    }
  }

  async ready(timeoutMs = 1_000): Promise<boolean> {
    try {
      const res = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(timeoutMs) });
      await res.arrayBuffer();
      return res.status === 200;
    } catch {
      return false;
    }
  }

  closeLog(): void {
    this.log.end();
  }
}

/** The node that answers /readyz 200 and /cluster as leader, waiting up to `timeoutMs`. */
export async function waitForLeader(nodes: readonly LocalClusterNode[], timeoutMs = 30_000): Promise<LocalClusterNode> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const node of nodes) {
      if (!node.running) continue;
      if ((await node.ready(500)) && (await node.status(500))?.role === 'leader') return node;
    }
    if (Date.now() > deadline) throw new Error(`no leader within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The last seq `node` has applied (GET /cluster). */
export async function appliedSeq(node: LocalClusterNode): Promise<number> {
  // Three tries: the first may go out on a keep-alive connection the node closed (uWS closes
  // idle ones after 10 s) while this process sat in wrk's spawnSync and did not see it close.
  let status: ClusterStatus | null = null;
  for (let attempt = 0; attempt < 3 && status === null; attempt++) status = await node.status(2_000);
  if (status === null) throw new Error(`${node.name}: GET /cluster did not answer (3 tries)`);
  return status.appliedSeq;
}

/** Waits until `follower` has applied `seq`; resolves to what it has applied then. */
export async function caughtUp(follower: LocalClusterNode, seq: number, timeoutMs = 120_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const applied = await appliedSeq(follower);
    if (applied >= seq) return applied;
    if (performance.now() > deadline) throw new Error(`${follower.name} applied ${applied}, not ${seq}, within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
