// Keys in cluster mode (CONTRACT.md §1 keys rows, §12 "Keys"): `npm run keys` with
// CLUSTER_POSTGRES_URL works on the cluster's keys in PostgreSQL, every node honours a change
// within 1 s, exactly one node creates the first key, clusters sharing a database keep their
// keys apart, and a PostgreSQL that goes away leaves the last keys read in force.
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startOwnPostgres } from '../bench/lib/sink-servers.ts';
import { createFirstKey } from '../src/auth/key-store.ts';
import { PgKeys } from '../src/cluster/pg-keys.ts';
import { withClient } from './helpers/sinks.ts';
import { exportLines, runCli, tempDataDir, type TestServer } from './helpers/server.ts';
import { startTcpProxy } from './helpers/tcp-proxy.ts';
import { openStore, storeExists } from '../src/journal/store.ts';
import { clustersOfThisFile, type TestCluster } from './helpers/cluster.ts';
import { until } from './helpers/wait.ts';

const CREATED_LINE = /^created workspace default, service key: (\S+)$/gm;

const cluster = clustersOfThisFile();

/** `npm run keys -- ...` against the cluster's keys (DATA_DIR points at an unused directory). */
function keys(c: TestCluster, ...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return runCli('keys', args, tempDataDir(), { CLUSTER_POSTGRES_URL: c.url, CLUSTER_NAME: c.name });
}

function createdKey(c: TestCluster, workspace: string): string {
  const created = keys(c, 'create', workspace);
  assert.equal(created.status, 0, created.stderr);
  assert.match(created.stdout, /^[A-Za-z0-9]{40}\n$/, 'the new key alone on stdout');
  return created.stdout.trim();
}

/**
 * Whether `node` takes `key`: anything but 401. A body that fails validation applies nothing
 * (422 on every node: a follower validates before it would forward).
 */
async function accepts(node: TestServer, key: string): Promise<boolean> {
  return (await node.post('/msv_cevt', {}, key)).status !== 401;
}

/** Milliseconds until `check` holds on every node; fails past `withinMs`. */
async function everyNodeWithin(nodes: TestServer[], check: (node: TestServer) => Promise<boolean>, withinMs: number): Promise<number> {
  const started = Date.now();
  for (;;) {
    const results = await Promise.all(nodes.map(check));
    if (results.every(Boolean)) return Date.now() - started;
    if (Date.now() - started > withinMs) throw new Error(`not true on every node within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** How many keys a data directory's own LMDB holds. */
async function localKeys(dataDir: string): Promise<number> {
  const store = openStore(dataDir);
  try {
    return [...store.keys.getKeys()].length;
  } finally {
    await store.close();
  }
}

function createdLines(nodes: TestServer[]): string[] {
  return nodes.flatMap((node) => [...node.stderr().matchAll(CREATED_LINE)].map((m) => m[1]!));
}

describe('keys in cluster mode', () => {
  test('keys CLI with CLUSTER_POSTGRES_URL: create, list, revoke; every node honours each change within 1 s', async () => {
    const c = cluster();
    // SERVICE_KEYS set (the helpers' default): no first-start key.
    const nodes = [await c.add(), await c.add()];
    const leader = await c.leader();

    const key = createdKey(c, 'ws1');
    const acceptedMs = await everyNodeWithin(nodes, (node) => accepts(node, key), 1000);
    assert.ok(acceptedMs < 1000, `accepted after ${acceptedMs} ms`);
    assert.equal((await leader.post('/product', { id: 'p', name: 'P' }, key)).status, 200, 'the leader takes a write with it');

    // Stored hashed: the sha256 and the 12-character prefix, never the key.
    const rows = await withClient(c.url, async (client) => (await client.query('SELECT * FROM intake_cluster.keys WHERE cluster = $1', [c.name])).rows);
    assert.equal(rows.length, 1);
    assert.equal(rows[0].hash, createHash('sha256').update(key).digest('hex'));
    assert.equal(rows[0].prefix, key.slice(0, 12));
    assert.equal(rows[0].workspace, 'ws1');
    assert.ok(!JSON.stringify(rows).includes(key), 'the key itself is not stored');
    for (const node of nodes) assert.equal(await localKeys(node.dataDir), 0, 'nothing in the node\'s own LMDB');

    // The flags work as well as the environment.
    const list = runCli('keys', ['list', '--cluster-postgres-url', c.url, `--cluster-name=${c.name}`], tempDataDir());
    assert.equal(list.status, 0, list.stderr);
    const [header, row, ...rest] = list.stdout.trim().split('\n');
    assert.match(header!, /WORKSPACE\s+PREFIX\s+CREATED\s+REVOKED/);
    assert.match(row!, new RegExp(`^ws1\\s+${key.slice(0, 12)}\\s+\\d{4}-\\d\\d-\\d\\dT\\S+Z\\s+-$`));
    assert.deepEqual(rest, []);

    const revoked = keys(c, 'revoke', key.slice(0, 8));
    assert.equal(revoked.status, 0, revoked.stderr);
    assert.equal(revoked.stderr, `revoked key ${key.slice(0, 12)} of workspace ws1\n`);
    const revokedMs = await everyNodeWithin(nodes, async (node) => !(await accepts(node, key)), 1000);
    assert.ok(revokedMs < 1000, `refused after ${revokedMs} ms`);
    assert.match(keys(c, 'list').stdout, new RegExp(`${key.slice(0, 12)}\\s+\\S+Z\\s+\\d{4}-\\S+Z`), 'list shows when it was revoked');

    for (const bad of [key.slice(0, 8), 'zzzzzzzz', 'short', key.slice(0, 13)]) {
      const res = keys(c, 'revoke', bad);
      assert.notEqual(res.status, 0, `revoke ${bad} must fail`);
      assert.match(res.stderr, /^keys: /);
    }
    assert.notEqual(keys(c, 'create', 'bad name!').status, 0);

    // Two keys sharing their first 8 characters cannot be made by chance; write them directly.
    await withClient(c.url, async (client) => {
      for (const [hash, prefix] of [['hash-1', 'ABCDEFGH1111'], ['hash-2', 'ABCDEFGH2222']]) {
        await client.query('INSERT INTO intake_cluster.keys (cluster, hash, workspace, prefix, created_at) VALUES ($1, $2, $3, $4, $5)', [c.name, hash, 'ws2', prefix, Date.now()]);
      }
    });
    const ambiguous = keys(c, 'revoke', 'ABCDEFGH');
    assert.notEqual(ambiguous.status, 0);
    assert.match(ambiguous.stderr, /ambiguous/);
    assert.equal(keys(c, 'revoke', 'ABCDEFGH2').status, 0);
  });

  test('keys CLI for a cluster with no node yet (a name no node uses, a typo\'s say): the key is made, and stderr says no node of that name has started; silent for a running cluster', async () => {
    // It made the key and said nothing (exit 0): a key no node would ever accept (a review).
    const c = cluster();
    const early = keys(c, 'create', 'ws1');
    assert.equal(early.status, 0, early.stderr);
    assert.match(early.stdout, /^[A-Za-z0-9]{40}\n$/);
    assert.match(early.stderr, new RegExp(`^keys: cluster "${c.name}" has no node yet \\(no row in intake_cluster\\.head of this database\\): the key works for nodes started with this CLUSTER_NAME`));
    assert.match(keys(c, 'list').stderr, /has no node yet .*no node reads these keys/);
    // Made before the first node, as for a data directory: the node takes it.
    const node = await c.add();
    await c.leader();
    assert.equal(await accepts(node, early.stdout.trim()), true, 'the key made early works');
    const later = keys(c, 'create', 'ws2');
    assert.equal(later.status, 0, later.stderr);
    assert.equal(later.stderr, '', 'nothing to say once a node of the cluster started');
    assert.equal(keys(c, 'list').stderr, '');
  });

  test('first start of a cluster with no key anywhere: of three nodes started at once exactly one creates and prints the key, which every node takes', async () => {
    const c = cluster();
    const nodes = await Promise.all([1, 2, 3].map(() => c.add({ serviceKeys: null })));
    await until('the first-start line', async () => createdLines(nodes).length > 0, 2000);
    const printed = createdLines(nodes);
    assert.equal(printed.length, 1, `one line across the nodes' stderr: ${nodes.map((n) => n.stderr()).join('\n')}`);
    const key = printed[0]!;
    for (const node of nodes) for (const line of node.logs()) assert.ok(!line.includes(key), 'the key is not in the JSON logs');
    await everyNodeWithin(nodes, (node) => accepts(node, key), 1000);
    const list = keys(c, 'list').stdout.trim().split('\n');
    assert.equal(list.length, 2, list.join('\n'));
    assert.match(list[1]!, new RegExp(`^default\\s+${key.slice(0, 12)}\\s`));

    const later = await c.add({ serviceKeys: null });
    assert.doesNotMatch(later.stderr(), /created workspace/, 'a later start prints nothing');
    assert.ok(await accepts(later, key));
    assert.equal(keys(c, 'list').stdout.trim().split('\n').length, 2, 'and creates nothing');
  });

  test('COMMIT_MODE=sync in cluster mode is refused (exit 2) before the first start makes the cluster\'s key; the corrected start makes and prints it', async () => {
    const c = cluster();
    await assert.rejects(c.add({ serviceKeys: null, env: { COMMIT_MODE: 'sync' } }), (error: Error) => {
      assert.match(error.message, /exited \(2\) before listening; stderr: intake: COMMIT_MODE=sync is not available in cluster mode/);
      assert.doesNotMatch(error.message, /created workspace/, 'no key was made or printed');
      return true;
    });
    // (No table yet, on a PostgreSQL no cluster used before: nothing written either.)
    const rows = await withClient(c.url, async (client) => {
      const present = (await client.query<{ present: boolean }>("SELECT to_regclass('intake_cluster.keys') IS NOT NULL AS present")).rows[0]!.present;
      return present ? (await client.query('SELECT 1 FROM intake_cluster.keys WHERE cluster = $1', [c.name])).rows : [];
    });
    assert.equal(rows.length, 0, 'nothing written to the cluster');
    const node = await c.add({ serviceKeys: null });
    await until('the first-start line', async () => createdLines([node]).length === 1, 2000);
  });

  test('keys CLI without CLUSTER_POSTGRES_URL refuses a cluster node\'s data directory, and --cluster-name alone (exit 2, nothing written); a single node\'s directory still works', async () => {
    const c = cluster();
    const node = await c.add();
    await c.leader();
    assert.equal(await node.stop(), 0);
    const single = { CLUSTER_POSTGRES_URL: '', CLUSTER_NAME: '' };
    for (const args of [['create', 'x'], ['list'], ['revoke', 'abcdefgh']]) {
      const res = runCli('keys', args, node.dataDir, single);
      assert.equal(res.status, 2, `${args[0]}: ${res.stderr}`);
      assert.match(res.stderr, /is the data directory of a cluster node \(cluster identity \S+\).*Set CLUSTER_POSTGRES_URL/, args[0]);
      assert.equal(res.stdout, '', 'no key printed');
    }
    // Before, `create` wrote the key here and printed it, and no node ever accepted it.
    assert.equal(await localKeys(node.dataDir), 0);

    // --cluster-name without a URL: before, the key went to DATA_DIR (./data by default).
    const dataDir = tempDataDir();
    for (const flag of [['--cluster-name', c.name], [`--cluster-name=${c.name}`]]) {
      const named = runCli('keys', ['create', 'x', ...flag], dataDir, single);
      assert.equal(named.status, 2, named.stderr);
      assert.match(named.stderr, /--cluster-name needs CLUSTER_POSTGRES_URL/);
    }
    assert.equal(storeExists(dataDir), false, 'no data directory was made');

    const ok = runCli('keys', ['create', 'x'], dataDir, single);
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal(await localKeys(dataDir), 1);
  });

  test('the first-start check and insert are one locked transaction: of ten connections racing, exactly one creates a key', async () => {
    const c = cluster();
    const sources = Array.from({ length: 10 }, () => new PgKeys(c.url, c.name));
    try {
      // Connected (and the schema ensured) first, so that the ten really race.
      await Promise.all(sources.map((source) => source.version()));
      const created = await Promise.all(sources.map((source) => createFirstKey(source, 'default')));
      assert.equal(created.filter((key) => key !== null).length, 1);
      assert.equal((await sources[0]!.list()).length, 1);
      assert.equal(await sources[0]!.version(), 1, 'one change, one version bump');
    } finally {
      await Promise.all(sources.map((source) => source.close()));
    }
  });

  for (const threads of ['1', '2']) {
    test(`a key revoked while a follower cannot reach PostgreSQL (it keeps the keys it last read) is refused through that follower within 1 s: the leader checks the key of each forwarded write (HTTP_THREADS=${threads})`, async () => {
      const c = cluster({ HTTP_THREADS: threads });
      const a = await c.add();
      await c.leader();
      // The follower reaches PostgreSQL through the proxy (cut below), and the leader over HTTP.
      const pgUrl = new URL(c.url);
      const proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
      try {
        const b = await c.add({ env: { CLUSTER_POSTGRES_URL: proxy.urlFor(c.url) } });
        const key = createdKey(c, 'ws1');
        await everyNodeWithin([a, b], (node) => accepts(node, key), 1000);
        assert.equal((await b.post('/product', { id: 'before', name: 'P' }, key)).status, 200);

        await proxy.cut();
        const revoked = keys(c, 'revoke', key.slice(0, 12));
        assert.equal(revoked.status, 0, revoked.stderr);
        const revokedAt = Date.now();
        await everyNodeWithin([a], async (node) => !(await accepts(node, key)), 1000);
        const direct = await a.post('/product', { id: 'direct', name: 'P' }, key);
        assert.equal(direct.status, 401);
        // b still holds the key (it cannot read the change), and still reaches the leader.
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, revokedAt + 1000 - Date.now())));
        const through = await b.post('/product', { id: 'through-follower', name: 'P' }, key);
        // Before, the leader ran the forwarded write without looking at its key: 200, applied.
        assert.equal(through.status, 401, through.text);
        assert.equal(through.text, direct.text, 'the same body as a direct request with the revoked key');
        assert.equal(through.headers.get('retry-after'), null);
        // A key that holds goes through as before (SERVICE_KEYS, checked by its sha256 too).
        assert.equal((await b.post('/product', { id: 'env-key', name: 'P' })).status, 200);
        const products = exportLines<{ id: string }>(a.dataDir, 'products').map((p) => p.id).sort();
        assert.deepEqual(products, ['before', 'env-key'], 'nothing of the refused writes was applied');

        // Cut off from the keys, b is not ready (a load balancer stops sending it clients whose
        // keys it may not know: it stayed ready, found by a review), though the leader answers
        // it; with PostgreSQL back, it is ready again.
        const readyz = async (): Promise<number> => (await b.request('/readyz', undefined, { key: null })).status;
        await until('the cut-off follower to be not ready', async () => (await readyz()) === 503, 6_000);
        const notReady = await b.request('/readyz', undefined, { key: null });
        assert.match(notReady.text, /cannot read the cluster's keys/, notReady.text);
        assert.equal((await b.post('/product', { id: 'while-not-ready', name: 'P' })).status, 200, 'it still forwards what is sent to it');
        await proxy.restore();
        await until('the follower to be ready again', async () => (await readyz()) === 200, 10_000);
      } finally {
        await proxy.close();
      }
    });
  }

  test('clusters sharing one database keep their keys apart', async () => {
    const one = cluster();
    const two = cluster();
    const nodeOne = await one.add();
    const key = createdKey(one, 'ws1');
    // The other cluster has no key of its own: its first start is not put off by cluster one's.
    const nodeTwo = await two.add({ serviceKeys: null });
    const printed = createdLines([nodeTwo]);
    assert.equal(printed.length, 1, nodeTwo.stderr());
    const keyTwo = printed[0]!;

    await everyNodeWithin([nodeOne], (node) => accepts(node, key), 1000);
    assert.equal(await accepts(nodeTwo, key), false, 'cluster one\'s key is not a key of cluster two');
    assert.equal(await accepts(nodeOne, keyTwo), false, 'nor the other way round');
    assert.ok(await accepts(nodeTwo, keyTwo));
    assert.doesNotMatch(keys(two, 'list').stdout, new RegExp(key.slice(0, 12)));
    const revoke = keys(two, 'revoke', key.slice(0, 12));
    assert.notEqual(revoke.status, 0, 'cluster two cannot revoke cluster one\'s key');
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.ok(await accepts(nodeOne, key), 'still valid in cluster one');
  });

  test('PostgreSQL unreachable: the last keys read stay in force (logged once), requests do not wait; changes (and a first start) count again once it is back', async () => {
    const own = await startOwnPostgres();
    try {
      const c = cluster({}, own.url);
      const node = await c.add();
      const key = createdKey(c, 'ws1');
      await everyNodeWithin([node], (n) => accepts(n, key), 1000);

      await own.stop();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const started = performance.now();
      assert.ok(await accepts(node, key), 'the key still works');
      assert.ok(performance.now() - started < 200, 'the request did not wait on PostgreSQL');
      await new Promise((resolve) => setTimeout(resolve, 500));
      const down = node.logs().filter((line) => line.includes('cannot read the stored keys'));
      assert.equal(down.length, 1, 'said once');
      assert.ok(!down[0]!.includes(key));

      // A fresh cluster's node that starts now cannot tell whether it is the first: it tries
      // again once PostgreSQL is back.
      const fresh = cluster({}, own.url);
      const early = await fresh.add({ serviceKeys: null });
      assert.doesNotMatch(early.stderr(), /created workspace/);

      await own.start();
      await node.waitForLog((line) => line.includes('stored keys can be read again'), 5000);
      assert.equal(keys(c, 'revoke', key.slice(0, 8)).status, 0);
      await everyNodeWithin([node], async (n) => !(await accepts(n, key)), 1000);
      await until('the first start once PostgreSQL is back', async () => createdLines([early]).length > 0, 5000);
      assert.ok(await accepts(early, createdLines([early])[0]!));
    } finally {
      await own.stop();
    }
  });
});
