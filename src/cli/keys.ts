// npm run keys -- create <workspace> | list | revoke <prefix>
// Works while the server runs; the server picks a change up within 1 s (it polls keysVersion).
import { createKey, KeyError, revokeKey, storedKeys } from '../auth/key-store.ts';
import { openStore } from '../journal/store.ts';

const USAGE = `usage: npm run keys -- <command>
  create <workspace>   create a key; prints the key alone on stdout (the only time it is shown)
  list                 workspace, key prefix, created, revoked
  revoke <prefix>      revoke the one active key starting with <prefix> (8 to 12 characters)
  DATA_DIR (or --data-dir <dir>) selects the data directory, default ./data
`;

async function main(argv: string[]): Promise<number> {
  let dataDir = process.env.DATA_DIR || './data';
  const i = argv.indexOf('--data-dir');
  if (i !== -1) {
    dataDir = argv[i + 1] ?? dataDir;
    argv.splice(i, 2);
  }
  const [command, arg] = argv;
  if (command === undefined || command === '--help' || command === '-h') {
    process.stderr.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  const store = openStore(dataDir);
  try {
    switch (command) {
      case 'create': {
        if (arg === undefined) throw new KeyError('create needs a workspace name');
        process.stdout.write(`${await createKey(store, arg)}\n`);
        return 0;
      }
      case 'list': {
        const rows = storedKeys(store).map((k) => [
          k.workspace,
          k.prefix,
          new Date(k.createdAt).toISOString(),
          k.revokedAt === null ? '-' : new Date(k.revokedAt).toISOString(),
        ]);
        const header = ['WORKSPACE', 'PREFIX', 'CREATED', 'REVOKED'];
        const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
        for (const r of [header, ...rows]) process.stdout.write(`${r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd()}\n`);
        return 0;
      }
      case 'revoke': {
        if (arg === undefined) throw new KeyError('revoke needs a key prefix');
        const revoked = await revokeKey(store, arg);
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
    throw error;
  } finally {
    await store.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
