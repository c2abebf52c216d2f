// Entry point: settings, LMDB, keys, recovery (snapshot + journal tail), then listen. In cluster
// mode (CLUSTER_POSTGRES_URL) the node also catches up with the cluster's journal before it
// listens, then takes part in the leader election.
// SIGTERM/SIGINT stop gracefully; SIGUSR2 takes a snapshot now.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { isIPv6 } from 'node:net';
import { Intake } from './actors/intake.ts';
import { ClusterNode, DivergedError, foreignDirectory, type ClusterMetrics } from './cluster/cluster-node.ts';
import { readClusterIdentityAt } from './cluster/schema.ts';
import { NodeState } from './cluster/node-state.ts';
import { ForwardEndpoint } from './cluster/forward-endpoint.ts';
import { forwardLimitBytes } from './cluster/forward-protocol.ts';
import { forwardingGate } from './cluster/forwarding-gate.ts';
import { LeaderLink } from './cluster/leader-link.ts';
import { SwitchingSink } from './cluster/switching-sink.ts';
import { LocalLink } from './edge/local-link.ts';
import type { CommandSink } from './state/command-sink.ts';
import { clusterMetrics } from './telemetry/cluster-metrics.ts';
import { Workspaces, type Workspace } from './actors/workspace.ts';
import { Authenticator } from './auth/authenticator.ts';
import { KeyError, LmdbKeys, parseServiceKeys } from './auth/key-store.ts';
import { PgKeys } from './cluster/pg-keys.ts';
import { helpText, parseSettings, SettingsError, type Settings } from './config/settings.ts';
import { packageVersion } from './config/version.ts';
import { Delivery } from './delivery/delivery.ts';
import { KeyTable } from './idempotency/key-table.ts';
import { RateLimits, type RateLimiter } from './http/rate-limits.ts';
import { ERRORS } from './http/errors.ts';
import type { WriteGate } from './http/write-gate.ts';
import { GET_PATHS, startHttpServer, type HttpServer } from './http/server.ts';
import { EdgeThreads } from './state/edge-threads.ts';
import { CommandExecutor } from './state/command-executor.ts';
import { SharedRateLimits } from './edge/shared-rate-limits.ts';
import { buildBatchRoute } from './http/batch.ts';
import { JournaledBatchAnswers } from './idempotency/batch-answer-record.ts';
import { defaultYoungGenerationForWorkers } from './workers/young-generation.ts';
import { buildWriteRoutes } from './http/write-routes.ts';
import { Journal, NotLeadingError, RemoteCommitError } from './journal/journal.ts';
import { JournalGap, recover } from './journal/recovery.ts';
import { SnapshotSchedule } from './journal/snapshot-schedule.ts';
import { SnapshotWriter } from './journal/snapshot-writer.ts';
import { openStore, readClusterId } from './journal/store.ts';
import { ensureDirectory, lockDataDir } from './journal/data-dir.ts';
import { checkPortFree, lockPort } from './http/port-check.ts';
import { StartupError } from './config/startup-error.ts';
import { throwPointOnce } from './config/fault-points.ts';
import { buildOpenApi } from './schemas/openapi.ts';
import { buildValidators } from './schemas/validators.ts';
import { createLogger } from './telemetry/logger.ts';
import { Metrics } from './telemetry/metrics.ts';
import { logUnhandledRejections } from './telemetry/unhandled.ts';
import { MappingPool } from './workers/mapping-pool.ts';

/**
 * How often the server looks for key changes made by the keys CLI (CONTRACT.md §1: within 1 s).
 * A change is seen at most this long plus one read after it is committed: half the second, so a
 * slow read still fits. Not less: in cluster mode each poll is a PostgreSQL round trip, about
 * 0.7 ms of a node's CPU, and at 250 ms the polls were a quarter of an idle node's CPU
 * (2026-11-25: 7 and 8 ms a second, idle leader and follower, against 5.5 and 6.8 at 500 ms).
 */
const KEYS_POLL_MS = 500;
/** Graceful stop must end within 10 s: requests get up to 3 s, the final snapshot what is left. */
const STOP_REQUESTS_TIMEOUT_MS = 3_000;
/**
 * A cluster leader waits this long for its requests before it hands the lease over, so that
 * another node leads within 2 s of the signal (CONTRACT.md §12) even with a request in flight
 * that will not end soon (a body trickling in, a big mapping); what ends later gets 503 and
 * Retry-After, and goes to the new leader (haproxy retries it).
 */
const HANDOVER_REQUESTS_MS = 700;
/** ...and then this long for the 503s of the forwards a stop cut short to reach their clients. */
const STOP_FORWARD_ANSWERS_MS = 1_000;
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

/** A single node takes writes until its journal fails. */
function singleNodeGate(journal: Journal): WriteGate {
  return {
    refusal: () => (journal.failed === null ? null : { message: ERRORS.serviceUnavailable.message, retryAfterSeconds: null }),
    notReady: () => (journal.failed === null ? null : `journal failed: ${journal.failed.message}`),
  };
}

/**
 * `gate`, and a refusal (503, Retry-After: 1) while `maxRecords` accepted writes wait for their
 * commit: a stalled fsync (or PostgreSQL, in cluster mode) must not let them pile up in memory.
 * With HTTP_THREADS=1 nothing else bounds them (the edges' queue does with more): clients that
 * time out and retry grew a server by 17 MB a second, /readyz 200 throughout (a review).
 */
function pendingLimited(gate: WriteGate, journal: Journal, maxRecords: number): WriteGate {
  // One fixed text: the edges are told of the gate again whenever its message changes (a count
  // in it would re-send it every poll while over the limit).
  const message = `${maxRecords} accepted writes are waiting for their journal commit (JOURNAL_MAX_PENDING_RECORDS): the disk (or, in cluster mode, PostgreSQL) is slow or stalled`;
  const waiting = (): string | null => (journal.lastAppendedSeq - journal.durableSeq < maxRecords ? null : message);
  return {
    refusal: () => {
      const refusal = gate.refusal();
      if (refusal !== null) return refusal;
      return waiting() === null ? null : { message, retryAfterSeconds: 1 };
    },
    notReady: () => gate.notReady() ?? waiting(),
  };
}

/**
 * A cluster node applies writes while it leads with the whole journal applied and its lease held
 * (the state side's gate; its edges forward writes while it follows: cluster/forwarding-gate.ts).
 */
function clusterGate(node: ClusterNode): WriteGate {
  return {
    refusal: () => {
      const reason = node.refusal();
      return reason === null ? null : { message: reason, retryAfterSeconds: 1 };
    },
    notReady: () => node.refusal(),
  };
}

/** Set once the HTTP server runs: closes its connections (every edge thread's). */
let closeServer: (() => Promise<void>) | null = null;
/** Set by the first exitProcess(). */
let exiting = false;
/** How long an exit waits for the edge threads to close their connections. */
const EXIT_CLOSE_TIMEOUT_MS = 1_500;

/**
 * Ends the process. Edge threads close their connections first: a thread still holding uWS
 * handles when the process exits makes Node abort (or hang) instead of exiting with `code`.
 */
function exitProcess(code: number): void {
  // Once: a second call (the stop's hard limit, a second failure) while the edges close would
  // exit at once, with their sockets still open.
  if (exiting) return;
  exiting = true;
  const close = closeServer;
  if (close === null) process.exit(code);
  closeServer = null;
  const timer = new Promise((resolve) => setTimeout(resolve, EXIT_CLOSE_TIMEOUT_MS));
  void Promise.race([close().catch(() => undefined), timer]).finally(() => process.exit(code));
}

async function main(): Promise<void> {
  defaultYoungGenerationForWorkers();
  const settings = readSettings();
  if (settings === null) return;
  // Refused before anything is opened or made: checked after the cluster's keys were read, a
  // first start created the cluster's key, printed it, then exited 2, and the corrected start
  // printed none (found by a README walkthrough).
  if (settings.clusterPostgresUrl !== '' && settings.commitMode === 'sync') {
    process.stderr.write('intake: COMMIT_MODE=sync is not available in cluster mode (a commit is a PostgreSQL round trip)\n');
    process.exit(2);
  }
  // Bad keys are a bad setting: said before anything is opened.
  const serviceKeys = envKeys(settings);
  const log = createLogger(settings.logLevel);
  const version = packageVersion();
  // A write past a file-size limit must fail as an I/O error (503), not kill the process.
  process.on('SIGXFSZ', () => log.error('file size limit reached (SIGXFSZ)'));
  // No request may end the process: a stray rejected promise is logged, and the journal's own
  // failure handling decides what is still accepted.
  logUnhandledRejections(log);

  // One server per data directory, and a port no other program listens on: found before the
  // store is opened or recovery starts (data-dir.ts, port-check.ts).
  ensureDirectory(settings.dataDir);
  await lockDataDir(settings.dataDir);
  await lockPort(settings.host, settings.port);
  await checkPortFree(settings.host, settings.port);
  const store = openStore(settings.dataDir);
  // A cluster node's directory started without the cluster's settings (a unit file that lost
  // CLUSTER_POSTGRES_URL, say) would take writes that never reach the cluster's journal, and
  // the node could not rejoin with them: refused, changing nothing.
  const clusterId = settings.clusterPostgresUrl === '' ? readClusterId(store) : null;
  if (clusterId !== null) {
    await store.close();
    throw new StartupError(
      `the data directory ${settings.dataDir} belongs to a cluster (identity ${clusterId}), and this start has no CLUSTER_POSTGRES_URL: ` +
        'set CLUSTER_POSTGRES_URL and CLUSTER_NAME to that cluster\'s to start this node, or give a single node another data directory',
    );
  }
  // A directory of one cluster started against another (a wrong CLUSTER_POSTGRES_URL or
  // CLUSTER_NAME) is refused before anything is made: below, the first start of a cluster makes
  // its rows and its first key (cluster-node.ts, foreignDirectory). PostgreSQL unreachable here:
  // the node's own check decides later.
  if (settings.clusterPostgresUrl !== '') {
    const mine = readClusterId(store);
    const localLastSeq = Journal.lastSeq(store.journal);
    const theirs = mine === null && localLastSeq === 0 ? undefined : await readClusterIdentityAt(settings.clusterPostgresUrl, settings.clusterName, 'intake identity check').catch(() => undefined);
    const refusal = theirs === undefined ? null : foreignDirectory(settings.clusterName, mine, theirs, localLastSeq);
    if (refusal !== null) {
      await store.close();
      throw refusal;
    }
  }
  // Stored keys: this node's LMDB, or in cluster mode the cluster's, in PostgreSQL (§12).
  const keySource = settings.clusterPostgresUrl === '' ? new LmdbKeys(store) : new PgKeys(settings.clusterPostgresUrl, settings.clusterName);
  const auth = new Authenticator(keySource, serviceKeys, log);
  // The first start's key is printed once, to stderr, outside the JSON logs (CONTRACT.md §1).
  await auth.start(KEYS_POLL_MS, (key) => process.stderr.write(`created workspace default, service key: ${key}\n`));

  // The snapshot writer hands each workspace its change tracker; it is created right after.
  let writer: SnapshotWriter | null = null;
  const workspaces = new Workspaces((name) => writer!.trackerFor(name));
  const metrics = new Metrics({
    devices: () => sum(workspaces, (ws) => ws.devices.size),
    products: () => sum(workspaces, (ws) => ws.catalog.products.size),
    collections: () => sum(workspaces, (ws) => ws.catalog.collections.size),
  });
  const clustered = settings.clusterPostgresUrl !== '';
  // Cluster mode: set once the node exists; a failed commit makes the leader step down.
  let node: ClusterNode | null = null;
  /** Cluster mode, HTTP_THREADS=1: told when this node starts or stops leading (where writes go). */
  let leadingChanged: ((on: boolean) => void) | null = null;
  let clusterCounters: ClusterMetrics | null = null;
  const journal = new Journal(store.journal, settings.commitMode, settings.journalMaxBatchRecords, {
    onCommit(records, commitLatencyMs) {
      metrics.batchRecords.observe(records);
      metrics.commitSeconds.observe(commitLatencyMs / 1000);
    },
    onFailure(error) {
      metrics.journalFailures.inc();
      if (node !== null && error instanceof RemoteCommitError) {
        log.error({ err: error.reason }, 'a commit to the cluster\'s PostgreSQL failed: this node stops leading');
        node.commitFailed(error.reason);
      } else if (node !== null) {
        // This node's own copy cannot be written (disk full, I/O error). It must not lead or
        // follow on a journal it cannot keep: it ends, and the cluster goes on without it.
        log.fatal({ err: error }, 'this node\'s own journal cannot be written: stopping (exit 1); fix the disk and start it again');
        exitProcess(1);
      } else log.fatal({ err: error }, 'journal commit failed: refusing writes until restart');
    },
  }, settings.journalMaxCommitsInFlight);
  if (clustered) journal.follow(new NotLeadingError('this node is not the cluster\'s leader yet'));
  const keys = new KeyTable(settings.idempotencyMaxKeys, settings.idempotencyWindowSeconds);
  writer = new SnapshotWriter(store, journal, () => workspaces, log, { sliceEntities: settings.snapshotSliceEntities, keys });
  const intake = new Intake(workspaces, journal, keys);
  const recovery = recover(store, workspaces, intake.interner, keys, settings.dataDir);
  journal.continueAfter(recovery.lastSeq);
  // Everything recovered is fsync'd (with the durable position) before anything is delivered.
  journal.useMarker(store.meta);
  await journal.markDurable();
  log.info(
    { ...recovery, snapshotMs: Math.round(recovery.snapshotMs), replayMs: Math.round(recovery.replayMs), idempotencyKeys: keys.size },
    'recovered state: snapshot, then journal records after it',
  );
  // Chunks of snapshots a crash cut short go now, not when a snapshot next completes.
  void writer.removeLeftovers().catch((error: unknown) => log.warn({ err: error }, 'removing the snapshots a crash left behind failed; the next snapshot removes them'));
  metrics.watchRetries(intake.retries, keys);
  setInterval(() => keys.expire(Math.floor(Date.now() / 1000), KEYS_SWEEP_MAX), KEYS_SWEEP_EVERY_MS).unref();
  const delivery = new Delivery(settings, store, journal, metrics, log);
  // In cluster mode only the leader delivers (CONTRACT.md §12): started when it leads.
  if (!clustered) delivery.start();
  // Retention never trims a record a configured sink has not confirmed, nor the record of a
  // remembered Idempotency-Key (a retried launch is answered from it).
  const keepAfter = (): number | null => {
    let delivered = delivery.confirmedSeq();
    // A cluster node that does not lead delivers nothing: its own sink positions stop where it
    // last led (0 if it never did), and its local journal grew without end. What a leader
    // trimmed from the cluster's journal, every sink had confirmed.
    if (delivered !== null && node !== null && node.role !== 'leader') delivered = Math.max(delivered, node.clusterTrimmedThroughSeq);
    const oldestKey = keys.oldestSeq();
    const limits = [delivered, oldestKey === null ? null : oldestKey - 1].filter((seq): seq is number => seq !== null);
    return limits.length === 0 ? null : Math.min(...limits);
  };
  const schedule = new SnapshotSchedule(writer, journal, store, settings, log, keepAfter);
  schedule.start();

  if (clustered) {
    const state = new NodeState({
      store,
      dataDir: settings.dataDir,
      journal,
      workspaces,
      interner: intake.interner,
      keys,
      writer,
      log,
      leading(on) {
        if (on) delivery.start();
        else void delivery.stop(STOP_DELIVERY_TIMEOUT_MS);
        leadingChanged?.(on);
      },
      keepAfter,
      sinkPositions: () => delivery.positions(),
      adoptSinkPositions: (positions) => delivery.adopt(positions),
    });
    node = new ClusterNode(
      { url: settings.clusterPostgresUrl, cluster: settings.clusterName, leaseMs: settings.clusterLeaseMs, journalRetentionSeconds: settings.journalRetentionSeconds, commitGapMs: settings.clusterCommitGapMs },
      state,
      log,
      (clusterCounters = clusterMetrics(metrics.registry, () => node)),
    );
    delivery.onDelivered = () => node?.sinkPositionsChanged();
    // The leader stores each snapshot it completes in PostgreSQL, for nodes that join.
    writer.onWritten((meta) => node?.snapshotWritten(meta));
    node.onFatal = (error) => {
      process.stderr.write(`intake: ${error.message}\n`);
      exitProcess(1);
    };
    await node.start();
  }

  const validators = buildValidators(settings);
  const pool = new MappingPool(settings);
  metrics.watchMappings(pool);
  const writeRoutes = buildWriteRoutes({ intake, validators, metrics, pool, offload: (size, encoding) => pool.shouldOffload(size, encoding), mappingMaxItems: settings.mappingMaxItems });
  const edgeThreads = settings.httpThreads > 1;
  // With edge threads every thread takes from the same buckets (CONTRACT.md §9: a limit is per key).
  const rateLimits: RateLimiter = edgeThreads && settings.rateLimitPerSecond > 0 ? SharedRateLimits.create(settings.rateLimitPerSecond, settings.rateLimitBurst) : new RateLimits(settings.rateLimitPerSecond, settings.rateLimitBurst);
  metrics.watchRateLimits(rateLimits);
  // The state side applies writes only where it may: a single node until its journal fails, the leader.
  const stateGate = pendingLimited(node === null ? singleNodeGate(journal) : clusterGate(node), journal, settings.journalMaxPendingRecords);
  // POST /batch runs its items through the write routes above (CONTRACT.md §13), on the state side.
  const journaledAnswers = new JournaledBatchAnswers(journal, keys);
  const routes = [...writeRoutes, buildBatchRoute({ settings, routes: writeRoutes, otherPaths: GET_PATHS, gate: stateGate, rateLimits, metrics, log, retries: intake.retries, keys, journaledAnswers })];
  const openApiJson = JSON.stringify(buildOpenApi(routes, version));
  const clusterStatus = node === null ? null : () => Promise.resolve(JSON.stringify(node!.status()));
  const executor = new CommandExecutor(routes, workspaces, stateGate, settings, log);
  // Cluster mode (issue 21 item 3): a follower does the edge work and forwards valid writes to the
  // leader (leader-link.ts); the leader runs followers' frames (forward-endpoint.ts).
  let gate = stateGate;
  let sink: CommandSink = executor;
  let leaderLink: LeaderLink | null = null;
  let forwardEndpoint: ForwardEndpoint | null = null;
  if (node !== null) {
    const clusterNode = node;
    leaderLink = new LeaderLink({
      origin: `${settings.nodeName !== '' ? settings.nodeName : hostname()}/${process.pid}.${randomBytes(6).toString('hex')}`,
      target: () => clusterNode.forwardTarget(),
      noTargetReason: () => clusterNode.noLeaderReason(),
      local: executor,
      forwardTimeoutMs: settings.clusterForwardTimeoutMs > 0 ? settings.clusterForwardTimeoutMs : settings.clusterLeaseMs + 3_000,
      readyWithinMs: settings.clusterLeaseMs + 2_000,
      keysRemembered: settings.idempotencyMaxKeys > 0,
      log: log.child({ component: 'forward' }),
      onRefused: () => clusterCounters?.forwardRefused(),
    });
    gate = forwardingGate(clusterNode, stateGate, leaderLink, auth);
    sink = new SwitchingSink(() => clusterNode.role === 'leader', executor, leaderLink);
    forwardEndpoint = new ForwardEndpoint(clusterNode, executor, auth, log, clusterCounters);
  }
  let server: HttpServer;
  if (edgeThreads) {
    // A bug that throws on this thread, uncaught, ends the process with exit 1 and its stack on
    // stderr, as with HTTP_THREADS=1. Left to Node, the exit ended the edge threads with their
    // uWS sockets open, which aborts it (SIGABRT, 'uv_loop_close() while having open handles',
    // a native stack instead of a clean exit; found by a review). So: the error, the edges'
    // connections closed, then exit 1.
    process.on('uncaughtException', (error) => {
      process.stderr.write(`intake: uncaught exception on the state thread: ${error instanceof Error ? error.stack : String(error)}\n`);
      exitProcess(1);
    });
    // HTTP_THREADS > 1: edge threads do the HTTP work; this thread is the state thread.
    const threads = await EdgeThreads.start({
      count: settings.httpThreads,
      argv: process.argv.slice(2),
      env: process.env,
      host: settings.host,
      port: settings.port,
      keys: () => auth.storedKeys,
      gate,
      rateLimits: rateLimits instanceof SharedRateLimits ? rateLimits.buffer : null,
      openApiJson,
      clusterStatus,
      sink,
      forwarded: forwardEndpoint === null ? null : (secret, bytes) => forwardEndpoint.handle(secret, bytes),
      forwardAdmission: forwardEndpoint === null ? null : () => forwardEndpoint.admission(),
      metrics,
      log,
    });
    auth.keysChanged = (keys) => threads.keysChanged(keys);
    // Each edge got the keys as they were when it started; a change the key poll read while the
    // edges were starting went to no one (keysChanged was not set yet), and the edges kept a
    // revoked key, or refused a new one, until the next change. The keys as they are now, once.
    threads.keysChanged(auth.storedKeys);
    server = threads;
  } else {
    metrics.watchHttpThreads(() => 1);
    // A cluster node applies writes here while it leads; while it follows they go to the leader.
    const followerLink = node === null ? null : new LocalLink(sink, auth);
    const mainServer = await startHttpServer({
      settings,
      auth,
      workspaces,
      link: node !== null && node.role !== 'leader' ? followerLink : null,
      routes,
      requestMetrics: (name) => metrics.route(name),
      metricsText: async () => ({ text: await metrics.registry.metrics(), contentType: metrics.registry.contentType }),
      log,
      openApiJson,
      rateLimits,
      gate,
      clusterStatus,
      forwarded: forwardEndpoint === null ? null : { limitBytes: forwardLimitBytes(settings), judge: (secret) => forwardEndpoint.judge(secret), handle: (secret, bytes) => forwardEndpoint.handle(secret, bytes) },
    });
    leadingChanged = (on) => mainServer.setLink(on ? null : followerLink);
    server = mainServer;
  }
  closeServer = () => server.close();
  if (node !== null) {
    const host = settings.host === '0.0.0.0' || settings.host === '::' ? hostname() : settings.host;
    // An IPv6 literal in brackets: `http://::1:8080` is no URL, and followers forwarding to it
    // waited out their timeout for every write (found by a review).
    const address = settings.clusterAdvertiseUrl !== '' ? settings.clusterAdvertiseUrl : `http://${isIPv6(host) ? `[${host}]` : host}:${server.port}`;
    node.elect(settings.nodeName !== '' ? settings.nodeName : `${hostname()}:${server.port}`, address);
  }

  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    const startedAt = Date.now();
    log.info({ signal }, 'stopping: no new requests, answering those in flight');
    // Not unref'd: it keeps the process alive while the stop awaits something that never settles
    // (lmdb-js's close() after a commit failed on a full disk). Unref'd, the event loop emptied
    // there and Node exited on its own, with status 0, the journal failure unreported (found by
    // a review on a full tmpfs).
    setTimeout(() => {
      log.error('graceful stop took too long; exiting (the journal holds every acknowledged write)');
      exitProcess(1);
    }, STOP_HARD_LIMIT_MS);
    server.stopAccepting();
    // The requests in flight are answered once committed: without waiting for the commit gap.
    journal.endCommitGap();
    // A follower no longer takes the lease while it finishes its requests (its leader may be
    // stopping too: one leader change for the clients, not two).
    node?.leave();
    schedule.stop();
    /** A leader's delivery, stopped as it hands over (below); null: stopped with the rest. */
    let deliveryStopping: Promise<void> | null = null;
    if (node !== null && (node.role === 'leader' || node.role === 'candidate')) {
      // Hand over first (HANDOVER_REQUESTS_MS): commit what was accepted, then give the lease up.
      await server.settled(HANDOVER_REQUESTS_MS);
      await journal.drain();
      await journal.markDurable();
      // Writes that end from now on are refused (503, Retry-After) instead of committed: their
      // commit would be fenced once another node leads, and fail this node's journal.
      journal.follow(new NotLeadingError('this node is stopping and has handed the lead over: send the write to the cluster\'s leader'));
      // Delivery runs on the leader only (CONTRACT.md §12): it stops as the lead is handed over,
      // not seconds later, when the new leader's delivery already runs. Found by a review: the
      // two delivered side by side, each refused where the other had been (the sinks' own
      // positions kept every record once), and the new leader marked its sinks down and backed off.
      deliveryStopping = delivery.stop(STOP_DELIVERY_TIMEOUT_MS);
      await node.stop();
    }
    await server.settled(Math.max(0, STOP_REQUESTS_TIMEOUT_MS - (Date.now() - startedAt)));
    // Writes still waiting to be forwarded, or still in flight to the leader, get 503.
    await leaderLink?.stop();
    await server.settled(STOP_FORWARD_ANSWERS_MS);
    await journal.drain();
    await journal.markDurable();
    // A leader hands over now: another node leads within a second or two (CONTRACT.md §12).
    await node?.stop();
    const deliveryStopped = deliveryStopping ?? delivery.stop(STOP_DELIVERY_TIMEOUT_MS);
    await pool.close();
    // A snapshot started earlier covers an older position: replace it with one of the final state.
    // Bounded: abort() waits for a failed snapshot's clean-up too, and after a failed commit
    // lmdb-js may never settle a write (as for close() below).
    const snapshotLeftMs = (): number => Math.max(0, STOP_SNAPSHOT_DEADLINE_MS - (Date.now() - startedAt));
    await Promise.race([writer!.abort(), new Promise((resolve) => setTimeout(resolve, snapshotLeftMs()).unref())]);
    if (journal.commitFailure === null) {
      const deadline = setTimeout(() => void writer!.abort(), snapshotLeftMs());
      await writer!.snapshot('shutdown', { paced: false });
      clearTimeout(deadline);
    }
    await deliveryStopped;
    await auth.stop();
    // After a failed commit lmdb-js may never settle close(); do not let that hang the stop.
    await Promise.race([store.close(), new Promise((resolve) => setTimeout(resolve, STOP_CLOSE_TIMEOUT_MS))]);
    const failure = journal.commitFailure;
    log.info({ durationMs: Date.now() - startedAt, journalFailed: failure !== null }, 'stopped');
    // Exit 1 tells a supervisor the journal had failed: fix the disk, then restart.
    exitProcess(failure === null ? 0 : 1);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGUSR2', () => void schedule.snapshotNow('SIGUSR2'));
  // Logged only once the handlers above are in place: a supervisor that signals as soon as it
  // reads "listening" must get a graceful stop, not Node's default exit.
  log.info({ pid: process.pid, host: settings.host, port: server.port, dataDir: settings.dataDir, httpThreads: settings.httpThreads, mappingWorkers: settings.mappingWorkers, sinks: delivery.enabled }, 'listening');
  // Crash tests: a bug on this thread once it serves (it must not abort Node, edge threads or not).
  throwPointOnce('state-listening');
}

main().catch((error: unknown) => {
  // A journal intake refuses is the operator's to fix: its message says how, a stack would not help.
  if (error instanceof StartupError) {
    process.stderr.write(`intake: ${error.message}\n`);
    exitProcess(2);
    return;
  }
  const text = error instanceof JournalGap || error instanceof DivergedError ? error.message : error instanceof Error ? error.stack : String(error);
  process.stderr.write(`intake: failed to start: ${text}\n`);
  // Edge threads may listen already (a failure after they started): they close first.
  exitProcess(1);
});
