// npm run cluster:local -- <nodes> <postgres-url> [cluster-name | fresh]
//
// A cluster on this machine for trying cluster mode out (CONTRACT.md §12): <nodes> intake nodes
// (the compiled build, as `npm start` runs it) on free loopback ports, each with its own data
// directory data/cluster-local/<node>/ and its log in data/cluster-local/logs/<node>.log, all
// sharing the cluster's journal in <postgres-url> under CLUSTER_NAME (default `local`, kept across
// runs with its data; `fresh` picks a new name), and HAProxy in front on 127.0.0.1:8080
// (HAPROXY_PORT) with a config made from deploy/haproxy.cfg (data/cluster-local/haproxy.cfg; its
// log beside the nodes'). HAProxy is installed with apt-get when it is missing.
// Keys: SERVICE_KEYS when set (every node gets it), else the key a first start of the cluster
// prints, kept in data/cluster-local/<cluster>.key (mode 600) for later runs.
// Other settings (CLUSTER_LEASE_MS, LOG_LEVEL...) pass through from the environment.
// Enter prints the cluster's status; `r` + Enter restarts the nodes that are not running (after
// a kill -9, say). Ctrl-C (SIGINT), SIGTERM, SIGHUP or SIGQUIT stops HAProxy, then every node
// gracefully. Node directories of a cluster since removed from PostgreSQL start empty.
//
// It lives in bench/ beside the benches because it is the same kind of tool (a tsx script that
// starts intake as `npm start` does, on loopback, with bench/lib's helpers, which bench:cluster
// uses too) and so is type-checked by `npm run typecheck` like them, with no change to tsconfig.
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { readClusterIdentityAt } from '../src/cluster/schema.ts';
import { LocalClusterNode, waitForLeader, type ClusterStatus } from './lib/cluster-nodes.ts';
import { ensureHaproxy, startHaproxy, type RunningHaproxy } from './lib/haproxy.ts';
import { ROOT } from './lib/servers.ts';
import { freePort } from './lib/sink-servers.ts';
import { StopSignals } from '../src/cli/stop-signals.ts';

const USAGE = 'usage: npm run cluster:local -- <nodes> <postgres-url> [cluster-name | fresh]';
const CLUSTER_NAME_PATTERN = /^[A-Za-z0-9_-]{1,40}$/;

function fail(message: string): never {
  process.stderr.write(`cluster:local: ${message}\n`);
  process.exit(2);
}

function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

/** The URL without its password, for printing. */
function safeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** Whose nodes data/cluster-local holds: the cluster's URL and name, and its identity (head.cluster_id) once it started. */
interface Owner {
  postgres: string;
  cluster: string;
  clusterId?: string;
}

async function main(): Promise<void> {
  const [nodesText, postgresUrl, nameArg] = process.argv.slice(2);
  const count = Number(nodesText);
  if (!Number.isInteger(count) || count < 1 || count > 9 || postgresUrl === undefined) fail(USAGE);
  if (!/^postgres(ql)?:\/\//.test(postgresUrl)) fail(`not a PostgreSQL URL: ${postgresUrl}\n${USAGE}`);
  let cluster = nameArg ?? process.env.CLUSTER_NAME ?? 'local';
  if (cluster === 'fresh') cluster = `local-${randomBytes(3).toString('hex')}`;
  if (!CLUSTER_NAME_PATTERN.test(cluster)) fail(`cluster name "${cluster}": letters, digits, _ and -, at most 40`);
  const haproxyPort = Number(process.env.HAPROXY_PORT ?? 8080);
  if (!existsSync(`${ROOT}dist/src/main.js`)) fail('no compiled build (dist/src/main.js): run `npm run build` first');

  const haproxyBin = ensureHaproxy((line) => say(line));
  if (!(await portIsFree(haproxyPort))) fail(`127.0.0.1:${haproxyPort} is in use (set HAPROXY_PORT to use another port)`);

  // Node data directories belong to one cluster: started against another URL or name, they
  // would hold records that cluster's journal does not. Keep a note of whose they are.
  const base = join(ROOT, 'data', 'cluster-local');
  const logs = join(base, 'logs');
  mkdirSync(logs, { recursive: true });
  const owner: Owner = { postgres: safeUrl(postgresUrl), cluster };
  const ownerFile = join(base, 'cluster.json');
  const previous = existsSync(ownerFile) ? (JSON.parse(readFileSync(ownerFile, 'utf8')) as Owner) : null;
  const nodeNames = Array.from({ length: count }, (_, i) => `node${i + 1}`);
  const forgetNodes = (why: string): void => {
    say(`${why}: starting the nodes from empty data directories`);
    for (const entry of ['node1', 'node2', 'node3', 'node4', 'node5', 'node6', 'node7', 'node8', 'node9']) rmSync(join(base, entry), { recursive: true, force: true });
    rmSync(join(base, `${cluster}.key`), { force: true });
  };
  if (previous !== null && (previous.postgres !== owner.postgres || previous.cluster !== owner.cluster)) {
    forgetNodes(`data/cluster-local held another cluster's nodes (${previous.cluster} on ${previous.postgres})`);
  } else if (previous !== null) {
    // The same name, but the cluster those nodes joined may be gone: its rows deleted (the
    // README's clean-up), maybe made again since. Its nodes would refuse their directories
    // ("not a copy of cluster ..."; found by a review), and its key no longer exists.
    const identity = await readClusterIdentityAt(postgresUrl, cluster, 'intake-cluster-local');
    if (identity === null || (previous.clusterId !== undefined && previous.clusterId !== identity)) forgetNodes(`cluster "${cluster}" is not the one data/cluster-local's nodes belonged to (its rows were removed)`);
  }
  writeFileSync(ownerFile, JSON.stringify(owner));

  const keyFile = join(base, `${cluster}.key`);
  let key: string | null = process.env.SERVICE_KEYS ?? null;
  const keyFromFirstStart = (printed: string): void => {
    key = printed;
    writeFileSync(keyFile, `${printed}\n`, { mode: 0o600 });
    chmodSync(keyFile, 0o600);
  };
  if (key === null && existsSync(keyFile)) key = readFileSync(keyFile, 'utf8').trim();

  const nodes: LocalClusterNode[] = [];
  for (const name of nodeNames) {
    nodes.push(
      new LocalClusterNode({
        name,
        port: await freePort(),
        dataDir: join(base, name),
        logFile: join(logs, `${name}.log`),
        env: { CLUSTER_POSTGRES_URL: postgresUrl, CLUSTER_NAME: cluster },
        detached: true,
        onFirstStartKey: keyFromFirstStart,
      }),
    );
  }
  let stopping = false;
  /** Set once every node listens: before, a node that exits fails the start (below). */
  let started = false;
  for (const node of nodes) {
    node.onUnexpectedExit = (code, signal) => {
      if (!stopping && started) say(`! ${node.name} (pid exited: ${signal ?? `code ${code}`}); the others go on. Type r + Enter to restart it. Log: ${node.logFile}`);
    };
  }

  let haproxy: RunningHaproxy | null = null;
  const signals = new StopSignals();
  const stopAll = async (signal: string, exitCode = 0): Promise<void> => {
    const seen = signals.seen(signal);
    if (seen === 'copy') return;
    if (stopping || seen === 'again') {
      say('second signal: killing everything now');
      haproxy?.child.kill('SIGKILL');
      for (const node of nodes) void node.kill('SIGKILL');
      process.exit(1);
    }
    stopping = true;
    say(`\n${signal}: stopping haproxy, then the nodes (followers first, the leader last)`);
    await haproxy?.stop();
    const statuses = await Promise.all(nodes.map((node) => node.status(500)));
    const isLeader = (i: number) => statuses[i]?.role === 'leader';
    const report = async (node: LocalClusterNode) => {
      if (!node.running) return say(`  ${node.name} was not running`);
      const code = await node.stop();
      say(`  ${node.name} stopped (exit ${code})`);
    };
    await Promise.all(nodes.filter((_, i) => !isLeader(i)).map(report));
    await Promise.all(nodes.filter((_, i) => isLeader(i)).map(report));
    for (const node of nodes) node.closeLog();
    say(`stopped. Data: ${base} (the cluster "${cluster}" keeps its journal in PostgreSQL)`);
    process.exit(exitCode);
  };
  // SIGHUP (the terminal closed) and SIGQUIT too: the nodes and haproxy run detached, in
  // sessions of their own, and outlived a cluster:local ended by them (found by a review).
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const) process.on(signal, () => void stopAll(signal));

  say(`starting ${count} node(s) of cluster "${cluster}" on ${safeUrl(postgresUrl)}...`);
  let leader: LocalClusterNode;
  try {
    // The first node alone: on a new cluster it creates the first key, once.
    await nodes[0]!.start();
    await Promise.all(nodes.slice(1).map((node) => node.start()));
    leader = await waitForLeader(nodes, 60_000);
    haproxy = await startHaproxy(
      haproxyBin,
      { bind: `127.0.0.1:${haproxyPort}`, servers: nodes.map((node) => ({ name: node.name, address: `127.0.0.1:${node.port}` })), statsSocket: join(base, 'haproxy.sock') },
      join(base, 'haproxy.cfg'),
      join(logs, 'haproxy.log'),
      true,
    );
  } catch (error) {
    // A signal during the start: its stop is under way (it made the start fail); not a second signal.
    if (stopping) return;
    process.stderr.write(`cluster:local: ${error instanceof Error ? error.message : String(error)}\n`);
    return stopAll('failed to start', 1);
  }
  started = true;
  const identity = await readClusterIdentityAt(postgresUrl, cluster, 'intake-cluster-local').catch(() => null);
  if (identity !== null) writeFileSync(ownerFile, JSON.stringify({ ...owner, clusterId: identity }));

  const keyText =
    key !== null
      ? key
      : `(none printed: the cluster "${cluster}" already has keys. Make one: CLUSTER_POSTGRES_URL='${postgresUrl}' CLUSTER_NAME=${cluster} npm run keys -- create default)`;
  say('');
  say(`haproxy   ${haproxy.url}   (config ${join(base, 'haproxy.cfg')}, log ${join(logs, 'haproxy.log')}, stats socket ${join(base, 'haproxy.sock')})`);
  for (const node of nodes) say(`${node.name.padEnd(9)} ${node.url}   pid ${node.pid}   data ${node.dataDir}   log ${node.logFile}${node === leader ? '   (leader)' : ''}`);
  say(`key       ${keyText}`);
  say(`cluster   ${cluster} on ${safeUrl(postgresUrl)}, lease ${process.env.CLUSTER_LEASE_MS ?? '5000 (default)'} ms`);
  say('');
  say('Try:');
  say(`  curl -s ${haproxy.url}/cluster`);
  say(`  curl -s -XPOST ${haproxy.url}/mcrs_appl_v1 -H 'x-service-key: <key>' -H 'content-type: application/json' -d '{"timestamp":1700000000000,"info":{"appVersionCode":1,"appVersionName":"1.0","sdkVersion":1,"firstTime":true,"deviceType":"phone","deviceManufacturer":"x","deviceModel":"y","deviceCarrier":"z","osName":"Android","osVersion":"14","platform":"ANDROID","language":"en"}}'`);
  say(`  kill -9 ${leader.pid}    # the leader; another node leads within the lease, haproxy follows it`);
  say('Enter: status; r + Enter: restart the nodes that are not running; Ctrl-C: stop everything.');

  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    void (async () => {
      if (stopping) return;
      if (line.trim() === 'r') {
        for (const node of nodes.filter((n) => !n.running)) {
          say(`restarting ${node.name}...`);
          try {
            await node.start();
            say(`${node.name} listens again at ${node.url} (pid ${node.pid})`);
          } catch (error) {
            say(`${node.name} did not start: ${error instanceof Error ? error.message : String(error)}`);
          }
        }
      }
      for (const node of nodes) {
        const status: ClusterStatus | null = node.running ? await node.status(500) : null;
        const ready = node.running && (await node.ready(500));
        say(`${node.name.padEnd(9)} ${node.running ? `pid ${node.pid}` : 'not running'}  ${status === null ? '' : `${status.role}, leader ${status.leader ?? '?'}, epoch ${status.epoch}, appliedSeq ${status.appliedSeq}`}${ready ? ', ready' : ''}`);
      }
    })();
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`cluster:local: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
