// Entry point: settings, LMDB, keys, recovery (snapshot + journal tail), then listen.
// SIGTERM/SIGINT stop gracefully; SIGUSR2 takes a snapshot now.
import { Intake } from './actors/intake.ts';
import { Workspaces, type Workspace } from './actors/workspace.ts';
import { Authenticator } from './auth/authenticator.ts';
import { createKey, KeyError, parseServiceKeys } from './auth/key-store.ts';
import { helpText, parseSettings, SettingsError, type Settings } from './config/settings.ts';
import { packageVersion } from './config/version.ts';
import { Delivery } from './delivery/delivery.ts';
import { KeyTable } from './idempotency/key-table.ts';
import { RateLimits } from './http/rate-limits.ts';
import { startHttpServer } from './http/server.ts';
import { buildWriteRoutes } from './http/write-routes.ts';
import { Journal } from './journal/journal.ts';
import { recover } from './journal/recovery.ts';
import { SnapshotSchedule } from './journal/snapshot-schedule.ts';
import { SnapshotWriter } from './journal/snapshot-writer.ts';
import { openStore } from './journal/store.ts';
import { buildOpenApi } from './schemas/openapi.ts';
import { buildValidators } from './schemas/validators.ts';
import { createLogger } from './telemetry/logger.ts';
import { Metrics } from './telemetry/metrics.ts';
import { MappingPool } from './workers/mapping-pool.ts';

/** How often the server looks for key changes made by the keys CLI (CONTRACT.md §1: within 1 s). */
const KEYS_POLL_MS = 250;
/** Graceful stop must end within 10 s: requests get up to 3 s, the final snapshot what is left. */
const STOP_REQUESTS_TIMEOUT_MS = 3_000;
const STOP_SNAPSHOT_DEADLINE_MS = 8_500;
const STOP_HARD_LIMIT_MS = 9_500;
const STOP_CLOSE_TIMEOUT_MS = 1_000;
/** Sinks get this long at stop to finish the batch in hand and save their positions. */
const STOP_DELIVERY_TIMEOUT_MS = 2_000;
/** Idempotency-Keys past their window are swept this often, at most this many a sweep. */
const KEYS_SWEEP_EVERY_MS = 1_000;
const KEYS_SWEEP_MAX = 100_000;

function readSettings(): Settings | null {
  try {
    const parsed = parseSettings(process.argv.slice(2), process.env);
    if (!parsed.help) return parsed.settings;
    process.stdout.write(helpText());
    return null;
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    process.stderr.write(`intake: ${error.message}\n`);
    process.exit(2);
  }
}

function envKeys(settings: Settings): Map<string, string> {
  try {
    return parseServiceKeys(settings.serviceKeys);
  } catch (error) {
    if (!(error instanceof KeyError)) throw error;
    process.stderr.write(`intake: ${error.message}\n`);
    process.exit(2);
  }
}

function sum(workspaces: Workspaces, count: (ws: Workspace) => number): number {
  let total = 0;
  for (const ws of workspaces.all()) total += count(ws);
  return total;
}

async function main(): Promise<void> {
  const settings = readSettings();
  if (settings === null) return;
  const log = createLogger(settings.logLevel);
  const version = packageVersion();
  // A write past a file-size limit must fail as an I/O error (503), not kill the process.
  process.on('SIGXFSZ', () => log.error('file size limit reached (SIGXFSZ)'));
  // No request may end the process: a stray rejected promise is logged, and the journal's own
  // failure handling decides what is still accepted.
  process.on('unhandledRejection', (reason) => log.error({ err: reason }, 'unhandled promise rejection'));

  const store = openStore(settings.dataDir);
  const auth = new Authenticator(store, envKeys(settings));
  if (!auth.hasAnyKey) {
    const key = await createKey(store, 'default');
    // Printed once, to stderr, outside the JSON logs (CONTRACT.md §1).
    process.stderr.write(`created workspace default, service key: ${key}\n`);
    auth.reload();
  }
  auth.watch(KEYS_POLL_MS);

  // The snapshot writer hands each workspace its change tracker; it is created right after.
  let writer: SnapshotWriter | null = null;
  const workspaces = new Workspaces((name) => writer!.trackerFor(name));
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
  }, settings.journalMaxCommitsInFlight);
  const keys = new KeyTable(settings.idempotencyMaxKeys, settings.idempotencyWindowSeconds);
  writer = new SnapshotWriter(store, journal, () => workspaces, log, { sliceEntities: settings.snapshotSliceEntities, keys });
  const intake = new Intake(workspaces, journal, keys);
  const recovery = recover(store, workspaces, intake.interner, keys);
  journal.continueAfter(recovery.lastSeq);
  // Everything recovered is fsync'd (with the durable position) before anything is delivered.
  journal.useMarker(store.meta);
  await journal.markDurable();
  log.info(
    { ...recovery, snapshotMs: Math.round(recovery.snapshotMs), replayMs: Math.round(recovery.replayMs), idempotencyKeys: keys.size },
    'recovered state: snapshot, then journal records after it',
  );
  metrics.watchRetries(intake.retries, keys);
  setInterval(() => keys.expire(Math.floor(Date.now() / 1000), KEYS_SWEEP_MAX), KEYS_SWEEP_EVERY_MS).unref();
  const delivery = new Delivery(settings, store, journal, metrics, log);
  delivery.start();
  // Retention never trims a record a configured sink has not confirmed, nor the record of a
  // remembered Idempotency-Key (a retried launch is answered from it).
  const keepAfter = (): number | null => {
    const delivered = delivery.confirmedSeq();
    const oldestKey = keys.oldestSeq();
    const limits = [delivered, oldestKey === null ? null : oldestKey - 1].filter((seq): seq is number => seq !== null);
    return limits.length === 0 ? null : Math.min(...limits);
  };
  const schedule = new SnapshotSchedule(writer, journal, store, settings, log, keepAfter);
  schedule.start();

  const validators = buildValidators(settings);
  const pool = new MappingPool(settings);
  const routes = buildWriteRoutes({ intake, validators, metrics, pool, mappingMaxItems: settings.mappingMaxItems });
  const rateLimits = new RateLimits(settings.rateLimitPerSecond, settings.rateLimitBurst);
  metrics.watchRateLimits(rateLimits);
  const server = await startHttpServer({
    settings,
    auth,
    workspaces,
    routes,
    metrics,
    log,
    openApiJson: JSON.stringify(buildOpenApi(routes, version)),
    rateLimits,
    journalFailure: () => journal.failed,
  });

  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    const startedAt = Date.now();
    log.info({ signal }, 'stopping: no new requests, answering those in flight');
    setTimeout(() => {
      log.error('graceful stop took too long; exiting (the journal holds every acknowledged write)');
      process.exit(1);
    }, STOP_HARD_LIMIT_MS).unref();
    server.stopAccepting();
    schedule.stop();
    await server.settled(STOP_REQUESTS_TIMEOUT_MS);
    await journal.drain();
    await journal.markDurable();
    const deliveryStopped = delivery.stop(STOP_DELIVERY_TIMEOUT_MS);
    await pool.close();
    // A snapshot started earlier covers an older position: replace it with one of the final state.
    await writer!.abort();
    if (journal.failed === null) {
      const deadline = setTimeout(() => void writer!.abort(), Math.max(0, STOP_SNAPSHOT_DEADLINE_MS - (Date.now() - startedAt)));
      await writer!.snapshot('shutdown', { paced: false });
      clearTimeout(deadline);
    }
    await deliveryStopped;
    auth.stop();
    // After a failed commit lmdb-js may never settle close(); do not let that hang the stop.
    await Promise.race([store.close(), new Promise((resolve) => setTimeout(resolve, STOP_CLOSE_TIMEOUT_MS).unref())]);
    const failure = journal.failed;
    log.info({ durationMs: Date.now() - startedAt, journalFailed: failure !== null }, 'stopped');
    // Exit 1 tells a supervisor the journal had failed: fix the disk, then restart.
    process.exit(failure === null ? 0 : 1);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGUSR2', () => void schedule.snapshotNow('SIGUSR2'));
  // Logged only once the handlers above are in place: a supervisor that signals as soon as it
  // reads "listening" must get a graceful stop, not Node's default exit.
  log.info({ host: settings.host, port: server.port, dataDir: settings.dataDir, mappingWorkers: settings.mappingWorkers, sinks: delivery.enabled }, 'listening');
}

main().catch((error: unknown) => {
  process.stderr.write(`intake: failed to start: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
