// The sink positions a leader shares in the cluster's PostgreSQL (src/cluster/sink-positions.ts,
// read by the next leader before its delivery starts) follow where each sink stands, also when it
// stands lower than before. Found by a review (2026-11-29): the leader shared what the last
// confirmed batch had reported, and a NATS stream deleted and created again (found at 0 on
// reconnecting) kept the deleted stream's position in the shared row until the new stream
// confirmed a batch. A leader change meanwhile gave the next leader that position: its
// retention, and the trim of the cluster's journal, could then drop records the new stream never
// got. Real NATS, real PostgreSQL, real processes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { jetstreamManager, DiscardPolicy } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { clustersOfThisFile } from './helpers/cluster.ts';
import { LAUNCH_INFO, T0 } from './helpers/server.ts';
import { natsHarness, postgresHarness, SHARED_NATS_URL, SHARED_POSTGRES_URL, waitForHeld, withClient } from './helpers/sinks.ts';
import { metric, until } from './helpers/wait.ts';

const cluster = clustersOfThisFile();

async function sharedPosition(clusterName: string, sink: string): Promise<{ seq: number; marker: unknown } | null> {
  return withClient(SHARED_POSTGRES_URL, async (client) => {
    const { rows } = await client.query<{ seq: string; marker: unknown }>('SELECT seq, marker FROM intake_cluster.sink_positions WHERE cluster = $1 AND sink = $2', [clusterName, sink]);
    return rows.length === 0 ? null : { seq: Number(rows[0]!.seq), marker: rows[0]!.marker };
  });
}

test('a NATS stream deleted and created again, which takes nothing yet: the leader shares the position found in it (0), not the deleted stream\'s, while the PostgreSQL sink goes on', async () => {
  const nats = await natsHarness.target();
  const pgTarget = await postgresHarness.target();
  try {
    const c = cluster({ ...nats.env, ...pgTarget.env, DELIVERY_RETRY_MAX_MS: '200', DELIVERY_LINGER_MS: '0' });
    const a = await c.add();
    await c.leader();
    const did = (await a.post<{ did: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO })).body.did;
    for (let i = 0; i < 20; i++) assert.equal((await a.post('/msv_cevt', { did, name: `before-${i}`, timestamp: T0 })).status, 200);
    const before = (await a.status()).appliedSeq;
    await waitForHeld(nats, before);
    await waitForHeld(pgTarget, before);
    const natsId = `nats:${nats.env.SINK_NATS_STREAM}`;
    await until('the leader to share the NATS position', async () => (await sharedPosition(c.name, natsId))?.seq === before);
    const deletedMarker = (await sharedPosition(c.name, natsId))!.marker;

    // An operator deletes the stream and creates it again, with room for no message yet (a
    // max_bytes too small for any record, new messages refused): intake finds it at 0 when it
    // reconnects, and cannot deliver to it.
    const nc = await connect({ servers: SHARED_NATS_URL, reconnect: false });
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.delete(nats.env.SINK_NATS_STREAM!);
      await jsm.streams.add({ name: nats.env.SINK_NATS_STREAM!, subjects: [`${nats.env.SINK_NATS_SUBJECT_PREFIX}.>`], max_bytes: 16, discard: DiscardPolicy.New });
    } finally {
      await nc.close();
    }
    // New writes: the NATS publish fails, delivery reconnects and finds the new stream at 0;
    // the PostgreSQL sink confirms them (each confirmed batch shares the positions again).
    for (let i = 0; i < 5; i++) assert.equal((await a.post('/msv_cevt', { did, name: `after-${i}`, timestamp: T0 })).status, 200);
    await until('the leader to find the new stream at 0', async () => (await metric(a, 'intake_sink_delivered_seq', { sink: 'nats' })) === 0, 10_000);
    for (let i = 5; i < 10; i++) assert.equal((await a.post('/msv_cevt', { did, name: `after-${i}`, timestamp: T0 })).status, 200);
    await waitForHeld(pgTarget, (await a.status()).appliedSeq);
    await until('the shared NATS position to be the new stream\'s (0)', async () => (await sharedPosition(c.name, natsId))?.seq === 0, 5_000);
    const shared = await sharedPosition(c.name, natsId);
    assert.notDeepEqual(shared!.marker, deletedMarker, 'the new stream\'s marker, not the deleted one\'s');
    // Shared at most every 100 ms: the last batch's row may come a moment after the NATS one.
    const last = (await a.status()).appliedSeq;
    await until('the PostgreSQL sink\'s shared position to move on', async () => (await sharedPosition(c.name, `postgres:${pgTarget.env.SINK_POSTGRES_TABLE}`))?.seq === last, 5_000);
  } finally {
    await nats.cleanup();
    await pgTarget.cleanup();
  }
});
