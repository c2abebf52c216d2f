// intake/client (src/client) against the real server over HTTP, through a proxy that misbehaves
// on purpose (test/helpers/fault-proxy.ts). Imported through the package name, as a consumer
// does: package.json's `exports` must resolve `intake/client` to the compiled build.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ClientClosedError,
  createClient,
  describeError,
  IntakeRequestError,
  IntakeUnavailableError,
  IntakeValidationError,
  QueueFullError,
  type ClientOptions,
  type IntakeClient,
} from 'intake/client';
import { startFaultProxy, type Action, type FaultProxy } from './helpers/fault-proxy.ts';
import { exportLines, KEY_A, LAUNCH_INFO, startServer, T0, type TestServer } from './helpers/server.ts';

const servers: TestServer[] = [];
const proxies: FaultProxy[] = [];
after(async () => {
  for (const proxy of proxies) await proxy.close();
  for (const server of servers) await server.kill();
});

async function start(env: Record<string, string> = {}): Promise<TestServer> {
  const server = await startServer({ env });
  servers.push(server);
  return server;
}

async function proxyTo(server: TestServer, plan?: (n: number) => Action): Promise<FaultProxy> {
  const proxy = await startFaultProxy(server.url, plan ? (request) => plan(request.n) : undefined);
  proxies.push(proxy);
  return proxy;
}

/** Fast retries, so that the tests take seconds. */
const FAST: Partial<ClientOptions> = { flushIntervalMs: 10, retryBaseDelayMs: 5, retryMaxDelayMs: 50, retryAfterMaxMs: 100, retryDeadlineMs: 20_000 };

function client(url: string, options: Partial<ClientOptions> = {}): IntakeClient {
  return createClient({ url, serviceKey: KEY_A, ...FAST, ...options });
}

/** A write's outcome, caught at once (a rejection awaited later would count as unhandled meanwhile). */
function outcome<T>(promise: Promise<T>): Promise<{ value: T } | { error: unknown }> {
  return promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
}

function rejection(result: { value: unknown } | { error: unknown }): unknown {
  assert.ok('error' in result, `expected a rejection, got ${JSON.stringify(result)}`);
  return result.error;
}

const count = <T>(items: readonly T[], key: (item: T) => string): Map<string, number> => {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
};

describe('intake/client', () => {
  let server: TestServer;
  before(async () => {
    server = await start();
  });

  test('`intake/client` resolves through package.json exports to the compiled build', () => {
    assert.ok(import.meta.resolve('intake/client').endsWith('/dist/src/client/index.js'), import.meta.resolve('intake/client'));
  });

  test('through a proxy that drops connections (before and after the server applied the batch) and answers 503 + Retry-After, every write lands exactly once', async () => {
    // Request n: 1 pass, 2 drop after the server answered (applied, answer lost), 3 503 with
    // Retry-After, 4 drop before anything reaches the server; then again.
    const proxy = await proxyTo(server, (n) =>
      (
        [
          { kind: 'pass' },
          { kind: 'drop-after' },
          { kind: 'status', status: 503, headers: { 'retry-after': '1' } },
          { kind: 'drop-before' },
        ] as const
      )[(n - 1) % 4]!,
    );
    const c = client(proxy.url, { maxBatchItems: 25 });
    const { did } = await c.appLaunch({ timestamp: T0, info: LAUNCH_INFO as never });
    const writes: Array<Promise<unknown>> = [];
    for (let i = 0; i < 200; i++) writes.push(c.trackEvent({ did, name: `flaky-${i}`, timestamp: T0 + i }));
    for (let i = 0; i < 60; i++) writes.push(c.upsertProduct({ id: `flaky-p${i}`, name: `product ${i}`, price: i }));
    const results = await Promise.all(writes);
    assert.ok(results.every((r) => (r as { success: boolean }).success === true));
    await c.close();

    const kinds = proxy.seen.map((r) => r.action);
    assert.ok(kinds.filter((k) => k === 'drop-after').length >= 3, `answers were lost after the server applied them: ${kinds.join(',')}`);
    assert.ok(kinds.includes('status') && kinds.includes('drop-before'));
    assert.ok(proxy.seen.every((r) => r.path === '/batch'), 'every write went through POST /batch');

    const events = exportLines(server.dataDir, 'events', '--workspace', 'ws-a');
    const tracked = count(events.filter((e) => e.kind === 'event' && String(e.data.name).startsWith('flaky-')), (e) => e.data.name);
    assert.equal(tracked.size, 200);
    assert.ok([...tracked.values()].every((n) => n === 1), 'no track event journaled twice');
    const upserts = count(events.filter((e) => e.kind === 'product_upsert' && String(e.data.id).startsWith('flaky-')), (e) => e.data.id);
    assert.equal(upserts.size, 60);
    assert.ok([...upserts.values()].every((n) => n === 1), 'no product upsert journaled twice');
    assert.equal(events.filter((e) => e.kind === 'app_launch' && e.did === did).length, 1, 'the launch whose answer was lost made one device');
    assert.ok(proxy.seen.filter((r) => r.action === 'drop-after').every((r) => r.upstreamStatus === 200), 'the server applied the batches whose answers were lost');
  });

  test('close() sends what is queued, waits for it, and refuses writes after', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 60_000, maxBatchItems: 1000 });
    const writes = Array.from({ length: 10 }, (_, i) => c.upsertProduct({ id: `close-${i}`, name: 'n' }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(proxy.seen.length, 0, 'nothing sent before close(): the batch is not full and the interval is long');
    await c.close();
    assert.equal(proxy.seen.length, 1, 'close() sent one batch');
    for (const w of writes) assert.deepEqual(await w, { success: true });
    const ids = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').map((p) => p.id);
    for (let i = 0; i < 10; i++) assert.ok(ids.includes(`close-${i}`));
    await assert.rejects(c.upsertProduct({ id: 'late', name: 'n' }), ClientClosedError);
  });

  test('an id with an unpaired surrogate names the same product in a path as in a body (U+FFFD), and never throws', async () => {
    const c = client(server.url);
    assert.deepEqual(await c.upsertProduct({ id: 'lone-\ud800', name: 'n' }), { success: true });
    // Before, encodeURIComponent threw a URIError out of the method itself.
    const deleted = c.deleteProduct('lone-\ud800');
    assert.ok(deleted instanceof Promise);
    assert.deepEqual(await deleted, { success: true });
    await c.close();
    const ids = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').map((p) => p.id);
    assert.ok(!ids.includes('lone-\ufffd'), 'the product the body made is the one the path deleted');
  });

  test('flush() sends a partial batch at once; the interval sends one on its own', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 60_000 });
    const first = c.upsertProduct({ id: 'flush-1', name: 'n' });
    await c.flush();
    assert.deepEqual(await first, { success: true });
    const timed = client(proxy.url, { flushIntervalMs: 50 });
    const started = Date.now();
    assert.deepEqual(await timed.upsertProduct({ id: 'flush-2', name: 'n' }), { success: true });
    assert.ok(Date.now() - started >= 40, 'the interval, not an immediate send');
    await Promise.all([c.close(), timed.close()]);
    assert.equal(proxy.seen.length, 2);
  });

  test('a flush() after every write: each resolves once every write before it is settled, in order, thousands waiting at once', async () => {
    const c = client(server.url, { flushIntervalMs: 60_000, maxBatchItems: 100, maxConcurrentBatches: 2 });
    const writes = 3_000;
    const settled: boolean[] = new Array<boolean>(writes).fill(false);
    const resolvedFlushes: number[] = [];
    const all: Array<Promise<unknown>> = [];
    for (let i = 0; i < writes; i++) {
      all.push(c.upsertProduct({ id: `flush-each-${i}`, name: 'n' }).then(() => (settled[i] = true)));
      all.push(
        c.flush().then(() => {
          assert.ok(settled.slice(0, i + 1).every(Boolean), `flush ${i} resolved before write ${settled.indexOf(false)} settled`);
          resolvedFlushes.push(i);
        }),
      );
    }
    await Promise.all(all);
    assert.equal(resolvedFlushes.length, writes);
    assert.deepEqual(resolvedFlushes, [...resolvedFlushes].sort((a, b) => a - b), 'flushes resolve in the order they were called');
    // The queue is reusable after the waiters are gone: a later flush still waits for its write.
    let late = false;
    const lateWrite = c.upsertProduct({ id: 'flush-each-late', name: 'n' }).then(() => (late = true));
    await c.flush();
    assert.equal(late, true);
    await lateWrite;
    await c.close();
  });

  test('a server nobody listens for: retries say why (ECONNREFUSED), and the write fails as not applied; a dropped answer stays "may have been applied"', async () => {
    // A port that was free a moment ago: every connect is refused.
    const probe = await startFaultProxy(server.url);
    const closedUrl = probe.url;
    await probe.close();
    const reasons: string[] = [];
    const refused = createClient({ url: closedUrl, serviceKey: KEY_A, ...FAST, retryDeadlineMs: 400, onRetry: (info) => reasons.push(describeError(info.error)) });
    const error = rejection(await outcome(refused.upsertProduct({ id: 'refused', name: 'n' })));
    assert.ok(error instanceof IntakeUnavailableError);
    assert.equal(error.mayHaveBeenApplied, false);
    assert.match(error.message, /ECONNREFUSED/);
    assert.match(error.message, /it was not applied: no attempt reached the server/);
    assert.ok(reasons.length > 0 && reasons.every((r) => /ECONNREFUSED/.test(r)), reasons.join('; '));
    await refused.close();

    // The server applied the batch and the answer was lost: that write may have been applied.
    const proxy = await proxyTo(server, () => ({ kind: 'drop-after' }));
    const dropped = client(proxy.url, { retryDeadlineMs: 400 });
    const lost = rejection(await outcome(dropped.upsertProduct({ id: 'dropped-answer', name: 'n' })));
    assert.ok(lost instanceof IntakeUnavailableError);
    assert.equal(lost.mayHaveBeenApplied, true);
    assert.match(lost.message, /it may or may not have been applied/);
    await dropped.close();
  });

  test('retries go on until retryDeadlineMs, whatever the backoff: a random wait past it becomes one last attempt just before it, not a give-up at once', async () => {
    // Before, a batch gave up as soon as its next random wait would end past the deadline: with
    // waits of up to 100 s, at the first failure (a walkthrough: 0.6 to 2.7 s of a 3 s deadline).
    const probe = await startFaultProxy(server.url);
    const closedUrl = probe.url;
    await probe.close();
    const attempts: number[] = [];
    const c = createClient({ url: closedUrl, serviceKey: KEY_A, flushIntervalMs: 10, retryBaseDelayMs: 100_000, retryMaxDelayMs: 100_000, retryDeadlineMs: 2_000, onRetry: (info) => attempts.push(info.attempt) });
    const started = performance.now();
    const error = rejection(await outcome(c.upsertProduct({ id: 'patient', name: 'n' })));
    const tookMs = performance.now() - started;
    assert.ok(error instanceof IntakeUnavailableError, String(error));
    assert.equal(error.mayHaveBeenApplied, false, 'refused connections: not applied');
    // At 90 to 100% of the deadline; the upper bound only catches a wait far past it.
    assert.ok(tookMs >= 1_700 && tookMs < 3_500, `gave up at the deadline, not before (${tookMs.toFixed(0)} ms)`);
    // One (two when the first random wait happened to fit): not a burst of them.
    assert.ok(attempts.length >= 1 && attempts.length <= 3, `one last attempt, not a burst of them: ${attempts.length} retries`);
    await c.close();
  });

  test('a full queue refuses new writes with QueueFullError (items and bytes); the queued ones still land', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 60_000, maxQueueItems: 5 });
    const queued = Array.from({ length: 5 }, (_, i) => c.upsertProduct({ id: `q-${i}`, name: 'n' }));
    const refused = c.upsertProduct({ id: 'q-5', name: 'n' });
    await assert.rejects(refused, (error: unknown) => {
      assert.ok(error instanceof QueueFullError);
      assert.equal(error.code, 'INTAKE_QUEUE_FULL');
      assert.match(error.message, /queue is full \(maxQueueItems = 5\)/);
      return true;
    });
    assert.equal(c.stats().heldItems, 5);
    await c.close();
    await Promise.all(queued);
    assert.equal(c.stats().heldItems, 0);

    const bytes = client(proxy.url, { flushIntervalMs: 60_000, maxQueueBytes: 2_000 });
    const big = { name: 'n', description: 'd'.repeat(700) };
    const ok = [bytes.upsertProduct({ id: 'qb-0', ...big }), bytes.upsertProduct({ id: 'qb-1', ...big })];
    await assert.rejects(bytes.upsertProduct({ id: 'qb-2', ...big }), /maxQueueBytes = 2000/);
    await bytes.close();
    await Promise.all(ok);
    // Settled writes free their room: the same client takes new writes (a new client here, as this one is closed).
    const again = client(proxy.url, { maxQueueItems: 1 });
    await again.upsertProduct({ id: 'q-again-1', name: 'n' });
    await again.upsertProduct({ id: 'q-again-2', name: 'n' });
    await again.close();
  });

  test('a 422 rejects that write with the validation details; the others in its batch resolve', async () => {
    const c = client(server.url, { flushIntervalMs: 60_000 });
    const good = c.upsertProduct({ id: 'v-good', name: 'n' });
    const bad = outcome(c.upsertProduct({ id: 'v-bad', name: 'n', status: 'sold' as never }));
    const missing = outcome(c.addProductsToCollection('no-such-collection', ['v-good']));
    await c.flush();
    assert.deepEqual(await good, { success: true });
    assert.ok(((error: unknown) => {
      assert.ok(error instanceof IntakeValidationError);
      assert.equal(error.status, 422);
      assert.equal(error.write?.path, '/product');
      assert.deepEqual(error.details.map((d) => [d.type, d.path]), [['any.allowOnly', ['status']]]);
      assert.deepEqual(error.details[0]!.context.valids, ['inStock', 'outOfStock']);
      return true;
    })(rejection(await bad)));
    const notFound = rejection(await missing);
    assert.ok(notFound instanceof IntakeValidationError && notFound.details[0]!.type === 'collection.notFound');
    await c.close();
  });

  test('a batch over the server\'s body limit (413) is halved until it fits; one write alone over it goes to its own endpoint (a mapping may be bigger than a batch); over that one too, it rejects with 413', async () => {
    const small = await start({ BATCH_BODY_LIMIT_BYTES: '16384', BODY_LIMIT_BYTES: '32768' });
    const proxy = await proxyTo(small);
    const c = client(proxy.url, { flushIntervalMs: 60_000, maxBatchItems: 1000, gzipThresholdBytes: Infinity });
    const description = 'x'.repeat(900);
    const writes = Array.from({ length: 64 }, (_, i) => c.upsertProduct({ id: `big-${i}`, name: 'n', description }));
    const tooBig = c.upsertProduct({ id: 'too-big', name: 'n', description: 'y'.repeat(2000), vendor: 'v'.repeat(1000), image: 'i'.repeat(1000), url: 'u'.repeat(1000) });
    // 2,000 product ids (the 64 above, repeated: the server drops repeats): about 18 KB, over
    // the batch limit even alone, under the mapping endpoint's 16 MiB.
    const collection = c.upsertCollection({ id: 'wide', name: 'Wide' });
    const mapping = c.addProductsToCollection('wide', Array.from({ length: 2000 }, (_, i) => `big-${i % 64}`));
    const huge = client(proxy.url, { flushIntervalMs: 60_000 });
    // About 56 KB: over the batch limit, and over its own endpoint's BODY_LIMIT_BYTES too.
    const alone = outcome(huge.trackEvent({ did: 'd', name: 'e', timestamp: T0, info: Array.from({ length: 256 }, (_, i) => ({ name: `a${i}`.padEnd(100, 'z'), value: 'v'.repeat(100), type: 'string' as const })) }));
    await Promise.all([c.close(), huge.close()]);
    for (const w of writes) assert.deepEqual(await w, { success: true });
    assert.deepEqual(await tooBig, { success: true }, 'fits once split small enough');
    assert.deepEqual(await collection, { success: true });
    assert.deepEqual(await mapping, { success: true }, 'the mapping went alone to its endpoint');
    const refused = rejection(await alone);
    assert.ok(refused instanceof IntakeRequestError && refused.status === 413, String(refused));
    const seen = proxy.seen.map((r) => `${r.path} ${r.upstreamStatus}`);
    assert.ok(seen.filter((x) => x === '/batch 413').length >= 3, `split after 413s: ${seen.join(',')}`);
    assert.ok(seen.includes('/collection/wide/products/add 200'), `the mapping alone: ${seen.join(',')}`);
    assert.ok(seen.includes('/msv_cevt 413'), `the track event alone: ${seen.join(',')}`);
    const upserts = exportLines(small.dataDir, 'events', '--kind', 'product_upsert');
    assert.equal(upserts.length, 65, 'every write once, none twice');
    assert.equal(exportLines(small.dataDir, 'events', '--kind', 'collection_products_add').length, 1, 'the mapping once');
  });

  test('a batch far over the server\'s body limit, cut off with EPIPE before its 413 is read, is halved as after a 413, not sent again unchanged', async () => {
    // The server reads and throws away up to its limit again, then answers 413 and closes: a
    // 4 MB body against a 16 KiB limit meets a closed socket while it is being sent (EPIPE in
    // 3 of 3 probes), and the old client retried it unchanged until its deadline.
    const small = await start({ BATCH_BODY_LIMIT_BYTES: '16384' });
    const retries: string[] = [];
    const c = client(small.url, {
      flushIntervalMs: 60_000,
      maxBatchItems: 1000,
      maxBatchBytes: 8_000_000,
      gzipThresholdBytes: Infinity,
      onRetry: (info) => retries.push(`${info.items} items: ${info.status ?? String((info.error as { cause?: { code?: unknown } })?.cause?.code ?? info.error)}`),
    });
    const description = 'x'.repeat(2000);
    const writes = Array.from({ length: 1000 }, (_, i) => outcome(c.upsertProduct({ id: `cut-${i}`, name: 'n'.repeat(2000), description })));
    await c.close();
    for (const w of writes) assert.deepEqual(await w, { value: { success: true } });
    assert.deepEqual(retries.filter((r) => r.includes('EPIPE')), [], `no batch was sent again unchanged after EPIPE: ${retries.join('; ')}`);
    assert.equal(exportLines(small.dataDir, 'events', '--kind', 'product_upsert').length, 1000, 'every write once');
  });

  test('a batch of more items than the key\'s rate-limit burst is cut to the burst (429); one over BATCH_MAX_ITEMS is halved (422): every write lands once', async () => {
    // Such a batch can never pass as it is: retried unchanged until the deadline, every write failed.
    const limited = await start({ RATE_LIMIT_PER_SECOND: '1000', RATE_LIMIT_BURST: '30' });
    const capped = await start({ BATCH_MAX_ITEMS: '16' });
    for (const [target, expected] of [
      [limited, 429],
      [capped, 422],
    ] as const) {
      const proxy = await proxyTo(target);
      const c = client(proxy.url, { flushIntervalMs: 60_000, maxBatchItems: 100, retryDeadlineMs: 10_000 });
      const writes = Array.from({ length: 100 }, (_, i) => c.upsertProduct({ id: `cut-${i}`, name: 'n' }));
      await c.close();
      for (const w of writes) assert.deepEqual(await w, { success: true });
      const statuses = proxy.seen.map((r) => r.upstreamStatus);
      assert.equal(statuses[0], expected, `the first batch got ${expected}: ${statuses.join(',')}`);
      assert.equal(exportLines(target.dataDir, 'events', '--kind', 'product_upsert').length, 100, 'every write once, none twice');
    }
  });

  test('groups cut to a slow key\'s burst each get the deadline from the last write settled (the server works through them), and an onRetry that throws stops no retry', async () => {
    // 10 writes every 2 s: 30 take about 4 s, past a 2.5 s deadline counted once for the batch.
    const slow = await start({ RATE_LIMIT_PER_SECOND: '5', RATE_LIMIT_BURST: '10' });
    let retriesSeen = 0;
    const c = client(slow.url, {
      flushIntervalMs: 60_000,
      maxBatchItems: 100,
      retryDeadlineMs: 2_500,
      retryAfterMaxMs: 2_000,
      onRetry: () => {
        retriesSeen++;
        throw new Error('the logger failed');
      },
    });
    const startedAt = performance.now();
    const writes = Array.from({ length: 30 }, (_, i) => outcome(c.upsertProduct({ id: `slow-${i}`, name: 'n' })));
    await c.close();
    const failed = (await Promise.all(writes)).filter((w) => 'error' in w);
    assert.deepEqual(failed, [], 'every write landed');
    assert.ok(performance.now() - startedAt > 2_500, 'past the deadline counted from the batch alone');
    assert.ok(retriesSeen > 0, 'onRetry was called (and threw)');
    assert.equal(exportLines(slow.dataDir, 'events', '--kind', 'product_upsert').length, 30, 'every write once');
  });

  test('a url fetch cannot send to, or a key that is no header value, throws at createClient (not retried as a network error for the whole deadline)', () => {
    for (const url of ['http://127.0.0.1:99999', 'http://user:secret@127.0.0.1:8080', 'ftp://127.0.0.1', 'not a url', 'http://']) {
      assert.throws(() => createClient({ url, serviceKey: KEY_A }), TypeError, url);
    }
    for (const serviceKey of ['key\nwith-newline', ' leading-space', 'trailing-space ']) {
      assert.throws(() => createClient({ url: 'http://127.0.0.1:8080', serviceKey }), TypeError, JSON.stringify(serviceKey));
    }
    assert.doesNotThrow(() => createClient({ url: 'http://127.0.0.1:8080/', serviceKey: KEY_A }).close());
    // Longer than Node's longest timer: setTimeout would fire after 1 ms, again and again.
    for (const name of ['flushIntervalMs', 'requestTimeoutMs', 'retryMaxDelayMs', 'retryAfterMaxMs'] as const) {
      assert.throws(() => createClient({ url: 'http://127.0.0.1:8080', serviceKey: KEY_A, [name]: 2 ** 31 }), /at most 2147483647/, name);
    }
    assert.doesNotThrow(() => createClient({ url: 'http://127.0.0.1:8080', serviceKey: KEY_A, flushIntervalMs: 2 ** 31 - 1 }).close());
  });

  test('a body JSON cannot carry (a BigInt) rejects the write\'s promise; it does not throw', async () => {
    const c = client(server.url);
    const write = c.upsertProduct({ id: 'bigint', name: 'n', price: 1n as unknown as number });
    await assert.rejects(write, TypeError);
    await c.close();
  });

  test('an idempotencyKey the server would not take (empty: "no key" to it; a space; 256 characters) rejects the write, and nothing is sent', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url);
    for (const key of ['', 'has space', 'k'.repeat(256), 'é']) await assert.rejects(c.upsertProduct({ id: 'bad-key', name: 'n' }, { idempotencyKey: key }), TypeError, JSON.stringify(key));
    assert.deepEqual(await c.upsertProduct({ id: 'good-key', name: 'n' }, { idempotencyKey: 'k'.repeat(255) }), { success: true });
    await c.close();
    assert.equal(proxy.seen.length, 1, 'only the write with a valid key was sent');
  });

  test('Retry-After: 0 (or a date already past) does not take the backoff away: the computed wait applies, growing per attempt', async () => {
    const { retryDelayMs } = await import('../src/client/retry-policy.ts');
    const settings = { retryBaseDelayMs: 100, retryMaxDelayMs: 10_000, retryAfterMaxMs: 30_000 };
    assert.equal(retryDelayMs(1, 0, settings, () => 1), 100);
    assert.equal(retryDelayMs(4, 0, settings, () => 1), 800);
    assert.equal(retryDelayMs(4, 2_000, settings, () => 1), 2_000, 'a Retry-After above 0 wins');
    assert.equal(retryDelayMs(4, 60_000, settings, () => 1), 30_000, 'up to retryAfterMaxMs');
  });

  test('Retry-After: delta-seconds or one of the three HTTP-date forms; anything else is ignored (the backoff applies)', async () => {
    const { parseRetryAfterMs } = await import('../src/client/retry-policy.ts');
    const now = Date.parse('Sun, 06 Nov 1994 08:49:30 GMT');
    assert.equal(parseRetryAfterMs('5', now), 5000);
    assert.equal(parseRetryAfterMs('Sun, 06 Nov 1994 08:49:37 GMT', now), 7000);
    assert.equal(parseRetryAfterMs('Sunday, 06-Nov-94 08:49:37 GMT', now), 7000);
    assert.equal(parseRetryAfterMs('Sun Nov  6 08:49:37 1994', now), 7000);
    assert.equal(parseRetryAfterMs('Sun, 06 Nov 1994 08:49:00 GMT', now), 0, 'a date passed: no wait');
    // Date.parse reads these as dates in 2001: a wait of 0 ms in place of the backoff.
    for (const value of ['0.5', '1.5', '-5', '2 ', 'soon', '']) assert.equal(parseRetryAfterMs(value, now), value.trim() === '2' ? 2000 : null, JSON.stringify(value));
  });

  test('no retry on other 4xx: 401, and a proxy 409 or 400, are final after one attempt', async () => {
    const proxy = await proxyTo(server);
    const wrongKey = createClient({ url: proxy.url, serviceKey: 'not-a-key-of-this-server', ...FAST });
    await assert.rejects(wrongKey.upsertProduct({ id: 'x', name: 'n' }), (error: unknown) => error instanceof IntakeRequestError && error.status === 401 && error.type === 'AuthenticationError');
    await wrongKey.close();
    assert.equal(proxy.seen.length, 1);
    for (const status of [400, 409, 404, 501, 505]) {
      proxy.seen.length = 0;
      proxy.plan = () => ({ kind: 'status', status, body: { type: 'SomeError', message: 'no' } });
      const c = client(proxy.url);
      await assert.rejects(c.trackEvent({ did: 'd', name: 'e', timestamp: T0 }), (error: unknown) => error instanceof IntakeRequestError && error.status === status);
      await c.close();
      assert.equal(proxy.seen.length, 1, `${status}: one attempt`);
    }
  });

  test('408, 429 and 5xx are retried; Retry-After is honoured, up to retryAfterMaxMs', async () => {
    const proxy = await proxyTo(server);
    const gaps = async (first: Action, options: Partial<ClientOptions>): Promise<number> => {
      proxy.seen.length = 0;
      proxy.plan = (request) => (request.n === 1 ? first : { kind: 'pass' });
      const c = client(proxy.url, options);
      assert.deepEqual(await c.upsertProduct({ id: 'ra', name: 'n' }), { success: true });
      await c.close();
      assert.equal(proxy.seen.length, 2);
      return proxy.seen[1]!.atMs - proxy.seen[0]!.atMs;
    };
    const honoured = await gaps({ kind: 'status', status: 429, headers: { 'retry-after': '1' } }, { retryAfterMaxMs: 5_000 });
    assert.ok(honoured >= 950, `waited Retry-After: 1 s (${honoured} ms)`);
    const capped = await gaps({ kind: 'status', status: 503, headers: { 'retry-after': '30' } }, { retryAfterMaxMs: 300 });
    assert.ok(capped >= 280 && capped < 2_000, `Retry-After: 30 capped at 300 ms (${capped} ms)`);
    for (const status of [408, 500, 502, 504]) await gaps({ kind: 'status', status }, {});
  });

  test('batches past maxConcurrentBatches wait for a slot with their body made: with 1, none overtakes another, across a retry', async () => {
    // The first batch is answered 503 with Retry-After: the next ones are taken (and gzip'd)
    // meanwhile, but must leave only after it, one at a time, and apply in the order written.
    const proxy = await proxyTo(server, (n) => (n === 1 ? { kind: 'status', status: 503, headers: { 'retry-after': '1' } } : { kind: 'pass' }));
    const c = client(proxy.url, { maxBatchItems: 2, maxConcurrentBatches: 1, gzipThresholdBytes: 0, retryAfterMaxMs: 300, flushIntervalMs: 60_000 });
    const writes: Array<Promise<unknown>> = [];
    for (let i = 0; i < 4; i++) writes.push(c.upsertProduct({ id: 'slot-order', name: `v${i}` }), c.upsertProduct({ id: `slot-${i}`, name: 'n' }));
    let mostInFlight = 0;
    const poll = setInterval(() => (mostInFlight = Math.max(mostInFlight, c.stats().batchesInFlight)), 1);
    await c.close();
    clearInterval(poll);
    for (const write of writes) assert.deepEqual(await write, { success: true });
    assert.equal(mostInFlight, 1);
    const keys = proxy.seen.map((r) => r.headers['idempotency-key']);
    assert.equal(proxy.seen.length, 5, 'four batches, the first sent twice');
    assert.equal(keys[1], keys[0], 'the retry is the first batch again, before any other');
    assert.equal(new Set(keys).size, 4);
    assert.ok(proxy.seen[1]!.atMs - proxy.seen[0]!.atMs >= 280, 'nothing else left during the retry wait');
    const product = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').find((p) => p.id === 'slot-order');
    assert.equal(product?.name, 'v3', 'the last write applied last');
  });

  test('a batch taken later but made sooner (under the gzip threshold) still leaves after the one before it', async () => {
    // With one slot, the first batch (gzip'd, made on the thread pool) must leave before the
    // second, which close() takes a moment later and which needs no gzip, so is made at once.
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { maxBatchItems: 2, maxConcurrentBatches: 1, gzipThresholdBytes: 2_000, flushIntervalMs: 60_000 });
    const long = 'x'.repeat(1_500);
    const writes = [
      c.upsertProduct({ id: 'made-sooner', name: 'first', description: long }),
      c.upsertProduct({ id: 'made-sooner-2', name: 'n', description: long }),
      c.upsertProduct({ id: 'made-sooner', name: 'second' }),
    ];
    await c.close();
    for (const write of writes) assert.deepEqual(await write, { success: true });
    assert.deepEqual(
      proxy.seen.map((r) => r.headers['content-encoding'] ?? 'identity'),
      ['gzip', 'identity'],
      'the batches left in the order taken',
    );
    const product = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').find((p) => p.id === 'made-sooner');
    assert.equal(product?.name, 'second', 'the later write applied last');
  });

  test('the total deadline: a server that keeps failing, or never answers, rejects with IntakeUnavailableError in time', async () => {
    const proxy = await proxyTo(server, () => ({ kind: 'status', status: 503 }));
    const c = client(proxy.url, { retryDeadlineMs: 800, retryBaseDelayMs: 20, retryMaxDelayMs: 100 });
    let started = Date.now();
    await assert.rejects(c.upsertProduct({ id: 'dl', name: 'n' }), (error: unknown) => {
      assert.ok(error instanceof IntakeUnavailableError);
      assert.equal(error.lastStatus, 503);
      assert.ok(error.attempts > 2);
      assert.match(error.message, /may or may not have been applied/);
      // A key the client made: its random 128-bit prefix (22 base64url characters) and a counter.
      assert.match(error.write?.idempotencyKey ?? '', /^[A-Za-z0-9_-]{22}\.[0-9a-z]+$/);
      return true;
    });
    let took = Date.now() - started;
    assert.ok(took >= 600 && took < 1_500, `gave up at the deadline (${took} ms)`);
    await c.close();

    proxy.plan = () => ({ kind: 'hang' });
    const hung = client(proxy.url, { retryDeadlineMs: 500, requestTimeoutMs: 60_000 });
    started = Date.now();
    await assert.rejects(hung.upsertProduct({ id: 'dl2', name: 'n' }), (error: unknown) => error instanceof IntakeUnavailableError && error.lastStatus === null);
    took = Date.now() - started;
    assert.ok(took >= 450 && took < 1_500, `an attempt never outlives the deadline (${took} ms)`);
    await hung.close();

    // A 503, then an attempt the deadline cuts short: the error still says what the server
    // answered, and the timeout is its cause.
    let requests = 0;
    proxy.plan = () => (requests++ === 0 ? { kind: 'status', status: 503 } : { kind: 'hang' });
    const cut = client(proxy.url, { retryDeadlineMs: 500, retryBaseDelayMs: 20, retryMaxDelayMs: 50, requestTimeoutMs: 60_000 });
    await assert.rejects(cut.upsertProduct({ id: 'dl3', name: 'n' }), (error: unknown) => {
      assert.ok(error instanceof IntakeUnavailableError);
      assert.equal(error.attempts, 2);
      assert.equal(error.lastStatus, 503, 'the last status the server answered');
      assert.ok(error.cause !== null && error.cause !== undefined, 'the cut attempt is the cause');
      assert.match(error.message, /last answer 503, last error: /);
      return true;
    });
    await cut.close();
  });

  test('batches queued behind one that gives up on an unreachable server fail by their own deadline, counted from when they were queued: close() takes about retryDeadlineMs, not one deadline per batch', async () => {
    const probe = await startFaultProxy(server.url);
    const closedUrl = probe.url;
    await probe.close();
    const c = createClient({ url: closedUrl, serviceKey: KEY_A, ...FAST, maxBatchItems: 1, maxConcurrentBatches: 1, retryDeadlineMs: 600 });
    const started = Date.now();
    const results = Array.from({ length: 6 }, (_, i) => outcome(c.upsertProduct({ id: `queued-dl-${i}`, name: 'n' })));
    await c.close();
    const took = Date.now() - started;
    // One deadline per batch, one batch at a time, was 6 × 600 ms.
    assert.ok(took >= 500 && took < 1_800, `close() took ${took} ms`);
    const errors = (await Promise.all(results)).map(rejection);
    for (const error of errors) {
      assert.ok(error instanceof IntakeUnavailableError);
      assert.equal(error.mayHaveBeenApplied, false);
    }
    // Those that got their slot after the deadline were not sent at all (how many is timing:
    // the first gives up as soon as its next wait would end past the deadline, and the next
    // ones use what is left of it).
    for (const error of errors) if ((error as IntakeUnavailableError).attempts === 0) assert.match((error as Error).message, /gave up before sending it .*; it was not applied/);
  });

  test('a queue the server works through slowly is not failed for waiting: the deadline restarts with each write the server settles', async () => {
    const proxy = await proxyTo(server, () => ({ kind: 'delay', ms: 250 }));
    const c = client(proxy.url, { maxBatchItems: 1, maxConcurrentBatches: 1, retryDeadlineMs: 700 });
    const writes = Array.from({ length: 6 }, (_, i) => c.upsertProduct({ id: `slow-queue-${i}`, name: 'n' }));
    const started = Date.now();
    await Promise.all(writes);
    // The last write waited far longer than retryDeadlineMs in the queue, and still landed.
    assert.ok(Date.now() - started > 1_400, 'the queue took longer than one deadline');
    await c.close();
  });

  test('waiting for the flush interval does not use up the retry deadline: a healthy server gets the write even when flushIntervalMs is longer than retryDeadlineMs', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 600, retryDeadlineMs: 500 });
    await c.upsertProduct({ id: 'interval-over-deadline', name: 'n' });
    assert.equal(proxy.seen.length, 1);
    await c.close();
    assert.throws(() => client(proxy.url, { retryDeadlineMs: 40 }), /retryDeadlineMs must be at least 50/);
  });

  test('a step of the wall clock moves neither the flush timer nor the deadline (both count on performance.now())', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 200 });
    const realNow = Date.now;
    const started = performance.now();
    const write = c.upsertProduct({ id: 'clock-step', name: 'n' });
    // Three seconds back, right after the write was queued (an NTP step, a VM resumed).
    Date.now = () => realNow() - 3_000;
    try {
      await write;
    } finally {
      Date.now = realNow;
    }
    const tookMs = performance.now() - started;
    assert.ok(tookMs < 1_500, `the write left after ${Math.round(tookMs)} ms with a 200 ms interval`);
    await c.close();
  });

  test('a 413 answered with less than 50 ms of the deadline left: the halves are not sent, and fail as not applied', async () => {
    const small = await start({ BATCH_BODY_LIMIT_BYTES: '16384' });
    // The batch's one attempt is answered 413, the answer relayed 975 ms into its 1,000 ms
    // deadline (which starts at flush()). Before 2026-11-29 the proxy held the request 955 ms
    // and the server's time came on top: on a loaded machine the answer sometimes came after the
    // deadline (a clean .ci/run), when the case is not reached. Now only this process's timer
    // counts; a try whose answer still came too late (the writes fail with the batch's one
    // attempt) is run again, at most 3 times.
    for (let tryNo = 1; ; tryNo++) {
      let answerAtMs = 0;
      const proxy = await proxyTo(small, () => ({ kind: 'answer-at', atMs: answerAtMs }));
      const c = client(proxy.url, { flushIntervalMs: 60_000, retryDeadlineMs: 1_000 });
      const writes = [0, 1].map((i) => outcome(c.upsertProduct({ id: `late-split-${tryNo}-${i}`, name: 'n', description: 'd'.repeat(10_000) })));
      answerAtMs = performance.now() + 975;
      await c.flush();
      const errors = (await Promise.all(writes)).map(rejection);
      await c.close();
      if (tryNo < 3 && errors.some((error) => error instanceof IntakeUnavailableError && error.attempts === 1)) continue;
      for (const error of errors) {
        assert.ok(error instanceof IntakeUnavailableError, String(error));
        assert.equal(error.attempts, 0, 'this half was never sent');
        assert.equal(error.mayHaveBeenApplied, false);
        assert.match(error.message, /gave up before sending it \(less than 50 ms was left of its retryDeadlineMs\)/);
      }
      assert.equal(proxy.seen.length, 1, 'only the batch the server answered 413');
      assert.equal(proxy.seen[0]!.upstreamStatus, 413);
      return;
    }
  });

  test('a redirect after an attempt that may have reached the server (answer lost) fails as "may have been applied", naming the redirect', async () => {
    const proxy = await proxyTo(server, (n) => (n === 1 ? { kind: 'drop-after' } : { kind: 'status', status: 302, headers: { location: 'http://127.0.0.1:9/maintenance' } }));
    const c = client(proxy.url);
    const error = rejection(await outcome(c.upsertProduct({ id: 'redirect-after-drop', name: 'n' })));
    assert.ok(error instanceof IntakeUnavailableError, String(error));
    assert.equal(error.mayHaveBeenApplied, true, 'the first attempt was applied, its answer lost');
    assert.equal(error.lastStatus, 302);
    assert.ok(error.cause instanceof IntakeRequestError && error.cause.location === 'http://127.0.0.1:9/maintenance');
    assert.match(error.message, /a redirect to http:\/\/127\.0\.0\.1:9\/maintenance, not followed/);
    await c.close();
  });

  test('a 401 or a 404 of /batch after an attempt that may have reached the server fails as "may have been applied"; a 401 first is "not applied"', async () => {
    for (const status of [401, 403, 404]) {
      const proxy = await proxyTo(server, (n) => (n === 1 ? { kind: 'drop-after' } : { kind: 'status', status, body: { type: 'SomeError', message: 'no' } }));
      const c = client(proxy.url);
      const id = `refused-after-drop-${status}`;
      const error = rejection(await outcome(c.upsertProduct({ id, name: 'n' })));
      assert.ok(error instanceof IntakeUnavailableError, `${status}: ${String(error)}`);
      assert.equal(error.mayHaveBeenApplied, true, `${status}: the first attempt was applied, its answer lost`);
      assert.equal(error.lastStatus, status);
      assert.ok(error.cause instanceof IntakeRequestError && error.cause.status === status, String(error.cause));
      assert.equal(proxy.seen.length, 2);
      // It was applied: the product is there.
      const applied = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').filter((p) => p.id === id);
      assert.equal(applied.length, 1, `${status}: the dropped attempt applied the write`);
      await c.close();
    }
    const proxy = await proxyTo(server, () => ({ kind: 'status', status: 401, body: { type: 'AuthError', message: 'no' } }));
    const c = client(proxy.url);
    const error = rejection(await outcome(c.upsertProduct({ id: 'refused-first', name: 'n' })));
    assert.ok(error instanceof IntakeRequestError && error.status === 401, String(error));
    await c.close();
  });

  test('a 429 applied nothing: a 429, then a 401, fails as "not applied"', async () => {
    const proxy = await proxyTo(server, (n) => (n === 1 ? { kind: 'status', status: 429 } : { kind: 'status', status: 401, body: { type: 'AuthError', message: 'no' } }));
    const c = client(proxy.url);
    const error = rejection(await outcome(c.upsertProduct({ id: 'limited-then-refused', name: 'n' })));
    assert.ok(error instanceof IntakeRequestError && error.status === 401, String(error));
    assert.equal(proxy.seen.length, 2);
    await c.close();
  });

  test('a write sent alone (too big for a batch) whose answer was lost: a proxy\'s 415 then fails it as "may have been applied"; its own 413 or 422 would say not applied', async () => {
    const small = await start({ BATCH_BODY_LIMIT_BYTES: '4096', BODY_LIMIT_BYTES: '32768' });
    // 1: the batch, answered 413 by the server; 2: the write alone, applied, its answer lost; 3: a proxy's 415.
    const proxy = await proxyTo(small, (n) => (n === 1 ? { kind: 'pass' } : n === 2 ? { kind: 'drop-after' } : { kind: 'status', status: 415, body: { type: 'UnsupportedMediaTypeError', message: 'no' } }));
    const c = client(proxy.url);
    // About 5 KB: over the batch limit, under the product endpoint's.
    const error = rejection(await outcome(c.upsertProduct({ id: 'alone-lost', name: 'n', description: 'y'.repeat(2000), vendor: 'v'.repeat(1000), image: 'i'.repeat(1000), url: 'u'.repeat(1000) })));
    assert.ok(error instanceof IntakeUnavailableError, String(error));
    assert.equal(error.mayHaveBeenApplied, true);
    assert.ok(error.cause instanceof IntakeRequestError && error.cause.status === 415, String(error.cause));
    assert.deepEqual(proxy.seen.map((s) => s.upstreamStatus ?? null), [413, 200, null], 'the batch refused, the write alone applied, then the proxy\'s answer');
    assert.equal(exportLines(small.dataDir, 'products', '--workspace', 'ws-a').filter((p) => p.id === 'alone-lost').length, 1, 'it was applied');
    await c.close();
  });

  test('a redirect is not followed: the write fails with IntakeRequestError naming the Location, and nothing (no service key) reaches it', async () => {
    const elsewhere = await proxyTo(server);
    const proxy = await proxyTo(server, () => ({ kind: 'status', status: 302, headers: { location: `${elsewhere.url}/batch` } }));
    const c = client(proxy.url);
    for (const status of [302, 307, 308]) {
      proxy.plan = () => ({ kind: 'status', status, headers: { location: `${elsewhere.url}/batch` } });
      const error = rejection(await outcome(c.upsertProduct({ id: `redirected-${status}`, name: 'n' })));
      assert.ok(error instanceof IntakeRequestError, String(error));
      assert.equal(error.status, status);
      assert.equal(error.location, `${elsewhere.url}/batch`);
      assert.match(error.message, new RegExp(`${status}: a redirect to ${elsewhere.url}/batch, not followed`));
    }
    assert.equal(proxy.seen.length, 3, 'one attempt each: not retried');
    assert.equal(elsewhere.seen.length, 0, 'the redirect target got nothing');
    await c.close();
  });

  test('an answer longer than maxAnswerBytes (declared, or chunked without a length) is cut off unread: its writes fail as "may have been applied", not retried', async () => {
    // Not intake at the url (or a broken proxy) must not grow the client's memory without end.
    let requests = 0;
    const wordy = http.createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () => {
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        if (requests === 1) {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(32 * chunk.length) });
        } else res.writeHead(200, { 'content-type': 'application/json' });
        // Written as the client reads: it cuts the answer off after 1 MiB, and the rest meets a closed socket.
        let sent = 0;
        const more = (): void => {
          while (sent < 32) {
            sent++;
            if (!res.write(chunk)) return void res.once('drain', more);
          }
          res.end();
        };
        res.on('error', () => undefined);
        more();
      });
    });
    await new Promise<void>((resolve) => wordy.listen(0, '127.0.0.1', resolve));
    try {
      const c = client(`http://127.0.0.1:${(wordy.address() as AddressInfo).port}`, { maxAnswerBytes: 1024 * 1024 });
      for (const id of ['declared-length', 'chunked']) {
        const error = rejection(await outcome(c.upsertProduct({ id, name: 'n' })));
        assert.ok(error instanceof IntakeUnavailableError, String(error));
        assert.equal(error.mayHaveBeenApplied, true);
        assert.equal(error.lastStatus, 200);
        assert.match(error.message, /answered 200 with a body longer than maxAnswerBytes \(1048576 bytes\): not read/);
      }
      assert.equal(requests, 2, 'one attempt each: the same answer would come back');
      await c.close();
      assert.throws(() => createClient({ url: 'http://127.0.0.1:9', serviceKey: KEY_A, maxAnswerBytes: 0 }), /maxAnswerBytes must be a positive number/);
    } finally {
      wordy.closeAllConnections();
      await new Promise((resolve) => wordy.close(resolve));
    }
  });

  test('the flush interval counts from each write\'s own enqueue: a write left at the head when the bytes limit sent the older one waits its whole interval', async () => {
    const proxy = await proxyTo(server);
    const c = client(proxy.url, { flushIntervalMs: 400, maxBatchBytes: 2_000 });
    const first = c.upsertProduct({ id: 'interval-1', name: 'n', description: 'd'.repeat(400) });
    await new Promise((resolve) => setTimeout(resolve, 250));
    // Together over maxBatchBytes: the first leaves alone at once, the second is the new head,
    // younger by 250 ms.
    const secondAtMs = Date.now();
    const second = c.upsertProduct({ id: 'interval-2', name: 'n', description: 'd'.repeat(1_500) });
    await Promise.all([first, second]);
    assert.equal(proxy.seen.length, 2);
    const waitedMs = proxy.seen[1]!.atMs - secondAtMs;
    // The timer set for the first write fired 150 ms after the second was queued, and sent it then.
    assert.ok(waitedMs >= 370, `the second write left after ${waitedMs} ms, not its 400`);
    await c.close();
  });

  test('every write keeps its Idempotency-Key across retries (given or made), and bodies above gzipThresholdBytes go gzip\'d', async () => {
    const proxy = await proxyTo(server, (n) => (n <= 2 ? { kind: 'drop-after' } : { kind: 'pass' }));
    const c = client(proxy.url, { flushIntervalMs: 60_000, gzipThresholdBytes: 1_000 });
    const mine = c.upsertProduct({ id: 'key-1', name: 'n', description: 'd'.repeat(2_000) }, { idempotencyKey: 'my-own-key-1' });
    const made = c.upsertProduct({ id: 'key-2', name: 'n' });
    await c.close();
    await Promise.all([mine, made]);
    assert.equal(proxy.seen.length, 3);
    assert.ok(proxy.seen.every((r) => r.headers['content-encoding'] === 'gzip'));
    const batchKeys = new Set(proxy.seen.map((r) => r.headers['idempotency-key']));
    assert.equal(batchKeys.size, 1, 'the batch key is kept while the batch is the same');
    const records = exportLines(server.dataDir, 'events', '--kind', 'product_upsert').filter((e) => String(e.data.id).startsWith('key-'));
    assert.equal(records.length, 2, 'applied once, replayed twice');
    // The write's own key is the one the server kept: sent alone with it, it is recognised.
    const alone = await server.request('/product', { id: 'key-1', name: 'n', description: 'd'.repeat(2_000) }, { headers: { 'idempotency-key': 'my-own-key-1' } });
    assert.equal(alone.headers.get('idempotent-replayed'), 'true');
  });
});
