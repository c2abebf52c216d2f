// npm run journal -- check | repair
// For the one journal damage intake itself could cause (before issue 17): a commit failed and
// later records were stored anyway, leaving a hole in `seq`. The server and the state exports
// refuse such a journal (recovery.ts) and say to run this. Stop the server first.
import { describeHole, findHole } from '../journal/recovery.ts';
import { DataDirError, lockDataDir } from '../journal/data-dir.ts';
import { openStore, type Store } from '../journal/store.ts';
import { requireStore } from './data-dir-check.ts';

const USAGE = `usage: npm run journal -- <command>
  check    exit 0 when intake can replay the journal; else say why and exit 1
  repair   when the journal has a hole (a commit failed and later records were stored anyway),
           delete the records stored after it: they were never acknowledged. Nothing else is
           touched; without a hole it does nothing. Stop intake first.
  DATA_DIR (or --data-dir <dir>) selects the data directory, default ./data
`;

/** The first stored batch (by key) that does not decode, or null. */
function firstUnreadableBatch(store: Store): { seq: number; reason: string } | null {
  for (const key of store.journal.getKeys()) {
    try {
      store.journal.get(key);
    } catch (error) {
      return { seq: key, reason: error instanceof Error ? error.message : String(error) };
    }
  }
  return null;
}

function usageError(message: string): number {
  process.stderr.write(`${message === '' ? '' : `journal: ${message}\n`}${USAGE}`);
  return 2;
}

async function main(argv: string[]): Promise<number> {
  let dataDir = process.env.DATA_DIR || './data';
  const words: string[] = [];
  // Every argument is read, `--data-dir=<dir>` too: only the separate form was, the rest was
  // ignored, so `check --data-dir=/x` checked ./data and said "no hole", and `repair
  // --data-dir=/x` repaired ./data (found by a review).
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--data-dir') {
      const value = argv[++i];
      if (value === undefined || value === '') return usageError('--data-dir needs a directory');
      dataDir = value;
    } else if (arg.startsWith('--data-dir=')) {
      dataDir = arg.slice('--data-dir='.length);
      if (dataDir === '') return usageError('--data-dir needs a directory');
    } else if (arg === '--help' || arg === '-h') {
      process.stderr.write(USAGE);
      return 0;
    } else words.push(arg);
  }
  const [command, ...extra] = words;
  if (command === undefined) return usageError('');
  if (command !== 'check' && command !== 'repair') return usageError(`unknown command ${command}`);
  if (extra.length > 0) return usageError(`unexpected argument ${extra[0]}`);
  if (!requireStore('journal', dataDir)) return 2;
  // A repair writes: never beside a server on the same directory (it would go on writing after the hole).
  if (command === 'repair') {
    try {
      await lockDataDir(dataDir);
    } catch (error) {
      if (!(error instanceof DataDirError)) throw error;
      process.stderr.write(`journal: ${error.message}: stop it first\n`);
      return 2;
    }
  }
  const store = openStore(dataDir);
  try {
    const hole = findHole(store);
    if (hole === null) {
      // findHole reads what a restart replays (after the newest snapshot); the records before
      // it are still the event log that export and the sinks read: check says when one of
      // those batches cannot be read (it said "no hole" while export died on it; a review).
      const unreadable = command === 'check' ? firstUnreadableBatch(store) : null;
      if (unreadable !== null) {
        process.stderr.write(`journal: the batch at seq ${unreadable.seq} cannot be read (${unreadable.reason}); intake can start (its state comes from the newest snapshot, after it), but export events and the sinks cannot read those records\n`);
        return 1;
      }
      process.stderr.write('journal: no hole, intake can replay this journal\n');
      return 0;
    }
    if (command === 'check') {
      process.stderr.write(`journal: ${describeHole(hole, dataDir)}\n`);
      return 1;
    }
    // One write transaction: every batch from the first one after the hole, or none of them.
    const db = store.journal;
    let records = 0;
    db.transactionSync(() => {
      for (const { key, value } of db.getRange({ start: hole.resumesAt })) {
        records += value.length;
        db.removeSync(key);
      }
    });
    process.stderr.write(
      `journal: deleted ${records} record(s), seq ${hole.resumesAt} to ${hole.lastSeq}, stored after the missing seq ${hole.missingFrom} to ${hole.resumesAt - 1}; intake can start now\n`,
    );
    const next = findHole(store);
    if (next !== null) throw new Error(`still a hole after the repair: ${describeHole(next)}`);
    return 0;
  } catch (error) {
    // A gap it cannot repair, a batch it cannot decode: the reason on one line.
    process.stderr.write(`journal: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  } finally {
    await store.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
