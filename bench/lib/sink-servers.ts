// Our own NATS and PostgreSQL servers, for tests that must stop a sink's server to prove an
// outage is survived and for bench:delivery: each runs from the machine's binaries on a free
// loopback port with its data in a temporary directory, and only it is ever stopped. The shared services on 4222 and
// 5432 are never touched. Binaries: NATS_SERVER_BIN (default /usr/sbin/nats-server) and
// POSTGRES_BIN_DIR (default /usr/lib/postgresql/15/bin).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { cpuSeconds } from './cpu.ts';

const NATS_SERVER_BIN = process.env.NATS_SERVER_BIN ?? '/usr/sbin/nats-server';
const POSTGRES_BIN_DIR = process.env.POSTGRES_BIN_DIR ?? '/usr/lib/postgresql/15/bin';
/** PostgreSQL refuses to run as root; as root its commands run as this user. */
const POSTGRES_OS_USER = 'postgres';

const cleanups: Array<() => void> = [];
process.on('exit', () => {
  for (const cleanup of cleanups) cleanup();
});

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

/** utime + stime of `pid` and its child processes (PostgreSQL forks a backend per connection). */
function treeCpuSeconds(pid: number): number {
  let total = 0;
  try {
    total += cpuSeconds(pid);
    for (const child of spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean)) total += treeCpuSeconds(Number(child));
  } catch {
    // gone
  }
  return total;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} did not come up within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export interface OwnServer {
  readonly url: string;
  readonly port: number;
  /** CPU seconds the server has used so far (its processes and their children). */
  cpuSeconds(): number;
  /** Stops the server gracefully (its data stays); stopping a stopped server does nothing. */
  stop(): Promise<void>;
  /** Kills it as a crash would (NATS: SIGKILL; PostgreSQL: immediate shutdown, no checkpoint). */
  kill(): Promise<void>;
  /** Starts it again on the same port with the same data. */
  start(): Promise<void>;
  /** SIGSTOP (PostgreSQL: the postmaster and every backend): connections stay open, nothing answers until resume(). */
  freeze(): void;
  resume(): void;
  /** Stops the server, copies its data directory aside (a backup), and starts it again. */
  backup(): Promise<void>;
  /** Stops the server, puts the backup's data directory in place (losing what came after it), and starts it again. */
  restoreBackup(): Promise<void>;
}

/** Copies `from` to `to` (replacing it), keeping owners and modes. */
function copyDir(from: string, to: string): void {
  rmSync(to, { recursive: true, force: true });
  run(['cp', '-a', from, to]);
}

export interface NatsOptions {
  /** The server's max_payload in bytes (default 8 MiB). */
  maxPayloadBytes?: number;
}

export interface OwnNats extends OwnServer {
  restartWith(options: NatsOptions): Promise<void>;
}

/** `nats-server -js` on a free port, its JetStream store in a temporary directory. */
export async function startOwnNats(options: NatsOptions = {}): Promise<OwnNats> {
  const dir = mkdtempSync(join(tmpdir(), 'intake-nats-'));
  const port = await freePort();
  let child: ChildProcess | null = null;
  const configure = (opts: NatsOptions): void => {
    writeFileSync(
      join(dir, 'nats.conf'),
      `listen: "127.0.0.1:${port}"\nmax_payload: ${opts.maxPayloadBytes ?? 8 * 1024 * 1024}\njetstream { store_dir: "${join(dir, 'js')}" }\n`,
    );
  };
  const start = async (): Promise<void> => {
    child = spawn(NATS_SERVER_BIN, ['-c', join(dir, 'nats.conf')], { stdio: 'ignore' });
    await waitFor(`nats-server on ${port}`, () => canConnect(port));
  };
  const end = async (signal: NodeJS.Signals): Promise<void> => {
    const running = child;
    child = null;
    if (running === null || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGCONT'); // a frozen server cannot act on SIGTERM
    running.kill(signal);
    await exited;
  };
  const stop = (): Promise<void> => end('SIGTERM');
  cleanups.push(() => {
    child?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  configure(options);
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    cpuSeconds: () => (child?.pid === undefined ? 0 : treeCpuSeconds(child.pid)),
    stop,
    kill: () => end('SIGKILL'),
    start,
    freeze: () => child?.kill('SIGSTOP'),
    resume: () => child?.kill('SIGCONT'),
    async backup() {
      await stop();
      copyDir(join(dir, 'js'), join(dir, 'js-backup'));
      await start();
    },
    async restoreBackup() {
      await stop();
      copyDir(join(dir, 'js-backup'), join(dir, 'js'));
      await start();
    },
    async restartWith(opts) {
      await stop();
      configure(opts);
      await start();
    },
  };
}

function asPostgres(command: string, args: string[]): string[] {
  const binary = join(POSTGRES_BIN_DIR, command);
  return userInfo().uid === 0 ? ['runuser', '-u', POSTGRES_OS_USER, '--', binary, ...args] : [binary, ...args];
}

function run(command: string[]): void {
  const result = spawnSync(command[0]!, command.slice(1), { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`${command.join(' ')} failed (${result.status}): ${result.stderr}${result.stdout}`);
}

export interface PostgresOptions {
  /** fsync each commit (default off: tests need the server's behaviour, not its durability). */
  fsync?: boolean;
}

/** A PostgreSQL cluster of our own (initdb in a temporary directory), trust auth, database `postgres`. */
export async function startOwnPostgres(options: PostgresOptions = {}): Promise<OwnServer> {
  const dir = mkdtempSync(join(tmpdir(), 'intake-pg-'));
  if (userInfo().uid === 0) {
    const uid = Number(spawnSync('id', ['-u', POSTGRES_OS_USER], { encoding: 'utf8' }).stdout.trim());
    const gid = Number(spawnSync('id', ['-g', POSTGRES_OS_USER], { encoding: 'utf8' }).stdout.trim());
    chownSync(dir, uid, gid);
  }
  const port = await freePort();
  const data = join(dir, 'data');
  run(asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']));
  let running = false;
  const start = async (): Promise<void> => {
    run(asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=${options.fsync === true ? 'on' : 'off'}`, 'start']));
    running = true;
    await waitFor(`postgres on ${port}`, () => canConnect(port));
  };
  const postmaster = (): number => Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
  /** The postmaster and its children (backends, background workers). */
  const signalAll = (signal: NodeJS.Signals): void => {
    try {
      const pid = postmaster();
      const children = spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
      for (const target of signal === 'SIGSTOP' ? [pid, ...children] : [...children, pid]) {
        try {
          process.kill(target, signal);
        } catch {
          // gone meanwhile
        }
      }
    } catch {
      // not running
    }
  };
  const stopWith = async (mode: 'fast' | 'immediate'): Promise<void> => {
    if (!running) return;
    running = false;
    signalAll('SIGCONT'); // a frozen server cannot act on pg_ctl's signal
    run(asPostgres('pg_ctl', ['-D', data, '-w', '-m', mode, 'stop']));
  };
  cleanups.push(() => {
    signalAll('SIGCONT');
    const kill = asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']);
    spawnSync(kill[0]!, kill.slice(1));
    rmSync(dir, { recursive: true, force: true });
  });
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    cpuSeconds: () => {
      try {
        return treeCpuSeconds(postmaster());
      } catch {
        return 0;
      }
    },
    stop: () => stopWith('fast'),
    kill: () => stopWith('immediate'),
    start,
    freeze: () => signalAll('SIGSTOP'),
    resume: () => signalAll('SIGCONT'),
    async backup() {
      await stopWith('fast');
      copyDir(data, join(dir, 'data-backup'));
      await start();
    },
    async restoreBackup() {
      await stopWith('fast');
      copyDir(join(dir, 'data-backup'), data);
      await start();
    },
  };
}
