// The state thread's side of HTTP_THREADS > 1: it starts the edge threads (edge/edge-thread.ts),
// runs the commands they send through the CommandExecutor, and posts each thread the answers of
// its commands, one frame per event-loop turn. It passes on what the edges must know (key changes,
// the write gate), answers their questions (/metrics summed over threads, /cluster), and stops
// them in order at shutdown. To main.ts it is the HTTP server (HttpServer).
import { sharedInFlight } from '../telemetry/shared-in-flight.ts';
import { createServer, type AddressInfo } from 'node:net';
import type { Worker } from 'node:worker_threads';
import type { KeyRecord } from '../auth/key-store.ts';
import { AnswerWriter, FrameError, readCommands } from '../handoff/frames.ts';
import type { EdgeMessage, EdgeStart, GateState, StateMessage } from '../handoff/thread-messages.ts';
import type { HttpServer } from '../http/server.ts';
import type { WriteGate } from '../http/write-gate.ts';
import type { Logger } from '../telemetry/logger.ts';
import { Metrics } from '../telemetry/metrics.ts';
import { moduleUrl, startThread } from '../workers/threads.ts';
import { StateHeartbeat } from '../edge/state-heartbeat.ts';
import { blockPointOnce, throwsNow } from '../config/fault-points.ts';
import type { CommandSink } from './command-sink.ts';
import type { ForwardAdmission, ForwardReply } from '../cluster/forward-protocol.ts';

/**
 * How often the gate (journal failed? leading?) is looked at for changes to pass on, and the
 * heartbeat stamped (edge/state-heartbeat.ts; one timer, one wakeup, for both).
 */
const GATE_POLL_MS = 50;
/** A scrape waits this long for every edge's share of /metrics. */
const COLLECT_TIMEOUT_MS = 2_000;
/**
 * A stopping edge gets this long to close its connections and end (it takes milliseconds):
 * under main.ts's EXIT_CLOSE_TIMEOUT_MS, so that a stuck edge is named in the log before the
 * process exits (at 2 s it exited first, with no word of why Node aborted).
 */
const CLOSE_TIMEOUT_MS = 1_000;

/**
 * A replacement edge that fails too (before it listened, or soon after) is started again after
 * RESTART_FIRST_MS, doubling up to RESTART_MAX_MS: never given up while the server runs, never a
 * tight loop. One that served RESTART_STABLE_MS or more starts its count again (at once).
 */
const RESTART_FIRST_MS = 100;
const RESTART_MAX_MS = 5_000;
const RESTART_STABLE_MS = 10_000;

/** Tries at an ephemeral port shared by the edge threads (PORT=0). */
const FREE_PORT_ATTEMPTS = 5;

/** A port free on `host` now (the kernel's pick for port 0). */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const port = (probe.address() as AddressInfo).port;
      probe.close(() => resolve(port));
    });
  });
}

const EDGE_ENTRY = moduleUrl('../edge/edge-thread', import.meta.url);

/** Ended edges' shares of /metrics kept apart; more are summed into one (EdgeThreads.retire). */
const MAX_RETIRED_SHARES = 4;

/** An ended edge's share of /metrics without its gauges: a gauge of a thread gone is no longer true, a count still is. */
function countsOnly(share: unknown): unknown {
  return Array.isArray(share) ? share.filter((metric: { type?: string }) => metric.type === 'counter' || metric.type === 'histogram') : [];
}

export interface EdgeThreadsOptions {
  count: number;
  /** The settings' own inputs: each edge parses them as the main thread did. */
  argv: string[];
  env: Record<string, string | undefined>;
  host: string;
  port: number;
  keys: () => KeyRecord[];
  gate: WriteGate;
  rateLimits: SharedArrayBuffer | null;
  openApiJson: string;
  clusterStatus: (() => Promise<string>) | null;
  /** Runs the edges' commands (the executor; on a follower, the forwarder to the leader). */
  sink: CommandSink;
  /** Cluster mode: runs the frames followers forward to this node (cluster/forward-endpoint.ts). */
  forwarded: ((secret: string, bytes: Buffer) => Promise<ForwardReply>) | null;
  /** Cluster mode: which forwards the edges read (passed on with the gate), as ForwardEndpoint.admission(). */
  forwardAdmission: (() => ForwardAdmission) | null;
  metrics: Metrics;
  log: Logger;
}

class Edge {
  readonly answers = new AnswerWriter();
  scheduled = false;
  listening = false;
  closing = false;
  exited = false;
  settledWaiters: (() => void)[] = [];
  closedWaiters: (() => void)[] = [];
  /** This edge's share of /metrics as it last sent it (prom-client JSON), or null. */
  lastMetrics: unknown = null;
  /** performance.now() when it said it listens. */
  listeningAtMs = 0;
  constructor(
    readonly index: number,
    readonly worker: Worker,
    /** 0: started with the server; n: the n-th replacement in a row for a thread that failed. */
    readonly attempt: number,
  ) {}

  post(message: StateMessage): void {
    this.worker.postMessage(message);
  }
}

export class EdgeThreads implements HttpServer {
  private readonly edges: Edge[] = [];
  private gateState: GateState;
  /** Polls the gate (until stopAccepting()) and stamps the heartbeat (until close()). */
  private ticker: NodeJS.Timeout | null = null;
  private nextCollect = 1;
  private readonly collecting = new Map<number, { answered: Set<Edge>; wanted: number; done: () => void }>();
  /**
   * The counters and histograms of edge threads that ended (their last share of /metrics):
   * added to every scrape, so that a thread replaced after a failure does not take its counts
   * with it. Before, intake_requests_total fell when an edge was replaced (Prometheus reads a
   * fall as a counter reset: a false spike in rate()); found by a review.
   */
  private readonly retiredMetrics: unknown[] = [];
  /** Whether retired shares are being summed into one (retire()). */
  private foldingRetired = false;
  private stopping = false;
  /** Replacements waiting to start (restart()): cancelled by close(). */
  private readonly restarts = new Set<NodeJS.Timeout>();
  /** Stamped every GATE_POLL_MS until close(): the edges' /readyz says 503 while it is stale. */
  private readonly heartbeat = StateHeartbeat.create();
  port = 0;

  private constructor(private readonly options: EdgeThreadsOptions) {
    this.gateState = this.readGate();
    this.tick();
    options.metrics.watchHttpThreads(() => this.edges.filter((e) => e.listening).length);
  }

  /** Starts the ticker (again, after a close()). */
  private tick(): void {
    this.heartbeat.beat();
    this.ticker ??= setInterval(() => {
      this.heartbeat.beat();
      if (!this.stopping) this.checkGate();
    }, GATE_POLL_MS);
    this.ticker.unref();
  }

  /** Starts `count` edge threads; the first fixes the port (when the setting is 0), the rest share it. */
  static async start(options: EdgeThreadsOptions): Promise<EdgeThreads> {
    const threads = new EdgeThreads(options);
    for (let attempt = 1; ; attempt++) {
      // uWS shares a port among threads (SO_REUSEPORT) only when it is named: an ephemeral one
      // (PORT=0) is picked here first. Another process may take it meanwhile: then pick again.
      threads.port = options.port !== 0 ? options.port : await freePort(options.host);
      try {
        await Promise.all(Array.from({ length: options.count }, (_, i) => threads.startEdge(i, threads.port)));
        return threads;
      } catch (error) {
        await threads.close();
        threads.stopping = false;
        threads.tick();
        if (options.port !== 0 || attempt >= FREE_PORT_ATTEMPTS) throw error;
      }
    }
  }

  private startEdge(index: number, port: number, attempt = 0): Promise<number> {
    const { options } = this;
    const start: EdgeStart = {
      index,
      argv: options.argv,
      env: options.env,
      port,
      keys: options.keys(),
      gate: this.gateState,
      heartbeat: this.heartbeat.buffer,
      rateLimits: options.rateLimits,
      openApiJson: options.openApiJson,
      clustered: options.clusterStatus !== null,
      attempt,
    };
    const worker = startThread(EDGE_ENTRY, start as unknown as Record<string, unknown>);
    const edge = new Edge(index, worker, attempt);
    this.edges[index] = edge;
    return new Promise((resolve, reject) => {
      worker.on('message', (message: EdgeMessage) => {
        if (message.t === 'listening') {
          edge.listening = true;
          edge.listeningAtMs = performance.now();
          resolve(message.port);
        } else if (message.t === 'listen-failed') reject(new Error(message.message));
        else this.onMessage(edge, message);
      });
      worker.on('error', (error) => {
        options.log.error({ err: error, edge: index }, 'an edge thread failed');
        reject(error);
      });
      worker.on('exit', (code) => {
        const served = edge.listening;
        edge.listening = false;
        edge.exited = true;
        if (edge.lastMetrics !== null) this.retire(edge.lastMetrics);
        edge.lastMetrics = null;
        for (const done of edge.closedWaiters.splice(0)) done();
        for (const done of edge.settledWaiters.splice(0)) done();
        reject(new Error(`edge thread ${index} ended before it listened (exit code ${code})`));
        // One of the first edges that did not listen: start() gives up or tries another port.
        if (this.stopping || edge.closing || (!served && attempt === 0)) return;
        // Its connections are gone with it (their clients see a reset and retry); the port is
        // still served by the others, and a new thread takes its place. A replacement that
        // failed to start is tried again, later: before, it was given up for good, and the
        // server ran on with one edge fewer (none, once each had failed so), up and answering
        // nothing (found by a review).
        const failures = served && performance.now() - edge.listeningAtMs >= RESTART_STABLE_MS ? 0 : attempt;
        const delayMs = failures === 0 ? 0 : Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** (failures - 1));
        options.log.error({ edge: index, code, listened: served, delayMs }, 'an edge thread ended; starting another');
        this.restart(index, failures + 1, delayMs);
      });
    });
  }

  /** Starts edge `index` again after `delayMs` (its exit handler schedules the next try if this one fails). */
  private restart(index: number, attempt: number, delayMs: number): void {
    const timer = setTimeout(() => {
      this.restarts.delete(timer);
      if (this.stopping) return;
      this.startEdge(index, this.port, attempt).catch((error: unknown) => this.options.log.error({ err: error, edge: index }, 'an edge thread could not be restarted; trying again'));
    }, delayMs);
    this.restarts.add(timer);
  }

  private onMessage(edge: Edge, message: EdgeMessage): void {
    switch (message.t) {
      case 'commands': {
        // Crash tests: the state thread stuck, as in a synchronous call that hangs.
        blockPointOnce('state-command');
        let commands;
        try {
          // Crash tests: a frame that cannot be read (only a bug makes one).
          if (throwsNow('state-frame')) throw new FrameError('test fault: state-frame');
          commands = readCommands({ text: message.text, blobs: message.blobs });
        } catch (error) {
          // A bug. The edge's requests in this frame would get no answer ever (and its graceful
          // stop would wait for them): that edge ends as after a bug of its own, its clients see
          // their connections reset (a write not answered may or may not be applied, and this
          // one was not), and another edge takes its place (found by a review).
          if (!(error instanceof FrameError)) throw error;
          this.options.log.error({ err: error, edge: edge.index }, 'an edge thread sent a malformed frame: ending it');
          edge.post({ t: 'fail', message: `the state thread could not read a frame of this edge's: ${error.message}` });
          return;
        }
        const reply = this.replyTo(edge);
        for (const command of commands) this.options.sink.run(command, reply);
        return;
      }
      case 'ask':
        void this.answerAsk(edge, message.id, message.what);
        return;
      case 'forward':
        void this.runForwarded(edge, message.id, message.secret, message.bytes);
        return;
      case 'metrics': {
        edge.lastMetrics = message.json;
        const scrape = this.collecting.get(message.id);
        if (scrape === undefined) return;
        scrape.answered.add(edge);
        if (scrape.answered.size === scrape.wanted) scrape.done();
        return;
      }
      case 'settled':
        for (const done of edge.settledWaiters.splice(0)) done();
        return;
      case 'closed':
        for (const done of edge.closedWaiters.splice(0)) done();
        return;
    }
  }

  /** The answers to one edge's commands: gathered, and posted once per turn. */
  private replyTo(edge: Edge): (answer: Parameters<AnswerWriter['add']>[0]) => void {
    return (answer) => {
      edge.answers.add(answer);
      if (edge.scheduled) return;
      edge.scheduled = true;
      setImmediate(() => {
        edge.scheduled = false;
        // A gate change goes out before the answers of this turn (one port keeps its order): a
        // client that got the 503 of a failed commit finds every edge refusing its next write.
        this.checkGate();
        if (edge.answers.count > 0) edge.post({ t: 'answers', text: edge.answers.take() });
      });
    };
  }

  /** A follower's frame an edge received: run here, answered back to that edge. */
  private async runForwarded(edge: Edge, id: number, secret: string, bytes: Uint8Array): Promise<void> {
    let reply: ForwardReply;
    try {
      if (this.options.forwarded === null) throw new Error('not in cluster mode');
      reply = await this.options.forwarded(secret, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    } catch (error) {
      this.options.log.error({ err: error }, 'running forwarded writes failed');
      reply = { status: 500, text: '{"type":"InternalError","message":"internal error"}', retryAfterSeconds: null };
    }
    edge.post({ t: 'forwarded', id, ...reply });
  }

  /**
   * Keeps an ended edge's counts. Past MAX_RETIRED_SHARES they are summed into one share: an edge
   * that kept failing (replaced every 5 s at most) added a share per replacement, which every
   * scrape summed again and memory kept for good (found by a review, 2026-11-29).
   */
  private retire(share: unknown): void {
    this.retiredMetrics.push(countsOnly(share));
    if (this.retiredMetrics.length <= MAX_RETIRED_SHARES || this.foldingRetired) return;
    this.foldingRetired = true;
    const parts = this.retiredMetrics.slice();
    void Metrics.foldShares(parts)
      .then((sum) => {
        // In one step, and only the parts summed (more may have retired meanwhile): a scrape
        // sees the retired counts as the parts or as their sum, never as neither.
        this.retiredMetrics.splice(0, parts.length, countsOnly(sum));
        this.options.log.info({ shares: parts.length }, 'summed the metrics of ended edge threads into one share');
      })
      .catch((error: unknown) => this.options.log.warn({ err: error }, 'summing the metrics of ended edge threads failed; they stay apart'))
      .finally(() => {
        this.foldingRetired = false;
      });
  }

  /** Every edge's asks share one scrape, and one status, at a time (shared-in-flight.ts). */
  private readonly summedMetrics = sharedInFlight(async () => this.options.metrics.summedWith(await this.collect()));
  private readonly clusterStatus = sharedInFlight(async () => {
    const status = this.options.clusterStatus;
    if (status === null) throw new Error('not in cluster mode');
    return status();
  });

  private async answerAsk(edge: Edge, id: number, what: 'metrics' | 'cluster'): Promise<void> {
    try {
      if (what === 'metrics') {
        const text = await this.summedMetrics();
        edge.post({ t: 'told', id, status: 200, text, contentType: this.options.metrics.registry.contentType });
      } else {
        edge.post({ t: 'told', id, status: 200, text: await this.clusterStatus(), contentType: 'application/json' });
      }
    } catch (error) {
      this.options.log.error({ err: error, what }, 'answering an edge thread failed');
      edge.post({ t: 'told', id, status: 500, text: (error as Error).message, contentType: 'text/plain' });
    }
  }

  /**
   * Every listening edge's share of /metrics, and the ended ones' counts. An edge that does not
   * answer in time counts with its share of the scrape before (counters never fall).
   */
  private collect(): Promise<unknown[]> {
    const edges = this.edges.filter((e) => e.listening);
    const shares = (): unknown[] => [...this.retiredMetrics, ...edges.flatMap((e) => (e.lastMetrics === null ? [] : [e.lastMetrics]))];
    if (edges.length === 0) return Promise.resolve(shares());
    const id = this.nextCollect++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const scrape = this.collecting.get(id);
        this.collecting.delete(id);
        this.options.log.warn({ answered: scrape?.answered.size ?? 0, edges: edges.length }, 'an edge thread did not send its metrics in time; its last share counts');
        resolve(shares());
      }, COLLECT_TIMEOUT_MS);
      this.collecting.set(id, {
        answered: new Set(),
        wanted: edges.length,
        done: () => {
          clearTimeout(timer);
          this.collecting.delete(id);
          resolve(shares());
        },
      });
      for (const edge of edges) edge.post({ t: 'collect', id });
    });
  }

  private readGate(): GateState {
    return { refusal: this.options.gate.refusal(), notReady: this.options.gate.notReady(), forward: this.options.forwardAdmission?.() ?? null };
  }

  private checkGate(): void {
    const now = this.readGate();
    const was = this.gateState;
    if (
      now.notReady === was.notReady &&
      now.refusal?.message === was.refusal?.message &&
      now.refusal?.retryAfterSeconds === was.refusal?.retryAfterSeconds &&
      now.forward?.open === was.forward?.open &&
      now.forward?.secret === was.forward?.secret
    ) {
      return;
    }
    this.gateState = now;
    for (const edge of this.edges) edge?.post({ t: 'gate', gate: now });
  }

  /** The stored keys changed (the main thread's poll): every edge reads them at once. */
  keysChanged(keys: KeyRecord[]): void {
    for (const edge of this.edges) edge?.post({ t: 'keys', keys });
  }

  stopAccepting(): void {
    this.stopping = true;
    for (const edge of this.edges) edge.post({ t: 'stop' });
  }

  async settled(timeoutMs: number): Promise<void> {
    await Promise.all(
      this.edges.map(
        (edge) =>
          new Promise<void>((done) => {
            if (!edge.listening) return done();
            edge.settledWaiters.push(done);
            edge.post({ t: 'settle', timeoutMs });
          }),
      ),
    );
  }

  /** Closes every edge's connections and waits for the threads to end (Node aborts on exit otherwise). */
  async close(): Promise<void> {
    this.stopping = true;
    if (this.ticker !== null) clearInterval(this.ticker);
    this.ticker = null;
    for (const timer of this.restarts) clearTimeout(timer);
    this.restarts.clear();
    await Promise.all(
      this.edges.map(async (edge) => {
        if (edge.exited) return;
        edge.closing = true;
        const ended = new Promise<void>((done) => edge.worker.once('exit', () => done()));
        edge.post({ t: 'close' });
        const timer = new Promise<void>((done) => setTimeout(done, CLOSE_TIMEOUT_MS).unref());
        await Promise.race([ended, timer]);
        // Stuck (a synchronous call that does not return): its connections stay open, and Node
        // aborts (SIGABRT) when the process exits with them. Nothing can close them from this
        // thread; the journal is closed by then. Said, so the abort has a cause in the log.
        if (!edge.exited) this.options.log.error({ edge: edge.index, closeTimeoutMs: CLOSE_TIMEOUT_MS }, 'an edge thread did not close its connections in time (stuck): Node aborts as the process exits');
      }),
    );
  }
}
