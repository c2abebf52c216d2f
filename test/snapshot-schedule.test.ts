// When snapshots are taken by count: after SNAPSHOT_EVERY_RECORDS new records, or after twice as
// many new records as the last snapshot wrote entities if that is more, so that a snapshot's cost
// per record journaled does not grow with the state. The last snapshot's size is known after a
// restart too (read from its meta).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, startServer, tempDataDir, type TestServer } from './helpers/server.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function snapshotLogs(server: TestServer, msg: string): Array<Record<string, number>> {
  return server
    .logs()
    .filter((line) => line.includes(`"${msg}"`))
    .map((line) => JSON.parse(line) as Record<string, number>);
}

async function launchMany(server: TestServer, count: number): Promise<void> {
  for (let i = 0; i < count; i += 10) {
    await Promise.all(Array.from({ length: Math.min(10, count - i) }, () => launch(server)));
  }
}

describe('snapshot schedule by count', () => {
  test('a snapshot waits for twice as many records as the last one wrote entities, when that is more than SNAPSHOT_EVERY_RECORDS', async () => {
    const dataDir = tempDataDir();
    // 100 devices, then a graceful stop: its snapshot writes all of them.
    const first = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' } });
    await launchMany(first, 100);
    assert.equal(await first.stop(), 0);
    assert.equal(snapshotLogs(first, 'snapshot written').at(-1)?.devices, 100);

    const server = await startServer({ dataDir, env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '10' } });
    try {
      // 110 records: past SNAPSHOT_EVERY_RECORDS and past the 100 entities the last snapshot
      // wrote, short of twice as many.
      await launchMany(server, 110);
      await sleep(2500); // the schedule looks once a second
      assert.deepEqual(snapshotLogs(server, 'snapshot started'), [], 'no snapshot after 110 records when the last one wrote 100 entities');

      // 100 more: 210 since the last snapshot.
      await launchMany(server, 100);
      const deadline = Date.now() + 5000;
      while (snapshotLogs(server, 'snapshot written').length === 0 && Date.now() < deadline) await sleep(100);
      const written = snapshotLogs(server, 'snapshot written');
      assert.equal(written.length, 1, 'one snapshot once 200 records came after a snapshot of 100 entities');
      // Due at the 200th record; the schedule looks once a second, so it may start before the
      // last of the 10 launches sent together have their records.
      const devices = written[0]!.devices!;
      assert.ok(devices >= 300 && devices <= 310, `the snapshot wrote ${devices} devices`);

      // The next is due after twice as many records as this one wrote entities (600 or more):
      // not after 10, nor after 400 (as many as it wrote, and then some).
      await launchMany(server, 400);
      await sleep(2500);
      assert.equal(snapshotLogs(server, 'snapshot started').length, 1, `no snapshot 400 records after one of ${devices} entities`);
    } finally {
      await server.stop();
    }
  });

  test('below SNAPSHOT_EVERY_RECORDS entities, the count alone decides', async () => {
    const server = await startServer({ env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '50' } });
    try {
      await launchMany(server, 60);
      const deadline = Date.now() + 5000;
      while (snapshotLogs(server, 'snapshot written').length === 0 && Date.now() < deadline) await sleep(100);
      const devices = snapshotLogs(server, 'snapshot written')[0]?.devices ?? 0;
      assert.ok(devices >= 50, `a snapshot after 50 records (it wrote ${devices} devices)`);
    } finally {
      await server.stop();
    }
  });
});
