// `npm run export -- events --follow` (issue 9): what `events` prints, then every new durable
// record as it comes, with --since/--workspace/--kind applied, in constant memory, until SIGINT,
// SIGTERM or a closed stdout (EPIPE ends it quietly, exit 0).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { Journal } from '../src/journal/journal.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { openStore } from '../src/journal/store.ts';
import { cliCommand, exportLines, KEY_B, launch, ROOT, startServer, T0, tempDataDir, type TestServer } from './helpers/server.ts';
import { until } from './helpers/wait.ts';

interface Follower {
  child: ChildProcessWithoutNullStreams;
  lines: any[];
  stderr(): string;
  exited: Promise<number | null>;
}

function follow(dataDir: string, args: string[] = [], nodeFlags: string[] = [], onLine?: (line: string) => void): Follower {
  const child = spawn(process.execPath, [...cliCommand('export', nodeFlags), 'events', '--follow', ...args], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir },
  });
  const lines: any[] = [];
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  createInterface({ input: child.stdout }).on('line', onLine ?? ((line) => lines.push(JSON.parse(line))));
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, lines, stderr: () => stderr, exited };
}

const servers: TestServer[] = [];
const followers: Follower[] = [];
after(async () => {
  for (const f of followers) f.child.kill('SIGKILL');
  for (const s of servers) await s.kill();
});

test('--follow prints the journal, then each new record once it is durable, until SIGTERM (exit 0)', async () => {
  const server = await startServer();
  servers.push(server);
  const { did } = await launch(server);
  await server.post('/msv_cevt', { did, name: 'one', timestamp: T0 });
  const f = follow(server.dataDir);
  followers.push(f);
  await until('the existing records', async () => f.lines.length === 2);
  for (const name of ['two', 'three']) assert.equal((await server.post('/msv_cevt', { did, name, timestamp: T0 })).status, 200);
  await server.post('/product', { id: 'p', name: 'n' });
  await until('the new records', async () => f.lines.length === 5, 5_000);
  assert.deepEqual(f.lines, exportLines(server.dataDir, 'events'), 'the same lines `events` prints, in seq order');
  f.child.kill('SIGTERM');
  assert.equal(await f.exited, 0);
  assert.equal(f.stderr(), '');
});

test('--follow with no server on the directory prints every stored record, past the durable marker a kill -9 left behind', async () => {
  const server = await startServer();
  servers.push(server);
  assert.equal((await server.post('/product', { id: 'acked', name: 'n' })).status, 200);
  await server.kill();
  // What a kill -9 leaves: a record stored after the last durable marker the server wrote.
  const store = openStore(server.dataDir);
  const last = Journal.lastSeq(store.journal);
  const workspace = (exportLines(server.dataDir, 'products')[0] as { workspace: string }).workspace;
  await store.journal.put(last + 1, [{ kind: 'product_upsert', workspace, at: Date.now(), data: { id: 'past-marker', name: 'n' } } satisfies JournalRecord]);
  await store.close();
  const f = follow(server.dataDir, ['--kind', 'product_upsert']);
  followers.push(f);
  // Before 2026-11-29 it printed 'acked' and waited at the marker until a server started.
  await until('the record past the marker', async () => f.lines.some((l) => l.data?.id === 'past-marker'), 5_000);
  assert.deepEqual(f.lines.map((l) => l.data.id), ['acked', 'past-marker']);
  f.child.kill('SIGTERM');
  assert.equal(await f.exited, 0);
});

test('--follow composes with --since, --workspace and --kind, and stops on SIGINT', async () => {
  const server = await startServer();
  servers.push(server);
  const a = await launch(server);
  const b = await launch(server, undefined, KEY_B);
  await server.post('/msv_cevt', { did: a.did, name: 'a1', timestamp: T0 });
  await server.post('/msv_cevt', { did: b.did, name: 'b1', timestamp: T0 }, KEY_B);
  const f = follow(server.dataDir, ['--since', '2', '--workspace', 'ws-a', '--kind', 'event']);
  followers.push(f);
  await until('the first matching record', async () => f.lines.length === 1);
  assert.equal(f.lines[0].data.name, 'a1');
  await server.post('/msv_cevt', { did: b.did, name: 'b2', timestamp: T0 }, KEY_B);
  await server.post('/product', { id: 'p', name: 'n' });
  await server.post('/msv_cevt', { did: a.did, name: 'a2', timestamp: T0 });
  await until('the next matching record', async () => f.lines.length === 2, 5_000);
  assert.equal(f.lines[1].data.name, 'a2');
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(f.lines.length, 2, 'nothing else matched');
  f.child.kill('SIGINT');
  assert.equal(await f.exited, 0);
});

test('a closed stdout (EPIPE) ends --follow quietly with exit 0', async () => {
  const server = await startServer();
  servers.push(server);
  const { did } = await launch(server);
  const f = follow(server.dataDir);
  followers.push(f);
  await until('the first record', async () => f.lines.length === 1);
  f.child.stdout.destroy(); // the reader goes away, like `| head -n 1`
  // The next record it writes meets the closed pipe.
  for (let i = 0; i < 5; i++) await server.post('/msv_cevt', { did, name: `e${i}`, timestamp: T0 });
  assert.equal(await f.exited, 0);
  assert.equal(f.stderr(), '');
});

test('--follow streams 200,000 new records under a 48 MB heap', async () => {
  const dataDir = tempDataDir();
  const store = openStore(dataDir);
  const journal = new Journal(store.journal, 'group', 8192);
  journal.useMarker(store.meta);
  await journal.markDurable();
  let count = 0;
  let lastSeq = 0;
  const f = follow(dataDir, [], ['--max-old-space-size=48'], (line) => {
    count++;
    lastSeq = (JSON.parse(line) as { seq: number }).seq;
  });
  followers.push(f);
  const waiter = { committed() {}, failed(error: Error) { throw error; } };
  const TOTAL = 200_000;
  for (let i = 0; i < TOTAL; i++) {
    const record: JournalRecord = { kind: 'product_upsert', workspace: 'ws', at: T0 + i, data: { id: `p-${i}`, name: `product number ${i}`, description: 'd'.repeat(100) } };
    journal.append(record, waiter);
    if (i % 10_000 === 9_999) await journal.drain();
  }
  await journal.drain();
  await journal.markDurable();
  await until('every record printed', async () => count >= TOTAL, 60_000);
  assert.equal(count, TOTAL);
  assert.equal(lastSeq, TOTAL);
  f.child.kill('SIGTERM');
  assert.equal(await f.exited, 0, f.stderr());
  await store.close();
});
