// HAProxy in front of local cluster nodes (npm run cluster:local, bench:cluster), its config made
// from deploy/haproxy.cfg: the same template operators start from, with the real loopback ports.
// HAProxy is installed with apt-get when it is missing (Debian's package; needs root).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { ensureDebianBinary } from './debian-package.ts';
import { ROOT } from './servers.ts';

export const HAPROXY_TEMPLATE = `${ROOT}deploy/haproxy.cfg`;

/** The haproxy binary, installed with apt-get when missing. */
export function ensureHaproxy(log?: (line: string) => void): string {
  return ensureDebianBinary('haproxy', 'haproxy', log);
}

export interface LocalBackend {
  /** Where the frontend listens, e.g. 127.0.0.1:8080. */
  bind: string;
  servers: Array<{ name: string; address: string }>;
  /** A stats socket of our own (the template's /run/haproxy one belongs to a system haproxy). */
  statsSocket: string;
}

/**
 * Connections a local haproxy may take: the template's maxconn needs about twice as many file
 * descriptors, more than a shell's limit often allows (a production service raises its limit;
 * haproxy refuses to start when it cannot).
 */
const LOCAL_MAXCONN = 4096;

/**
 * deploy/haproxy.cfg for local nodes: its `server` lines are replaced by one per node (with the
 * first template server's options: check...), its `bind` by `backend.bind`. Every other setting
 * (health check, retries, timeouts, buffers) is kept as it is. What only a system installation
 * has is left out: the chroot, user and group (the local run may not be root) and the system
 * stats socket; the global maxconn is capped (LOCAL_MAXCONN).
 */
export function renderHaproxyConfig(template: string, backend: LocalBackend): string {
  const out: string[] = [];
  let serverOptions: string | null = null;
  let binds = 0;
  let global = false;
  for (const line of template.split('\n')) {
    const words = line.trim().split(/\s+/);
    const keyword = words[0] ?? '';
    const indent = /^\s*/.exec(line)![0];
    if (indent === '' && keyword !== '' && !keyword.startsWith('#')) global = keyword === 'global';
    if (keyword === 'server') {
      if (serverOptions === null) {
        serverOptions = words.slice(3).join(' ');
        for (const server of backend.servers) out.push(`${indent}server ${server.name} ${server.address} ${serverOptions}`.trimEnd());
      }
      continue;
    }
    if (keyword === 'bind') {
      if (binds++ === 0) out.push(`${indent}bind ${backend.bind}`);
      continue;
    }
    if (keyword === 'chroot' || keyword === 'user' || keyword === 'group' || keyword === 'daemon') continue;
    if (keyword === 'maxconn' && global) {
      out.push(`${indent}maxconn ${Math.min(Number(words[1]), LOCAL_MAXCONN)}`);
      continue;
    }
    if (keyword === 'stats' && words[1] === 'socket') {
      out.push(`${indent}stats socket ${backend.statsSocket} mode 600 level admin`);
      continue;
    }
    out.push(line);
  }
  if (serverOptions === null || binds === 0) throw new Error('the haproxy template needs a bind line and at least one server line');
  return out.join('\n');
}

/** `haproxy -c -f file`: throws with haproxy's message when the config is not valid. */
export function checkHaproxyConfig(binary: string, file: string): void {
  const result = spawnSync(binary, ['-c', '-f', file], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`haproxy -c -f ${file} failed:\n${result.stdout}${result.stderr}`);
}

export interface RunningHaproxy {
  readonly child: ChildProcess;
  readonly url: string;
  /** Soft stop (SIGUSR1: finish what is in flight), then SIGTERM after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<void>;
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Writes the local config to `configFile`, checks it, and runs haproxy in the foreground (-db)
 * with its log (stdout and stderr) appended to `logFile`, until its frontend accepts connections.
 * With `detached`, haproxy has its own process group (a Ctrl-C at the terminal reaches only us).
 */
export async function startHaproxy(binary: string, backend: LocalBackend, configFile: string, logFile: string, detached = false): Promise<RunningHaproxy> {
  writeFileSync(configFile, renderHaproxyConfig(readFileSync(HAPROXY_TEMPLATE, 'utf8'), backend));
  checkHaproxyConfig(binary, configFile);
  const log = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(binary, ['-db', '-f', configFile], { stdio: ['ignore', 'pipe', 'pipe'], detached });
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  const killOnExit = (): void => void child.kill('SIGKILL');
  process.on('exit', killOnExit);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const [host, portText] = [backend.bind.slice(0, backend.bind.lastIndexOf(':')), backend.bind.slice(backend.bind.lastIndexOf(':') + 1)];
  const port = Number(portText);
  const deadline = Date.now() + 10_000;
  while (!(await canConnect(host, port))) {
    if (child.exitCode !== null) throw new Error(`haproxy exited (${child.exitCode}) before listening on ${backend.bind}: see ${logFile}`);
    if (Date.now() > deadline) throw new Error(`haproxy is not listening on ${backend.bind} after 10 s: see ${logFile}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    child,
    url: `http://${backend.bind}`,
    async stop(timeoutMs = 3_000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGUSR1');
        const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
        await exited;
        clearTimeout(timer);
      }
      process.off('exit', killOnExit);
      log.end();
    },
  };
}
