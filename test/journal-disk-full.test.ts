// A full disk, for real: the data directory on a 2 MB tmpfs. The journal fails (503, /readyz 503)
// and a stop then exits 1, as the README says a supervisor is told. After a commit failed with
// ENOSPC, lmdb-js's close() never settles; the stop's timers were unref'd, so once nothing else
// kept the event loop alive Node exited on its own, with status 0 or an abort in lmdb's native
// teardown (134), never 1 (found by a review; the prlimit tests of journal-failure.test.ts fail
// with EFBIG, after which close() does settle). The server's output goes to a file, as under a
// supervisor: a pipe to this test kept the loop alive and hid it. Skipped where this process may
// not mount a tmpfs.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serverCommand } from '../bench/lib/servers.ts';
import { exportLines, KEY_A, ROOT } from './helpers/server.ts';

const DESCRIPTION = 'd'.repeat(1900);

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

test('a full disk: the journal fails, and a stop exits 1', async (t) => {
  const mountPoint = mkdtempSync(join(tmpdir(), 'intake-full-'));
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mountPoint]);
  if (mounted.status !== 0) {
    rmSync(mountPoint, { recursive: true, force: true });
    t.skip(`cannot mount a tmpfs here: ${String(mounted.stderr).trim()}`);
    return;
  }
  const logDir = mkdtempSync(join(tmpdir(), 'intake-full-log-'));
  t.after(() => {
    spawnSync('umount', [mountPoint]);
    rmSync(mountPoint, { recursive: true, force: true });
    rmSync(logDir, { recursive: true, force: true });
  });
  const dataDir = join(mountPoint, 'data');
  mkdirSync(dataDir);
  const port = await freePort();
  const logFile = join(logDir, 'server.log');
  const out = openSync(logFile, 'w');
  const child = spawn(process.execPath, serverCommand(), {
    cwd: ROOT,
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), DATA_DIR: dataDir, SERVICE_KEYS: `ws-a:${KEY_A}`, LOG_LEVEL: 'info' },
    stdio: ['ignore', out, out],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  t.after(() => child.kill('SIGKILL'));
  const url = `http://127.0.0.1:${port}`;
  // The load comes from a process of its own that ends before the stop: no keep-alive
  // connection of this test's is left open to keep the server's event loop busy (that hid it too).
  // A write whose connection the server closed counts as not answered (-1): uncaught, the
  // rejection ended the load process with nothing printed, and the test failed on its empty
  // output (1 CI run in about 10, 2026-11-29).
  const load = spawn(process.execPath, ['-e', `
    const post = (id) => fetch('${url}/product', { method: 'POST', headers: { 'x-service-key': '${KEY_A}', 'content-type': 'application/json' }, body: JSON.stringify({ id, name: 'n', description: '${DESCRIPTION}' }) }).then((r) => { if (r.status === 200) ok.push(id); return r.status; }, () => -1);
    const ok = [];
    (async () => {
      for (let i = 0; i < 200; i++) {
        if (await fetch('${url}/healthz').then((r) => r.ok, () => false)) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      let refused = 0;
      for (let i = 0; i < 500 && refused < 50; i++) refused += (await Promise.all(Array.from({ length: 16 }, (_, k) => post('full-' + i + '-' + k)))).filter((s) => s === 503).length;
      const ready = await fetch('${url}/readyz').then((r) => r.status, () => -1);
      process.stdout.write(JSON.stringify({ refused, ready, ok }));
    })();
  `], { stdio: ['ignore', 'pipe', 'inherit'] });
  let loadOut = '';
  load.stdout.setEncoding('utf8').on('data', (d: string) => (loadOut += d));
  await new Promise((resolve) => load.once('close', resolve));
  const { refused, ready, ok } = JSON.parse(loadOut) as { refused: number; ready: number; ok: string[] };
  if (child.exitCode !== null || child.signalCode !== null) {
    // lmdb-js itself can abort the process on ENOSPC: "Write error: No space left on device ...
    // corrupted size vs. prev_size" from glibc, then SIGABRT, about 1 start in 12 here (an
    // upstream native fault, README "Known flaky"; seen in a clean CI run, 2026-11-29 15:41).
    // What must hold then too: every write answered 200 is in the journal.
    const log = readFileSync(logFile, 'utf8');
    assert.match(log, /No space left on device/, `the server died, and not of the full disk: ${log.slice(-600)}`);
    t.diagnostic(`lmdb-js aborted the server on ENOSPC (exit ${child.exitCode}, signal ${child.signalCode}); checking the ${ok.length} writes answered 200`);
    const journaled = new Set(exportLines(dataDir, 'events').map((e) => (e.data as { id: string }).id));
    assert.deepEqual(ok.filter((id) => !journaled.has(id)), [], 'every write answered 200 is in the journal');
    return;
  }
  assert.ok(refused >= 50, 'the journal failed: the disk is full');
  assert.equal(ready, 503);
  child.kill('SIGTERM');
  const { code, signal } = await exited;
  const log = readFileSync(logFile, 'utf8');
  if (code === null && signal === 'SIGABRT') {
    // The stop reported the failure and then lmdb-js's native teardown aborted (glibc "corrupted
    // size vs. prev_size": README, Known flaky; 1 clean run in 3 on 2026-11-29). A supervisor
    // still sees a failure, which is what this test guards (the bug was an exit 0): accepted only
    // after the stop's own "stopped" line with journalFailed, and with glibc's message.
    assert.match(log, /"journalFailed":true,"msg":"stopped"/, `aborted before the stop had reported the failure: ${log.slice(-600)}`);
    assert.match(log, /corrupted size vs\. prev_size/, `aborted, and not in lmdb-js's known teardown fault: ${log.slice(-600)}`);
    t.diagnostic('the stop reported the journal failure, then lmdb-js aborted in native teardown (SIGABRT)');
    return;
  }
  assert.equal(code, 1, `a stop after a journal failure exits 1; log: ${log.slice(-600)}`);
});
