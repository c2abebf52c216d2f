// `npm start` runs the compiled build, and a fresh clone gets it from `npm install` alone (the
// package's `prepare` script runs tsc): the README's quick start, done in a copy of the working
// tree as a clone has it (tracked and not ignored files; no dist/, no node_modules/). Then
// `npm start` on an empty data directory must answer /readyz 200. How soon (issue 11's 1.0 s)
// is a figure of the machine as much as of the code, so it is measured by a bench, not held
// here: `npm run bench:startup` (README, Performance). This test holds a start to a limit no
// healthy start comes near, so that a start that builds, hangs or waits on something fails it.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { ROOT } from './helpers/server.ts';
import { freePort } from '../bench/lib/sink-servers.ts';
import { untilReady } from '../bench/lib/servers.ts';

/** Far above any healthy start (0.4 to 1.2 s measured), far below a build at start (about 10 s). */
const START_LIMIT_MS = 5_000;

const clone = mkdtempSync(join(tmpdir(), 'intake-clone-'));
after(() => rmSync(clone, { recursive: true, force: true }));

/**
 * Set by .ci/run, which is a fresh clone that has just run `npm install`: `npm start` is tried in
 * it, not in another copy installed again (about 40 s of the suite's time on a slow machine,
 * 2026-11-30, for what CI's own install has just shown).
 */
const CLONE_IS_ROOT = process.env.INTAKE_TEST_CLONE_IS_ROOT === '1';

test('a fresh clone: npm install builds dist/ (prepare), npm start serves /readyz', { timeout: 300_000 }, async () => {
  const cwd = CLONE_IS_ROOT ? ROOT : clone;
  if (!CLONE_IS_ROOT) installCopy();
  assert.ok(existsSync(join(cwd, 'dist/src/main.js')), 'prepare built the server');

  const port = await freePort();
  const started = performance.now();
  const npm = spawn('npm', ['start', '--silent'], {
    cwd,
    env: { ...process.env, DATA_DIR: mkdtempSync(join(tmpdir(), 'intake-clone-data-')), PORT: String(port), HOST: '127.0.0.1', SERVICE_KEYS: 'k-123456789' },
    stdio: 'ignore',
    detached: true,
  });
  try {
    await untilReady(port, started, START_LIMIT_MS);
  } finally {
    process.kill(-npm.pid!, 'SIGKILL');
  }
});

/** The working tree as a clone has it (tracked and not ignored files), then `npm install` in it. */
function installCopy(): void {
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter((f) => f !== '' && existsSync(join(ROOT, f)));
  for (const file of files) {
    mkdirSync(dirname(join(clone, file)), { recursive: true });
    copyFileSync(join(ROOT, file), join(clone, file));
  }
  assert.ok(!existsSync(join(clone, 'dist')), 'no build in the clone');
  const install = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], { cwd: clone, encoding: 'utf8', timeout: 240_000 });
  assert.equal(install.status, 0, install.stderr);
  assert.ok(!/install-scripts|allowScripts/.test(install.stderr), `npm install ends without an install-scripts warning: ${install.stderr}`);
}
