// The data directory's lock (journal/data-dir.ts, an abstract Unix socket) and the question
// `export` asks of it: is a server running here? Asked by taking the lock and releasing it, a
// server starting in that moment found the lock held and stopped with status 2 (a cron'd export
// beside a restart; found by a review, 2026-11-29). Now the question takes nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dataDirInUse, lockDataDir } from '../src/journal/data-dir.ts';
import { tempDataDir } from './helpers/server.ts';

test('dataDirInUse says whether the lock is held, and asking never keeps a server from taking it', async () => {
  const dir = tempDataDir();
  assert.equal(await dataDirInUse(dir), false, 'nobody holds it');
  // A server starting while exports keep asking: it takes the lock all the same.
  const asking = Array.from({ length: 50 }, () => dataDirInUse(dir));
  const lock = await lockDataDir(dir);
  await Promise.all(asking);
  assert.equal(await dataDirInUse(dir), true, 'held now');
  assert.equal(await dataDirInUse(`${dir}/.`), true, 'by its real path: another spelling of it too');
  await assert.rejects(lockDataDir(dir), /in use by another intake process/);
  lock.release();
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(await dataDirInUse(dir), false, 'released');
});
