// npm run import -- products|collections|memberships <file.ndjson> [--url <url>] [--key <key>] [--idempotency-salt <text>] [--retry-seconds <n>]
// Syncs a catalog from NDJSON (one write per line) through intake/client, i.e. POST /batch.
// Progress on stderr; a summary at the end; exit 1 if any line failed, with the failed lines in
// <file>.failed.ndjson and why. Every line's Idempotency-Key is derived from the file and the
// line (import-lines.ts), so running it again after a crash or Ctrl-C applies nothing twice.
import { closeSync, createReadStream, openSync, realpathSync, rmSync, statSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { createClient, describeError, IntakeError, IntakeRequestError, IntakeUnavailableError, IntakeValidationError, type IntakeClient } from '../client/index.ts';
import { IMPORT_KINDS, LineError, lineKey, sendLine, type ImportKind } from './import-lines.ts';
import { Progress } from './import-progress.ts';
import { StopSignals } from './stop-signals.ts';

const USAGE = `usage: npm run import -- <${IMPORT_KINDS.join('|')}> <file.ndjson> [--url <url>] [--key <key>] [--idempotency-salt <text>] [--retry-seconds <n>]
  products      each line a product as POST /product takes it: {"id":"p1","name":"Shirt","price":20}
  collections   each line a collection as POST /collection takes it: {"id":"c1","name":"Summer"}
  memberships   each line {"collection":"c1","products":["p1","p2"]} (or "product":"p1"),
                optionally "action":"remove" (default "add")
  --url <url>   the server (default INTAKE_URL, else http://127.0.0.1:8080)
  --key <key>   the workspace's service key (default INTAKE_SERVICE_KEY)
  --idempotency-salt <text>  send every line as a new write (default: a line imported before
                within the server's IDEMPOTENCY_WINDOW_SECONDS is recognised, not applied again)
  --retry-seconds <n>  how long (0.05 or more) a batch is retried while the server cannot be reached or
                answers 503 (default 120); then the import stops (run it again to go on)
  Failed lines go to <file>.failed.ndjson with the reason; exit status 1 if any line failed.
`;

class UsageError extends Error {}

const BATCH_ITEMS = 1_000;
/** Lines sent and not yet answered, at most, and their bytes: bound memory, and stay under the
 * client's queue limits (a line over MAX_BYTES_IN_FLIGHT goes alone). Counting lines only, lines of
 * ~3.4 KB or more filled the client's 16 MiB before 5,000 were in flight, and the next lines were
 * refused (QueueFullError) and reported as failed. Two batches: one in flight and the next one
 * ready. More only waits, and holds memory (and, on a second Ctrl-C, more lines to report as
 * unanswered). */
const MAX_LINES_IN_FLIGHT = 2 * BATCH_ITEMS;
const MAX_BYTES_IN_FLIGHT = 8 * 1024 * 1024;
const DEFAULT_RETRY_SECONDS = 120;
/** The client's own bound on a deadline is far above any sensible wait: a day. */
const MAX_RETRY_SECONDS = 86_400;

interface Args {
  kind: ImportKind;
  file: string;
  url: string;
  key: string;
  salt: string;
  retrySeconds: number;
}

function parseArgs(argv: readonly string[]): Args {
  const positional: string[] = [];
  let url = process.env.INTAKE_URL || 'http://127.0.0.1:8080';
  let key = process.env.INTAKE_SERVICE_KEY ?? '';
  let salt = '';
  let retrySeconds = DEFAULT_RETRY_SECONDS;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value`);
      return v;
    };
    if (flag === '--url') url = value();
    else if (flag === '--key') key = value();
    else if (flag === '--idempotency-salt') salt = value();
    else if (flag === '--retry-seconds') {
      const text = value();
      retrySeconds = Number(text);
      // At least the client's shortest attempt (MIN_ATTEMPT_MS, 50 ms): below it nothing would be sent.
      if (text.trim() === '' || !Number.isFinite(retrySeconds) || retrySeconds < 0.05 || retrySeconds > MAX_RETRY_SECONDS) throw new UsageError(`--retry-seconds must be a number of seconds from 0.05 to ${MAX_RETRY_SECONDS}, not ${text}`);
    }
    else if (flag === '--help' || flag === '-h') throw new UsageError('');
    else if (flag.startsWith('--')) throw new UsageError(`unknown option ${flag}`);
    else positional.push(arg);
  }
  const [kind, file, ...extra] = positional;
  if (kind === undefined || file === undefined) throw new UsageError('give a kind and a file');
  if (!(IMPORT_KINDS as readonly string[]).includes(kind)) throw new UsageError(`unknown kind ${kind}`);
  if (extra.length > 0) throw new UsageError(`unexpected argument ${extra[0]}`);
  if (key === '') throw new UsageError('no service key: give --key or set INTAKE_SERVICE_KEY');
  return { kind: kind as ImportKind, file, url, key, salt, retrySeconds };
}

/** Lines in the file (for the ETA), counted without holding it in memory. */
async function countLines(file: string): Promise<number> {
  let lines = 0;
  let last = 10;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    if (chunk.length > 0) last = chunk[chunk.length - 1]!;
  }
  return last === 10 ? lines : lines + 1;
}

/**
 * The lines of `file`, split at "\n" only (one "\r" before it is dropped: CRLF files). Not
 * readline: it also ends a line at a lone "\r", which is JSON whitespace inside a line, and then
 * the line numbers (and so the lines' Idempotency-Keys) would not be those countLines counts.
 */
async function* linesOf(file: string): AsyncGenerator<string> {
  const withoutCr = (line: string) => (line.endsWith('\r') ? line.slice(0, -1) : line);
  // The current line's pieces: only each new chunk is searched, so a line of many MB costs no more.
  const pieces: string[] = [];
  let first = true;
  for await (const chunk of createReadStream(file, 'utf8') as AsyncIterable<string>) {
    // A UTF-8 byte order mark (files saved by Excel and other Windows tools) is not part of the
    // first line: JSON.parse refused it, and that line failed (found by a review).
    let start = first && chunk.startsWith('\uFEFF') ? 1 : 0;
    first = false;
    for (let end = chunk.indexOf('\n'); end !== -1; end = chunk.indexOf('\n', start)) {
      pieces.push(chunk.slice(start, end));
      yield withoutCr(pieces.join(''));
      pieces.length = 0;
      start = end + 1;
    }
    if (start < chunk.length) pieces.push(chunk.slice(start));
  }
  // A last line without "\n" (countLines counts it too).
  if (pieces.length > 0) yield withoutCr(pieces.join(''));
}

/** A line sent and not yet answered when a second Ctrl-C quit the import. */
class QuitBeforeAnswer extends Error {
  constructor() {
    super('the import was quit (Ctrl-C twice) before its answer: it may or may not have been applied; run the import again (the line keeps its Idempotency-Key, and is not applied twice)');
  }
}

/**
 * The failed-lines file, opened (and truncated) at the first failure of this run. Written with
 * synchronous writes: a second Ctrl-C exits at once, and what a write stream still held was lost
 * (a review).
 */
class FailedLines {
  private fd: number | null = null;
  count = 0;
  constructor(readonly path: string) {}

  write(lineNumber: number, line: string, error: unknown): void {
    this.fd ??= openSync(this.path, 'w');
    this.count++;
    let item: unknown = line;
    try {
      item = JSON.parse(line);
    } catch {
      // kept as the raw text
    }
    const entry: Record<string, unknown> = { line: lineNumber, status: null, error: error instanceof Error ? error.message : String(error) };
    if (error instanceof IntakeError && 'status' in error) entry.status = (error as { status: number }).status;
    if (error instanceof IntakeValidationError) entry.details = error.details;
    if (error instanceof IntakeUnavailableError) {
      entry.status = error.lastStatus;
      entry.mayHaveBeenApplied = error.mayHaveBeenApplied;
    }
    if (error instanceof QuitBeforeAnswer) entry.mayHaveBeenApplied = true;
    entry.item = item;
    writeSync(this.fd, `${JSON.stringify(entry)}\n`);
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }
}

const fmt = (x: number): string => x.toLocaleString('en-US');

async function run(args: Args): Promise<number> {
  // A pipe (`/dev/stdin`, `<(...)`) would be read to its end by the count, leaving nothing to
  // send (every line lost, exit 0; found by a review), and its path, part of each line's
  // Idempotency-Key, changes with every run: a second run would apply every line again.
  if (!statSync(args.file).isFile()) throw new Error(`${args.file} is not a regular file: import reads it twice (to count its lines, then to send them) and names each line's Idempotency-Key after its path; save the lines to a file first`);
  const fileIdentity = realpathSync(args.file);
  const totalLines = await countLines(args.file);
  // Beside the file the lines come from: a regular file given as /dev/stdin (`< file`) put its
  // failed lines in /dev (a walkthrough, as root); a path under /dev or /proc names the real one.
  const failed = new FailedLines(`${/^\/(dev|proc)\//.test(resolve(args.file)) ? fileIdentity : args.file}.failed.ndjson`);
  // An earlier run's failures are not this run's: a run that fails nothing leaves no such file.
  rmSync(failed.path, { force: true });
  const client: IntakeClient = createClient({
    url: args.url,
    serviceKey: args.key,
    maxBatchItems: BATCH_ITEMS,
    // One batch at a time: lines are applied in file order (a product's later line wins; a
    // mapping after the products it names, when both are in one file).
    maxConcurrentBatches: 1,
    maxQueueItems: MAX_LINES_IN_FLIGHT * 2,
    maxQueueBytes: MAX_BYTES_IN_FLIGHT * 2,
    retryDeadlineMs: args.retrySeconds * 1000,
    // The progress line says why nothing moves (a server that is down, say), not only "0 done".
    onRetry: (info) => {
      const why = info.status !== null ? `answer ${info.status}` : describeError(info.error);
      progress.retrying = `retrying (attempt ${info.attempt + 1}, ${why}), next in ${Math.ceil(info.delayMs / 100) / 10} s`;
    },
  });
  let done = 0;
  let ok = 0;
  /** Blank lines: counted as done, never sent. */
  let blank = 0;
  let inFlight = 0;
  let inFlightBytes = 0;
  let wake: (() => void) | null = null;
  let interrupted = false;
  /** The exit status after a signal: 128 + its number, as a shell reports it (130 Ctrl-C, 143 SIGTERM). */
  let signalStatus = 130;
  /** Why the import stopped early (a batch gave up: the server cannot be reached), or null. */
  let stopped: string | null = null;
  /** Whether it stopped because the server refused the key (401/403). */
  let keyRefused = false;
  const progress = new Progress(`import ${args.kind}`, totalLines, () => ({ done, failed: failed.count }));

  /** Lines sent and not yet answered, by line number (at most MAX_LINES_IN_FLIGHT): a second Ctrl-C writes them to the failed file. */
  const unanswered = new Map<number, string>();
  const summary = (): string => {
    const seconds = progress.elapsedSeconds();
    let text = `import ${args.kind} ${args.file}: ${fmt(done)} of ${fmt(totalLines)} line(s) done in ${seconds.toFixed(1)} s (${fmt(Math.round(done / Math.max(seconds, 0.001)))}/s): ${fmt(ok)} ok, ${fmt(failed.count)} failed${blank > 0 ? `, ${fmt(blank)} blank (skipped)` : ''}`;
    if (failed.count > 0) text += `; failed lines and their reasons are in ${failed.path}`;
    return text;
  };
  /** A second Ctrl-C: the lines still unanswered go to the failed file as "may or may not have been applied", then exit. */
  const quitNow = (): never => {
    const quit = new QuitBeforeAnswer();
    for (const [n, line] of unanswered) failed.write(n, line, quit);
    // Counted as done, as the failed file now holds them: "done" is ok + failed + blank (the
    // summary said "45,000 of 50,000 done: 45,000 ok, 2,000 failed"; a walkthrough).
    done += unanswered.size;
    failed.close();
    progress.finish(`${summary()}; quit with ${fmt(unanswered.size)} line(s) unanswered (may or may not have been applied): run the same command again to send the rest (lines already applied are not applied twice)`);
    process.exit(signalStatus);
  };

  // One Ctrl-C under `npm run import` arrives twice within milliseconds (stop-signals.ts): only a
  // second press, later, means "quit now" (a review: the first one quit at once, no summary).
  const signals = new StopSignals();
  const onSignal = (signal: NodeJS.Signals): void => {
    const seen = signals.seen(signal);
    if (seen === 'copy') return;
    if (seen === 'again') return quitNow();
    interrupted = true;
    signalStatus = signal === 'SIGTERM' ? 143 : 130;
    progress.note(`interrupted: finishing the ${inFlight} line(s) already sent (Ctrl-C again to quit now; a re-run is safe either way)`);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const settle = (lineNumber: number, line: string, bytes: number, error: unknown): void => {
    unanswered.delete(lineNumber);
    done++;
    progress.retrying = null;
    inFlight--;
    inFlightBytes -= bytes;
    if (error === null) ok++;
    else failed.write(lineNumber, line, error);
    // Retried for --retry-seconds and never answered (or answered 503 all along): the lines
    // after it would wait as long each, so no more are sent.
    if (error instanceof IntakeUnavailableError && stopped === null) {
      // Ended by a final answer (a 401 after an attempt whose answer was lost), not by the deadline.
      stopped =
        error.cause instanceof IntakeRequestError
          ? `line ${fmt(lineNumber)} was answered ${error.cause.status} after an attempt whose answer was lost (${error.message})`
          : `line ${fmt(lineNumber)} was retried for ${args.retrySeconds} s and the server never answered it (${error.message})`;
    }
    // A key the server refuses refuses every line: the rest are not sent. Before 2026-11-29 a
    // wrong key sent the whole file and wrote every line to the failed file (an operator's review).
    if (error instanceof IntakeRequestError && (error.status === 401 || error.status === 403) && stopped === null) {
      stopped = `line ${fmt(lineNumber)} was answered ${error.status}: the service key is wrong or revoked (${error.message}); give the right one`;
      keyRefused = true;
    }
    const w = wake;
    wake = null;
    w?.();
  };

  let lineNumber = 0;
  for await (const line of linesOf(args.file)) {
    lineNumber++;
    if (interrupted || stopped !== null) break;
    if (line.trim() === '') {
      // Nothing to send: done (the progress counts lines), but not "ok", which says applied.
      done++;
      blank++;
      continue;
    }
    const n = lineNumber;
    const bytes = Buffer.byteLength(line);
    while (inFlight > 0 && (inFlight >= MAX_LINES_IN_FLIGHT || inFlightBytes + bytes > MAX_BYTES_IN_FLIGHT)) await new Promise<void>((resolve) => (wake = resolve));
    // What came while this line waited for room: it is not sent then.
    if (interrupted || stopped !== null) break;
    inFlight++;
    inFlightBytes += bytes;
    unanswered.set(n, line);
    try {
      sendLine(client, args.kind, line, lineKey(args.kind, fileIdentity, n, line, args.salt)).then(
        () => settle(n, line, bytes, null),
        (error: unknown) => settle(n, line, bytes, error),
      );
    } catch (error) {
      if (!(error instanceof LineError)) throw error;
      settle(n, line, bytes, error);
    }
  }
  await client.close();
  // Every write is settled now; its handler may still be a microtask away.
  while (inFlight > 0) await new Promise<void>((resolve) => (wake = resolve));
  failed.close();
  let text = summary();
  if (interrupted) text += '; interrupted: run the same command again to send the rest (lines already applied are not applied twice)';
  else if (stopped !== null) text += `; stopped: ${stopped}; run the same command again ${keyRefused ? 'with a key the server takes' : 'once the server answers it'} (lines already applied are not applied twice)`;
  progress.finish(text);
  if (interrupted) return signalStatus;
  return failed.count > 0 ? 1 : 0;
}

async function main(): Promise<void> {
  let args: Args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message ? `import: ${error.message}\n` : ''}${USAGE}`);
    process.exit(error.message ? 2 : 0);
  }
  try {
    process.exitCode = await run(args);
  } catch (error) {
    process.stderr.write(`import: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 2;
  }
}

await main();
