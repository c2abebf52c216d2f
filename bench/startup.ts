// npm run bench:startup: how long a start on an empty data directory takes to answer /readyz 200
// (issue 11's target: within 1.0 s through `npm start`), and what of it is npm's and Node's own.
//
// - `npm start`: the quick start as an operator runs it (npm's CLI, then node on the build).
// - `node <start flags> dist/src/main.js`: the same server without npm in front.
// - The floor: `node -e 0` and `npm --version`, timed the same way (spawn to exit).
// Each row: min / median / max over RUNS starts, spawn to the first /readyz 200 (polled every
// 5 ms), and the server's CPU (utime + stime of every thread) when it first answered.
//
//   npm run bench:startup -- [runs=7]
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { cpuSeconds } from './lib/cpu.ts';
import { printTable, runBench } from './lib/report.ts';
import { ROOT, serverCommand, untilReady } from './lib/servers.ts';
import { freePort } from './lib/sink-servers.ts';

const runs = Number(process.argv[2] ?? 7);
const TARGET_MS = 1_000;
const GIVE_UP_MS = 30_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const sorted = (values: readonly number[]) => [...values].sort((a, b) => a - b);
const spread = (values: readonly number[]) => {
  const s = sorted(values);
  return `${Math.round(s[0]!)} / ${Math.round(s[Math.floor(s.length / 2)]!)} / ${Math.round(s[s.length - 1]!)}`;
};

/** The server's pid under `npm start` (npm runs `sh -c`, and that runs node), or null. */
function serverPid(root: number): number | null {
  const children = spawnSync('pgrep', ['-P', String(root)], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).map(Number);
  for (const pid of children) {
    if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('dist/src/main.js')) return pid;
    const below = serverPid(pid);
    if (below !== null) return below;
  }
  return null;
}

async function timeStart(command: string, args: readonly string[]): Promise<{ ms: number; cpuMs: number }> {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'intake-startup-'));
  const started = performance.now();
  const child = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', SERVICE_KEYS: 'bench-startup-key-0123' },
    stdio: 'ignore',
    detached: true,
  });
  try {
    const ms = await untilReady(port, started, GIVE_UP_MS);
    const pid = command === 'npm' ? serverPid(child.pid!) : child.pid!;
    return { ms, cpuMs: pid === null ? NaN : cpuSeconds(pid) * 1000 };
  } finally {
    process.kill(-child.pid!, 'SIGKILL');
    await sleep(100);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function timeExit(command: string, args: readonly string[]): number {
  const started = performance.now();
  spawnSync(command, args, { cwd: ROOT, stdio: 'ignore' });
  return performance.now() - started;
}

runBench(async () => {
  const npm: number[] = [];
  const npmCpu: number[] = [];
  const node: number[] = [];
  const nodeCpu: number[] = [];
  const nodeFloor: number[] = [];
  const npmFloor: number[] = [];
  // Alternating, so that a change of the machine's speed touches both alike.
  for (let i = 0; i < runs; i++) {
    const a = await timeStart('npm', ['start', '--silent']);
    npm.push(a.ms);
    npmCpu.push(a.cpuMs);
    const b = await timeStart(process.execPath, serverCommand());
    node.push(b.ms);
    nodeCpu.push(b.cpuMs);
    nodeFloor.push(timeExit(process.execPath, ['-e', '0']));
    npmFloor.push(timeExit('npm', ['--version']));
    process.stderr.write(`run ${i + 1}: npm start ${Math.round(a.ms)} ms, node ${Math.round(b.ms)} ms\n`);
  }
  const best = sorted(npm)[0]!;
  printTable(
    `# bench:startup ${new Date().toISOString()}`,
    ['what', 'spawn to /readyz 200 (or to exit), ms: min / median / max', 'server CPU at ready, ms: min / median / max'],
    [
      `| \`npm start\`, empty data directory | ${spread(npm)} | ${spread(npmCpu)} |`,
      `| \`node ${serverCommand().join(' ')}\`, empty data directory | ${spread(node)} | ${spread(nodeCpu)} |`,
      `| floor: \`node -e 0\` (to exit) | ${spread(nodeFloor)} | |`,
      `| floor: \`npm --version\` (to exit) | ${spread(npmFloor)} | |`,
    ],
    [
      `Machine: ${cpus().length} × ${cpus()[0]?.model.trim()}, Node ${process.version}. Command: \`npm run bench:startup -- ${runs}\`, ${runs} alternating starts of each.`,
      `Best \`npm start\`: ${Math.round(best)} ms (target ≤ ${TARGET_MS} ms: ${best <= TARGET_MS ? 'met' : '**missed**'}).`,
    ],
  );
});
