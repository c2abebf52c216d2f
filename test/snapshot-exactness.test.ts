// A snapshot is the state after record P, exactly, even though it is written in slices while
// writes keep changing the state. Property test with the real actors, journal, LMDB and snapshot
// writer: random writes of every kind run between the slices of many snapshots (tiny slices, so
// almost every write hits an entity the walk has not reached: copy-on-write, deletes, creations);
// each finished snapshot, loaded, must equal a plain replay of the journal up to its P. Some
// writes carry Idempotency-Keys (retries, conflicts, new keys) into a table of only 32 keys, so
// its ring wraps and evicts while snapshots are written: the remembered keys are state too.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { applyRecord } from '../src/actors/apply.ts';
import { Intake, type Reply } from '../src/actors/intake.ts';
import { ProfileInterner } from '../src/actors/interner.ts';
import { collectionViews, customerViews, deviceViews, productViews, sortedWorkspaces } from '../src/actors/views.ts';
import { Workspaces } from '../src/actors/workspace.ts';
import { bodyFingerprint, IdempotencyClaim } from '../src/idempotency/claim.ts';
import { keyHashOf, KeyTable } from '../src/idempotency/key-table.ts';
import { Journal } from '../src/journal/journal.ts';
import { recover } from '../src/journal/recovery.ts';
import { loadSnapshot } from '../src/journal/snapshot-loader.ts';
import { SnapshotWriter } from '../src/journal/snapshot-writer.ts';
import { openStore, type SnapshotMeta, type Store } from '../src/journal/store.ts';
import { seededRandom } from '../bench/lib/random.ts';
import { LAUNCH_INFO, T0, tempDataDir } from './helpers/server.ts';


const ignore: Reply = { succeed() {}, reject() {}, committed() {}, failed() {}, crashed(error) { throw error; }, idempotency: null, replay() {} };
/** Small, so that keys are evicted and the ring wraps during snapshots. */
const KEYS_HELD = 32;
/** The workload's timestamps are years old: a window that still holds them. */
const KEYS_WINDOW_SECONDS = 100 * 365 * 86_400;

/** A reply carrying an Idempotency-Key for `body` (fingerprint as the HTTP layer makes it). */
function keyed(workspace: string, path: string, key: string, body: unknown, base: Reply = ignore): Reply {
  const claim = new IdempotencyClaim(workspace, 'POST', path, key);
  claim.fingerprint(bodyFingerprint(Buffer.from(JSON.stringify(body))));
  return { ...base, idempotency: claim };
}

/** Random valid writes through the intake, over a small id space so entities are hit often. */
class Workload {
  private readonly dids: string[] = [];
  private readonly keyed: Array<{ ws: string; key: string; body: unknown }> = [];
  private n = 0;
  constructor(
    private readonly intake: Intake,
    private readonly workspaces: Workspaces,
    private readonly rnd: () => number,
  ) {}

  private pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.rnd() * list.length)]!;
  }

  step(): void {
    const ws = this.workspaces.get(this.rnd() < 0.8 ? 'a' : 'b');
    const did = this.dids.length > 0 ? this.pick(this.dids) : undefined;
    const pid = `p${Math.floor(this.rnd() * 40)}`;
    const cid = `c${Math.floor(this.rnd() * 8)}`;
    const at = T0 + ++this.n;
    const r = this.rnd();
    const attrs = () => [
      { name: this.pick(['email', 'tier', 'age']), value: this.rnd() < 0.2 ? null : `v${this.n}`, type: 'string' as const },
    ];
    // A keyed track event: a new key, a retry of an earlier one (same body), or a key reused for
    // another body (a conflict); only the new ones add records and keys.
    if (did !== undefined && r < 0.06) {
      const body = { did, name: 'k', timestamp: at };
      const earlier = this.keyed.length > 0 && this.rnd() < 0.5 ? this.pick(this.keyed) : null;
      if (earlier === null) {
        const key = `key-${this.n}`;
        this.keyed.push({ ws: ws.name, key, body });
        this.intake.devices.trackEvent(ws, body as never, at, keyed(ws.name, '/msv_cevt', key, body));
      } else {
        const sent = this.rnd() < 0.7 ? earlier.body : body;
        this.intake.devices.trackEvent(this.workspaces.get(earlier.ws), sent as never, at, keyed(earlier.ws, '/msv_cevt', earlier.key, sent));
      }
      return;
    }
    if (r < 0.12 || did === undefined) {
      const reply: Reply = { ...ignore, succeed: (body: string) => this.dids.push((JSON.parse(body) as { did: string }).did) };
      const info = { ...LAUNCH_INFO, appVersionName: this.pick(['1.0', '2.0', '3.0']), firstTime: this.rnd() < 0.5 };
      this.intake.devices.appLaunch(ws, { timestamp: at, info, did: this.rnd() < 0.5 ? did ?? null : null } as never, at, reply);
    } else if (r < 0.3) this.intake.devices.trackEvent(ws, { did, name: 'e', timestamp: at } as never, at, ignore);
    else if (r < 0.42) {
      const body = this.rnd() < 0.6 ? { did, clientCustomerId: `u${Math.floor(this.rnd() * 10)}`, timestamp: at, info: attrs() } : { did, timestamp: at, info: attrs() };
      this.intake.devices.identify(ws, body as never, at, ignore);
    } else if (r < 0.5) this.intake.devices.pushToken(ws, { did, type: this.pick(['fcm', 'apns']), token: `t${this.n}`, timestamp: at } as never, at, ignore);
    else if (r < 0.53) this.intake.devices.logout(ws, { did }, at, ignore);
    else if (r < 0.68) this.intake.catalog.productUpsert(ws, { id: pid, name: `n${this.n}`, price: this.rnd() < 0.2 ? null : this.n } as never, at, ignore);
    else if (r < 0.73) this.intake.catalog.productDelete(ws, pid, at, ignore);
    else if (r < 0.8) this.intake.catalog.collectionUpsert(ws, { id: cid, name: `c${this.n}`, url: this.rnd() < 0.3 ? null : 'u' } as never, at, ignore);
    else if (r < 0.83) this.intake.catalog.collectionDelete(ws, cid, at, ignore);
    else {
      const products = Array.from({ length: 1 + Math.floor(this.rnd() * 6) }, () => `p${Math.floor(this.rnd() * 40)}`);
      // Adds only of existing products, so most adds are accepted.
      const existing = products.filter((p) => ws.catalog.products.has(p));
      if (this.rnd() < 0.7 && existing.length > 0) this.intake.catalog.mapping(ws, cid, true, existing, at, ignore);
      else this.intake.catalog.mapping(ws, cid, false, products, at, ignore);
    }
  }
}

/**
 * The state exports' lines as `npm run export` prints them: their order and their bytes (until
 * 2026-11-29 this sorted the views first, and a snapshot that loaded entities in another order
 * than the replay's passed, while the export printed them in that other order).
 */
function views(workspaces: Workspaces): unknown {
  const lines = { devices: [] as string[], customers: [] as string[], products: [] as string[], collections: [] as string[] };
  for (const ws of sortedWorkspaces(workspaces)) {
    for (const d of deviceViews(ws)) lines.devices.push(JSON.stringify(d));
    for (const c of customerViews(ws)) lines.customers.push(JSON.stringify(c));
    for (const p of productViews(ws.name, ws.catalog)) lines.products.push(JSON.stringify(p));
    for (const c of collectionViews(ws.name, ws.catalog)) lines.collections.push(JSON.stringify(c));
  }
  return lines;
}

function keyView(keys: KeyTable): string[] {
  return [...keys.held()].map((k) => JSON.stringify(k)).sort();
}

function replayUpTo(store: Store, seq: number): unknown {
  const workspaces = new Workspaces();
  const interner = new ProfileInterner();
  const keys = new KeyTable(KEYS_HELD, KEYS_WINDOW_SECONDS);
  for (const { seq: s, record } of Journal.read(store.journal)) {
    if (s > seq) break;
    applyRecord(workspaces, interner, record);
    if (record.idem !== undefined) keys.remember(keyHashOf(record.idem), s, record.at);
  }
  return { ...(views(workspaces) as object), keys: keyView(keys) };
}

function fromSnapshot(store: Store, id: number): unknown {
  const meta = store.snapshots.get(id);
  assert.ok(meta?.completedAt, `snapshot ${id} is complete`);
  const workspaces = new Workspaces();
  const keys = new KeyTable(KEYS_HELD, KEYS_WINDOW_SECONDS);
  loadSnapshot(store, meta, workspaces, new ProfileInterner(), keys);
  return { ...(views(workspaces) as object), keys: keyView(keys) };
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The real store, journal, actors and snapshot writer, wired as main.ts wires them. */
function openRig(dataDir: string, sliceEntities: number) {
  const store = openStore(dataDir);
  let writer: SnapshotWriter | null = null;
  const workspaces = new Workspaces((name) => writer!.trackerFor(name));
  const journal = new Journal(store.journal, 'group', 8192);
  const keys = new KeyTable(KEYS_HELD, KEYS_WINDOW_SECONDS);
  writer = new SnapshotWriter(store, journal, () => workspaces, pino({ level: 'silent' }), { sliceEntities, keys });
  const intake = new Intake(workspaces, journal, keys);
  const close = async (): Promise<void> => {
    await journal.drain();
    await store.close();
  };
  return { store, workspaces, journal, writer, intake, keys, close };
}

/** The snapshot ids that have chunks in the store, in order. */
function chunkSnapshotIds(store: Store): number[] {
  return [...new Set([...store.snapshotChunks.getKeys()].map((key) => key[0] as number))];
}

/** Starts a snapshot and aborts it once its first chunk is in the store. */
async function abortAfterFirstChunk(store: Store, writer: SnapshotWriter): Promise<void> {
  const before = chunkSnapshotIds(store).length;
  const aborted = writer.snapshot('aborted');
  for (let i = 0; i < 10_000 && chunkSnapshotIds(store).length <= before; i++) await turn();
  await writer.abort();
  assert.equal(await aborted, null);
}

describe('snapshot exactness', () => {
  for (const seed of [1, 2, 3]) {
    test(`seed ${seed}: 12 snapshots written while random writes run between their slices equal a replay up to their seq`, async () => {
      const { store, workspaces, journal, writer, intake, keys, close } = openRig(tempDataDir(), 2);
      const rnd = seededRandom(seed);
      const workload = new Workload(intake, workspaces, rnd);
      try {
        for (let i = 0; i < 300; i++) workload.step();
        let checked = 0;
        for (let round = 0; round < 12; round++) {
          let done = false;
          const snapshot: Promise<SnapshotMeta | null> = writer.snapshot(`round ${round}`).then((meta) => {
            done = true;
            return meta;
          });
          while (!done) {
            for (let i = 0, n = Math.floor(rnd() * 6); i < n; i++) workload.step();
            await turn();
          }
          const meta = await snapshot;
          assert.ok(meta !== null, 'the snapshot finished');
          await journal.drain();
          assert.deepEqual(fromSnapshot(store, meta.id), replayUpTo(store, meta.seq), `snapshot ${meta.id} at seq ${meta.seq}`);
          checked++;
          for (let i = 0, n = Math.floor(rnd() * 200); i < n; i++) workload.step();
        }
        assert.equal(checked, 12);
        assert.ok(keys.forgotten > 0 && keys.size === KEYS_HELD, `the key table was full and evicting (${keys.size} held, ${keys.forgotten} forgotten)`);
        // Only the newest complete snapshot is kept.
        assert.equal([...store.snapshots.getKeys()].length, 1);
      } finally {
        await close();
      }
    });
  }

  test('big mappings applied in slices, with writes queued behind them, while snapshots run', async () => {
    const { store, workspaces, journal, writer, intake, keys, close } = openRig(tempDataDir(), 50);
    const rnd = seededRandom(42);
    const ws = workspaces.get('a');
    const productIds = Array.from({ length: 12_000 }, (_, i) => `p${i}`);
    try {
      for (const id of productIds) intake.catalog.productUpsert(ws, { id, name: id }, T0, ignore);
      for (let c = 0; c < 4; c++) intake.catalog.collectionUpsert(ws, { id: `c${c}`, name: `c${c}` }, T0, ignore);
      let bigMappings = 0;
      for (let round = 0; round < 6; round++) {
        let done = false;
        const snapshot: Promise<SnapshotMeta | null> = writer.snapshot(`round ${round}`).then((meta) => {
          done = true;
          return meta;
        });
        while (!done) {
          const r = rnd();
          const cid = `c${Math.floor(rnd() * 4)}`;
          if (r < 0.3) {
            // More ids than one slice: checked, staged and swapped in over several turns.
            const from = Math.floor(rnd() * 6000);
            const ids = productIds.slice(from, from + 5000 + Math.floor(rnd() * 4000)).filter((id) => ws.catalog.products.has(id));
            intake.catalog.mapping(ws, cid, rnd() < 0.7, ids, T0, ignore);
            bigMappings++;
          } else if (r < 0.6) intake.catalog.productDelete(ws, productIds[Math.floor(rnd() * productIds.length)]!, T0, ignore);
          else if (r < 0.75) intake.catalog.productUpsert(ws, { id: productIds[Math.floor(rnd() * productIds.length)]!, name: 'again' }, T0, ignore);
          else if (r < 0.8) intake.catalog.collectionDelete(ws, cid, T0, ignore);
          else intake.catalog.collectionUpsert(ws, { id: cid, name: 'again' }, T0, ignore);
          await turn();
        }
        const meta = await snapshot;
        assert.ok(meta !== null);
        await journal.drain();
        assert.deepEqual(fromSnapshot(store, meta.id), replayUpTo(store, meta.seq), `snapshot ${meta.id} at seq ${meta.seq}`);
      }
      assert.ok(bigMappings > 10, `big mappings ran during snapshots (${bigMappings})`);
      // Whatever is still queued finishes; then the live state equals a full replay.
      while (!ws.catalog.mailbox.idle) await turn();
      await journal.drain();
      assert.deepEqual({ ...(views(workspaces) as object), keys: keyView(keys) }, replayUpTo(store, Number.MAX_SAFE_INTEGER));
    } finally {
      while (!ws.catalog.mailbox.idle) await turn();
      await close();
    }
  });

  test('an aborted snapshot is never used; the previous complete one stays', async () => {
    const { store, workspaces, journal, writer, intake, close } = openRig(tempDataDir(), 1);
    const workload = new Workload(intake, workspaces, seededRandom(9));
    try {
      for (let i = 0; i < 200; i++) workload.step();
      const first = await writer.snapshot('first');
      assert.ok(first);
      for (let i = 0; i < 200; i++) workload.step();
      const second = writer.snapshot('second');
      await turn();
      await writer.abort();
      assert.equal(await second, null);
      const metas = [...store.snapshots.getRange()].map(({ value }) => value);
      assert.deepEqual(metas.map((m) => [m.id, m.completedAt !== null]), [[first.id, true]]);
      await journal.drain();
      assert.deepEqual(fromSnapshot(store, first.id), replayUpTo(store, first.seq));
    } finally {
      await close();
    }
  });

  test('a completed snapshot removes every older one, complete or aborted, chunks and meta', async () => {
    const { store, workspaces, journal, writer, intake, close } = openRig(tempDataDir(), 1);
    const workload = new Workload(intake, workspaces, seededRandom(11));
    try {
      // Enough entities for many chunks (a chunk holds 250 entries): the abort below must land
      // while the walk is still going (with 3 chunks it sometimes finished first, a flaky test).
      for (let i = 0; i < 40000; i++) workload.step();
      const first = await writer.snapshot('first');
      assert.ok(first && first.chunks > 1);
      for (let i = 0; i < 300; i++) workload.step();
      await abortAfterFirstChunk(store, writer);
      assert.deepEqual(chunkSnapshotIds(store), [first.id], 'the aborted snapshot\'s chunks went when it ended');
      for (let i = 0; i < 300; i++) workload.step();
      const third = await writer.snapshot('third');
      assert.ok(third);
      assert.deepEqual([...store.snapshots.getKeys()], [third.id]);
      const chunkIds = [...store.snapshotChunks.getKeys()].map((key) => key[0]);
      assert.equal(chunkIds.length, third.chunks);
      assert.ok(chunkIds.every((id) => id === third.id));
      await journal.drain();
      assert.deepEqual(fromSnapshot(store, third.id), replayUpTo(store, third.seq));
    } finally {
      await close();
    }
  });

  test('after a restart, chunks left without a meta (aborted, or a crash while removing) are never reused or read, and go with the next snapshot', async () => {
    const dataDir = tempDataDir();
    const before = openRig(dataDir, 1);
    const workload = new Workload(before.intake, before.workspaces, seededRandom(13));
    let second: SnapshotMeta | null;
    try {
      // Many chunks, so that the abort below lands while the walk still runs (as in the test above).
      for (let i = 0; i < 40000; i++) workload.step();
      const first = await before.writer.snapshot('first');
      for (let i = 0; i < 300; i++) workload.step();
      second = await before.writer.snapshot('second');
      assert.ok(first && second && second.id > first.id);
      // An aborted snapshot removes its chunks; a crash while one was written leaves chunks
      // above the newest meta (written here as that crash would leave them)...
      for (let i = 0; i < 300; i++) workload.step();
      await abortAfterFirstChunk(before.store, before.writer);
      assert.deepEqual(chunkSnapshotIds(before.store), [second.id], 'the aborted snapshot removed its chunks');
      await before.store.snapshotChunks.put([second.id + 1, 0], Buffer.from('a chunk of a snapshot a crash cut short'));
      // ...and a crash between removing an old meta and its chunks leaves chunks below it.
      await before.store.snapshotChunks.put([first.id, 0], Buffer.from('not a chunk of any snapshot'));
      assert.deepEqual(chunkSnapshotIds(before.store), [first.id, second.id, second.id + 1]);
    } finally {
      await before.close();
    }

    // Restart: recover from the store as main.ts does, then snapshot again.
    const after = openRig(dataDir, 50);
    const report = recover(after.store, after.workspaces, after.intake.interner, after.keys);
    assert.equal(report.snapshotId, second.id, 'recovery uses the newest complete snapshot');
    after.journal.continueAfter(report.lastSeq);
    try {
      const next = await after.writer.snapshot('after restart');
      assert.ok(next);
      assert.equal(next.id, second.id + 2, 'the aborted snapshot\'s id is not reused');
      assert.deepEqual(chunkSnapshotIds(after.store), [next.id]);
      assert.deepEqual([...after.store.snapshots.getKeys()], [next.id]);
      assert.deepEqual(fromSnapshot(after.store, next.id), replayUpTo(after.store, next.seq));
    } finally {
      await after.close();
    }
  });

  test('a snapshot whose meta is stored stays complete when removing the older ones fails (its chunks are kept; a restart uses it)', async () => {
    const dataDir = tempDataDir();
    const rig = openRig(dataDir, 50);
    const workload = new Workload(rig.intake, rig.workspaces, seededRandom(17));
    let second: SnapshotMeta | null = null;
    try {
      for (let i = 0; i < 3000; i++) workload.step();
      const first = await rig.writer.snapshot('first', { paced: false });
      assert.ok(first);
      for (let i = 0; i < 300; i++) workload.step();
      // The disk fails while the older snapshot is removed (after the new meta is stored).
      const remove = rig.store.snapshots.remove.bind(rig.store.snapshots);
      rig.store.snapshots.remove = (() => Promise.reject(new Error('injected: ENOSPC'))) as typeof rig.store.snapshots.remove;
      second = await rig.writer.snapshot('second', { paced: false });
      rig.store.snapshots.remove = remove;
      assert.ok(second, 'the snapshot is complete: its meta is stored');
      assert.equal([...rig.store.snapshotChunks.getKeys()].filter((key) => key[0] === second!.id).length, second.chunks, 'every chunk of it is kept');
    } finally {
      await rig.close();
    }
    const after = openRig(dataDir, 50);
    try {
      const report = recover(after.store, after.workspaces, after.intake.interner, after.keys);
      assert.equal(report.snapshotId, second.id);
      assert.deepEqual(fromSnapshot(after.store, second.id), replayUpTo(after.store, second.seq));
    } finally {
      await after.close();
    }
  });
});
