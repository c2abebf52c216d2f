// One harness per sink, so that one test suite (delivery.test.ts) runs against both, the way
// hono runs one router suite against every router. A harness gives intake the settings of a
// fresh stream or table (on the shared server, or on one of our own for outage tests) and reads
// back everything the sink holds, in the sink's own order, as the objects `export events` prints.
import { randomBytes } from 'node:crypto';
import { AckPolicy, jetstream, jetstreamManager, JetStreamApiError, RetentionPolicy } from '@nats-io/jetstream';
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
  /** Deletes what the sink holds after `seq` (an operator's delete: the sink removed records it was given). */
  dropAfter(seq: number): Promise<void>;
  /** Removes the stream or table, as an operator would (PostgreSQL: intake's position row stays). */
  drop(): Promise<void>;
  /** drop(), and intake's position row too (the end of a test). */
  cleanup(): Promise<void>;
  /**
   * A consumer that removes what it reads (PostgreSQL: DELETE … RETURNING; NATS: a pull consumer
   * acking every message of a WorkQueue stream, see TargetOptions.removes), reconnecting when its
   * server goes away. `stop()` resolves with the seqs it got, in the order it got them, one entry
   * per record stored (a message the server redelivers because an ack was lost counts once).
   */
  consume(): { seqs(): number[]; stop(): Promise<number[]> };
}

export interface TargetOptions {
  /**
   * NATS: create the stream beforehand with this `Nats-Msg-Id` duplicate window (at least 100
   * ms), so that a test proves exactly-once without the window's help. PostgreSQL ignores it.
   */
  duplicateWindowMs?: number;
  /** NATS: create the stream beforehand as a WorkQueue (a message goes once acknowledged). */
  removes?: boolean;
  /** NATS: create the stream beforehand with this max_msg_size (its own limit, under the server's max_payload). */
  maxMsgBytes?: number;
}

export interface SinkHarness {
  readonly name: 'nats' | 'postgres';
  /** A fresh stream or table on `server` (default: the shared one). */
  target(server?: OwnServer, options?: TargetOptions): Promise<SinkTarget>;
  startOwnServer(): Promise<OwnServer>;
  /**
   * Breaks intake's delivery connections to `server` (our own): PostgreSQL ends their backends
   * (pg_terminate_backend), NATS restarts the server.
   */
  dropConnections(server: OwnServer): Promise<void>;
}

const unique = (): string => randomBytes(5).toString('hex');
const STREAM_NOT_FOUND = 10059;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `step` until stop() (retrying after an error: the server may be away); stop() waits for the last step. */
function keepRunning(step: () => Promise<void>): { stop(): Promise<void> } {
  let stopping = false;
  const running = (async () => {
    while (!stopping) {
      try {
        await step();
      } catch {
        await sleep(100);
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      await running;
    },
  };
}

export const natsHarness: SinkHarness = {
  name: 'nats',
  startOwnServer: () => startOwnNats(),
  async dropConnections(server) {
    await server.stop();
    await server.start();
  },
  async target(server, options = {}) {
    const url = server?.url ?? SHARED_NATS_URL;
    const id = unique();
    const stream = `T_${id}`;
    const prefix = `t${id}`;
    if (options.duplicateWindowMs !== undefined || options.removes === true || options.maxMsgBytes !== undefined) {
      const nc = await connect({ servers: url, reconnect: false });
      await (await jetstreamManager(nc)).streams.add({
        name: stream,
        subjects: [`${prefix}.>`],
        ...(options.duplicateWindowMs === undefined ? {} : { duplicate_window: options.duplicateWindowMs * 1_000_000 }),
        ...(options.removes === true ? { retention: RetentionPolicy.Workqueue } : {}),
        ...(options.maxMsgBytes === undefined ? {} : { max_msg_size: options.maxMsgBytes }),
      });
      await nc.close();
    }
    const drop = async (): Promise<void> => {
      try {
        const nc = await connect({ servers: url, reconnect: false });
        await (await jetstreamManager(nc)).streams.delete(stream).finally(() => nc.close());
      } catch {
        // never created, or the server is gone
      }
    };
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
      drop,
      cleanup: drop,
      consume() {
        // Stream sequence → seq: a message redelivered (its ack lost in a restart) has the same
        // stream sequence; a record stored twice would have two.
        const got = new Map<number, number>();
        let nc: Awaited<ReturnType<typeof connect>> | null = null;
        const loop = keepRunning(async () => {
          if (nc === null || nc.isClosed()) {
            nc = null;
            const fresh = await connect({ servers: url, reconnect: false });
            const jsm = await jetstreamManager(fresh);
            await jsm.consumers.add(stream, { durable_name: 'remover', ack_policy: AckPolicy.Explicit, ack_wait: 2_000_000_000 });
            nc = fresh;
          }
          const consumer = await jetstream(nc).consumers.get(stream, 'remover');
          const messages = await consumer.fetch({ max_messages: 10, expires: 1_000 });
          for await (const m of messages) {
            if (!got.has(m.seq)) got.set(m.seq, Number(m.headers?.get('Nats-Msg-Id')));
            await m.ackAck();
          }
        });
        const seqs = (): number[] => [...got.entries()].sort(([a], [b]) => a - b).map(([, seq]) => seq);
        return {
          seqs,
          async stop() {
            await loop.stop();
            await (nc as Awaited<ReturnType<typeof connect>> | null)?.close().catch(() => undefined);
            return seqs();
          },
        };
      },
    };
  },
};

type Row = { seq: string; workspace: string; kind: string; at: string; did: string | null; sid: string | null; customer: string | null; data: unknown };

/** One connection to the PostgreSQL at `url` for `use`, closed afterwards. */
export async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
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
  async dropConnections(server) {
    // Our own server: no one else's intake is connected to it.
    await withClient(server.url, (client) => client.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'intake-delivery'`));
  },
  async target(server) {
    const url = server?.url ?? SHARED_POSTGRES_URL;
    const table = `t_${unique()}`;
    const drop = (): Promise<void> => withClient(url, (client) => client.query(`DROP TABLE IF EXISTS "${table}"`)).then(() => undefined, () => undefined);
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
      drop,
      async cleanup() {
        await drop();
        await withClient(url, (client) => client.query(`DELETE FROM intake_sink_positions WHERE table_name = $1`, [table])).catch(() => undefined);
      },
      consume() {
        const got: number[] = [];
        let client: pg.Client | null = null;
        const loop = keepRunning(async () => {
          if (client === null) {
            const fresh = new pg.Client({ connectionString: url });
            fresh.on('error', () => undefined);
            await fresh.connect();
            client = fresh;
          }
          try {
            // The table may not exist yet.
            const { rows } = await client.query<{ seq: string }>(`DELETE FROM "${table}" RETURNING seq`);
            for (const row of rows.map((r) => Number(r.seq)).sort((a, b) => a - b)) got.push(row);
          } catch (error) {
            if (!String(error).includes('does not exist')) {
              const broken = client;
              client = null;
              await broken.end().catch(() => undefined);
            }
            throw error;
          }
          await sleep(10);
        });
        return {
          seqs: () => [...got],
          async stop() {
            await loop.stop();
            await (client as pg.Client | null)?.end().catch(() => undefined);
            return [...got];
          },
        };
      },
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
