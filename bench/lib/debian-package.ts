// Tools the benches need from Debian's packages (haproxy, wrk), installed with apt-get when they
// are missing, so that one command does all the set-up on a fresh machine of this kind (root).
import { spawnSync } from 'node:child_process';

function binaryPath(binary: string): string | null {
  const found = spawnSync('sh', ['-c', `command -v ${binary} || ls /usr/sbin/${binary} 2>/dev/null`], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
  return found === undefined || found === '' ? null : found;
}

/** The path of `binary`, installing Debian's `pkg` (after apt-get update when needed) when it is missing. */
export function ensureDebianBinary(binary: string, pkg: string, log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): string {
  const found = binaryPath(binary);
  if (found !== null) return found;
  if (process.getuid?.() !== 0) throw new Error(`${binary} is not installed, and installing it needs root: apt-get install -y ${pkg}`);
  const apt = (args: string[]) => spawnSync('apt-get', args, { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } }).status === 0;
  log(`${binary} is not installed: apt-get install -y ${pkg}`);
  if (!apt(['install', '-y', pkg])) {
    log('apt-get install failed: apt-get update, then again');
    if (!apt(['update']) || !apt(['install', '-y', pkg])) throw new Error(`could not install ${pkg} with apt-get`);
  }
  const installed = binaryPath(binary);
  if (installed === null) throw new Error(`apt-get installed ${pkg}, but no ${binary} binary is on the PATH`);
  return installed;
}
