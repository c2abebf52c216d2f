// Entry point: settings, LMDB, keys, recovery, then listen. SIGTERM/SIGINT stop gracefully.
import { readFileSync } from 'node:fs';
import { Intake } from './actors/intake.ts';
import { Workspaces } from './actors/workspace.ts';
import { Authenticator } from './auth/authenticator.ts';
import { createKey, KeyError, parseServiceKeys } from './auth/key-store.ts';
import { helpText, parseSettings, SettingsError } from './config/settings.ts';
import { startHttpServer } from './http/server.ts';
import { buildWriteRoutes } from './http/write-routes.ts';
import { Journal } from './journal/journal.ts';
import { recover } from './journal/recovery.ts';
import { openStore } from './journal/store.ts';
import { buildOpenApi } from './schemas/openapi.ts';
import { buildValidators } from './schemas/validators.ts';
import { createLogger } from './telemetry/logger.ts';
import { Metrics } from './telemetry/metrics.ts';

/** How often the server looks for key changes made by the keys CLI (CONTRACT.md §1: within 1 s). */
const KEYS_POLL_MS = 250;
/** Graceful stop must finish well inside 10 s. */
const STOP_REQUESTS_TIMEOUT_MS = 5_000;
const STOP_HARD_LIMIT_MS = 9_000;

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseSettings(process.argv.slice(2), process.env);
  } catch (error) {
    if (error instanceof SettingsError) {
      process.stderr.write(`intake: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  if (parsed.help) {
    process.stdout.write(helpText());
    return;
  }
  const settings = parsed.settings;
  const log = createLogger(settings.logLevel);
  const version = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

  const store = openStore(settings.dataDir);
  let envKeys: Map<string, string>;
  try {
    envKeys = parseServiceKeys(settings.serviceKeys);
  } catch (error) {
    if (error instanceof KeyError) {
      process.stderr.write(`intake: ${error.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const auth = new Authenticator(store, envKeys);
  if (!auth.hasAnyKey) {
    const key = await createKey(store, 'default');
    // Printed once, to stderr, outside the JSON logs (CONTRACT.md §1).
    process.stderr.write(`created workspace default, service key: ${key}\n`);
    auth.reload();
  }
  auth.watch(KEYS_POLL_MS);

  const workspaces = new Workspaces();
  const metrics = new Metrics({
    devices: () => sum(workspaces, (ws) => ws.devices.size),
    products: () => sum(workspaces, (ws) => ws.catalog.products.size),
    collections: () => sum(workspaces, (ws) => ws.catalog.collections.size),
  });
  const journal = new Journal(store.journal, settings.commitMode, settings.journalMaxBatchRecords, {
    onCommit(records, commitLatencyMs) {
      metrics.batchRecords.observe(records);
      metrics.commitSeconds.observe(commitLatencyMs / 1000);
    },
    onFailure(error) {
      metrics.journalFailures.inc();
      log.fatal({ err: error }, 'journal commit failed: refusing writes until restart');
    },
  });
  const intake = new Intake(workspaces, journal);
  const recovery = recover(store, workspaces, intake.interner);
  log.info({ ...recovery, durationMs: Math.round(recovery.durationMs) }, 'recovered state from the journal');

  const validators = buildValidators(settings);
  const routes = buildWriteRoutes(intake, validators, metrics);
  const server = await startHttpServer({
    settings,
    auth,
    workspaces,
    routes,
    metrics,
    log,
    openApiJson: JSON.stringify(buildOpenApi(routes, version)),
    journalFailure: () => journal.failed,
  });
  log.info({ host: settings.host, port: server.port, dataDir: settings.dataDir }, 'listening');

  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping: no new requests, answering those in flight');
    setTimeout(() => {
      log.error('graceful stop took too long; exiting');
      process.exit(1);
    }, STOP_HARD_LIMIT_MS).unref();
    server.stopAccepting();
    await server.settled(STOP_REQUESTS_TIMEOUT_MS);
    await journal.drain();
    auth.stop();
    await store.close();
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

function sum(workspaces: Workspaces, count: (ws: import('./actors/workspace.ts').Workspace) => number): number {
  let total = 0;
  for (const ws of workspaces.all()) total += count(ws);
  return total;
}

main().catch((error: unknown) => {
  process.stderr.write(`intake: failed to start: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
