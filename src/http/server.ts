// The uWebSockets.js HTTP layer. Checks run in CONTRACT.md §4's order: route (404/405, by uWS's
// router), authentication (401), content type and encoding (415), declared size (413), then the
// body is read (413 when it grows past the limit), parsed (400) and handed to the route (422, or
// the actor and the journal).
import uWS, { type HttpRequest, type HttpResponse, type TemplatedApp, type us_listen_socket } from 'uWebSockets.js';
import type { Workspaces } from '../actors/workspace.ts';
import type { Authenticator } from '../auth/authenticator.ts';
import type { Settings } from '../config/settings.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { RouteMetrics } from '../telemetry/metrics.ts';
import { sharedInFlight } from '../telemetry/shared-in-flight.ts';
import { IdempotencyClaim, validIdempotencyKey } from '../idempotency/claim.ts';
import { BodyBuffer, declaredBytes } from './body-buffer.ts';
import { bodiesHeldMessage, HeldBodies } from './held-bodies.ts';
import { acceptsContentType, bodyEncoding, bodyLimitBytes } from './body.ts';
import { Drain } from './drain.ts';
import { H_CONTENT_ENCODING, H_CONTENT_LENGTH, H_CONTENT_TYPE, H_IDEMPOTENCY_KEY, H_REQUEST_ID, H_SERVICE_KEY } from './native-strings.ts';
import { decodeParam, fillParam } from './path-param.ts';
import type { RateLimiter } from './rate-limits.ts';
import type { WriteGate } from './write-gate.ts';
import { requestIdFor } from './request-id.ts';
import { ERRORS, type ErrorSpec } from './errors.ts';
import { leaveRequest, PendingRequest, type RequestEnvironment, type StateLink, type WriteRoute } from './pending-request.ts';
import { OK, send, sendError, statusLine, type SendOptions } from './respond.ts';
import { FORWARD_PATH, FORWARD_SECRET_HEADER, type ForwardReply, type ForwardVerdict } from '../cluster/forward-protocol.ts';

export interface ServerDependencies {
  settings: Settings;
  auth: Authenticator;
  /** The state, where this thread holds it; null on an edge thread (writes go to `link`). */
  workspaces: Workspaces | null;
  /** Where valid writes go when they are not applied here (pending-request.ts). */
  link: StateLink | null;
  routes: WriteRoute[];
  /** GET /metrics: this process's metrics (an edge thread asks the state thread, which sums them). */
  metricsText: () => Promise<{ text: string; contentType: string }>;
  log: Logger;
  openApiJson: string;
  rateLimits: RateLimiter;
  /** Whether writes are accepted, and /readyz (write-gate.ts). */
  gate: WriteGate;
  /** Cluster mode: what GET /cluster answers, as JSON text (null on a single node: 404). */
  clusterStatus: (() => Promise<string>) | null;
  /**
   * The counts (intake_requests_total) of a route that is no write route: the read-only
   * endpoints by name, and `unmatched` for a 404 or 405. Absent: not counted.
   */
  requestMetrics?: (route: string) => RouteMetrics;
  /**
   * Cluster mode: the leader's internal endpoint for followers' forwarded writes
   * (cluster/forward-protocol.ts). Absent on a single node: the path is then 404.
   */
  forwarded?: {
    limitBytes: number;
    /**
     * What becomes of a forward with this secret, by its header (forward-protocol.ts
     * judgeForward): `refuse`, 401 before the body is read; `drain`, the node does not lead: the
     * body is read and dropped, then 503. An edge thread judges by what the state thread last
     * posted. Absent: `read`.
     */
    judge?(secret: string): ForwardVerdict;
    handle(secret: string, bytes: Buffer): Promise<ForwardReply>;
  } | null;
}

export interface HttpServer {
  readonly port: number;
  /**
   * Stops accepting: closes the listening socket and answers new requests on open keep-alive
   * connections with 503 (and closes them). Requests already started are still answered.
   */
  stopAccepting(): void;
  /** Resolves when no request is in flight, or after `timeoutMs`. */
  settled(timeoutMs: number): Promise<void>;
  /** Closes every connection (a thread must, before it ends: uWS handles would abort Node). */
  close(): Promise<void>;
}

/** The server of the main thread, whose writes may go elsewhere for a while (a cluster follower). */
export interface MainHttpServer extends HttpServer {
  /** From now on, valid writes go to `link` (null: applied on this thread). */
  setLink(link: StateLink | null): void;
}

/** The read-only endpoints (a batch item naming one of them gets the 405 it would get alone). */
export const GET_PATHS = ['/healthz', '/readyz', '/metrics', '/openapi.json', '/cluster'];

/** An answer decided from the request head alone (the body, if any, is never read). */
function refuseEarly(env: RequestEnvironment, route: WriteRoute, res: HttpResponse, requestId: string, startedAt: number, error: ErrorSpec, message?: string, options: SendOptions = {}): void {
  route.metrics.observe(error.status, startedAt);
  if (env.logRequests) env.log.debug({ reqId: requestId, route: route.name, status: error.status, ms: performance.now() - startedAt }, 'request');
  sendError(res, requestId, error, message, options);
}

const CLOSE: SendOptions = { close: true };
/**
 * A write that came as the server stops: another node takes it within a second or two in a
 * cluster, a restarted server soon after on one node. Without Retry-After (until 2026-11-29) the
 * answer said less than every other 503 of a stop does (found by a review).
 */
const CLOSE_RETRY: SendOptions = { close: true, header: ['retry-after', '1'] };

const SHUTTING_DOWN = 'the server is shutting down';
const NOT_LEADING = 'this node is not the cluster\'s leader now; nothing was applied';

export function startHttpServer(deps: ServerDependencies): Promise<MainHttpServer> {
  const { settings, auth, workspaces, log } = deps;
  const app: TemplatedApp = uWS.App();
  const env: RequestEnvironment = { log, logRequests: log.isLevelEnabled('debug'), gate: deps.gate, inFlight: 0, onIdle: null, workspaces, link: deps.link, auth, bodies: new HeldBodies(settings.bodiesHeldMaxBytes) };
  const rateLimits = deps.rateLimits;
  let stopping = false;

  const handleWrite = (route: WriteRoute, res: HttpResponse, req: HttpRequest): void => {
    const startedAt = performance.now();
    const requestId = requestIdFor(req.getHeader(H_REQUEST_ID));
    if (stopping) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.serviceUnavailable, SHUTTING_DOWN, CLOSE_RETRY);
    let param = '';
    if (route.hasParam) {
      const decoded = decodeParam(req.getParameter(0));
      if (decoded === null) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.notFound, 'malformed percent-encoding in the path');
      param = decoded;
    }
    const serviceKey = req.getHeader(H_SERVICE_KEY);
    const workspaceName = auth.workspaceOf(serviceKey);
    if (workspaceName === null) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.authentication);
    // Right after the key: a limited request costs a lookup and a subtraction, nothing more.
    if (rateLimits.enabled) {
      const retryAfterSeconds = rateLimits.take(serviceKey, startedAt);
      if (retryAfterSeconds > 0) {
        if (env.logRequests) env.log.debug({ reqId: requestId, workspace: workspaceName }, 'rate limited');
        return refuseEarly(env, route, res, requestId, startedAt, ERRORS.rateLimit, undefined, { header: ['retry-after', String(retryAfterSeconds)] });
      }
    }
    // A node that does not take writes now (a journal failure; in cluster mode, a follower)
    // says so before reading the body: the client retries elsewhere or after Retry-After.
    const refusal = deps.gate.refusal();
    if (refusal !== null) {
      const options: SendOptions = refusal.retryAfterSeconds === null ? {} : { header: ['retry-after', String(refusal.retryAfterSeconds)] };
      return refuseEarly(env, route, res, requestId, startedAt, ERRORS.serviceUnavailable, refusal.message, options);
    }
    // Idempotency-Key: a malformed one is refused before the body is read. (uWS cannot tell an
    // empty header from none: both mean "no key".)
    let claim: IdempotencyClaim | null = null;
    const idempotencyKey = req.getHeader(H_IDEMPOTENCY_KEY);
    if (idempotencyKey !== '') {
      if (!validIdempotencyKey(idempotencyKey)) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.idempotencyKey);
      claim = new IdempotencyClaim(workspaceName, route.method === 'del' ? 'DELETE' : 'POST', route.hasParam ? fillParam(route.pattern, param) : route.pattern, idempotencyKey);
    }
    let limitBytes = 0;
    let declared = 0;
    let encoding: 'identity' | 'gzip' = 'identity';
    if (route.limit !== 'none') {
      if (!acceptsContentType(req.getHeader(H_CONTENT_TYPE))) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.unsupportedMediaType);
      const found = bodyEncoding(req.getHeader(H_CONTENT_ENCODING));
      if (found === null) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.unsupportedMediaType);
      encoding = found;
      limitBytes = bodyLimitBytes(route.limit, settings);
      const header = req.getHeader(H_CONTENT_LENGTH);
      if (header !== '' && Number(header) > limitBytes) {
        // Refused from the head, answered once the body is drained (drain.ts).
        const drain = new Drain(limitBytes, () => refuseEarly(env, route, res, requestId, startedAt, ERRORS.payloadTooLarge, undefined, CLOSE));
        res.onAborted(() => drain.abort());
        res.onData((chunk, isLast) => drain.data(chunk.byteLength, isLast));
        return;
      }
      declared = declaredBytes(header);
      // The bytes this thread may hold in bodies being received (held-bodies.ts): refused now,
      // before the body is read, as writes are when the gate is closed.
      if (!env.bodies.take(declared)) return refuseEarly(env, route, res, requestId, startedAt, ERRORS.serviceUnavailable, bodiesHeldMessage(env.bodies.maxBytes), { header: ['retry-after', '1'] });
    }
    const request = new PendingRequest(res, route, workspaceName, param, startedAt, limitBytes, encoding, env, claim, requestId, serviceKey, declared);
    request.start();
  };

  const allowed = new Map<string, string[]>();
  for (const route of deps.routes) {
    const handler = (res: HttpResponse, req: HttpRequest) => handleWrite(route, res, req);
    if (route.method === 'post') app.post(route.pattern, handler);
    else app.del(route.pattern, handler);
    const methods = allowed.get(route.pattern) ?? [];
    methods.push(route.method === 'del' ? 'DELETE' : 'POST');
    allowed.set(route.pattern, methods);
  }

  const idOf = (req: HttpRequest): string => requestIdFor(req.getHeader(H_REQUEST_ID));
  // Counted as the write routes are (CONTRACT §8: requests by route and status), 404s and 405s
  // under `unmatched` (a bounded label, whatever the path): before 2026-11-29 only writes counted.
  const counts = (name: string): RouteMetrics | null => deps.requestMetrics?.(name) ?? null;
  const healthzCount = counts('healthz');
  const readyzCount = counts('readyz');
  const metricsCount = counts('metrics');
  const openApiCount = counts('openapi');
  const clusterCount = counts('cluster');
  const unmatchedCount = counts('unmatched');
  app.get('/healthz', (res, req) => {
    send(res, idOf(req), OK, '{"status":"ok"}');
    healthzCount?.observe(200, performance.now());
  });
  app.get('/readyz', (res, req) => {
    const startedAt = performance.now();
    const notReady = stopping ? SHUTTING_DOWN : deps.gate.notReady();
    if (notReady !== null) sendError(res, idOf(req), ERRORS.serviceUnavailable, notReady);
    else send(res, idOf(req), OK, '{"status":"ready"}');
    readyzCount?.observe(notReady !== null ? ERRORS.serviceUnavailable.status : 200, startedAt);
  });
  // Answers that come later (from the state thread, or a prom-client collect): written unless the
  // client went away meanwhile.
  const later = (res: HttpResponse, requestId: string, what: string, count: RouteMetrics | null, produce: () => Promise<{ text: string; contentType?: string }>): void => {
    const startedAt = performance.now();
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    produce().then(
      ({ text, contentType }) => {
        if (!aborted) send(res, requestId, OK, text, contentType === undefined ? undefined : { contentType });
        count?.observe(200, startedAt);
      },
      (error: unknown) => {
        log.error({ err: error, reqId: requestId }, `${what} failed`);
        if (!aborted) sendError(res, requestId, ERRORS.internal);
        count?.observe(ERRORS.internal.status, startedAt);
      },
    );
  };
  const forwarded = deps.forwarded ?? null;
  if (forwarded !== null) {
    // Not a public route: no 405 for other methods, not in /openapi.json. The body is the
    // follower's frame; the answer comes once every command in it is answered.
    app.post(FORWARD_PATH, (res, req) => {
      const requestId = idOf(req);
      const secret = req.getHeader(FORWARD_SECRET_HEADER);
      const verdict = stopping ? 'drain' : (forwarded.judge?.(secret) ?? 'read');
      // Refused from the headers (stopping: 503; a wrong secret: 401), the body is still read to
      // its end, counted and not kept, and answered then: answered at once with the connection
      // closed, a follower still sending a frame of a few MB got EPIPE, not the answer, and took
      // the frame for "may have been applied" (found by a review).
      const refusal = (options: SendOptions): void => {
        if (stopping) sendError(res, requestId, ERRORS.serviceUnavailable, SHUTTING_DOWN, { ...options, header: ['retry-after', '1'] });
        else if (verdict === 'refuse') sendError(res, requestId, ERRORS.authentication, 'not this epoch\'s cluster secret', options);
        else sendError(res, requestId, ERRORS.serviceUnavailable, NOT_LEADING, { ...options, header: ['retry-after', '1'] });
      };
      const declared = declaredBytes(req.getHeader(H_CONTENT_LENGTH));
      // Past the limit: 413, or, refused anyway, that refusal (a 503 makes a follower look for
      // the leader again; a 413 would tell it the write cannot be taken anywhere).
      const tooBig = (): void => (verdict === 'read' ? sendError(res, requestId, ERRORS.payloadTooLarge, undefined, CLOSE) : refusal(CLOSE));
      if (declared > forwarded.limitBytes) return tooBig();
      env.inFlight++;
      let finished = false;
      let aborted = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        leaveRequest(env);
      };
      res.onAborted(() => {
        aborted = true;
        finish();
      });

      // One buffer, whatever the chunking (body-buffer.ts): a Buffer per chunk let a body sent one
      // byte per chunk take hundreds of times its size, before the secret is even checked.
      // Not leading (see judgeForward), stopping, or a wrong secret: the body is counted, not kept.
      const body = verdict === 'read' ? new BodyBuffer(declared, forwarded.limitBytes) : null;
      let drainedBytes = 0;
      res.onData((chunk, isLast) => {
        if (finished) return;
        const sizeBytes = (body?.byteLength ?? drainedBytes) + chunk.byteLength;
        if (sizeBytes > forwarded.limitBytes) {
          tooBig();
          return finish();
        }
        // uWS reuses the chunk's memory after we return: the buffer copies it.
        if (body === null) drainedBytes = sizeBytes;
        else body.append(chunk);
        if (!isLast) return;
        if (body === null) {
          // Closed after a stale secret's 401 and a stopping node's 503, as before they were
          // drained; a follower's 503 keeps the connection (its sender looks for the leader again).
          refusal(stopping || verdict === 'refuse' ? CLOSE : {});
          return finish();
        }
        forwarded.handle(secret, body.bytes()).then(
          (reply) => {
            if (!aborted) {
              const options: SendOptions = reply.status === 200 ? { contentType: 'text/plain; charset=utf-8' } : reply.retryAfterSeconds === null ? {} : { header: ['retry-after', String(reply.retryAfterSeconds)] };
              send(res, requestId, statusLine(reply.status), reply.text, options);
            }
            finish();
          },
          (error: unknown) => {
            log.error({ err: error, reqId: requestId }, 'forwarded writes failed');
            if (!aborted) sendError(res, requestId, ERRORS.internal);
            finish();
          },
        );
      });
    });
  }
  const clusterStatus = deps.clusterStatus;
  const clusterText = clusterStatus === null ? null : sharedInFlight(async () => ({ text: await clusterStatus() }));
  app.get('/cluster', (res, req) => {
    if (clusterText !== null) return later(res, idOf(req), 'cluster status', clusterCount, clusterText);
    sendError(res, idOf(req), ERRORS.notFound, 'not in cluster mode (CLUSTER_POSTGRES_URL is not set)');
    clusterCount?.observe(ERRORS.notFound.status, performance.now());
  });
  app.get('/openapi.json', (res, req) => {
    send(res, idOf(req), OK, deps.openApiJson);
    openApiCount?.observe(200, performance.now());
  });
  const metricsText = sharedInFlight(deps.metricsText);
  app.get('/metrics', (res, req) => later(res, idOf(req), 'metrics', metricsCount, metricsText));
  for (const path of GET_PATHS) allowed.set(path, ['GET']);

  // A known path with another method: 405 with Allow. uWS prefers a method's own handler to any().
  for (const [pattern, methods] of allowed) {
    const allow = methods.join(', ');
    app.any(pattern, (res, req) => {
      sendError(res, idOf(req), ERRORS.methodNotAllowed, undefined, { header: ['allow', allow] });
      unmatchedCount?.observe(ERRORS.methodNotAllowed.status, performance.now());
    });
  }
  app.any('/*', (res, req) => {
    sendError(res, idOf(req), ERRORS.notFound);
    unmatchedCount?.observe(ERRORS.notFound.status, performance.now());
  });

  return new Promise((resolve, reject) => {
    app.listen(settings.host, settings.port, (socket: us_listen_socket | false) => {
      if (socket === false) {
        // The app's handles would keep an edge thread from ending (and abort Node at exit).
        (app as TemplatedApp & { close(): void }).close();
        reject(new Error(`cannot listen on ${settings.host}:${settings.port}`));
        return;
      }
      const port = uWS.us_socket_local_port(socket);
      let listening: us_listen_socket | null = socket;
      resolve({
        port,
        setLink(link) {
          env.link = link;
        },
        stopAccepting() {
          stopping = true;
          if (listening !== null) uWS.us_listen_socket_close(listening);
          listening = null;
        },
        close() {
          // In the native addon, not in its typings (docs/index.d.ts of this build).
          (app as TemplatedApp & { close(): void }).close();
          return Promise.resolve();
        },
        settled(timeoutMs) {
          if (env.inFlight === 0) return Promise.resolve();
          return new Promise((done) => {
            const timer = setTimeout(done, timeoutMs);
            env.onIdle = () => {
              clearTimeout(timer);
              done();
            };
          });
        },
      });
    });
  });
}
