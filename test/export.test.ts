// `npm run export` (CONTRACT.md §8): NDJSON, one record per line, `--since` as a cursor,
// `--workspace` and `--kind` filters, streamed in bounded memory, and working beside a live
// server. The big journal is written with the real Journal (group commit into the real LMDB).
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Journal } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore } from '../src/journal/store.ts';
import { cliCommand, exportLines, launch, ROOT, runCli, startServer, T0, tempDataDir } from './helpers/server.ts';

const EVENTS = 300_000;
/** Far less than 300,000 records take as objects: the export must stream. */
const HEAP_LIMIT_MB = 48;

function eventRecord(i: number): JournalRecord {
  return {
    kind: 'event',
    workspace: i % 3 === 0 ? 'ws-b' : 'ws-a',
    at: 1_750_000_000_000 + i,
    did: `device-${i % 1000}`.padEnd(21, 'x'),
    sid: `session-${i % 1000}`.padEnd(21, 'y'),
    customer: i % 2 === 0 ? `customer-${i % 50}` : null,
    data: { did: `device-${i % 1000}`, name: `event-${i}`, timestamp: T0 + i, info: [{ name: 'sku', value: `sku-${i % 5000}`, type: 'string' }] },
  };
}

/** Runs the export CLI with a capped heap and counts lines as they stream in. */
function streamExport(dataDir: string, args: string[]): Promise<{ code: number | null; lines: number; first: any; last: any; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...cliCommand('export', [`--max-old-space-size=${HEAP_LIMIT_MB}`]), ...args], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let lines = 0;
    let first: any = null;
    let lastLine = '';
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (lines++ === 0) first = JSON.parse(line);
      lastLine = line;
    });
    child.on('close', (code) => resolve({ code, lines, first, last: lastLine === '' ? null : JSON.parse(lastLine), stderr }));
  });
}

describe('export', () => {
  let bigDir: string;
  before(async () => {
    bigDir = tempDataDir();
    const store = openStore(bigDir);
    const journal = new Journal(store.journal, 'group', 8192);
    const waiter = { committed() {}, failed(error: Error) { throw error; } };
    for (let i = 0; i < EVENTS; i++) {
      journal.append(eventRecord(i), waiter);
      if (i % 20_000 === 19_999) await journal.drain();
    }
    await journal.drain();
    await store.close();
  });

  test(`${EVENTS.toLocaleString('en')} events stream out under a ${HEAP_LIMIT_MB} MB heap, one record per line, in seq order`, async () => {
    const result = await streamExport(bigDir, ['events']);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.lines, EVENTS);
    assert.deepEqual(result.first, { seq: 1, ...eventRecord(0) });
    assert.deepEqual(Object.keys(result.first).slice(0, 4), ['seq', 'kind', 'workspace', 'at']);
    assert.equal(result.last.seq, EVENTS);
  });

  test('--since is a cursor: only records with a greater seq', async () => {
    const result = await streamExport(bigDir, ['events', '--since', String(EVENTS - 1234)]);
    assert.equal(result.lines, 1234);
    assert.equal(result.first.seq, EVENTS - 1233);
    // Inside a batch too (batches hold up to 8,192 records).
    const mid = await streamExport(bigDir, ['events', '--since', '100']);
    assert.equal(mid.first.seq, 101);
    assert.equal(mid.lines, EVENTS - 100);
  });

  test('--workspace and --kind filter; combined with --since', async () => {
    const ws = await streamExport(bigDir, ['events', '--workspace', 'ws-b']);
    assert.equal(ws.lines, EVENTS / 3);
    assert.equal(ws.first.workspace, 'ws-b');
    assert.equal((await streamExport(bigDir, ['events', '--kind', 'app_launch'])).lines, 0);
    assert.equal((await streamExport(bigDir, ['events', '--kind', 'event', '--workspace', 'ws-a', '--since', String(EVENTS - 30)])).lines, 20);
  });

  test('with a server running on the directory, events and state stop at the position it made durable (as --follow does); with none, everything stored', async () => {
    const server = await startServer();
    try {
      assert.equal((await server.post('/product', { id: 'durable-1', name: 'n' })).status, 200);
      // Past the server's durable position, a batch committed but (as far as the server has
      // said) not fsync'd yet: written here, beside it, into its LMDB.
      const store = openStore(server.dataDir);
      const last = Journal.lastSeq(store.journal);
      const workspace = (exportLines(server.dataDir, 'products')[0] as { workspace: string }).workspace;
      await store.journal.put(last + 1, [{ kind: 'product_upsert', workspace, at: Date.now(), data: { id: 'not-durable', name: 'n' } }]);
      await store.close();
      const running = exportLines(server.dataDir, 'events');
      assert.ok(running.some((e) => e.data?.id === 'durable-1'));
      assert.ok(!running.some((e) => e.data?.id === 'not-durable'), 'a record past the durable position is not printed while the server runs');
      const products = exportLines(server.dataDir, 'products').map((p) => p.id);
      assert.ok(products.includes('durable-1'));
      assert.ok(!products.includes('not-durable'), 'a state export leaves out a write past the durable position while the server runs');
    } finally {
      await server.kill();
    }
    assert.ok(exportLines(server.dataDir, 'events').some((e) => e.data?.id === 'not-durable'), 'with no server running, every stored record is printed');
    assert.ok(exportLines(server.dataDir, 'products').some((p) => p.id === 'not-durable'), 'and is in the state');
  });

  test('--flag=value works as --flag value does (as import and keys take it)', async () => {
    const spaced = await streamExport(bigDir, ['events', '--since', String(EVENTS - 10)]);
    const joined = await streamExport(bigDir, ['events', `--since=${EVENTS - 10}`]);
    assert.equal(joined.lines, 10);
    assert.deepEqual(joined.first, spaced.first);
    const kind = runCli('export', ['events', `--since=${EVENTS - 3}`, '--kind=event', `--data-dir=${bigDir}`], '/nonexistent-data-dir');
    assert.equal(kind.status, 0, kind.stderr);
    assert.equal(kind.stdout.split('\n').filter((line) => line !== '').length, 3, '--data-dir= chose the directory, --kind= and --since= filtered');
  });

  test('bad arguments: a message and a non-zero status', () => {
    for (const args of [[], ['everything'], ['events', '--since', 'x'], ['events', '--kind', 'nope'], ['devices', '--since', '3'], ['events', '--since='], ['events', '--follow=yes'], ['events', '--data-dir', '--follow'], ['events', '--kind=nope']]) {
      const res = runCli('export', args, bigDir);
      assert.notEqual(res.status, 0, args.join(' '));
      assert.match(res.stderr, /usage: npm run export/);
    }
  });

  test('state exports while the server runs and writes; collections list their members', async () => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '100' } });
    try {
      const { did } = await launch(server);
      await server.post('/product', { id: 'p1', name: 'P1' });
      await server.post('/product', { id: 'p2', name: 'P2' });
      await server.post('/collection', { id: 'c1', name: 'C1' });
      await server.post('/collection/c1/products/add', { products: ['p2', 'p1'] });
      let writing = true;
      const background = (async () => {
        for (let i = 0; writing; i++) await server.post('/msv_cevt', { did, name: `bg-${i}`, timestamp: T0 });
      })();
      for (let i = 0; i < 3; i++) {
        assert.deepEqual(exportLines(dataDir, 'collections'), [{ workspace: 'ws-a', id: 'c1', name: 'C1', products: ['p2', 'p1'] }]);
        assert.equal(exportLines(dataDir, 'devices').length, 1);
        const events = exportLines(dataDir, 'events', '--kind', 'event');
        assert.ok(events.every((e, k) => k === 0 || e.seq > events[k - 1].seq));
      }
      writing = false;
      await background;
    } finally {
      await server.stop();
    }
  });
});
