// The PostgreSQL sink: one row per record in SINK_POSTGRES_TABLE
// (seq bigint primary key, workspace, kind, at, did, sid, customer, data jsonb), a batch per
// INSERT statement, so a batch is one transaction: it is stored whole or not at all, and rows
// appear in seq order (a batch starts only after the one before it committed).
//
// Exactly once: `seq` is the primary key and the insert says ON CONFLICT (seq) DO NOTHING, so a
// batch delivered again (intake killed after the commit and before its position was saved) adds
// nothing. open() reads the table's highest seq, so delivery resumes right after it.
//
// PostgreSQL cannot store U+0000 in text or jsonb, nor an unpaired UTF-16 surrogate in jsonb;
// JSON allows both. Such characters become U+FFFD in this sink (NATS gets the exact line). Rows
// are inserted in seq order within a batch (jsonb_array_elements keeps the array's order).
import pg from 'pg';
import { SinkMismatchError, sinkId, type OutgoingRecord, type Sink, type SinkConfig, type SinkHead } from './sink.ts';

const CONNECT_TIMEOUT_MS = 3_000;
/** end() waits for the server's goodbye; a server that is gone may never send it. */
const CLOSE_TIMEOUT_MS = 1_000;
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

export class PostgresSink implements Sink {
  readonly kind = 'postgres';
  readonly id: string;
  private readonly url: string;
  private readonly table: string;
  private readonly quoted: string;
  private client: pg.Client | null = null;

  constructor(config: Extract<SinkConfig, { kind: 'postgres' }>) {
    this.url = config.url;
    this.table = config.table;
    this.quoted = quoteTable(config.table);
    this.id = sinkId(config);
  }

  async open(): Promise<SinkHead | null> {
    const client = new pg.Client({
      connectionString: this.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      keepAlive: true,
      application_name: 'intake-delivery',
    });
    // A connection lost between queries emits 'error'; the next query fails and the loop
    // reconnects. Without a listener the event would end the process.
    client.on('error', () => undefined);
    this.client = client;
    await client.connect();
    const dot = this.table.indexOf('.');
    if (dot !== -1) await client.query(`CREATE SCHEMA IF NOT EXISTS "${this.table.slice(0, dot)}"`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${this.quoted} (seq bigint PRIMARY KEY, workspace text NOT NULL, kind text NOT NULL, at bigint NOT NULL, did text, sid text, customer text, data jsonb NOT NULL)`,
    );
    const head = await client.query<{ seq: string; workspace: string; kind: string; at: string }>(
      `SELECT seq, workspace, kind, at FROM ${this.quoted} ORDER BY seq DESC LIMIT 1`,
    );
    const row = head.rows[0];
    if (row === undefined) return null;
    const seq = Number(row.seq);
    if (!Number.isSafeInteger(seq) || seq < 1) throw new SinkMismatchError(`table ${this.table} holds seq ${row.seq}, which intake never writes`);
    return {
      seq,
      matches: ({ record }) => row.workspace === record.workspace && row.kind === record.kind && Number(row.at) === record.at,
    };
  }

  async deliver(batch: readonly OutgoingRecord[]): Promise<number> {
    const client = this.client;
    if (client === null) throw new Error('not connected to PostgreSQL');
    // One parameter whatever the batch size: the exported lines, already JSON, as one array; the
    // server takes the columns out of it. (Eight array parameters cost the client a second
    // serialization of every record plus node-postgres escaping each element.)
    await client.query(
      `INSERT INTO ${this.quoted} (seq, workspace, kind, at, did, sid, customer, data)
       SELECT (r->>'seq')::bigint, r->>'workspace', r->>'kind', (r->>'at')::bigint, r->>'did', r->>'sid', r->>'customer', r->'data'
       FROM jsonb_array_elements($1::jsonb) AS r
       ON CONFLICT (seq) DO NOTHING`,
      [postgresRows(batch)],
    );
    return batch.length;
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = null;
    if (client === null) return;
    const ended = client.end().catch(() => undefined);
    await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, CLOSE_TIMEOUT_MS).unref())]);
  }
}
