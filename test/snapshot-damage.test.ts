// A damaged snapshot is refused with a message that names it, never loaded as if whole. LMDB
// checks its own pages, not the values in them: a snapshot chunk cut short failed the start
// with "TypeError: Unexpected end of buffer reading string" (no snapshot named), and a chunk
// replaced by a shorter one that still decodes lost its entities without a word (found by a
// review, 2026-11-29). The meta records the chunks' bytes and the entities written; the loader
// checks both.
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeRecords } from '../src/journal/record-bytes.ts';
import { ENTRY_CUSTOMER } from '../src/journal/snapshot-format.ts';
import { openStore } from '../src/journal/store.ts';
import { serverCommand } from '../bench/lib/servers.ts';
import { DEFAULT_KEYS, ROOT, startServer, tempDataDir } from './helpers/server.ts';

/** A data directory whose newest snapshot (taken at the stop) holds 600 products, in 3 chunks or more. */
async function snapshotted(): Promise<string> {
  const dataDir = tempDataDir();
  const server = await startServer({ dataDir });
  for (let i = 0; i < 600; i += 50) {
    const statuses = await Promise.all(Array.from({ length: 50 }, (_, j) => server.post('/product', { id: `p${i + j}`, name: 'P' }).then((r) => r.status)));
    assert.deepEqual(new Set(statuses), new Set([200]));
  }
  assert.equal(await server.stop(), 0);
  return dataDir;
}

/** Replaces chunk 1 of the newest snapshot with what `damage` makes of it. */
async function damageChunk(dataDir: string, damage: (chunk: Buffer) => Buffer): Promise<number> {
  const store = openStore(dataDir);
  try {
    const meta = [...store.snapshots.getRange({ reverse: true, limit: 1 })][0]!.value;
    assert.ok(meta.completedAt !== null && meta.chunks >= 3, `a complete snapshot of ${meta.chunks} chunks`);
    const chunk = store.snapshotChunks.get([meta.id, 1])!;
    await store.snapshotChunks.put([meta.id, 1], damage(chunk));
    return meta.id;
  } finally {
    await store.close();
  }
}

function start(dataDir: string): { status: number | null; stderr: string } {
  const result = spawnSync(process.execPath, serverCommand(), {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', SERVICE_KEYS: DEFAULT_KEYS },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: result.status, stderr: result.stderr };
}

test('a snapshot chunk cut short: the start fails naming the snapshot and the chunk', async () => {
  const dataDir = await snapshotted();
  const id = await damageChunk(dataDir, (chunk) => chunk.subarray(0, chunk.length - 7));
  const { status, stderr } = start(dataDir);
  assert.notEqual(status, 0);
  assert.match(stderr, new RegExp(`snapshot ${id}: chunk 1 cannot be read`), stderr);
});

test('a snapshot chunk replaced by one that decodes but holds less: the start fails, not a state without its entities', async () => {
  const dataDir = await snapshotted();
  const id = await damageChunk(dataDir, () => encodeRecords([]));
  const { status, stderr } = start(dataDir);
  assert.notEqual(status, 0, 'started without the chunk\'s products');
  assert.match(stderr, new RegExp(`snapshot ${id}: \\d+ bytes of chunks, \\d+ written`), stderr);
});

test('a snapshot chunk that decodes but holds an entry of the wrong shape: the start fails naming the snapshot and the chunk', async () => {
  const dataDir = await snapshotted();
  // A customer entry whose attributes are a number, not a list: a TypeError in the loader,
  // which named neither snapshot nor chunk before 2026-11-29 (a review).
  const id = await damageChunk(dataDir, () => encodeRecords([[ENTRY_CUSTOMER, 0, 'c', 5]]));
  const { status, stderr } = start(dataDir);
  assert.notEqual(status, 0);
  assert.match(stderr, new RegExp(`snapshot ${id}: chunk 1 holds an entry that cannot be loaded`), stderr);
});
