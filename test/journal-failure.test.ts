// A journal that cannot be written (CONTRACT.md §7), for real: the server runs under a file-size
// limit (prlimit --fsize), so once the LMDB file reaches it the commit's write fails with an I/O
// error, exactly as on a full or failing disk. From then on: 503 for the affected batch and every
// later write, /readyz 503, never a 200 for something not committed; after a restart without
// the limit, everything that was answered 200 is there.
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exportLines, launch, startServer, T0, tempDataDir } from './helpers/server.ts';

const FILE_LIMIT_BYTES = 600_000;
const DESCRIPTION = 'd'.repeat(2000);

describe('journal failure', () => {
  test('prlimit is available (the failure is made with a real file-size limit)', () => {
    assert.equal(spawnSync('prlimit', ['--version']).status, 0);
  });

  test('a failed commit: 503 for it and every later write, /readyz 503, no 200 after; a restart has every acknowledged write', async (t) => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir, wrap: ['prlimit', `--fsize=${FILE_LIMIT_BYTES}`] });
    // A failed assertion must not leave the server running: the test process would wait for it.
    t.after(() => server.kill());
    const { did } = await launch(server);
    const acknowledged: string[] = [];
    let first503: string | null = null;
    const statusesAfter: number[] = [];
    for (let i = 0; i < 1000 && statusesAfter.length < 20; i++) {
      // Several writes in flight at once, so a failing batch holds more than one request.
      const ids = Array.from({ length: 4 }, (_, k) => `p${i}-${k}`);
      const results = await Promise.all(ids.map((id) => server.post('/product', { id, name: id, description: DESCRIPTION })));
      if (first503 !== null) {
        statusesAfter.push(...results.map((res) => res.status));
        continue;
      }
      // The four race on their connections, so the group that meets the failure may hold writes
      // of a batch committed before it (200, and then they must survive the restart below)
      // beside those of the failed batch; only later groups must be all 503.
      results.forEach((res, k) => {
        const id = ids[k]!;
        if (res.status === 200) acknowledged.push(id);
        else {
          assert.equal(res.status, 503, res.text);
          assert.deepEqual(res.body, { type: 'ServiceUnavailableError', message: 'the journal cannot be written; the write was not accepted' });
          first503 ??= id;
        }
      });
    }
    assert.ok(first503 !== null, 'the journal failed once the file reached its size limit');
    assert.ok(acknowledged.length > 50, `writes succeeded before the limit (${acknowledged.length})`);
    // Requests already in a batch that failed may be answered 200 only if that batch committed
    // before the failure; after the first 503, nothing is accepted any more.
    assert.deepEqual([...new Set(statusesAfter)], [503]);

    // Every kind of write is refused now, and the process still serves.
    for (const [path, body] of [
      ['/mcrs_appl_v1', { timestamp: T0, info: { appVersionCode: 1 } }],
      ['/msv_cevt', { did, name: 'e', timestamp: T0 }],
      ['/collection', { id: 'c', name: 'C' }],
    ] as const) {
      assert.equal((await server.post(path, body)).status, 503, path);
    }
    assert.equal((await server.del('/product/p0-0')).status, 503);
    const ready = await server.request('/readyz');
    assert.equal(ready.status, 503);
    assert.equal(ready.body.type, 'ServiceUnavailableError');
    assert.equal((await server.request('/healthz')).status, 200);
    assert.equal(server.child.exitCode, null, 'the process is still running');

    assert.equal(await server.stop(), 1, 'a stop after a journal failure exits 1');

    const restarted = await startServer({ dataDir });
    try {
      const products = new Set(exportLines(dataDir, 'products').map((p) => p.id as string));
      const lost = acknowledged.filter((id) => !products.has(id));
      assert.deepEqual(lost, [], 'every write answered 200 survived');
      assert.equal((await restarted.request('/readyz')).status, 200);
      assert.equal((await restarted.post('/product', { id: 'after', name: 'A' })).status, 200);
    } finally {
      await restarted.stop();
    }
  });

  test('after a failure no snapshot is started, even once the disk has room again: the data file stops growing', async (t) => {
    const dataDir = tempDataDir();
    // A soft limit only, which the process's owner may raise again.
    const server = await startServer({ dataDir, wrap: ['prlimit', `--fsize=${FILE_LIMIT_BYTES}:unlimited`], env: { SNAPSHOT_INTERVAL_MS: '200', SNAPSHOT_EVERY_RECORDS: '0' } });
    t.after(() => server.kill());
    let failed = false;
    for (let i = 0; i < 1000 && !failed; i++) {
      const results = await Promise.all([0, 1, 2, 3].map((k) => server.post('/product', { id: `s${i}-${k}`, name: 'n', description: DESCRIPTION })));
      failed = results.some((res) => res.status === 503);
    }
    assert.ok(failed, 'the journal failed');
    // The operator frees space: the limit goes (a snapshot would now have room to be written).
    const raised = spawnSync('prlimit', ['--pid', String(server.child.pid), '--fsize=unlimited']);
    assert.equal(raised.status, 0, String(raised.stderr));
    // A snapshot already running when the journal failed stops at its next slice; then none starts.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const logsAtFailure = server.logs().length;
    const sizeAtFailure = statSync(join(dataDir, 'intake.mdb')).size;
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const started = server.logs().slice(logsAtFailure).filter((line) => line.includes('"snapshot started"'));
    assert.deepEqual(started, [], 'no snapshot started after the journal failed (10 intervals)');
    assert.equal(statSync(join(dataDir, 'intake.mdb')).size, sizeAtFailure, 'the data file did not grow');
    assert.deepEqual(server.logs().filter((line) => line.includes('unhandled promise rejection')), []);
    assert.equal(await server.stop(), 1);
  });
});
