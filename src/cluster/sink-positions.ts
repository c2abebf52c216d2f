// The sinks' confirmed positions in the cluster's PostgreSQL. Delivery runs on the leader, which
// saves each sink's position in its own LMDB; a node that starts leading has only its own, which
// may be far behind or missing (it never led). A NATS stream that removes messages (WorkQueue,
// max_age) tells nothing once emptied: without a position of the chain (a seq and its stream
// sequence) the new leader published the whole journal again. So the leader copies its positions
// here (after each batch a sink confirmed, at most every 100 ms), and a new leader takes them before its delivery
// starts (Delivery.adopt). A position a second old is as good as the newest: every stream
// sequence after it can only be intake's next record (nats-sink.ts), and PostgreSQL sinks keep
// their exact position in the sink database anyway. Rows are fenced by epoch: a former leader
// that resumes after a freeze cannot move them back.
import type pg from 'pg';
import type { SinkPosition } from '../delivery/delivery.ts';
import type { SinkMarker } from '../delivery/sink.ts';
import { SCHEMA } from './schema.ts';

export async function saveSinkPositions(client: pg.Client, cluster: string, epoch: number, positions: readonly SinkPosition[]): Promise<void> {
  if (positions.length === 0) return;
  await client.query(
    `INSERT INTO ${SCHEMA}.sink_positions AS p (cluster, sink, epoch, seq, marker)
     SELECT $1, x.sink, $2, x.seq, x.marker FROM jsonb_to_recordset($3::jsonb) AS x(sink text, seq bigint, marker jsonb)
     ON CONFLICT (cluster, sink) DO UPDATE SET epoch = EXCLUDED.epoch, seq = EXCLUDED.seq, marker = EXCLUDED.marker
     WHERE p.epoch <= EXCLUDED.epoch`,
    [cluster, epoch, JSON.stringify(positions.map((p) => ({ sink: p.sink, seq: p.confirmed.seq, marker: p.confirmed.marker })))],
  );
}

export async function readSinkPositions(client: pg.Client, cluster: string): Promise<SinkPosition[]> {
  const { rows } = await client.query<{ sink: string; seq: string; marker: SinkMarker | null }>(`SELECT sink, seq, marker FROM ${SCHEMA}.sink_positions WHERE cluster = $1`, [cluster]);
  return rows.map((row) => ({ sink: row.sink, confirmed: { seq: Number(row.seq), marker: row.marker } }));
}
