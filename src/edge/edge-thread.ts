// An edge thread (HTTP_THREADS > 1): its own uWebSockets.js app on the shared port (the kernel's
// SO_REUSEPORT spreads connections among the threads). It does the stateless work of a request:
// routing, the key, the rate limit (shared by all threads), content checks, body reading, gzip,
// JSON, schema validation and every 4xx these decide; a valid write goes to the state thread as a
// command (thread-link.ts) and its answer comes back to be sent. Nothing here holds state.
import { parentPort, workerData } from 'node:worker_threads';
import { Authenticator } from '../auth/authenticator.ts';
import { parseServiceKeys } from '../auth/key-store.ts';
import { blockPointOnce, throwPointOnce, throwPointOnceHere } from '../config/fault-points.ts';
import { parseSettings } from '../config/settings.ts';
import type { EdgeMessage, EdgeStart, GateState, StateMessage } from '../handoff/thread-messages.ts';
import { buildBatchRoute } from '../http/batch.ts';
import { RateLimits, type RateLimiter } from '../http/rate-limits.ts';
import { GET_PATHS, startHttpServer, type HttpServer } from '../http/server.ts';
import type { WriteGate } from '../http/write-gate.ts';
import { buildWriteRoutes } from '../http/write-routes.ts';
import { buildValidators } from '../schemas/validators.ts';
import { createLogger } from '../telemetry/logger.ts';
import { Metrics } from '../telemetry/metrics.ts';
import { offloadsMapping } from '../workers/mapping-pool.ts';
import { PushedKeys } from './pushed-keys.ts';
import { StateHeartbeat } from './state-heartbeat.ts';
import { SharedRateLimits } from './shared-rate-limits.ts';
import { ThreadLink } from './thread-link.ts';
import { ForwardRelay } from './forward-relay.ts';
import { judgeForward, forwardLimitBytes } from '../cluster/forward-protocol.ts';

/** A question to the state thread (/metrics, /cluster) waits at most this long. */
const ASK_TIMEOUT_MS = 5_000;
/** A failed thread's loop should end once its sockets are closed; if something else holds it, it is ended after this. */
const FAILED_EXIT_MS = 1_000;

async function run(): Promise<void> {
  const port = parentPort!;
  const start = workerData as EdgeStart;
  const post = (message: EdgeMessage): void => port.postMessage(message);
  const { settings } = parseSettings(start.argv, start.env);
  const log = createLogger(settings.logLevel).child({ edge: start.index });

  const keys = new PushedKeys(start.keys);
  const auth = new Authenticator(keys, parseServiceKeys(settings.serviceKeys), log);
  await auth.reload();
  const link = new ThreadLink(port, auth, settings);

  // The gate as the state thread last posted it: a write it refuses gets 503 before its body is
  // read. The state thread checks again when the command arrives (the gate may have closed since).
  let gateState: GateState = start.gate;
  // Not ready, too, while the state thread is stuck: the writes this edge takes would wait for it.
  const heartbeat = StateHeartbeat.attach(start.heartbeat);
  // A write is refused too while this edge has too many waiting for the state thread (backlog()).
  const gate: WriteGate = {
    refusal: () => {
      if (gateState.refusal !== null) return gateState.refusal;
      const backlog = link.backlog();
      return backlog === null ? null : { message: backlog, retryAfterSeconds: 1 };
    },
    notReady: () => gateState.notReady ?? heartbeat.stalled(),
  };

  const rateLimits: RateLimiter = start.rateLimits === null ? new RateLimits(0, 0) : SharedRateLimits.attach(start.rateLimits);
  const metrics = new Metrics(null);
  const validators = buildValidators(settings);
  const writeRoutes = buildWriteRoutes({
    intake: null,
    validators,
    metrics,
    pool: null,
    offload: (size, encoding) => offloadsMapping(settings, size, encoding),
    mappingMaxItems: settings.mappingMaxItems,
  });
  const routes = [...writeRoutes, buildBatchRoute({ settings, routes: writeRoutes, otherPaths: GET_PATHS, gate, rateLimits, metrics, log })];
  // Cluster mode: followers' forwarded frames go to the state thread, which runs them when it leads.
  const relay = start.clustered ? new ForwardRelay(port) : null;

  let nextAsk = 1;
  const asked = new Map<number, { done: (told: { text: string; contentType: string }) => void; fail: (error: Error) => void }>();
  const ask = (what: 'metrics' | 'cluster'): Promise<{ text: string; contentType: string }> =>
    new Promise((done, fail) => {
      const id = nextAsk++;
      const timer = setTimeout(() => {
        asked.delete(id);
        fail(new Error(`the state thread did not answer for ${what} within ${ASK_TIMEOUT_MS} ms`));
      }, ASK_TIMEOUT_MS);
      asked.set(id, {
        done: (told) => {
          clearTimeout(timer);
          done(told);
        },
        fail,
      });
      post({ t: 'ask', id, what });
    });

  // Crash tests: a replacement that fails before it listens (the thread ends, no uWS handle open).
  if (start.attempt > 0) throwPointOnceHere('edge-restarting');
  let server: HttpServer;
  try {
    server = await startHttpServer({
      settings: { ...settings, port: start.port },
      auth,
      workspaces: null,
      link,
      routes,
      requestMetrics: (name) => metrics.route(name),
      metricsText: () => ask('metrics'),
      log,
      openApiJson: start.openApiJson,
      rateLimits,
      gate,
      clusterStatus: start.clustered ? async () => (await ask('cluster')).text : null,
      // A wrong secret gets 401 from the header, by the admission the state thread last posted
      // (within GATE_POLL_MS of a leader change; a follower retries a 401 as it does a 503).
      // Before, an edge read every body to its end first, up to forwardLimitBytes (16 MiB or
      // more) a request, for anyone who could reach the port (the fix HTTP_THREADS=1 had).
      forwarded:
        relay === null
          ? null
          : {
              limitBytes: forwardLimitBytes(settings),
              judge: (secret) => (gateState.forward === null ? 'read' : judgeForward(gateState.forward, secret)),
              handle: (secret, bytes) => relay.handle(secret, bytes),
            },
    });
  } catch (error) {
    post({ t: 'listen-failed', message: (error as Error).message });
    return;
  }

  // A bug that throws here, uncaught, must end this thread only: the state thread starts another
  // in its place (edge-threads.ts). Left to Node, the thread ended with its uWS sockets open,
  // which aborts the whole process (uv_loop_close() with open handles). So: close them, then end.
  let failed = false;
  const fail = (error: unknown): void => {
    if (failed) return;
    failed = true;
    log.error({ err: error }, 'an edge thread failed: closing its connections and ending it (another takes its place)');
    void server.close().then(() => {
      port.close();
      setTimeout(() => process.exit(1), FAILED_EXIT_MS).unref();
    });
  };
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);

  port.on('message', (message: StateMessage) => {
    switch (message.t) {
      case 'answers':
        return link.answers(message.text);
      case 'fail':
        return fail(new Error(message.message));
      case 'keys':
        keys.set(message.keys);
        void auth.reload();
        return;
      case 'gate':
        gateState = message.gate;
        return;
      case 'collect':
        void metrics.registry.getMetricsAsJSON().then((json) => {
          post({ t: 'metrics', id: message.id, json });
          // Crash tests: an edge that fails after it counted requests (its counts must stay).
          throwPointOnce('edge-collected');
        });
        return;
      case 'told': {
        const waiting = asked.get(message.id);
        asked.delete(message.id);
        if (waiting === undefined) return;
        if (message.status === 200) waiting.done({ text: message.text, contentType: message.contentType });
        else waiting.fail(new Error(message.text));
        return;
      }
      case 'forwarded':
        return relay?.answered(message.id, message);
      case 'stop':
        return server.stopAccepting();
      case 'settle':
        // A write of an aborted request may still wait for its frame (up to LINGER_MS): it goes
        // first, so the state thread journals it before its final drain, not after (a review).
        void server.settled(message.timeoutMs).then(() => {
          link.flushNow();
          post({ t: 'settled' });
        });
        return;
      case 'close':
        // A stand-in for an edge stuck in a synchronous call as the process stops.
        blockPointOnce('edge-close');
        // Every connection closed, then nothing keeps this thread's loop alive: it ends.
        void server.close().then(() => {
          post({ t: 'closed' });
          port.close();
        });
        return;
    }
  });
  post({ t: 'listening', port: server.port });
  throwPointOnce('edge-listening');
}

run().catch((error: unknown) => {
  // Rethrown outside the promise so the thread ends with it and the main thread hears.
  setImmediate(() => {
    throw error;
  });
});
