// Operating the server: first start, keys from the environment and the CLI, --help and flags,
// and logs that never carry keys or bodies (CONTRACT.md §1, §3, §9).
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createNetServer, Socket, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createKey, KeyError, LmdbKeys, revokeKey, storedKeys } from '../src/auth/key-store.ts';
import { SETTINGS } from '../src/config/settings.ts';
import { openStore, STORE_FILE } from '../src/journal/store.ts';
import { open } from 'lmdb';
import { serverCommand } from '../bench/lib/servers.ts';
import { exportLines, launch, ROOT, runCli, startServer, T0, tempDataDir } from './helpers/server.ts';

const CREATED_LINE = /^created workspace default, service key: (\S+)$/m;

async function eventually(check: () => Promise<boolean>, withinMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < withinMs) {
    if (await check()) return Date.now() - started;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`not true within ${withinMs} ms`);
}

describe('first start', () => {
  test('with no key anywhere: creates workspace default, prints its key once to stderr; later starts do not', async () => {
    const dataDir = tempDataDir();
    const first = await startServer({ dataDir, serviceKeys: null });
    const match = CREATED_LINE.exec(first.stderr());
    assert.ok(match, `stderr: ${first.stderr()}`);
    const key = match[1]!;
    const { did } = await launch(first, undefined, key);
    assert.equal((await first.post('/msv_cevt', { did, name: 'secret-body-marker', timestamp: T0 }, key)).status, 200);
    assert.equal((await first.post('/msv_cevt', { did: 'x', name: 'secret-body-marker' }, key)).status, 422);
    assert.equal(await first.stop(), 0);
    for (const line of first.logs()) {
      assert.doesNotThrow(() => JSON.parse(line), `a log line is JSON: ${line}`);
      assert.ok(!line.includes(key), 'no key in logs');
      assert.ok(!line.includes('secret-body-marker'), 'no request body in logs');
    }
    assert.equal(exportLines(dataDir, 'devices')[0].workspace, 'default');

    const second = await startServer({ dataDir, serviceKeys: null });
    assert.doesNotMatch(second.stderr(), /created workspace/);
    assert.equal((await second.post('/msv_cevt', { did, name: 'e', timestamp: T0 }, key)).status, 200);
    await second.stop();
  });

  test('SERVICE_KEYS: a bare key belongs to workspace default, ws:key to ws; no key is created', async () => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir, serviceKeys: 'bare-key-123456, shop:shop-key-123456' });
    assert.doesNotMatch(server.stderr(), /created workspace/);
    await launch(server, undefined, 'bare-key-123456');
    await launch(server, undefined, 'shop-key-123456');
    await server.stop();
    assert.deepEqual(exportLines(dataDir, 'devices').map((d) => d.workspace).sort(), ['default', 'shop']);
    assert.equal(runCli('keys', ['list'], dataDir).stdout.trim().split('\n').length, 1, 'only the header: nothing stored');
  });
});

describe('keys CLI', () => {
  test('create, list and revoke while the server runs; the server honours each change within 1 s', async () => {
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir });
    try {
      const created = runCli('keys', ['create', 'shop'], dataDir);
      assert.equal(created.status, 0, created.stderr);
      assert.match(created.stdout, /^[A-Za-z0-9]{40}\n$/, 'the new key alone on stdout');
      const key = created.stdout.trim();
      const tookMs = await eventually(async () => (await server.post('/product', { id: 'p', name: 'P' }, key)).status === 200, 1000);
      assert.ok(tookMs < 1000);

      const list = runCli('keys', ['list'], dataDir);
      assert.equal(list.status, 0);
      const [header, row] = list.stdout.trim().split('\n');
      assert.match(header!, /WORKSPACE\s+PREFIX\s+CREATED\s+REVOKED/);
      assert.match(row!, new RegExp(`^shop\\s+${key.slice(0, 12)}\\s+\\d{4}-\\d\\d-\\d\\dT\\S+Z\\s+-$`));

      const revoked = runCli('keys', ['revoke', key.slice(0, 8)], dataDir);
      assert.equal(revoked.status, 0, revoked.stderr);
      await eventually(async () => (await server.post('/product', { id: 'p', name: 'P' }, key)).status === 401, 1000);
      assert.match(runCli('keys', ['list'], dataDir).stdout, new RegExp(`${key.slice(0, 12)}\\s+\\S+Z\\s+\\d{4}-\\S+Z`), 'list shows when it was revoked');

      for (const bad of [key.slice(0, 8), 'zzzzzzzz', 'short', key.slice(0, 13)]) {
        const res = runCli('keys', ['revoke', bad], dataDir);
        assert.notEqual(res.status, 0, `revoke ${bad} must fail`);
        assert.match(res.stderr, /keys: /);
      }
      assert.notEqual(runCli('keys', ['create', 'bad name!'], dataDir).status, 0);
    } finally {
      await server.stop();
    }
  });

  test('a create that cannot succeed touches nothing; a data file that is not LMDB is refused (status 2), not crashed on; --data-dir without a value is a usage error', async () => {
    const parent = tempDataDir();
    const typo = join(parent, 'typo');
    for (const args of [['create', 'bad name!'], ['create']]) {
      const res = runCli('keys', args, typo);
      assert.equal(res.status, 1, res.stderr);
      assert.match(res.stderr, /keys: (workspace name must be|create needs a workspace name)/);
      assert.doesNotMatch(res.stderr, /created it/, 'it says nothing was created');
      assert.equal(existsSync(typo), false, `keys ${args.join(' ')}: no data directory made`);
    }
    assert.equal(runCli('keys', ['list'], typo).status, 2, 'still no intake data there');
    const garbage = join(parent, 'garbage');
    mkdirSync(garbage);
    writeFileSync(join(garbage, STORE_FILE), randomBytes(64 * 1024));
    const crashed = runCli('keys', ['create', 'shop'], garbage);
    assert.equal(crashed.status, 2, `refused, not a crash (signal ${String(crashed.status)}): ${crashed.stderr}`);
    const noValue = runCli('keys', ['list', '--data-dir'], typo);
    assert.equal(noValue.status, 2);
    assert.match(noValue.stderr, /--data-dir needs a value/);
  });

  test('a key revoked while its request\'s body is still arriving: 401 once the body is complete, nothing applied', async () => {
    // The key is checked when the headers arrive; before, a slow upload whose key was revoked
    // meanwhile was applied seconds later.
    const dataDir = tempDataDir();
    const server = await startServer({ dataDir });
    try {
      const created = runCli('keys', ['create', 'shop'], dataDir);
      const key = created.stdout.trim();
      await eventually(async () => (await server.post('/product', { id: 'early', name: 'P' }, key)).status === 200, 1000);
      const body = JSON.stringify({ id: 'late', name: 'sent after the revocation' });
      const socket = new Socket();
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk));
      await new Promise<void>((resolve) => socket.connect(server.port, '127.0.0.1', resolve));
      socket.write(`POST /product HTTP/1.1\r\nhost: x\r\nx-service-key: ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(runCli('keys', ['revoke', key.slice(0, 8)], dataDir).status, 0);
      // An invalid body as the probe: 422 (nothing applied) while the key holds, then 401.
      await eventually(async () => (await server.post('/product', {}, key)).status === 401, 1000);
      socket.write(body.slice(5));
      await eventually(async () => answer.includes('\r\n\r\n'), 2000);
      socket.destroy();
      assert.match(answer, /^HTTP\/1\.1 401 /);
    } finally {
      await server.stop();
    }
    assert.deepEqual(exportLines(dataDir, 'products').map((p) => p.id), ['early'], 'nothing of the refused request');
  });

  test('keys are stored hashed: the data file holds the 12-character prefix, never the key', async () => {
    const dataDir = tempDataDir();
    const store = openStore(dataDir);
    const key = await createKey(new LmdbKeys(store), 'ws');
    await store.close();
    const file = readFileSync(join(dataDir, STORE_FILE));
    assert.ok(file.includes(Buffer.from(key.slice(0, 12))), 'the prefix is there');
    assert.ok(!file.includes(Buffer.from(key)), 'the key itself is not');
  });

  test('revoke refuses an ambiguous prefix', async () => {
    const store = openStore(tempDataDir());
    try {
      // Two keys sharing their first 8 characters cannot be made by chance; write them directly.
      const now = Date.now();
      await store.keys.put('hash-1', { workspace: 'a', prefix: 'ABCDEFGH1111', createdAt: now, revokedAt: null });
      await store.keys.put('hash-2', { workspace: 'b', prefix: 'ABCDEFGH2222', createdAt: now, revokedAt: null });
      await assert.rejects(revokeKey(new LmdbKeys(store), 'ABCDEFGH'), (e: unknown) => e instanceof KeyError && /ambiguous/.test(e.message));
      const revoked = await revokeKey(new LmdbKeys(store), 'ABCDEFGH2');
      assert.equal(revoked.workspace, 'b');
      assert.deepEqual(storedKeys(store).map((k) => k.revokedAt === null), [true, false]);
    } finally {
      await store.close();
    }
  });
});

describe('npm start', () => {
  test('passes SIGTERM on to the server, which stops gracefully', async () => {
    const { spawn } = await import('node:child_process');
    const { createInterface } = await import('node:readline');
    // Its own process group, so a failing run can kill npm and the server together.
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: ROOT,
      env: { ...process.env, DATA_DIR: tempDataDir(), PORT: '0', HOST: '127.0.0.1', SERVICE_KEYS: 'k-123456789' },
      stdio: ['ignore', 'pipe', 'ignore'],
      detached: true,
    });
    try {
      const messages: string[] = [];
      const lines = createInterface({ input: npm.stdout! });
      // The server shares npm's stdout: the stream closes once the server itself has exited.
      const outputClosed = new Promise<void>((resolve) => lines.once('close', resolve));
      const listening = new Promise<boolean>((resolve) => {
        lines.on('line', (line) => {
          const msg = (JSON.parse(line) as { msg: string }).msg;
          messages.push(msg);
          if (msg === 'listening') resolve(true);
        });
        npm.once('exit', () => resolve(false));
      });
      assert.ok(await listening, `the server started: ${messages.join(', ')}`);
      npm.kill('SIGTERM');
      const timedOut = await Promise.race([outputClosed.then(() => false), new Promise<boolean>((r) => setTimeout(() => r(true), 15_000).unref())]);
      assert.equal(timedOut, false, 'the server exited within 15 s of SIGTERM');
      assert.ok(messages.includes('stopping: no new requests, answering those in flight'), `the server got the SIGTERM: ${messages.join(', ')}`);
      assert.ok(messages.includes('stopped'), `the server logged its graceful stop: ${messages.join(', ')}`);
    } finally {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // the group is gone already: the normal case
      }
      npm.stdout!.destroy();
    }
  });
});

describe('settings', () => {
  const run = (args: string[], env: Record<string, string> = {}) =>
    // A timeout: a start that wrongly succeeds must fail the test, not hang it.
    spawnSync(process.execPath, [...serverCommand(), ...args], { cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });

  test('--help lists every setting with its variable, flag and default, and exits 0', () => {
    const res = run(['--help']);
    assert.equal(res.status, 0);
    for (const s of SETTINGS) {
      assert.ok(res.stdout.includes(s.env), `${s.env} in --help`);
      assert.ok(res.stdout.includes(s.flag), `${s.flag} in --help`);
      assert.ok(res.stdout.includes(s.defaultLabel ?? (s.defaultValue === '' ? '(none)' : String(s.defaultValue))), `${s.key} default`);
      // And what a value may be (since 2026-11-29): the range, the list or the pattern's hint.
      if (s.min !== undefined && s.max !== undefined) assert.ok(res.stdout.includes(`${s.min}..${s.max}`), `${s.key} range`);
      if (s.choices !== undefined) assert.ok(res.stdout.includes(`one of ${s.choices.join(', ')}`), `${s.key} choices`);
      if (s.patternHint !== undefined) assert.ok(res.stdout.includes(s.patternHint), `${s.key} pattern`);
    }
  });

  test('an unknown flag or a bad value stops the server with a message and status 2', () => {
    for (const args of [['--nope'], ['--port', 'abc'], ['--commit-mode', 'maybe'], ['--port']]) {
      const res = run(args);
      assert.equal(res.status, 2, args.join(' '));
      assert.match(res.stderr, /^intake: /);
    }
    assert.equal(run([], { PORT: '99999' }).status, 2);
    // An IPv6 address without brackets is no URL (followers forwarding to it waited out their timeout).
    const unbracketed = run([], { CLUSTER_ADVERTISE_URL: 'http://::1:8080' });
    assert.equal(unbracketed.status, 2, unbracketed.stderr);
    assert.match(unbracketed.stderr, /CLUSTER_ADVERTISE_URL: "http:\/\/::1:8080" is not valid \(.*IPv6 address in brackets\)/);
    // A body is parsed from one string: no limit may allow one longer than V8 can make (a body
    // over it ended the process, uncaught, on any thread).
    for (const name of ['BATCH_BODY_LIMIT_BYTES', 'MAPPING_BODY_LIMIT_BYTES']) {
      const res = run([], { [name]: String(1024 * 1024 * 1024) });
      assert.equal(res.status, 2, name);
      assert.match(res.stderr, new RegExp(`${name}: 1073741824 is outside`));
    }
  });

  test('SERVICE_KEYS that could never be used stop the server with status 2 (too long, spaces at an end, one key for two workspaces)', () => {
    for (const keys of ['k'.repeat(257), 'shop: spaced-key-123456', 'shop:tab\tkey-123456', 'a:same-key-123456,b:same-key-123456', 'caf\u00e9-key-123456']) {
      const res = run([], { SERVICE_KEYS: keys, DATA_DIR: tempDataDir(), PORT: '0' });
      assert.equal(res.status, 2, `${JSON.stringify(keys)}: ${res.stderr}`);
      assert.match(res.stderr, /^intake: SERVICE_KEYS: /);
      assert.doesNotMatch(res.stderr, /same-key|spaced-key/, 'the message does not print the key');
    }
  });

  test('a flag wins over its environment variable', async () => {
    const server = await startServer({ env: { BODY_LIMIT_BYTES: '1024' }, args: ['--body-limit-bytes', '4096'] });
    try {
      const res = await server.post('/product', { id: 'big', name: 'x'.repeat(1500) });
      assert.equal(res.status, 200, 'a 1.5 KiB body passes the 4 KiB flag limit, not the 1 KiB env limit');
      assert.equal((await server.post('/product', { id: 'big', name: 'x'.repeat(1999), description: 'y'.repeat(2000), vendor: 'z'.repeat(1000) })).status, 413, 'a 5 KiB body is over the flag limit');
    } finally {
      await server.stop();
    }
  });
});

describe('one server per data directory and per port', () => {
  const run = (env: Record<string, string>, timeoutMs = 15_000) =>
    spawnSync(process.execPath, serverCommand(), { cwd: ROOT, env: { ...process.env, HOST: '127.0.0.1', PORT: '0', SERVICE_KEYS: 'k-0123456789abcdef', ...env }, encoding: 'utf8', timeout: timeoutMs });

  test('a second server on the same DATA_DIR, or on a port in use, stops with status 2 and a one-line message; the first keeps every write', async () => {
    // A fixed port, as operators set one (port 0 is never shared, so it takes no port lock).
    const free = createNetServer();
    await new Promise<void>((resolve) => free.listen({ host: '127.0.0.1', port: 0 }, resolve));
    const port = (free.address() as AddressInfo).port;
    await new Promise((resolve) => free.close(resolve));
    const first = await startServer({ env: { PORT: String(port) } });
    try {
      const before = await first.post('/product', { id: 'held-1', name: 'n' });
      assert.equal(before.status, 200);
      // Two servers on one data directory each wrote their batches over the other's (writes answered 200 were lost).
      const sameDir = run({ DATA_DIR: first.dataDir });
      assert.equal(sameDir.status, 2, sameDir.stderr);
      assert.equal(sameDir.stderr, `intake: the data directory ${first.dataDir} is in use by another intake process on this machine (one process per data directory)\n`);
      // uWS listens with SO_REUSEPORT: a second server on a port in use listened beside the first, and the kernel split the connections.
      const samePort = run({ DATA_DIR: tempDataDir(), PORT: String(first.port) });
      assert.equal(samePort.status, 2, samePort.stderr);
      assert.equal(samePort.stderr, `intake: cannot listen on 127.0.0.1:${first.port}: another intake process on this machine uses port ${first.port} (one intake per port, whatever its HOST)\n`);
      // An intake under another spelling of the host takes the same lock: named after HOST too,
      // 0.0.0.0 and 127.0.0.1 took two, and two such servers started together both listened.
      const otherHost = run({ DATA_DIR: tempDataDir(), PORT: String(first.port), HOST: '0.0.0.0' });
      assert.equal(otherHost.status, 2, otherHost.stderr);
      assert.equal(otherHost.stderr, `intake: cannot listen on 0.0.0.0:${first.port}: another intake process on this machine uses port ${first.port} (one intake per port, whatever its HOST)\n`);
      // Another program on the port.
      const other = createNetServer();
      await new Promise<void>((resolve) => other.listen({ host: '127.0.0.1', port: 0 }, resolve));
      const otherPort = (other.address() as AddressInfo).port;
      const taken = run({ DATA_DIR: tempDataDir(), PORT: String(otherPort) });
      other.close();
      assert.equal(taken.status, 2, taken.stderr);
      assert.equal(taken.stderr, `intake: cannot listen on 127.0.0.1:${otherPort}: the port is in use (another intake, or another program)\n`);
      for (let i = 0; i < 20; i++) assert.equal((await first.post('/product', { id: `held-${i + 2}`, name: 'n' })).status, 200);
    } finally {
      await first.kill();
    }
    // SIGKILL leaves no stale lock: the next server on the directory starts and has every write.
    const again = await startServer({ dataDir: first.dataDir });
    try {
      assert.equal((await again.request('/readyz')).status, 200);
    } finally {
      await again.stop();
    }
    const ids = exportLines(first.dataDir, 'products').map((p: { id: string }) => p.id);
    assert.equal(ids.length, 21);
  });

  test('two servers started at once on one port (each on its own DATA_DIR): one listens, the other stops with status 2', async () => {
    const free = createNetServer();
    await new Promise<void>((resolve) => free.listen({ host: '127.0.0.1', port: 0 }, resolve));
    const port = (free.address() as AddressInfo).port;
    await new Promise((resolve) => free.close(resolve));
    // Both pass a probe of the port before either listens (they listen after recovery).
    const outcomes = await Promise.allSettled([0, 1].map(() => startServer({ env: { PORT: String(port) } })));
    const started = outcomes.filter((o): o is PromiseFulfilledResult<Awaited<ReturnType<typeof startServer>>> => o.status === 'fulfilled').map((o) => o.value);
    const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected').map((o) => String(o.reason));
    try {
      assert.equal(started.length, 1, `one server listens, not ${started.length}`);
      assert.equal(refused.length, 1);
      assert.match(refused[0]!, /server exited \(2\) before listening; stderr: intake: cannot listen on 127\.0\.0\.1:\d+: (the port is in use|another intake process on this machine uses port \d+)/);
    } finally {
      for (const server of started) await server.stop();
    }
  });

  test('a DATA_DIR that cannot be made, or a HOST that cannot be listened on, stops with status 2 and one line (no hang, no stack)', () => {
    // mkdirSync's `recursive` loops forever on /proc/x in Node 20: the start hung with no output.
    const proc = run({ DATA_DIR: '/proc/intake-no-such-dir' });
    assert.equal(proc.status, 2, `status ${proc.status}, signal ${proc.signal}, stderr ${proc.stderr}`);
    assert.match(proc.stderr, /^intake: cannot create the data directory \/proc\/intake-no-such-dir: ENOENT[^\n]*\n$/);
    const file = join(tempDataDir(), 'a-file');
    writeFileSync(file, 'x');
    const underFile = run({ DATA_DIR: join(file, 'sub') });
    assert.equal(underFile.status, 2, underFile.stderr);
    assert.match(underFile.stderr, /^intake: cannot create the data directory [^\n]*: ENOTDIR[^\n]*\n$/);
    const host = run({ DATA_DIR: tempDataDir(), HOST: 'no-such-host.invalid' });
    assert.equal(host.status, 2, host.stderr);
    assert.match(host.stderr, /^intake: cannot listen on no-such-host\.invalid:0: [^\n]+\n$/);
  });
});

describe('CLIs on a data directory', () => {
  test('export, journal and keys list/revoke refuse a directory without intake data (status 2, nothing created); keys create makes one and says so', () => {
    const missing = join(tempDataDir(), 'typo');
    for (const [cli, args] of [['export', ['events']], ['export', ['products']], ['journal', ['check']], ['journal', ['repair']], ['keys', ['list']], ['keys', ['revoke', 'ABCDEFGH']]] as const) {
      const res = runCli(cli, [...args], missing);
      assert.equal(res.status, 2, `${cli} ${args.join(' ')}: ${res.stderr}`);
      assert.equal(res.stderr, `${cli}: ${missing} holds no intake data (set DATA_DIR or --data-dir to the server's data directory)\n`);
      assert.equal(res.stdout, '');
      assert.equal(existsSync(missing), false, `${cli} ${args.join(' ')} created nothing`);
    }
    const created = runCli('keys', ['create', 'shop'], missing);
    assert.equal(created.status, 0, created.stderr);
    assert.match(created.stderr, /held no intake data: created it/);
    assert.equal(runCli('keys', ['list'], missing).stdout.trim().split('\n').length, 2, 'the header and the new key');
  });

  test('export, journal and keys refuse a store file that is empty or not LMDB (status 2, the file untouched): a foreign file crashed them (SIGSEGV), an empty one became an empty store', () => {
    for (const [content, why] of [[Buffer.alloc(0), /its intake\.mdb is empty/], [Buffer.from('x'.repeat(40_000)), /its intake\.mdb is not an LMDB file/]] as const) {
      const dir = tempDataDir();
      writeFileSync(join(dir, 'intake.mdb'), content);
      for (const [cli, args] of [['export', ['events']], ['export', ['products']], ['journal', ['check']], ['keys', ['list']]] as const) {
        const res = runCli(cli, [...args], dir);
        assert.equal(res.status, 2, `${cli} ${args.join(' ')}: ${res.status} ${res.stderr}`);
        assert.match(res.stderr, why);
        assert.equal(readFileSync(join(dir, 'intake.mdb')).length, content.length, 'the file is left as it was');
        assert.equal(existsSync(join(dir, 'intake.mdb-lock')), false, 'no lock file made');
      }
    }
  });

  test('export of a journal batch it cannot decode: the reason on one line and status 1, no stack trace', async () => {
    const dir = tempDataDir();
    const store = openStore(dir);
    await store.journal.put(1, [{ kind: 'product_delete', workspace: 'ws-a', at: 1, data: { id: 'x' } }]);
    await store.close();
    // The same batch key, its bytes replaced by ones no record decodes from.
    const raw = open({ path: join(dir, STORE_FILE), maxDbs: 8 }).openDB<Buffer, number>({ name: 'journal', encoding: 'binary' });
    await raw.put(1, Buffer.from([0xc1, 0xc1, 0xc1]));
    await raw.close();
    const res = runCli('export', ['events'], dir);
    assert.equal(res.status, 1, res.stderr);
    assert.match(res.stderr, /^export: [^\n]+\n$/);
    const check = runCli('journal', ['check'], dir);
    assert.equal(check.status, 1, check.stderr);
    assert.match(check.stderr, /^journal: [^\n]+\n$/);
  });

  test('journal check reads the batches before the newest snapshot too: one it cannot decode is reported (exit 1), though intake can start', async () => {
    const server = await startServer({ env: { SNAPSHOT_INTERVAL_MS: '0', SNAPSHOT_EVERY_RECORDS: '0' } });
    for (const id of ['c1', 'c2']) assert.equal((await server.post('/product', { id, name: id })).status, 200);
    server.child.kill('SIGUSR2');
    await server.waitForLog((line) => line.includes('"snapshot written"'), 10_000);
    assert.equal(await server.stop(), 0);
    const raw = open({ path: join(server.dataDir, STORE_FILE), maxDbs: 8 }).openDB<Buffer, number>({ name: 'journal', encoding: 'binary' });
    const first = [...raw.getKeys({ limit: 1 })][0]!;
    await raw.put(first, Buffer.from([0xc1, 0xc1, 0xc1]));
    await raw.close();
    const check = runCli('journal', ['check'], server.dataDir);
    assert.equal(check.status, 1, check.stderr);
    assert.match(check.stderr, new RegExp(`^journal: the batch at seq ${first} cannot be read \\(.+\\); intake can start`));
  });

  test('journal repair refuses while a server runs on the directory; check may run beside it', async () => {
    const server = await startServer();
    try {
      const repair = runCli('journal', ['repair'], server.dataDir);
      assert.equal(repair.status, 2, repair.stderr);
      assert.match(repair.stderr, /is in use by another intake process on this machine \(one process per data directory\): stop it first/);
      assert.equal(runCli('journal', ['check'], server.dataDir).status, 0);
    } finally {
      await server.stop();
    }
    assert.equal(runCli('journal', ['repair'], server.dataDir).status, 0, 'once it stopped');
  });
});

describe('metrics', () => {
  for (const threads of ['1', '2']) {
    test(`a flood of GET /metrics shares scrapes: 5,000 on 500 connections hold a write well under a second, not seconds; HTTP_THREADS=${threads}`, async () => {
      // /metrics needs no key. Each scrape used to serialise every metric (with edge threads: ask
      // each edge for its share, then sum), one after another: on this machine the write below
      // waited 3.8 s (HTTP_THREADS=1) and 6.3 s (=2), the scrapes 7 s and 14 s. Now the scrapes
      // read in one turn share one serialisation: 0.6 s and 0.8 s.
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      const agent = new http.Agent({ keepAlive: true, maxSockets: 500 });
      try {
        const scrape = () =>
          new Promise<number>((resolve, reject) => {
            http.get({ host: '127.0.0.1', port: server.port, path: '/metrics', agent }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            }).on('error', reject);
          });
        const startedAt = performance.now();
        const scrapes = Promise.all(Array.from({ length: 5_000 }, scrape));
        await new Promise((resolve) => setTimeout(resolve, 200));
        const sentAt = performance.now();
        const write = await server.post('/product', { id: 'during-scrapes', name: 'x' });
        const writeMs = performance.now() - sentAt;
        const statuses = await scrapes;
        const floodMs = performance.now() - startedAt;
        assert.equal(write.status, 200, write.text);
        assert.ok(statuses.every((s) => s === 200), 'every scrape answered 200');
        // (6 s: 4 s was seen in a loaded suite run; before the shared scrapes it took 7 to 14 s.)
        assert.ok(floodMs < 6_000, `5,000 scrapes took ${Math.round(floodMs)} ms`);
        assert.ok(writeMs < 2_000, `the write waited ${Math.round(writeMs)} ms`);
        const text = (await server.request('/metrics', undefined, { key: null })).text;
        assert.match(text, /intake_requests_total\{route="product_upsert",status="200"\} 1\b/, 'a scrape after the write sees it');
      } finally {
        agent.destroy();
        await server.stop();
      }
    });

    test(`intake_requests_total counts the read-only endpoints, and 404s and 405s as route "unmatched" (only writes counted before); HTTP_THREADS=${threads}`, async () => {
      const server = await startServer({ env: { HTTP_THREADS: threads } });
      try {
        for (const path of ['/healthz', '/healthz', '/readyz', '/openapi.json', '/no-such-path', '/cluster']) await server.request(path, undefined, { key: null });
        assert.equal((await server.request('/healthz', undefined, { key: null, method: 'POST' })).status, 405);
        await server.request('/metrics', undefined, { key: null });
        const text = (await server.request('/metrics', undefined, { key: null })).text;
        const count = (route: string, status: number) => Number(new RegExp(`^intake_requests_total\\{route="${route}",status="${status}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
        assert.equal(count('healthz', 200), 2, text);
        assert.equal(count('readyz', 200), 1);
        assert.equal(count('openapi', 200), 1);
        assert.equal(count('cluster', 404), 1, 'not in cluster mode');
        assert.equal(count('unmatched', 404), 1);
        assert.equal(count('unmatched', 405), 1);
        assert.equal(count('metrics', 200), 1, 'the scrape before this one');
      } finally {
        await server.stop();
      }
    });
  }

  test('two scrapes within the event-loop sample period: the second repeats the delay figures, not min 9.2e9 s, max 0, mean NaN', async () => {
    // prom-client resets its histogram at each scrape, and samples every 100 ms here: a second
    // scraper (an HA pair of Prometheus servers) found it empty (found by a review).
    const server = await startServer();
    try {
      await new Promise((resolve) => setTimeout(resolve, 400));
      const figures = async () => {
        const text = (await server.request('/metrics', undefined, { key: null })).text;
        const value = (name: string) => Number(/^(\S+) (\S+)$/m.exec(text.split('\n').find((line) => line.startsWith(`nodejs_eventloop_lag_${name}_seconds `)) ?? '')?.[2]);
        return { min: value('min'), max: value('max'), mean: value('mean'), p99: value('p99') };
      };
      const first = await figures();
      const second = await figures();
      for (const [scrape, f] of [['first', first], ['second', second]] as const) {
        assert.ok(Number.isFinite(f.mean) && f.mean > 0 && f.mean < 5, `${scrape} scrape: mean ${f.mean}`);
        assert.ok(f.min > 0 && f.min <= f.max && f.max < 5, `${scrape} scrape: min ${f.min}, max ${f.max}`);
      }
    } finally {
      await server.stop();
    }
  });
});
