// npm run keys -- create <workspace> | list | revoke <prefix>
// Works while the server runs; the server picks a change up within 1 s (it polls the keys'
// version). In cluster mode (CLUSTER_POSTGRES_URL set) the keys are the cluster's, in PostgreSQL,
// and every node picks the change up; otherwise they are in DATA_DIR's LMDB.
import { checkWorkspaceName, createKey, KeyError, LmdbKeys, revokeKey, type KeySource } from '../auth/key-store.ts';
import { PgKeys } from '../cluster/pg-keys.ts';
import { readClusterIdentityAt } from '../cluster/schema.ts';
import { SETTINGS } from '../config/settings.ts';
import { openStore, readClusterId, storeExists, type Store } from '../journal/store.ts';
import { requireStore } from './data-dir-check.ts';

const USAGE = `usage: npm run keys -- <command>
  create <workspace>   create a key; prints the key alone on stdout (the only time it is shown)
  list                 workspace, key prefix, created, revoked
  revoke <prefix>      revoke the one active key starting with <prefix> (8 to 12 characters)
  DATA_DIR (or --data-dir <dir>) selects the data directory, default ./data
  CLUSTER_POSTGRES_URL (or --cluster-postgres-url <url>), when set, selects the keys of cluster
  CLUSTER_NAME (or --cluster-name <name>, default intake) in that PostgreSQL instead
  (a cluster node's data directory, or --cluster-name, without it is refused)
`;

class UsageError extends Error {}

/**
 * Removes `--flag value` or `--flag=value` from argv; returns the value, else `fallback`. A flag
 * given without a value is a usage error: it fell back to DATA_DIR or ./data, another directory
 * than the one meant (found by a review).
 */
function takeFlag(argv: string[], flag: string, fallback: string): string {
  const i = argv.findIndex((arg) => arg === flag || arg.startsWith(`${flag}=`));
  if (i === -1) return fallback;
  const arg = argv[i]!;
  if (arg !== flag) {
    argv.splice(i, 1);
    return arg.slice(flag.length + 1);
  }
  const value = argv[i + 1];
  if (value === undefined || value.startsWith('--')) throw new UsageError(`${flag} needs a value`);
  argv.splice(i, 2);
  return value;
}

async function main(argv: string[]): Promise<number> {
  try {
    return await run(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`keys: ${error.message}\n${USAGE}`);
    return 2;
  }
}

async function run(argv: string[]): Promise<number> {
  const clusterNameGiven = argv.some((arg) => arg === '--cluster-name' || arg.startsWith('--cluster-name='));
  const dataDir = takeFlag(argv, '--data-dir', process.env.DATA_DIR || './data');
  const clusterUrl = takeFlag(argv, '--cluster-postgres-url', process.env.CLUSTER_POSTGRES_URL ?? '');
  const clusterName = takeFlag(argv, '--cluster-name', process.env.CLUSTER_NAME || 'intake');
  const [command, arg] = argv;
  if (command === undefined || command === '--help' || command === '-h') {
    process.stderr.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command !== 'create' && command !== 'list' && command !== 'revoke') throw new UsageError(`unknown command ${command}`);
  // A create that cannot succeed fails before it touches anything: it made a data directory
  // (a typo's) that `list` and `export` then accepted as intake data (found by a review).
  if (command === 'create') {
    try {
      if (arg === undefined) throw new KeyError('create needs a workspace name');
      checkWorkspaceName(arg);
    } catch (error) {
      if (!(error instanceof KeyError)) throw error;
      process.stderr.write(`keys: ${error.message}\n`);
      return 1;
    }
  }
  const nameSpec = SETTINGS.find((s) => s.key === 'clusterName')!;
  if (clusterUrl !== '' && !nameSpec.pattern!.test(clusterName)) {
    process.stderr.write(`keys: CLUSTER_NAME must be ${nameSpec.patternHint}\n`);
    return 2;
  }
  // A cluster named without its PostgreSQL: the keys would go to DATA_DIR (./data by default),
  // which no node of that cluster reads.
  if (clusterUrl === '' && clusterNameGiven) {
    process.stderr.write('keys: --cluster-name needs CLUSTER_POSTGRES_URL (or --cluster-postgres-url): a cluster\'s keys are in its PostgreSQL\n');
    return 2;
  }
  let store: Store | null = null;
  let existed = true;
  let source: KeySource;
  /** Cluster mode: a note for stderr when the cluster named has no node yet (a typo's name, say). */
  let noCluster: string | null = null;
  if (clusterUrl !== '') {
    source = new PgKeys(clusterUrl, clusterName, 'intake-keys-cli');
    // Keys may be made before a cluster's first node starts, as for a data directory; but a key
    // made under a name no node uses is never accepted, and this said nothing (a review).
    if (command !== 'revoke' && (await readClusterIdentityAt(clusterUrl, clusterName, 'intake-keys-cli')) === null) {
      noCluster = `keys: cluster "${clusterName}" has no node yet (no row in intake_cluster.head of this database): ${command === 'create' ? 'the key works for nodes started with this CLUSTER_NAME and CLUSTER_POSTGRES_URL' : 'no node reads these keys'}; check the name if you meant a running cluster\n`;
    }
  } else {
    // Only `create` may start a data directory (keys made before the server's first start);
    // it says so, since a key made in the wrong directory is never accepted.
    // A file there that is not LMDB's is refused for `create` too (it crashed lmdb-js: a review).
    if ((command !== 'create' || storeExists(dataDir)) && !requireStore('keys', dataDir)) return 2;
    existed = storeExists(dataDir);
    store = openStore(dataDir);
    // A cluster node's directory: its node reads keys from the cluster's PostgreSQL only, so a
    // key made here would never be accepted (and `list` would show keys nobody honours).
    const clusterId = existed ? readClusterId(store) : null;
    if (clusterId !== null) {
      await store.close();
      process.stderr.write(
        `keys: ${dataDir} is the data directory of a cluster node (cluster identity ${clusterId}); a cluster's keys are in its PostgreSQL, and no node reads keys from here. ` +
          'Set CLUSTER_POSTGRES_URL (or --cluster-postgres-url) and CLUSTER_NAME (or --cluster-name) to the cluster\'s\n',
      );
      return 2;
    }
    source = new LmdbKeys(store);
  }
  try {
    switch (command) {
      case 'create': {
        if (arg === undefined) throw new KeyError('create needs a workspace name');
        process.stdout.write(`${await createKey(source, arg)}\n`);
        if (noCluster !== null) process.stderr.write(noCluster);
        if (!existed) process.stderr.write(`keys: ${dataDir} held no intake data: created it; the key works for a server started with this DATA_DIR\n`);
        return 0;
      }
      case 'list': {
        const rows = (await source.list()).map((k) => [
          k.workspace,
          k.prefix,
          new Date(k.createdAt).toISOString(),
          k.revokedAt === null ? '-' : new Date(k.revokedAt).toISOString(),
        ]);
        const header = ['WORKSPACE', 'PREFIX', 'CREATED', 'REVOKED'];
        const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
        for (const r of [header, ...rows]) process.stdout.write(`${r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd()}\n`);
        if (noCluster !== null) process.stderr.write(noCluster);
        return 0;
      }
      case 'revoke': {
        if (arg === undefined) throw new KeyError('revoke needs a key prefix');
        const revoked = await revokeKey(source, arg);
        process.stderr.write(`revoked key ${revoked.prefix} of workspace ${revoked.workspace}\n`);
        return 0;
      }
      default:
        process.stderr.write(`keys: unknown command ${command}\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    if (error instanceof KeyError) {
      process.stderr.write(`keys: ${error.message}\n`);
      return 1;
    }
    // PostgreSQL down, refused, or a query failed: the operator's to fix, a stack would not help.
    if (clusterUrl !== '') {
      process.stderr.write(`keys: the cluster's PostgreSQL: ${error instanceof Error ? error.message : String(error)}\n`);
      return 1;
    }
    throw error;
  } finally {
    await source.close();
    await store?.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
