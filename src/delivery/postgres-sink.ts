// The PostgreSQL sink: one row per record in SINK_POSTGRES_TABLE
// (seq bigint primary key, workspace, kind, at, did, sid, customer, data jsonb), a batch per
// transaction: it is stored whole or not at all, and rows appear in seq order (a batch starts
// only after the one before it committed).
//
// Where delivery resumes: the sink database keeps it. A table `intake_sink_positions` in the
// sink table's schema holds, per table name, the table's oid, the seq of the last record stored
// and a hash of that record's exported line; each batch updates it in the same statement as its
// rows. open() resumes at that row when it names the table that exists now (its oid): rows a
// consumer deleted since are not delivered again, exactly, also across crashes. A table dropped
// and recreated (a new oid), or a new database (no row), gets every retained record; a table
// from before this position table (rows, no position row) resumes after its highest seq.
//
// Exactly once: a batch is a compare-and-set on the position row (deliver()), so a batch that
// another connection delivered first (a late commit of one given up on, a former leader's) stores
// nothing. Every row already there is compared with the one being delivered: a different one
// means the table holds another journal's records (another intake writing to it): nothing is
// stored and delivery stops with SinkMismatchError. A row another connection committed meanwhile
// (not in the statement's snapshot) fails the insert on the primary key; the retry compares it.
//
// A connection the loop gave up on (a stall) may still be running its last statement: the next
// open() ends its backend and waits until it is gone before it reads the position, so the
// position it reads is final; the position row never moves backwards either.
//
// PostgreSQL cannot store U+0000 in text or jsonb, nor an unpaired UTF-16 surrogate in jsonb;
// JSON allows both. U+0000 becomes U+FFFD in this sink (NATS gets the exact line); an unpaired
// surrogate never gets here (bodies are made well-formed as they are parsed: http/body.ts). Rows
// are inserted in seq order within a batch (jsonb_array_elements keeps the array's order).
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { closeClient, newClient } from '../cluster/pg-client.ts';
import { SinkMismatchError, sinkId, type Delivered, type OutgoingRecord, type Sink, type SinkConfig, type SinkOpened } from './sink.ts';

/** The table of positions, one per sink table, in the sink table's schema. */
export const POSITIONS_TABLE = 'intake_sink_positions';
/** How long open() waits for the backend of a connection it gave up on to be gone. */
const ABANDONED_WAIT_MS = 5_000;
const APPLICATION_NAME = 'intake-delivery';
/** SQLSTATE unique_violation: a row another connection committed after this statement's snapshot. */
const UNIQUE_VIOLATION = '23505';

/** What the position row keeps of the record at its seq: a hash of its exported line. */
export function recordHash(line: string): string {
  return createHash('sha256').update(line).digest('hex');
}

/** A batch of a few MB inserts in well under a second; a server that hangs longer is down. */
const QUERY_TIMEOUT_MS = 30_000;

/** `"schema"."table"` or `"table"`; the setting only allows plain identifiers (settings.ts). */
export function quoteTable(table: string): string {
  return table
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

// Characters PostgreSQL refuses: NUL (text and jsonb), and unpaired surrogates (as JSON escapes
// in jsonb). JSON.stringify writes both as \u escapes. A match may be a false alarm (an escaped
// backslash before "u0000"), which only costs the slower path.
const REFUSED_ESCAPE = /\\u0000|\\ud[89a-f]/i;
const REFUSED = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

function cleanValue(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(REFUSED, '\uFFFD');
  if (Array.isArray(value)) return value.map(cleanValue);
  if (typeof value === 'object' && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [key, inner] of Object.entries(value)) out[key.replace(REFUSED, '\uFFFD')] = cleanValue(inner);
    return out;
  }
  return value;
}

/**
 * The batch as one JSON array of exported records: their lines joined, unless a line holds a
 * character PostgreSQL refuses; that record is then serialized again with U+FFFD in its place.
 */
export function postgresRows(batch: readonly OutgoingRecord[]): string {
  const joined = `[${batch.map((r) => r.line).join(',')}]`;
  if (!REFUSED_ESCAPE.test(joined)) return joined;
  return `[${batch.map((r) => (REFUSED_ESCAPE.test(r.line) ? JSON.stringify(cleanValue(JSON.parse(r.line))) : r.line)).join(',')}]`;
}

/** A backend of ours: its pid and start time (a pid alone may be reused). */
interface Backend {
  pid: number;
  start: string;
}

export class PostgresSink implements Sink {
  readonly kind = 'postgres';
  readonly id: string;
  readonly keepsPosition = true;
  private readonly url: string;
  private readonly table: string;
  private readonly quoted: string;
  /** The table's name without its schema: its key in the positions table. */
  private readonly tableName: string;
  /** The positions table, in the sink table's schema. */
  private readonly positions: string;
  private readonly schema: string | null;
  private client: pg.Client | null = null;
  /** The connection open() made ended or failed since (connected()). */
  private lost = false;
  private backend: Backend | null = null;
  /** The table's oid when open() read its position: a batch is stored only in that table. */
  private tableOid: string | null = null;
  /** Backends of connections closed since: open() makes sure they are gone. */
  private closedBackends: Backend[] = [];
  /** Bumped by close(): a call given up on that finishes later leaves this object's state alone. */
  private epoch = 0;

  constructor(config: Extract<SinkConfig, { kind: 'postgres' }>) {
    this.url = config.url;
    this.table = config.table;
    this.quoted = quoteTable(config.table);
    const dot = config.table.indexOf('.');
    this.schema = dot === -1 ? null : config.table.slice(0, dot);
    this.tableName = dot === -1 ? config.table : config.table.slice(dot + 1);
    this.positions = this.schema === null ? `"${POSITIONS_TABLE}"` : `"${this.schema}"."${POSITIONS_TABLE}"`;
    this.id = sinkId(config);
  }

  async open(): Promise<SinkOpened> {
    const epoch = this.epoch;
    const client = newClient(this.url, { queryTimeoutMs: QUERY_TIMEOUT_MS, applicationName: APPLICATION_NAME });
    this.client = client; // close() ends it, also while it connects
    this.lost = false;
    // Lost between batches (the server restarted or ended the backend): connected() says so.
    const lost = (): void => {
      if (this.client === client) this.lost = true;
    };
    client.on('error', lost);
    client.on('end', lost);
    await client.connect();
    const me = await client.query<{ pid: number; start: string }>('SELECT pid, backend_start::text AS start FROM pg_stat_activity WHERE pid = pg_backend_pid()');
    if (epoch !== this.epoch) throw new Error('closed while opening');
    this.backend = me.rows[0] ?? null;
    await this.endClosedBackends(client);
    if (this.schema !== null) await client.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${this.quoted} (seq bigint PRIMARY KEY, workspace text NOT NULL, kind text NOT NULL, at bigint NOT NULL, did text, sid text, customer text, data jsonb NOT NULL)`,
    );
    await client.query(`CREATE TABLE IF NOT EXISTS ${this.positions} (table_name text PRIMARY KEY, table_oid oid NOT NULL, seq bigint NOT NULL, record_hash text NOT NULL)`);
    // Read before the position: a table dropped and created again in between makes the first
    // batch fail (`changed`) and the loop read the position again.
    const oid = await client.query<{ oid: string }>('SELECT to_regclass($1::text)::oid::text AS oid', [this.quoted]);
    this.tableOid = oid.rows[0]?.oid ?? null;
    const position = await client.query<{ seq: string; record_hash: string; current: boolean; held: boolean }>(
      `SELECT p.seq, p.record_hash, p.table_oid = to_regclass($2::text)::oid AS current, EXISTS (SELECT 1 FROM ${this.quoted} t WHERE t.seq = p.seq) AS held
       FROM ${this.positions} p WHERE p.table_name = $1`,
      [this.tableName, this.quoted],
    );
    const saved = position.rows[0];
    if (saved !== undefined && saved.current) {
      const seq = this.checkedSeq(saved.seq);
      return { seq, how: saved.held ? 'holds' : 'consumed', matches: ({ line }) => recordHash(line) === saved.record_hash, marker: null };
    }
    // No position for this table (a new one, or one filled before positions were kept): its
    // highest row, if any.
    const head = await client.query<{ seq: string; workspace: string; kind: string; at: string }>(
      `SELECT seq, workspace, kind, at FROM ${this.quoted} ORDER BY seq DESC LIMIT 1`,
    );
    const row = head.rows[0];
    if (row === undefined) return { seq: 0, how: 'new', matches: null, marker: null };
    return {
      seq: this.checkedSeq(row.seq),
      how: 'holds',
      matches: ({ record }) => row.workspace === record.workspace && row.kind === record.kind && Number(row.at) === record.at,
      marker: null,
    };
  }

  private checkedSeq(value: string): number {
    const seq = Number(value);
    if (!Number.isSafeInteger(seq) || seq < 1) throw new SinkMismatchError(`table ${this.table} holds seq ${value}, which intake never writes`);
    return seq;
  }

  /**
   * Ends the backends of this sink's earlier connections that are still there (one the loop
   * gave up on may still be running its last statement, or be about to commit it) and waits
   * until they are gone: what they did is then all there is to see.
   */
  private async endClosedBackends(client: pg.Client): Promise<void> {
    const deadline = performance.now() + ABANDONED_WAIT_MS;
    while (this.closedBackends.length > 0) {
      const still: Backend[] = [];
      for (const backend of this.closedBackends) {
        const found = await client.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start::text = $2 AND application_name = $3`,
          [backend.pid, backend.start, APPLICATION_NAME],
        );
        if (found.rowCount !== 0) still.push(backend);
      }
      this.closedBackends = still;
      if (still.length === 0) return;
      if (performance.now() > deadline) throw new Error(`an earlier delivery connection (backend ${still[0]!.pid}) is still there after ${ABANDONED_WAIT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  async deliver(batch: readonly OutgoingRecord[]): Promise<Delivered> {
    const client = this.client;
    const epoch = this.epoch;
    if (client === null) throw new Error('not connected to PostgreSQL');
    const first = batch[0]!;
    const last = batch[batch.length - 1]!;
    // One statement, one implicit transaction: no round trip of ours sits inside a transaction.
    // (With BEGIN, the statement and COMMIT apart, a leader frozen or lost between them left
    // its backend idle in transaction, holding the rows' locks: the new leader's delivery
    // waited on them for as long as that backend lived. Found by a review.)
    //
    // A compare-and-set on the position row: `pos` locks it (FOR UPDATE: another connection's
    // batch waits for this one to commit, then sees the position it moved), and when it says
    // that this table already got records at or past this batch's first, another connection
    // delivered them (a former leader resumed after a freeze, or the new one while this node
    // was frozen): nothing is stored, `moved` says so and the loop reads the position again.
    // Before, such a batch was only absorbed by ON CONFLICT, row by row: rows a consumer had
    // deleted meanwhile were stored again, and the consumer got those records twice (found by a
    // review). With no position row yet (a table's first batch), nothing is locked; rows
    // another connection committed after this statement's snapshot then fail the insert on the
    // primary key (the statement rolls back, and the retry compares them).
    //
    // The table must still be the one open() found (`changed`): a connection opened before the
    // table was dropped and created again stored its batch in the new, empty table and moved the
    // position there, and the records before it never reached that table (found by a review).
    //
    // One parameter whatever the batch size: the exported lines, already JSON, as one array; the
    // server takes the columns out of it. (Eight array parameters cost the client a second
    // serialization of every record plus node-postgres escaping each element.) Rows already
    // there are compared (`held`; `bad` is the first that differs) and not inserted again.
    let result: pg.QueryResult<{ inserted: number; held: number; bad: string | null; moved: boolean; changed: boolean }>;
    try {
      result = await client.query(
        `WITH pos AS (
           SELECT p.seq, p.table_oid = to_regclass($3::text)::oid AS current FROM ${this.positions} p WHERE p.table_name = $2 FOR UPDATE
         ),
         moved AS (SELECT EXISTS (SELECT 1 FROM pos WHERE pos.current AND pos.seq >= $6::bigint) AS yes),
         changed AS (SELECT to_regclass($3::text)::oid IS DISTINCT FROM $7::oid AS yes),
         input AS (
           SELECT (r->>'seq')::bigint AS seq, r->>'workspace' AS workspace, r->>'kind' AS kind, (r->>'at')::bigint AS at,
                  r->>'did' AS did, r->>'sid' AS sid, r->>'customer' AS customer, r->'data' AS data
           FROM jsonb_array_elements($1::jsonb) AS r
         ),
         held AS (
           SELECT i.seq, (t.workspace, t.kind, t.at, t.did, t.sid, t.customer, t.data) IS NOT DISTINCT FROM (i.workspace, i.kind, i.at, i.did, i.sid, i.customer, i.data) AS same
           FROM input i JOIN ${this.quoted} t ON t.seq = i.seq
         ),
         bad AS (SELECT min(seq) AS seq FROM held WHERE NOT same),
         go AS (SELECT NOT (SELECT yes FROM moved) AND NOT (SELECT yes FROM changed) AND (SELECT seq FROM bad) IS NULL AS ok),
         inserted AS (
           INSERT INTO ${this.quoted} (seq, workspace, kind, at, did, sid, customer, data)
           SELECT seq, workspace, kind, at, did, sid, customer, data FROM input
           WHERE (SELECT ok FROM go) AND seq NOT IN (SELECT seq FROM held)
           RETURNING 1
         ),
         position AS (
           INSERT INTO ${this.positions} AS p (table_name, table_oid, seq, record_hash)
           SELECT $2::text, to_regclass($3::text)::oid, $4::bigint, $5::text WHERE (SELECT ok FROM go)
           ON CONFLICT (table_name) DO UPDATE SET table_oid = EXCLUDED.table_oid, seq = EXCLUDED.seq, record_hash = EXCLUDED.record_hash
           -- never backwards, but a new table starts anew
           WHERE p.table_oid IS DISTINCT FROM EXCLUDED.table_oid OR p.seq < EXCLUDED.seq
           RETURNING 1
         )
         SELECT (SELECT count(*) FROM inserted)::int AS inserted, (SELECT count(*) FROM held WHERE same)::int AS held, (SELECT seq FROM bad) AS bad, (SELECT yes FROM moved) AS moved, (SELECT yes FROM changed) AS changed`,
        [postgresRows(batch), this.tableName, this.quoted, last.seq, recordHash(last.line), first.seq, this.tableOid],
      );
    } catch (error) {
      if ((error as { code?: string }).code === UNIQUE_VIOLATION) {
        throw new Error(`table ${this.table}: some of records ${first.seq}..${last.seq} were written by another connection meanwhile; comparing them again`);
      }
      throw error;
    }
    const { inserted, held, bad, moved, changed } = result.rows[0]!;
    if (changed) throw new Error(`table ${this.table} was dropped or created again since this connection read its position: reading it again`);
    if (moved) throw new Error(`table ${this.table} already got records from ${first.seq} on through another connection (a former or a newer leader): reading its position again`);
    if (bad !== null) {
      throw new SinkMismatchError(`table ${this.table} holds a different record ${bad} than this journal: it belongs to another journal (another intake writing to it?)`);
    }
    if (inserted + held !== batch.length) throw new Error(`table ${this.table}: stored ${inserted + held} of records ${first.seq}..${last.seq}`);
    if (epoch !== this.epoch) throw new Error('connection closed');
    return { records: batch.length, marker: null };
  }

  connected(): boolean {
    return this.client !== null && !this.lost;
  }

  async close(): Promise<void> {
    const client = this.client;
    this.epoch++;
    this.client = null;
    if (this.backend !== null) this.closedBackends.push(this.backend);
    this.backend = null;
    await closeClient(client);
  }
}
