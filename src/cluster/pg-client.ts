// PostgreSQL connections: cluster mode's and the PostgreSQL sink's (delivery/postgres-sink.ts).
// In cluster mode each job has its own client (commits, the lease, the journal reader, LISTEN),
// so a slow commit never delays a lease renewal, and LISTEN, which node-postgres cannot do on a
// pooled client, has a connection of its own.
import { createRequire } from 'node:module';
import type pg from 'pg';

// node-postgres is loaded at the first connection, not at start: a single node never uses it,
// and loading it took about 60 ms of a start that must answer /readyz within 1 s (issue 11).
// It is a CommonJS package, so a synchronous require() keeps newClient() synchronous.
const requireCjs = createRequire(import.meta.url);
let pgModule: typeof pg | null = null;
const loadPg = (): typeof pg => (pgModule ??= requireCjs('pg') as typeof pg);

/** A server that does not answer a connect within this is treated as unreachable. */
const CONNECT_TIMEOUT_MS = 3_000;
/** TCP keep-alive probes start after this long idle (newClient()). */
const KEEPALIVE_IDLE_MS = 10_000;
/** end() waits for the server's goodbye; a server that is gone may never send it. */
const CLOSE_TIMEOUT_MS = 1_000;

export interface ClientOptions {
  /** Client-side limit on one query (node-postgres rejects it, the connection is then dropped). */
  queryTimeoutMs: number;
  applicationName: string;
}

/** A client not connected yet, with the timeouts above and its 'error' event handled. */
export function newClient(url: string, options: ClientOptions): pg.Client {
  const client = new (loadPg().Client)({
    connectionString: url,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: options.queryTimeoutMs,
    keepAlive: true,
    // Probes after 10 s idle, not the OS's default of two hours: a connection a NAT or a
    // firewall dropped without a word is found within about a minute.
    keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
    application_name: options.applicationName,
  });
  // A connection lost between queries emits 'error'; the next query fails and its owner
  // reconnects. Without a listener the event would end the process.
  client.on('error', () => undefined);
  return client;
}

export async function connectClient(url: string, options: ClientOptions): Promise<pg.Client> {
  const client = newClient(url, options);
  try {
    await client.connect();
  } catch (error) {
    void closeClient(client);
    throw error;
  }
  return client;
}

export async function closeClient(client: pg.Client | null): Promise<void> {
  if (client === null) return;
  const ended = client.end().catch(() => undefined);
  await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, CLOSE_TIMEOUT_MS).unref())]);
}

/**
 * One connection that reconnects on demand: `use()` runs a query on it, and after any error
 * drops it, so the next use connects afresh (a broken connection never lingers).
 */
export class LazyClient {
  private client: pg.Client | null = null;
  private connecting: Promise<pg.Client> | null = null;

  constructor(
    private readonly url: string,
    private readonly options: ClientOptions,
  ) {}

  async use<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = await this.get();
    try {
      return await run(client);
    } catch (error) {
      if (this.client === client) {
        this.client = null;
        void closeClient(client);
      }
      throw error;
    }
  }

  private get(): Promise<pg.Client> {
    if (this.client !== null) return Promise.resolve(this.client);
    this.connecting ??= connectClient(this.url, this.options).then(
      (client) => {
        this.connecting = null;
        this.client = client;
        return client;
      },
      (error: unknown) => {
        this.connecting = null;
        throw error;
      },
    );
    return this.connecting;
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = null;
    await closeClient(client);
  }
}
