// A failed fsync, for real: an LD_PRELOAD shim (compiled here from C) makes the next fsync or
// fdatasync of the server return EIO once a flag file appears, then removes the flag. Here it
// hits the commit of the journal's idle durable marker, which carries no journal batch. After a
// failed fsync the kernel may drop the pages it could not write and mark them clean (PostgreSQL's
// "fsyncgate"), and the next commits reuse pages that commit wrote: the journal must fail as
// for a batch (503, /readyz 503). Before 2026-11-29 the marker's failure was ignored and later
// writes were answered 200 (found by a review). Skipped where no C compiler is installed.
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildEioShim } from './helpers/eio-shim.ts';
import { launch, startServer, T0 } from './helpers/server.ts';

test('an fsync that fails (EIO) on the commit of the idle durable marker fails the journal: the next write gets 503, /readyz 503', async (t) => {
  const shim = buildEioShim();
  if ('skip' in shim) {
    t.skip(shim.skip);
    return;
  }
  const { flag } = shim;
  // No snapshot: its chunks' commits would be other fsyncs the flag could meet.
  const server = await startServer({ env: { ...shim.env, SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' } });
  try {
    const { did } = await launch(server);
    // The idle marker is committed 20 ms after the last batch: its fsync is the next one, if the
    // flag is there by then. On a loaded machine the answer may come later than that: the flag
    // then meets nothing, and the test tries again with another write.
    let met = false;
    for (let attempt = 0; attempt < 20 && !met; attempt++) {
      assert.equal((await server.post('/msv_cevt', { did, name: `before-${attempt}`, timestamp: T0 })).status, 200);
      writeFileSync(flag, '');
      await new Promise((resolve) => setTimeout(resolve, 200));
      met = !existsSync(flag);
      rmSync(flag, { force: true });
    }
    assert.ok(met, 'an fsync met the flag (the marker\'s commit)');
    const after = await server.post('/msv_cevt', { did, name: 'after', timestamp: T0 });
    assert.equal(after.status, 503, `a write after the failed fsync is refused: ${after.status} ${after.text}`);
    assert.equal((await server.request('/readyz', undefined, { key: null })).status, 503);
    assert.ok(server.logs().some((line) => line.includes('journal commit failed')), 'logged as a journal failure');
  } finally {
    await server.kill();
  }
});
