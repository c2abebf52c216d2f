// Issue 17: a journal with a hole in `seq` (a commit failed and later records were stored anyway,
// as intake could do before) is refused: the server does not start, with a message that names
// the seqs and says what to do, and `npm run journal -- repair` deletes the records stored after
// the hole (they were never acknowledged), after which the server starts. The hole is written
// directly into LMDB, as a batch per key (the seq of its first record).
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { serverCommand } from '../bench/lib/servers.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore } from '../src/journal/store.ts';
import { DEFAULT_KEYS, exportLines, ROOT, runCli, startServer, tempDataDir } from './helpers/server.ts';

const upsert = (id: string): JournalRecord => ({ kind: 'product_upsert', workspace: 'ws-a', at: Date.now(), data: { id, name: id } });

/** Batches [1..3] and [7..8]: seqs 4 to 6 are missing. */
async function journalWithHole(): Promise<string> {
  const dataDir = tempDataDir();
  const store = openStore(dataDir);
  await store.journal.put(1, [upsert('p1'), upsert('p2'), upsert('p3')]);
  await store.journal.put(7, [upsert('p7'), upsert('p8')]);
  await store.close();
  return dataDir;
}

/** Runs the server as `npm start` does; it must exit before it listens. */
function startRefused(dataDir: string): { status: number | null; stderr: string; stdout: string } {
  const result = spawnSync(process.execPath, serverCommand(), {
    cwd: ROOT,
    env: { ...process.env, HOST: '127.0.0.1', PORT: '0', DATA_DIR: dataDir, SERVICE_KEYS: DEFAULT_KEYS },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: result.status, stderr: result.stderr, stdout: result.stdout };
}

test('a journal with a hole: the server refuses to start, says which seqs and what to do; repair, then it starts', async () => {
  const dataDir = await journalWithHole();
  const refused = startRefused(dataDir);
  assert.notEqual(refused.status, 0, 'non-zero exit');
  assert.equal(refused.status, 1);
  assert.ok(!refused.stdout.includes('"listening"'), 'it never listened');
  const message = refused.stderr;
  assert.match(message, /^intake: failed to start: the journal has a hole: seqs 4 to 6 are missing, and records 7 to 8 are stored after it\./);
  assert.match(message, /never acknowledged/);
  assert.match(message, /npm run journal -- repair/);
  assert.ok(message.includes(dataDir), 'names the data directory');
  assert.ok(!message.includes('    at '), 'no stack trace');
  assert.equal(message.trim().split('\n').length, 1, 'one line');

  // The state exports rebuild the state the same way: they refuse too.
  const exported = runCli('export', ['products'], dataDir);
  assert.equal(exported.status, 1);
  assert.match(exported.stderr, /^export: the journal has a hole: seqs 4 to 6 are missing/);
  assert.equal(exported.stdout, '');
  // So does `export events`, once it reaches the hole: the records after it would be deleted by
  // the repair and their seqs reused (it printed them, calling the hole "trimmed by retention").
  const events = runCli('export', ['events'], dataDir);
  assert.equal(events.status, 1, events.stderr);
  assert.match(events.stderr, /^export: the journal has a hole: seqs 4 to 6 are missing, and records 7 to 8 are stored after it\./);
  assert.deepEqual(events.stdout.split('\n').filter((line) => line !== '').map((line) => (JSON.parse(line) as { seq: number }).seq), [1, 2, 3], 'the records before the hole, none after it');

  const check = runCli('journal', ['check'], dataDir);
  assert.equal(check.status, 1);
  assert.match(check.stderr, /seqs 4 to 6 are missing/);

  // `--data-dir=<dir>` names the directory too (it was ignored: DATA_DIR's was checked, and
  // repaired, instead); an argument it does not know is a usage error, not ignored.
  const elsewhere = tempDataDir();
  const named = runCli('journal', ['check', `--data-dir=${dataDir}`], elsewhere);
  assert.equal(named.status, 1, named.stderr);
  assert.match(named.stderr, /seqs 4 to 6 are missing/);
  const odd = runCli('journal', ['repair', '--dry-run'], dataDir);
  assert.equal(odd.status, 2);
  assert.match(odd.stderr, /unexpected argument --dry-run/);

  const repair = runCli('journal', ['repair'], dataDir);
  assert.equal(repair.status, 0, repair.stderr);
  assert.match(repair.stderr, /deleted 2 record\(s\), seq 7 to 8/);
  assert.equal(runCli('journal', ['check'], dataDir).status, 0);
  assert.equal(runCli('journal', ['repair'], dataDir).status, 0, 'a second repair has nothing to do');

  const server = await startServer({ dataDir });
  try {
    assert.deepEqual(exportLines(dataDir, 'products').map((p) => p.id).sort(), ['p1', 'p2', 'p3']);
    assert.equal((await server.post('/product', { id: 'next', name: 'N' })).status, 200);
    assert.deepEqual(exportLines(dataDir, 'events').map((r) => r.seq), [1, 2, 3, 4], 'numbering goes on after the last record kept');
  } finally {
    await server.stop();
  }
});

test('a hole right after the position the newest snapshot covers is found too', async () => {
  const dataDir = tempDataDir();
  const server = await startServer({ dataDir });
  for (const id of ['p1', 'p2', 'p3']) assert.equal((await server.post('/product', { id, name: id })).status, 200);
  assert.equal(await server.stop(), 0, 'a graceful stop writes a snapshot covering seq 3');
  const store = openStore(dataDir);
  await store.journal.put(5, [upsert('p5')]);
  await store.close();
  const refused = startRefused(dataDir);
  assert.equal(refused.status, 1);
  assert.match(refused.stderr, /the journal has a hole: seq 4 is missing, and record 5 is stored after it\./);
  const events = runCli('export', ['events'], dataDir);
  assert.equal(events.status, 1, events.stderr);
  assert.match(events.stderr, /the journal has a hole: seq 4 is missing, and record 5 is stored after it\./);
  assert.match(runCli('journal', ['repair'], dataDir).stderr, /deleted 1 record\(s\), seq 5 to 5/);
  const restarted = await startServer({ dataDir });
  try {
    assert.deepEqual(exportLines(dataDir, 'products').map((p) => p.id).sort(), ['p1', 'p2', 'p3']);
  } finally {
    await restarted.stop();
  }
});
