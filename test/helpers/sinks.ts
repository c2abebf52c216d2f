// One harness per sink, so that one test suite (delivery.test.ts) runs against both, the way
// hono runs one router suite against every router. A harness gives intake the settings of a
// fresh stream or table (on the shared server, or on one of our own for outage tests) and reads
// back everything the sink holds, in the sink's own order, as the objects `export events` prints.
import { randomBytes } from 'node:crypto';
import { jetstream, jetstreamManager, JetStreamApiError } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { startOwnNats, startOwnPostgres, type OwnServer } from '../../bench/lib/sink-servers.ts';

/** The shared services every machine of this kind runs (override to point the tests elsewhere). */
export const SHARED_NATS_URL = process.env.TEST_NATS_URL ?? 'nats://127.0.0.1:4222';
export const SHARED_POSTGRES_URL = process.env.TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface Held {
  /** What the sink holds, in its own order, shaped like `export events` lines. */
  records: Array<Record<string, unknown>>;
  /** The exact message bodies (NATS), or null where the sink keeps columns (PostgreSQL). */
  lines: string[] | null;
}

export interface SinkTarget {
  readonly env: Record<string, string>;
  read(): Promise<Held>;
  /** Deletes what the sink holds after `seq` (a lost tail, or an operator's delete). */
  dropAfter(seq: number): Promise<void>;
  /** Removes the stream or table. */
  drop(): Promise<void>;
}

export interface TargetOptions {
  /**
   * NATS: create the stream beforehand with this `Nats-Msg-Id` duplicate window (at least 100
   * ms), so that a test proves exactly-once without the window's help. PostgreSQL ignores it.
   */
  duplicateWindowMs?: number;
}

export interface SinkHarness {
  readonly name: 'nats' | 'postgres';
  /** A fresh stream or table on `server` (default: the shared one). */
  target(server?: OwnServer, options?: TargetOptions): Promise<SinkTarget>;
  startOwnServer(): Promise<OwnServer>;
}

const unique = (): string => randomBytes(5).toString('hex');
const STREAM_NOT_FOUND = 10059;

export const natsHarness: SinkHarness = {
  name: 'nats',
  startOwnServer: () => startOwnNats(),
  async target(server, options = {}) {
    const url = server?.url ?? SHARED_NATS_URL;
    const id = unique();
    const stream = `T_${id}`;
    const prefix = `t${id}`;
    if (options.duplicateWindowMs !== undefined) {
      const nc = await connect({ servers: url, reconnect: false });
      await (await jetstreamManager(nc)).streams.add({ name: stream, subjects: [`${prefix}.>`], duplicate_window: options.duplicateWindowMs * 1_000_000 });
      await nc.close();
    }
    return {
      env: { SINK_NATS_URL: url, SINK_NATS_STREAM: stream, SINK_NATS_SUBJECT_PREFIX: prefix },
      async read() {
        const nc = await connect({ servers: url, reconnect: false });
        try {
          const jsm = await jetstreamManager(nc);
          let total = 0;
          try {
            total = (await jsm.streams.info(stream)).state.messages;
          } catch (error) {
            if (error instanceof JetStreamApiError && error.code === STREAM_NOT_FOUND) return { records: [], lines: [] };
            throw error;
          }
          const lines: string[] = [];
          const records: Array<Record<string, unknown>> = [];
          if (total === 0) return { records, lines };
          const consumer = await jetstream(nc).consumers.get(stream);
          const messages = await consumer.fetch({ max_messages: total, expires: 5_000 });
          for await (const m of messages) {
            const line = m.string();
            const record = JSON.parse(line) as Record<string, unknown>;
            // Every message: subject <prefix>.<workspace>.<kind>, Nats-Msg-Id its seq.
            if (m.subject !== `${prefix}.${record.workspace}.${record.kind}`) throw new Error(`record ${record.seq} on subject ${m.subject}`);
            if (m.headers?.get('Nats-Msg-Id') !== String(record.seq)) throw new Error(`record ${record.seq} has Nats-Msg-Id ${m.headers?.get('Nats-Msg-Id')}`);
            lines.push(line);
            records.push(record);
            if (lines.length === total) break;
          }
          return { records, lines };
        } finally {
          await nc.close();
        }
      },
      async dropAfter(seq) {
        const nc = await connect({ servers: url, reconnect: false });
        try {
          const jsm = await jetstreamManager(nc);
          const { first_seq, last_seq } = (await jsm.streams.info(stream)).state;
          for (let s = last_seq; s >= first_seq; s--) {
            const m = await jsm.streams.getMessage(stream, { seq: s });
            if (m === null) continue;
            if (Number(m.header?.get('Nats-Msg-Id')) <= seq) break;
            await jsm.streams.deleteMessage(stream, s);
          }
        } finally {
          await nc.close();
        }
      },
      async drop() {
        try {
          const nc = await connect({ servers: url, reconnect: false });
          await (await jetstreamManager(nc)).streams.delete(stream).finally(() => nc.close());
        } catch {
          // never created, or the server is gone
        }
      },
    };
  },
};

type Row = { seq: string; workspace: string; kind: string; at: string; did: string | null; sid: string | null; customer: string | null; data: unknown };

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

export const postgresHarness: SinkHarness = {
  name: 'postgres',
  startOwnServer: () => startOwnPostgres(),
  async target(server) {
    const url = server?.url ?? SHARED_POSTGRES_URL;
    const table = `t_${unique()}`;
    return {
      env: { SINK_POSTGRES_URL: url, SINK_POSTGRES_TABLE: table },
      read: () =>
        withClient(url, async (client) => {
          const exists = await client.query('SELECT to_regclass($1) AS t', [table]);
          if (exists.rows[0].t === null) return { records: [], lines: null };
          const { rows } = await client.query<Row>(`SELECT * FROM "${table}" ORDER BY seq`);
          const records = rows.map((row) => {
            const record: Record<string, unknown> = { seq: Number(row.seq), kind: row.kind, workspace: row.workspace, at: Number(row.at) };
            if (row.did !== null) Object.assign(record, { did: row.did, sid: row.sid, customer: row.customer });
            record.data = row.data;
            return record;
          });
          return { records, lines: null };
        }),
      dropAfter: (seq) => withClient(url, (client) => client.query(`DELETE FROM "${table}" WHERE seq > $1`, [seq])).then(() => undefined),
      drop: () => withClient(url, (client) => client.query(`DROP TABLE IF EXISTS "${table}"`)).then(() => undefined, () => undefined),
    };
  },
};

export const SINK_HARNESSES: readonly SinkHarness[] = [natsHarness, postgresHarness];

/** Polls the sink until it holds `count` records (or more), then returns what it holds. */
export async function waitForHeld(target: SinkTarget, count: number, timeoutMs = 20_000): Promise<Held> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const held = await target.read();
    if (held.records.length >= count) return held;
    if (Date.now() > deadline) throw new Error(`the sink holds ${held.records.length} records after ${timeoutMs} ms, expected ${count}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
