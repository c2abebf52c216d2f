// Cluster mode in tests: several real intake processes (the compiled server, as `npm start`
// runs it), each with its own data directory, sharing one cluster name on a real PostgreSQL
// (the machine's, or one of our own where a test must stop it). Tests talk to each node
// directly; nothing is mocked, and no load balancer is needed.
import type { ClusterStatus } from '../../src/cluster/cluster-node.ts';
import { randomBytes } from 'node:crypto';
import { afterEach } from 'node:test';
import { startServer, tempDataDir, type StartOptions, type TestServer } from './server.ts';
import { SHARED_POSTGRES_URL, withClient } from './sinks.ts';

export type { ClusterStatus } from '../../src/cluster/cluster-node.ts';

export interface TestCluster {
  readonly name: string;
  readonly url: string;
  readonly env: Record<string, string>;
  readonly nodes: TestNode[];
  /** Starts one more node (a fresh data directory unless given). */
  add(options?: StartOptions & { nodeName?: string }): Promise<TestNode>;
  /** The node that answers /cluster as leader and /readyz 200, waiting up to `timeoutMs`. */
  leader(timeoutMs?: number): Promise<TestNode>;
  /** Kills every node and removes the cluster's rows from PostgreSQL. */
  destroy(): Promise<void>;
}

export interface TestNode extends TestServer {
  readonly nodeName: string;
  status(): Promise<ClusterStatus>;
}

/** A fresh cluster name on `url` (default: the machine's PostgreSQL). */
export function newCluster(env: Record<string, string> = {}, url: string = SHARED_POSTGRES_URL): TestCluster {
  const name = `t${randomBytes(5).toString('hex')}`;
  const clusterEnv = { CLUSTER_POSTGRES_URL: url, CLUSTER_NAME: name, CLUSTER_LEASE_MS: '1000', ...env };
  const nodes: TestNode[] = [];
  let counter = 0;
  const cluster: TestCluster = {
    name,
    url,
    env: clusterEnv,
    nodes,
    async add(options = {}) {
      const nodeName = options.nodeName ?? `n${++counter}`;
      const server = await startServer({ ...options, dataDir: options.dataDir ?? tempDataDir(), env: { ...clusterEnv, NODE_NAME: nodeName, ...(options.env ?? {}) } });
      const node: TestNode = Object.assign(server, {
        nodeName,
        async status() {
          const res = await server.request<ClusterStatus>('/cluster', undefined, { key: null, timeoutMs: 5_000 });
          if (res.status !== 200) throw new Error(`/cluster answered ${res.status}: ${res.text}`);
          return res.body;
        },
      });
      nodes.push(node);
      return node;
    },
    async leader(timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const node of nodes) {
          if (node.child.exitCode !== null || node.child.signalCode !== null) continue;
          try {
            // A frozen node never answers: do not wait for it.
            const ready = await node.request('/readyz', undefined, { key: null, timeoutMs: 500 });
            if (ready.status === 200 && (await node.status()).role === 'leader') return node;
          } catch {
            // frozen or gone
          }
        }
        if (Date.now() > deadline) throw new Error(`no leader within ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async destroy() {
      for (const node of nodes) {
        node.child.kill('SIGCONT');
        await node.kill();
      }
      await dropCluster(url, name);
    },
  };
  return cluster;
}

/**
 * Removes every row of cluster `name`: from each table of the schema that has a `cluster` column,
 * as PostgreSQL lists them, so that a table added later is not forgotten (a fixed list missed
 * sink_positions, and every test with a sink left its rows behind).
 */
export async function dropCluster(url: string, name: string): Promise<void> {
  await withClient(url, async (client) => {
    const { rows } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.columns WHERE table_schema = 'intake_cluster' AND column_name = 'cluster' ORDER BY table_name`,
    );
    for (const { table_name } of rows) {
      await client.query(`DELETE FROM intake_cluster."${table_name}" WHERE cluster = $1`, [name]).catch(() => undefined);
    }
  }).catch(() => undefined); // the server is gone (our own, stopped)
}

/**
 * For a test file: `const cluster = clustersOfThisFile();` then `cluster(env, url)` makes a fresh
 * cluster that is destroyed (nodes killed, rows removed) after the test that made it. (After the
 * file's tests, as before, a file's nodes all lived until its end, each holding its PostgreSQL
 * connections: cluster.test.ts reached the server's max_connections, 100.)
 */
export function clustersOfThisFile(): (env?: Record<string, string>, url?: string) => TestCluster {
  let clusters: TestCluster[] = [];
  afterEach(async () => {
    const done = clusters;
    clusters = [];
    for (const cluster of done) await cluster.destroy();
  });
  return (env = {}, url) => {
    const c = newCluster(env, url);
    clusters.push(c);
    return c;
  };
}
