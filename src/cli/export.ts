// npm run export -- <events|devices|customers|products|collections> [--since <seq>] [--workspace <name>] [--kind <kind>] [--follow]
// NDJSON on stdout. Runs beside a live server: LMDB lets readers in while the server writes.
// `events` streams the journal batch by batch (memory bounded by one batch); `--follow` then
// keeps printing records as the server makes them durable, until SIGINT, SIGTERM or a closed
// stdout. The state exports rebuild the state the same way the server does at start, then print it.
import { Workspaces } from '../actors/workspace.ts';
import { ProfileInterner } from '../actors/interner.ts';
import { collectionViews, customerViews, deviceViews, productViews, sortedWorkspaces } from '../actors/views.ts';
import { exportRecord } from '../journal/export-line.ts';
import { DURABLE_SEQ_KEY, Journal } from '../journal/journal.ts';
import { RECORD_KINDS, type RecordKind } from '../journal/records.ts';
import { JournalHoleError, recover } from '../journal/recovery.ts';
import { openStore, type Store } from '../journal/store.ts';
import { newestCompleteSnapshot } from '../journal/snapshot-writer.ts';
import { dataDirInUse } from '../journal/data-dir.ts';
import { NdjsonWriter } from './output.ts';
import { requireStore } from './data-dir-check.ts';
import { StopSignals } from './stop-signals.ts';

const WHATS = ['events', 'devices', 'customers', 'products', 'collections'] as const;
type What = (typeof WHATS)[number];

const USAGE = `usage: npm run export -- <${WHATS.join('|')}> [--since <seq>] [--workspace <name>] [--kind <kind>] [--follow]
  events       the journal: one line per accepted write {seq, kind, workspace, at, did?, sid?, customer?, data}
               --since <seq>  only records with seq > <seq> (the last seq you saw is your cursor)
               --kind <kind>  one of ${RECORD_KINDS.join(', ')}
               --follow       then keep printing records as the server makes them durable (until
                              SIGINT, SIGTERM or a closed stdout)
  devices, customers, products, collections   the current state
  --workspace <name>   only that workspace
  DATA_DIR (or --data-dir <dir>) selects the data directory, default ./data
`;

class UsageError extends Error {}

interface ExportArgs {
  what: What;
  since: number;
  workspace: string | null;
  kind: RecordKind | null;
  follow: boolean;
  dataDir: string;
}

/** How often --follow looks for new records. */
const FOLLOW_POLL_MS = 100;
/** After SIGINT/SIGTERM, --follow gets this long to flush what it printed to a slow reader. */
const STOP_GRACE_MS = 1_000;

function parseArgs(argv: readonly string[]): ExportArgs {
  const args: ExportArgs = { what: 'events', since: 0, workspace: null, kind: null, follow: false, dataDir: process.env.DATA_DIR || './data' };
  let what: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    // `--flag value` or `--flag=value`, as `npm run import` and `npm run keys` take them.
    const raw = argv[i]!;
    const [arg, inline] = raw.startsWith('--') && raw.includes('=') ? [raw.slice(0, raw.indexOf('=')), raw.slice(raw.indexOf('=') + 1)] : [raw, undefined];
    const value = (): string => {
      if (inline !== undefined) return inline;
      const v = argv[++i];
      // A flag as the value (`--data-dir --follow`) is a value forgotten, not a directory named so.
      if (v === undefined || v.startsWith('--')) throw new UsageError(`${arg} needs a value`);
      return v;
    };
    if (inline !== undefined && (arg === '--follow' || arg === '--help')) throw new UsageError(`${arg} takes no value`);
    if (arg === '--since') {
      const v = value();
      if (!/^[0-9]+$/.test(v)) throw new UsageError('--since takes a non-negative integer seq');
      args.since = Number(v);
    } else if (arg === '--workspace') args.workspace = value();
    else if (arg === '--kind') {
      const v = value();
      if (!(RECORD_KINDS as readonly string[]).includes(v)) throw new UsageError(`--kind must be one of ${RECORD_KINDS.join(', ')}`);
      args.kind = v as RecordKind;
    } else if (arg === '--data-dir') args.dataDir = value();
    else if (arg === '--follow') args.follow = true;
    else if (arg === '--help' || arg === '-h') throw new UsageError('');
    else if (what === undefined && !arg.startsWith('-')) what = arg;
    else throw new UsageError(`unexpected argument ${raw}`);
  }
  if (what === undefined || !(WHATS as readonly string[]).includes(what)) throw new UsageError(`say what to export: ${WHATS.join(', ')}`);
  args.what = what as What;
  if (args.what !== 'events' && (args.kind !== null || args.since !== 0 || args.follow)) {
    throw new UsageError('--since, --kind and --follow apply to events only');
  }
  return args;
}

/** Says on stderr that records `from` to `to` are gone from the journal (not skipped in silence). */
function notInJournal(from: number, to: number, rest: string): void {
  process.stderr.write(`export: records ${from} to ${to} are not in this journal (trimmed by retention, or before the snapshot a cluster node joined from)${rest}\n`);
}

/**
 * Prints the records after `after` up to `upTo` (all of them when null) that pass the filters;
 * returns the last seq read. `stopped` ends it early.
 */
async function printEvents(store: Store, args: ExportArgs, out: NdjsonWriter, after: number, upTo: number | null, stopped: () => boolean): Promise<number> {
  let cursor = after;
  const firstSeq = Journal.firstSeq(store.journal);
  for (const { seq, record } of Journal.read(store.journal, after)) {
    if ((upTo !== null && seq > upTo) || stopped()) break;
    if (seq > cursor + 1 && firstSeq !== null && firstSeq <= cursor) {
      // A hole: records are stored before and after it (a data directory damaged by a version
      // before 2026-11-24, or edited). Past the newest snapshot it is what the server refuses to
      // start on, and `npm run journal -- repair` deletes the records after it, whose seqs new
      // writes then take: printed, a consumer would hold records that vanish and seqs that come
      // back meaning other writes. Refused as the state exports refuse it (a review).
      const coveredSeq = newestCompleteSnapshot(store)?.seq ?? 0;
      if (seq - 1 > coveredSeq) throw new JournalHoleError({ missingFrom: cursor + 1, resumesAt: seq, lastSeq: Journal.lastSeq(store.journal) }, args.dataDir);
      process.stderr.write(`export: records ${cursor + 1} to ${seq - 1} are missing from this journal (a hole, which the newest snapshot covers: they are in the state, not in the journal); going on at ${seq}\n`);
    } else if (seq > cursor + 1) {
      // Records before the journal's first were trimmed by retention (or, on a cluster node, not
      // copied by a join): said on stderr, as the delivery loop logs it, not skipped in silence.
      notInJournal(cursor + 1, seq - 1, `; going on at ${seq}`);
    }
    cursor = seq;
    if (args.workspace !== null && record.workspace !== args.workspace) continue;
    if (args.kind !== null && record.kind !== args.kind) continue;
    await out.write(exportRecord(seq, record));
  }
  if (cursor === after) {
    // Nothing after `after` in the journal: retention may have emptied it up to the newest
    // snapshot. Said too, as above (it printed nothing at all; found by a review).
    const coveredSeq = newestCompleteSnapshot(store)?.seq ?? 0;
    const end = upTo === null ? coveredSeq : Math.min(coveredSeq, upTo);
    if (end > cursor) {
      notInJournal(cursor + 1, end, '');
      cursor = end;
    }
  }
  return cursor;
}

/**
 * --follow: prints up to the journal's durable position (written by the server, journal.ts), then
 * polls it. A record is printed only once it is durable, so its seq is never taken back (a power
 * loss can undo a commit that was not fsync'd yet). Memory: one journal batch.
 */
async function follow(store: Store, args: ExportArgs, out: NdjsonWriter): Promise<void> {
  let stopping = false;
  let wake: (() => void) | null = null;
  const signals = new StopSignals();
  const stop = (signal: NodeJS.Signals): void => {
    // npm's forwarded copy of a Ctrl-C is not a second one (stop-signals.ts).
    if (signals.seen(signal) === 'copy') return;
    // A second signal, or a reader that does not take what is already written: exit anyway.
    if (stopping) process.exit(0);
    stopping = true;
    wake?.();
    setTimeout(() => process.exit(0), STOP_GRACE_MS).unref();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  let cursor = args.since;
  while (!stopping) {
    store.root.resetReadTxn();
    const stored = Journal.lastSeq(store.journal);
    // A data directory from before the durable position existed: all it holds is durable.
    const marked = store.meta.get(DURABLE_SEQ_KEY) ?? stored;
    // With no server on the directory, everything stored, as a plain `export events` prints: a
    // server killed with -9 left its marker behind its last writes, and --follow waited at it
    // until a server started again. Asked after the read above: a server that started since
    // holds the directory now, and then only its marker counts.
    const durable = marked < stored && !(await dataDirInUse(args.dataDir)) ? stored : marked;
    if (durable > cursor) cursor = await printEvents(store, args, out, cursor, durable, () => stopping);
    await out.flush();
    if (stopping) break;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, FOLLOW_POLL_MS);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

/**
 * How far a plain `export events`, or a state export, reads: with a server running on the directory, only up to the
 * position it made durable, as --follow does (lmdb-js shows a commit to other processes before
 * its fsync: a record printed then could be undone by a power loss and its seq reused by another
 * write, and a consumer whose cursor had passed it would skip that write; found by a review).
 * With none running, everything stored: a server that stopped or crashed wrote what it wrote.
 */
async function durableBound(dataDir: string, store: Store): Promise<number | null> {
  if (!(await dataDirInUse(dataDir))) return null;
  return store.meta.get(DURABLE_SEQ_KEY) ?? Journal.lastSeq(store.journal);
}

async function run(args: ExportArgs): Promise<void> {
  if (!requireStore('export', args.dataDir)) process.exit(2);
  const store = openStore(args.dataDir);
  const out = new NdjsonWriter();
  try {
    if (args.what === 'events' && args.follow) await follow(store, args, out);
    else if (args.what === 'events') await printEvents(store, args, out, args.since, await durableBound(args.dataDir, store), () => false);
    else {
      const workspaces = new Workspaces();
      // Beside a running server, only what it made durable, as for events (a review: a state
      // export showed writes lmdb-js had let other processes see before their fsync).
      recover(store, workspaces, new ProfileInterner(), null, args.dataDir, await durableBound(args.dataDir, store));
      for (const ws of sortedWorkspaces(workspaces)) {
        if (args.workspace !== null && ws.name !== args.workspace) continue;
        if (args.what === 'devices') for (const d of deviceViews(ws)) await out.write(d);
        else if (args.what === 'customers') for (const c of customerViews(ws)) await out.write(c);
        else if (args.what === 'products') for (const p of productViews(ws.name, ws.catalog)) await out.write(p);
        else for (const c of collectionViews(ws.name, ws.catalog)) await out.write(c);
      }
    }
    await out.flush();
  } catch (error) {
    // What was printed before the error (the records before a hole) goes out whole, then the error.
    await out.flush();
    throw error;
  } finally {
    await store.close();
  }
}

// A reader that went away (`| head`, a closed socket) ends the export quietly and successfully.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});

try {
  await run(parseArgs(process.argv.slice(2)));
} catch (error) {
  if (error instanceof UsageError) {
    if (error.message !== '') process.stderr.write(`export: ${error.message}\n`);
    process.stderr.write(USAGE);
    process.exit(error.message === '' ? 0 : 2);
  }
  // A journal with a gap, a data directory it cannot open (a read-only copy: LMDB sets up its
  // locks even to read), a batch it cannot decode: the reason on one line and status 1, not a
  // stack trace (found by a review).
  process.stderr.write(`export: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}
