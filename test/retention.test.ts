// Journal retention by age: records older than the retention are deleted only once a complete
// snapshot covers them; without a retention the journal is never trimmed. Recovery after trimming
// (snapshot + what is left) gives the same state, and seq keeps growing across restarts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { trimJournal, TRIM_RECORDS_PER_STEP } from '../src/journal/retention.ts';
import { openStore } from '../src/journal/store.ts';
import { exportLines, launch, runCli, startServer, T0, tempDataDir } from './helpers/server.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function writeSome(server: Awaited<ReturnType<typeof startServer>>, tag: string): Promise<void> {
  const { did } = await launch(server);
  for (let i = 0; i < 20; i++) assert.equal((await server.post('/msv_cevt', { did, name: `${tag}-${i}`, timestamp: T0 })).status, 200);
  assert.equal((await server.post('/product', { id: `${tag}-p`, name: tag })).status, 200);
}

describe('journal retention', () => {
  test('without a retention the journal keeps everything, snapshots or not', async () => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '100' } });
    await writeSome(server, 'keep');
    await sleep(600);
    assert.ok(server.logs().some((l) => l.includes('"snapshot written"')));
    assert.equal(exportLines(dataDir, 'events').length, 22);
    await server.stop();
  });

  test('a batch is trimmed only when its youngest record is older than the retention, whichever record comes last (a big mapping is appended after writes received later)', async () => {
    const store = openStore(tempDataDir());
    try {
      const nowMs = Date.now();
      const record = (id: string, at: number) => ({ kind: 'product_delete' as const, workspace: 'ws-a', at, data: { id } });
      await store.journal.put(1, [record('old-1', nowMs - 60_000), record('young', nowMs), record('old-2', nowMs - 60_000)]);
      await store.journal.put(4, [record('old-3', nowMs - 60_000)]);
      const report = await trimJournal(store, 4, nowMs - 30_000);
      assert.equal(report.records, 0, 'the first batch holds a record younger than the retention: nothing from it on');
      assert.deepEqual([...store.journal.getKeys()], [1, 4]);
    } finally {
      await store.close();
    }
  });

  test('a trim decodes at most TRIM_RECORDS_PER_STEP records (and the batch that crosses it) between two turns of the event loop', async () => {
    const store = openStore(tempDataDir());
    try {
      const oldMs = Date.now() - 60_000;
      const batchRecords = 8_192;
      const batches = 5;
      for (let b = 0; b < batches; b++) {
        const records = Array.from({ length: batchRecords }, (_, i) => ({ kind: 'product_delete' as const, workspace: 'ws-a', at: oldMs, data: { id: `p-${b}-${i}` } }));
        await store.journal.put(1 + b * batchRecords, records);
      }
      // Counts the records each read of the journal decodes: one read per step, and the steps
      // are separated by turns of the event loop (and a transaction).
      const perRead: number[] = [];
      const getRange = store.journal.getRange.bind(store.journal);
      store.journal.getRange = ((options: Parameters<typeof getRange>[0]) => {
        const index = perRead.push(0) - 1;
        return getRange(options).map((entry) => {
          perRead[index]! += entry.value.length;
          return entry;
        });
      }) as typeof store.journal.getRange;
      const report = await trimJournal(store, batches * batchRecords, Date.now() - 30_000);
      assert.equal(report.records, batches * batchRecords, 'all of it trimmed');
      assert.equal(report.firstKeptSeq, null);
      assert.deepEqual([...store.journal.getKeys()], []);
      const most = Math.max(...perRead);
      assert.ok(most <= TRIM_RECORDS_PER_STEP + batchRecords, `a step decoded ${most} records (${perRead.join(', ')})`);
      assert.ok(perRead.length >= 3, `in ${perRead.length} steps`);
    } finally {
      await store.close();
    }
  });

  test('a journal emptied by retention: the export says which records are gone (it printed nothing at all)', async () => {
    const server = await startServer({ env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0', JOURNAL_RETENTION_SECONDS: '1' } });
    try {
      for (const id of ['e1', 'e2', 'e3']) assert.equal((await server.post('/product', { id, name: id })).status, 200);
      await sleep(1500);
      server.child.kill('SIGUSR2');
      await server.waitForLog((line) => line.includes('"journal trimmed by retention"'), 10_000);
      assert.deepEqual(exportLines(server.dataDir, 'events'), []);
      const cli = runCli('export', ['events', '--since', '1'], server.dataDir);
      assert.equal(cli.status, 0);
      assert.equal(cli.stderr, 'export: records 2 to 3 are not in this journal (trimmed by retention, or before the snapshot a cluster node joined from)\n');
    } finally {
      await server.stop();
    }
  });

  test('records older than the retention go once a snapshot covers them; the rest and the state stay', async () => {
    const dataDir = tempDataDir();
    // No snapshot on a timer at first: old records must stay while nothing covers them.
    const first = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0', JOURNAL_RETENTION_SECONDS: '1' } });
    await writeSome(first, 'old');
    await sleep(1500);
    assert.equal(exportLines(dataDir, 'events').length, 22, 'nothing is trimmed before a snapshot covers it');
    await first.kill();

    const server = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '200', JOURNAL_RETENTION_SECONDS: '1' } });
    try {
      await writeSome(server, 'new');
      const deadline = Date.now() + 5000;
      while (exportLines(dataDir, 'events').some((e) => e.seq <= 22) && Date.now() < deadline) await sleep(200);
      const events = exportLines(dataDir, 'events');
      assert.ok(events.every((e) => e.seq > 22), 'the old records (older than 1 s, covered by a snapshot) were trimmed');
      // Log lines are read between awaits (exportLines blocks): give them a moment to arrive.
      for (let i = 0; i < 20 && !server.logs().some((l) => l.includes('"journal trimmed by retention"')); i++) await sleep(50);
      assert.ok(server.logs().some((l) => l.includes('"journal trimmed by retention"')));
      assert.equal(exportLines(dataDir, 'events', '--since', '0').filter((e) => e.data.name?.startsWith('new-')).length, 20, 'recent records are kept');
      // The export says the trimmed records are gone, on stderr, instead of skipping them silently.
      const first = exportLines(dataDir, 'events')[0]!.seq as number;
      const cli = runCli('export', ['events', '--since', '0'], dataDir);
      assert.equal(cli.status, 0);
      assert.equal(cli.stderr, `export: records 1 to ${first - 1} are not in this journal (trimmed by retention, or before the snapshot a cluster node joined from); going on at ${first}\n`);
      assert.equal(runCli('export', ['events', '--since', String(first - 1)], dataDir).stderr, '', 'from the first record held: nothing to say');
      const products = exportLines(dataDir, 'products').map((p) => p.id).sort();
      assert.deepEqual(products, ['new-p', 'old-p'], 'the state still holds what the trimmed records wrote');
    } finally {
      await server.stop();
    }
    // After trimming, a restart recovers from the snapshot and numbering goes on.
    const again = await startServer({ dataDir, env: { JOURNAL_RETENTION_SECONDS: '1' } });
    try {
      await writeSome(again, 'later');
      const seqs = exportLines(dataDir, 'events').map((e) => e.seq as number);
      assert.ok(Math.min(...seqs) > 22 && Math.max(...seqs) > 44, `seq keeps growing (${Math.min(...seqs)}..${Math.max(...seqs)})`);
      assert.deepEqual(exportLines(dataDir, 'products').map((p) => p.id).sort(), ['later-p', 'new-p', 'old-p']);
    } finally {
      await again.stop();
    }
  });
});
