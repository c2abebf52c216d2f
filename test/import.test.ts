// `npm run import` (src/cli/import.ts) against the real server: a run SIGKILLed part way (right
// after the server applied a batch whose answer the import never read) and run again applies
// every line exactly once; failed lines land in <file>.failed.ndjson with their reasons and the
// exit status is 1; memberships map to the mapping endpoints.
import { execFileSync, spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { scriptCommand } from '../bench/lib/servers.ts';
import { startFaultProxy, type FaultProxy } from './helpers/fault-proxy.ts';
import { exportLines, KEY_A, ROOT, startServer, tempDataDir, type TestServer } from './helpers/server.ts';

let server: TestServer;
const proxies: FaultProxy[] = [];
before(async () => {
  server = await startServer();
});
after(async () => {
  for (const proxy of proxies) await proxy.close();
  await server.kill();
});

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

function runImport(args: string[], url: string, onStart?: (kill: (signal?: NodeJS.Signals) => void) => void, stdinFile?: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const stdin = stdinFile === undefined ? 'ignore' : openSync(stdinFile, 'r');
    const child = spawn(process.execPath, [...scriptCommand('import'), ...args, '--url', url, '--key', KEY_A], { cwd: ROOT, stdio: [stdin, 'ignore', 'pipe'] });
    if (typeof stdin === 'number') closeSync(stdin);
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stderr }));
    onStart?.((signal = 'SIGKILL') => child.kill(signal));
  });
}

function writeNdjson(name: string, lines: string[]): string {
  const file = join(tempDataDir(), name);
  writeFileSync(file, lines.map((line) => `${line}\n`).join(''));
  return file;
}

const upserts = (kind: string) => exportLines(server.dataDir, 'events', '--workspace', 'ws-a', '--kind', kind);

describe('npm run import', () => {
  const PRODUCTS = 6_000;

  test('products: SIGKILLed part way, then run again: every line applied once, failed lines in <file>.failed.ndjson, exit 1', async () => {
    const lines = Array.from({ length: PRODUCTS }, (_, i) => JSON.stringify({ id: `imp-${i}`, name: `Product ${i}`, price: i / 100, status: 'inStock' }));
    // Three bad lines (1-based line numbers 101, 2502 and 5003 once inserted).
    lines.splice(100, 0, 'this is not JSON');
    lines.splice(2501, 0, JSON.stringify({ id: 'bad-status', name: 'x', status: 'sold' }));
    lines.splice(5002, 0, JSON.stringify({ id: 'no-name-on-create' }));
    const file = writeNdjson('products.ndjson', lines);

    // Through a proxy that slows every batch down, and kills the import right after the server
    // applied the third batch, before the import reads the answer.
    let kill: () => void = () => {};
    const proxy = await startFaultProxy(server.url, (request) => (request.n === 3 ? { kind: 'drop-after', then: () => kill() } : { kind: 'delay', ms: 100 }));
    proxies.push(proxy);
    const killed = await runImport(['products', file], proxy.url, (k) => (kill = k));
    assert.equal(killed.signal, 'SIGKILL', `the first run was killed: ${killed.stderr}`);
    const applied = new Set(upserts('product_upsert').map((e) => e.data.id));
    assert.ok(applied.size >= 2_000 && applied.size < PRODUCTS, `part of the file was applied before the kill (${applied.size})`);

    const second = await runImport(['products', file], server.url);
    assert.equal(second.code, 1, second.stderr);
    assert.match(second.stderr, /6,003 of 6,003 line\(s\) done .*6,000 ok, 3 failed; failed lines and their reasons are in .*products\.ndjson\.failed\.ndjson/);
    const records = upserts('product_upsert');
    assert.equal(records.length, PRODUCTS, 'no product upsert journaled twice');
    assert.equal(new Set(records.map((e) => e.data.id)).size, PRODUCTS);
    assert.equal(exportLines(server.dataDir, 'products', '--workspace', 'ws-a').filter((p) => String(p.id).startsWith('imp-')).length, PRODUCTS);

    const failed = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').map((line) => JSON.parse(line)).sort((a, b) => a.line - b.line);
    assert.deepEqual(failed.map((f) => [f.line, f.status]), [[101, null], [2502, 422], [5003, 422]]);
    assert.match(failed[0].error, /not JSON/);
    assert.equal(failed[0].item, 'this is not JSON');
    assert.deepEqual(failed[1].details.map((d: { type: string; path: string[] }) => [d.type, d.path]), [['any.allowOnly', ['status']]]);
    assert.deepEqual(failed[2].item, { id: 'no-name-on-create' });
    assert.equal(failed[2].details[0].type, 'any.required');

    // A third run applies nothing: every line is recognised by its key.
    const third = await runImport(['products', file], server.url);
    assert.equal(third.code, 1);
    assert.equal(upserts('product_upsert').length, PRODUCTS, 'a re-run adds no record');
  });

  test('a pipe (a FIFO, /dev/stdin) is refused with status 2 and sends nothing (it was read to its end by the line count: every line lost, exit 0)', async () => {
    const fifo = join(tempDataDir(), 'lines.fifo');
    execFileSync('mkfifo', [fifo]);
    const before = upserts('product_upsert').length;
    const run = await runImport(['products', fifo], server.url);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /is not a regular file/);
    assert.equal(upserts('product_upsert').length, before, 'nothing sent');
  });

  test('a regular file given as /dev/stdin (`< file`) is imported, and its failed lines go beside the file, not into /dev', async () => {
    const file = writeNdjson('via-stdin.ndjson', [JSON.stringify({ id: 'via-stdin-1', name: 'n' }), 'not JSON']);
    const run = await runImport(['products', '/dev/stdin'], server.url, undefined, file);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /1 ok, 1 failed/);
    assert.equal(readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').length, 1, 'beside the file');
    assert.ok(!existsSync('/dev/stdin.failed.ndjson'), 'nothing written into /dev');
  });

  test('collections and memberships: lines map to POST /collection and the mapping endpoints; exit 0 when all succeed', async () => {
    const collections = writeNdjson('collections.ndjson', [JSON.stringify({ id: 'summer', name: 'Summer' }), '', JSON.stringify({ id: 'winter', name: 'Winter', url: 'https://shop/w' })]);
    const ok = await runImport(['collections', collections], server.url);
    assert.equal(ok.code, 0, ok.stderr);
    assert.ok(!existsSync(`${collections}.failed.ndjson`), 'no failed file when nothing failed');

    const memberships = writeNdjson('memberships.ndjson', [
      JSON.stringify({ collection: 'summer', products: ['imp-1', 'imp-2', 'imp-3'] }),
      JSON.stringify({ collection: 'winter', product: 'imp-4' }),
      JSON.stringify({ collection: 'summer', product: 'imp-2', action: 'remove' }),
      JSON.stringify({ collection: 'winter', products: ['imp-5', 'no-such-product'] }),
      JSON.stringify({ products: ['imp-6'] }),
    ]);
    const run = await runImport(['memberships', memberships], server.url);
    assert.equal(run.code, 1, run.stderr);
    const members = Object.fromEntries(exportLines(server.dataDir, 'collections', '--workspace', 'ws-a').map((c) => [c.id, c.products]));
    assert.deepEqual(members, { summer: ['imp-1', 'imp-3'], winter: ['imp-4'] });
    const failed = readFileSync(`${memberships}.failed.ndjson`, 'utf8').trim().split('\n').map((line) => JSON.parse(line)).sort((a, b) => a.line - b.line);
    assert.deepEqual(failed.map((f) => [f.line, f.status]), [[4, 422], [5, null]]);
    assert.equal(failed[0].details[0].type, 'product.notFound');
    assert.match(failed[1].error, /"collection" must be a non-empty string/);

    const records = () => upserts('collection_products_add').length + upserts('collection_products_remove').length;
    const before = records();
    assert.equal(before, 3);
    assert.equal((await runImport(['memberships', memberships], server.url)).code, 1);
    assert.equal(records(), before, 'a re-run adds no mapping record');
  });

  test('lines of several KB: no line refused for the client\'s queue (in flight is bounded by bytes too); exit 0', async () => {
    // 2,600 products of ~7 KB: 18 MB, more than the client's 16 MiB queue, through a proxy that
    // holds each batch 100 ms. Bounded by lines only, the import queued them faster than batches
    // were answered, and the lines past 16 MiB failed with QueueFullError.
    const long = (c: string, n: number) => c.repeat(n);
    const lines = Array.from({ length: 2_600 }, (_, i) => JSON.stringify({ id: `kb-${i}`, name: long('n', 2000), description: long('d', 2000), image: long('i', 1000), url: long('u', 1000), vendor: long('v', 1000) }));
    const file = writeNdjson('big-lines.ndjson', lines);
    const proxy = await startFaultProxy(server.url, () => ({ kind: 'delay', ms: 100 }));
    proxies.push(proxy);
    const run = await runImport(['products', file], proxy.url);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /2,600 of 2,600 line\(s\) done .*2,600 ok, 0 failed/);
    assert.equal(upserts('product_upsert').filter((e) => String(e.data.id).startsWith('kb-')).length, 2_600);
  });

  test('lines end at "\\n" only (CRLF and a lone CR inside a line are read right); a re-run that fails nothing removes the earlier failed file', async () => {
    const file = writeNdjson('cr.ndjson', []);
    // A CRLF line, a line with a lone CR between two members (JSON whitespace), and a bad line.
    writeFileSync(file, `${JSON.stringify({ id: 'cr-1', name: 'A' })}\r\n{"id":"cr-2",\r"name":"B"}\nnot JSON\n`);
    const first = await runImport(['products', file], server.url);
    assert.equal(first.code, 1, first.stderr);
    assert.match(first.stderr, /3 of 3 line\(s\) done .*2 ok, 1 failed/);
    const failed = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
    assert.deepEqual(failed.map((f) => f.line), [3], 'only the bad line failed');
    const names = Object.fromEntries(exportLines(server.dataDir, 'products', '--workspace', 'ws-a').filter((p) => String(p.id).startsWith('cr-')).map((p) => [p.id, p.name]));
    assert.deepEqual(names, { 'cr-1': 'A', 'cr-2': 'B' });

    // The bad line fixed: nothing fails, and the failed file of the run before is gone.
    writeFileSync(file, `${JSON.stringify({ id: 'cr-1', name: 'A' })}\r\n{"id":"cr-2",\r"name":"B"}\n${JSON.stringify({ id: 'cr-3', name: 'C' })}\n`);
    const second = await runImport(['products', file], server.url);
    assert.equal(second.code, 0, second.stderr);
    assert.ok(!existsSync(`${file}.failed.ndjson`), 'no stale failed file after a run that failed nothing');
  });

  test('a batch whose answer was lost and whose retry gets 401 stops the import, saying so (not "never answered")', async () => {
    const file = writeNdjson('refused.ndjson', [JSON.stringify({ id: 'refused-1', name: 'A' }), JSON.stringify({ id: 'refused-2', name: 'B' })]);
    const proxy = await startFaultProxy(server.url, (request) => (request.n === 1 ? { kind: 'drop-after' } : { kind: 'status', status: 401, body: { type: 'AuthError', message: 'key revoked' } }));
    proxies.push(proxy);
    const run = await runImport(['products', file], proxy.url);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /stopped: line 1 was answered 401 after an attempt whose answer was lost/);
    const failed = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { mayHaveBeenApplied?: boolean });
    assert.equal(failed.length, 2);
    assert.ok(failed.every((f) => f.mayHaveBeenApplied === true), 'the lost attempt applied them');
  });

  test('a wrong service key stops the import at the first 401, saying so, instead of sending the whole file', async () => {
    // Until 2026-11-29 every line was sent and written to the failed file (an operator's review).
    const lines = Array.from({ length: 6_000 }, (_, i) => JSON.stringify({ id: `wrong-key-${i}`, name: 'A' }));
    const file = writeNdjson('wrong-key.ndjson', lines);
    const run = await new Promise<Run>((resolve, reject) => {
      const child = spawn(process.execPath, [...scriptCommand('import'), 'products', file, '--url', server.url, '--key', 'not-a-key-of-this-server'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      child.on('error', reject);
      child.on('close', (code, signal) => resolve({ code, signal, stderr }));
    });
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /stopped: line \d+ was answered 401: the service key is wrong or revoked/);
    const failed = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n');
    assert.ok(failed.length < lines.length, `${failed.length} of ${lines.length} lines were sent`);
  });

  test('blank lines are skipped and counted as blank, not as ok', async () => {
    const file = writeNdjson('blank.ndjson', []);
    writeFileSync(file, `${JSON.stringify({ id: 'blank-1', name: 'A' })}\n\n   \n${JSON.stringify({ id: 'blank-2', name: 'B' })}\n`);
    const run = await runImport(['products', file], server.url);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /4 of 4 line\(s\) done .*: 2 ok, 0 failed, 2 blank \(skipped\)/);
  });

  test('a UTF-8 byte order mark at the start of the file is not part of its first line', async () => {
    // Files saved by Excel and other Windows tools start with one: the first line failed as "not JSON".
    const file = writeNdjson('bom.ndjson', []);
    writeFileSync(file, `\uFEFF${JSON.stringify({ id: 'bom-1', name: 'A' })}\n${JSON.stringify({ id: 'bom-2', name: 'B' })}\n`);
    const run = await runImport(['products', file], server.url);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /2 of 2 line\(s\) done .*2 ok, 0 failed/);
    const ids = exportLines(server.dataDir, 'products', '--workspace', 'ws-a').map((p) => String(p.id)).filter((id) => id.startsWith('bom-'));
    assert.deepEqual(ids.sort(), ['bom-1', 'bom-2']);
  });

  test('a server that cannot be reached: the import stops after the batch that gave up (--retry-seconds), instead of waiting that long for every batch', async () => {
    const lines = Array.from({ length: 6_000 }, (_, i) => JSON.stringify({ id: `down-${i}`, name: `P ${i}` }));
    const file = writeNdjson('down.ndjson', lines);
    // A port nothing listens on: every attempt is refused at once.
    const closed = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const started = performance.now();
    const run = await runImport(['products', file, '--retry-seconds', '1'], `http://127.0.0.1:${closed}`);
    const seconds = (performance.now() - started) / 1000;
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /stopped: line [\d,]+ was retried for 1 s and the server never answered it/);
    const done = Number(/([\d,]+) of 6,000 line\(s\) done/.exec(run.stderr)![1]!.replace(/,/g, ''));
    // The batch that gave up and at most the one queued behind it: not all six.
    assert.ok(done >= 1_000 && done <= 2_000, `${done} lines done (${run.stderr.slice(-400)})`);
    assert.ok(seconds < 20, `${seconds.toFixed(1)} s`);
    const failedLines = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { mayHaveBeenApplied: boolean });
    assert.equal(failedLines.length, done);
    assert.ok(failedLines.every((l) => l.mayHaveBeenApplied === false), 'no attempt reached the server');
    const bad = await runImport(['products', file, '--retry-seconds', '0'], server.url);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--retry-seconds must be/);
  });

  test('SIGTERM: the lines already sent are finished, the summary says interrupted, exit status 143 (128 + SIGTERM, as a shell reports it)', async () => {
    const file = writeNdjson('term.ndjson', Array.from({ length: 4_000 }, (_, i) => JSON.stringify({ id: `term-${i}`, name: `P ${i}` })));
    let signal: (signal?: NodeJS.Signals) => void = () => {};
    const proxy = await startFaultProxy(server.url, (request) => {
      if (request.n === 1) signal('SIGTERM');
      return { kind: 'delay', ms: 200 };
    });
    proxies.push(proxy);
    const run = await runImport(['products', file], proxy.url, (s) => (signal = s));
    assert.equal(run.code, 143, run.stderr);
    assert.match(run.stderr, /; interrupted: run the same command again to send the rest/);
  });

  test('one Ctrl-C delivered twice within milliseconds (the terminal and npm both send it): the lines already sent are finished and summed up, exit status 130', async () => {
    const file = writeNdjson('ctrl-c.ndjson', Array.from({ length: 4_000 }, (_, i) => JSON.stringify({ id: `ctrlc-${i}`, name: `P ${i}` })));
    let signal: (signal?: NodeJS.Signals) => void = () => {};
    const proxy = await startFaultProxy(server.url, (request) => {
      if (request.n === 1) {
        signal('SIGINT');
        setTimeout(() => signal('SIGINT'), 5);
      }
      return { kind: 'delay', ms: 200 };
    });
    proxies.push(proxy);
    const run = await runImport(['products', file], proxy.url, (s) => (signal = s));
    assert.equal(run.code, 130, run.stderr);
    assert.match(run.stderr, /interrupted: finishing the/);
    assert.match(run.stderr, /2,000 of 4,000 line\(s\) done .*: 2,000 ok, 0 failed; interrupted: run the same command again to send the rest/);
  });

  test('a second Ctrl-C, later, quits at once: the failed lines so far and every line still unanswered ("may or may not have been applied") are in <file>.failed.ndjson', async () => {
    const lines = Array.from({ length: 4_000 }, (_, i) => JSON.stringify({ id: `quit-${i}`, name: `P ${i}` }));
    lines[0] = 'this is not JSON';
    const file = writeNdjson('quit.ndjson', lines);
    let signal: (signal?: NodeJS.Signals) => void = () => {};
    const proxy = await startFaultProxy(server.url, (request) => {
      if (request.n === 1) {
        signal('SIGINT');
        setTimeout(() => signal('SIGINT'), 800);
      }
      // Never answered: the lines sent stay unanswered until the second Ctrl-C.
      return { kind: 'hang' };
    });
    proxies.push(proxy);
    const run = await runImport(['products', file], proxy.url, (s) => (signal = s));
    assert.equal(run.code, 130, run.stderr);
    const quit = /quit with ([\d,]+) line\(s\) unanswered \(may or may not have been applied\)/.exec(run.stderr);
    assert.ok(quit, run.stderr);
    const unanswered = Number(quit[1]!.replaceAll(',', ''));
    assert.ok(unanswered >= 1_000, run.stderr);
    // "done" is ok + failed + blank, the unanswered lines (now in the failed file) included.
    const counts = /([\d,]+) of [\d,]+ line\(s\) done .*: ([\d,]+) ok, ([\d,]+) failed/.exec(run.stderr);
    assert.ok(counts, run.stderr);
    const [done, ok, failedCount] = counts.slice(1, 4).map((x) => Number(x!.replaceAll(',', '')));
    assert.equal(done, ok! + failedCount!, `the summary adds up: ${counts[0]}`);
    assert.equal(failedCount, 1 + unanswered);
    const entries = readFileSync(`${file}.failed.ndjson`, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { line: number; error: string; mayHaveBeenApplied?: boolean; item: unknown });
    assert.equal(entries.length, 1 + unanswered);
    assert.equal(entries[0]!.line, 1, 'the line that failed before the quit');
    const quitEntries = entries.slice(1);
    assert.ok(quitEntries.every((e) => e.mayHaveBeenApplied === true && /quit \(Ctrl-C twice\) before its answer/.test(e.error)));
    assert.deepEqual(quitEntries.map((e) => e.line), Array.from({ length: unanswered }, (_, i) => i + 2), 'the lines sent, in order');
    assert.deepEqual(quitEntries[0]!.item, { id: 'quit-1', name: 'P 1' });
  });

  test('usage errors exit 2 and say why', async () => {
    const run = await runImport(['things', 'x.ndjson'], server.url);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /unknown kind things/);
  });
});
