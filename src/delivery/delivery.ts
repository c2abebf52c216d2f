// The main thread's side of delivery: starts the delivery worker (delivery-worker.ts) when a
// sink is configured, publishes the journal's durable position to it, turns its reports into
// metrics, restarts it if it dies or hangs, stops it at shutdown, and tells retention how far
// every sink has confirmed. Nothing here is on a request's path: writes never wait for a sink.
//
// A worker that hangs (its event loop no longer turns: a bug, a native call that never
// returns) would deliver nothing and never die. It beats a heartbeat into the shared buffer
// (durable-signal.ts); when the beats stop for DELIVERY_STALL_TIMEOUT_MS it is terminated and
// started again, every sink counted as stalled and down meanwhile. (A sink call that never
// returns is the delivery loop's own deadline, delivery-loop.ts.)
import type { Worker } from 'node:worker_threads';
import type { Settings } from '../config/settings.ts';
import type { Journal } from '../journal/journal.ts';
import type { Store } from '../journal/store.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import { SinkMetrics } from '../telemetry/metrics.ts';
import { moduleUrl, startThread } from '../workers/threads.ts';
import type { DeliveryWorkerData, MainMessage, WorkerMessage } from './delivery-worker.ts';
import { DurableSignal, watchHeartbeat } from './durable-signal.ts';
import { sinkConfigs } from './sink-config.ts';
import { readConfirmed, saveConfirmed } from './positions.ts';
import { sinkId, type Confirmed, type SinkConfig } from './sink.ts';

/** A sink's id (sink.ts sinkId) and the position it confirmed. */
export interface SinkPosition {
  sink: string;
  confirmed: Confirmed;
}

/** A worker that died (a bug, an out-of-memory) is started again after this. */
const RESTART_AFTER_MS = 1_000;
/** A worker just started gets at least this long for its first beats (loading modules, LMDB). */
const STARTUP_ALLOWANCE_MS = 10_000;

export class Delivery {
  private readonly settings: Settings;
  private readonly store: Store;
  private readonly journal: Journal;
  private readonly log: Logger;
  private readonly configs: SinkConfig[];
  private readonly signal = new DurableSignal();
  private readonly metrics: SinkMetrics | null = null;
  private worker: Worker | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private stopWatching: (() => void) | null = null;
  private stopping = false;
  private watchingDurable = false;
  /**
   * Each sink's position as the worker last reported it (a confirmed batch, or where the sink was
   * found on connecting), by sink id: LMDB's copy catches up when the worker's save lands, so
   * this one, when there is one, is the newer. It may be lower than LMDB's: a NATS stream deleted
   * and created again is found at 0 (before 2026-11-29 only batches were reported, and the
   * leader shared the deleted stream's position until the new stream confirmed a batch; a new
   * leader that adopted it could trim records the new stream never got; found by a review).
   */
  private readonly reported = new Map<string, Confirmed>();
  /**
   * Workers being stopped (stop() until each ended). All of them, not the latest only: a newer
   * worker that ended first let adopt() and a final stop() go on while an older one was still
   * saving its positions (found by a review, 2026-11-28).
   */
  private readonly stoppingWorkers = new Set<Promise<void>>();
  /** Called after each batch a sink confirmed, and when a sink's position was found or moved (cluster mode: the leader shares the positions). */
  onDelivered: (() => void) | null = null;

  constructor(settings: Settings, store: Store, journal: Journal, metrics: Metrics, log: Logger) {
    this.settings = settings;
    this.store = store;
    this.journal = journal;
    this.log = log;
    this.configs = sinkConfigs(settings);
    if (this.configs.length > 0) {
      const saved = new Map(this.configs.map((config) => [config.kind, store.delivery.get(sinkId(config)) ?? 0] as const));
      this.metrics = new SinkMetrics(metrics.registry, saved, () => journal.durableSeq);
    }
  }

  get enabled(): boolean {
    return this.configs.length > 0;
  }

  /**
   * Starts delivering (again, after a stop: in cluster mode delivery runs on the leader only and
   * starts each time this node becomes leader).
   */
  start(): void {
    if (!this.enabled || this.worker !== null) return;
    this.stopping = false;
    this.metrics?.deliveringNow(true);
    this.signal.publish(this.journal.durableSeq);
    if (!this.watchingDurable) {
      this.watchingDurable = true;
      this.journal.watchDurable((seq) => this.signal.publish(seq));
    }
    this.spawn();
  }

  /**
   * The seq every configured sink has confirmed (saved in LMDB): retention keeps every record
   * after it. null when no sink is configured.
   */
  confirmedSeq(): number | null {
    if (!this.enabled) return null;
    return Math.min(...this.configs.map((config) => this.store.delivery.get(sinkId(config)) ?? 0));
  }

  /** Every configured sink's saved position (cluster mode: the leader shares them, cluster/sink-positions.ts). */
  positions(): SinkPosition[] {
    const out: SinkPosition[] = [];
    for (const config of this.configs) {
      const id = sinkId(config);
      const saved = readConfirmed(this.store, id);
      const reported = this.reported.get(id) ?? null;
      const confirmed = reported ?? saved;
      if (confirmed !== null) out.push({ sink: id, confirmed });
    }
    return out;
  }

  /** A sink's position as the worker reported it (`kind`: the sink's kind), shared in cluster mode. */
  private noteReported(kind: string, confirmed: Confirmed): void {
    const config = this.configs.find((c) => c.kind === kind);
    if (config !== undefined) this.reported.set(sinkId(config), confirmed);
    this.onDelivered?.();
  }

  /**
   * Takes the positions the cluster's last leader saved (read when this node starts leading),
   * before delivery starts. Without them a node that never delivered found a NATS stream its
   * consumer had emptied, knew none of it, and published the whole journal again (found by a
   * review). They replace this node's own even when its seq is higher: its own may be of a
   * stream since deleted and created again, and any position a sink confirmed in its current
   * stream is a right one to start from (open() asks the sink where it stands, and a NATS
   * position of the chain tells every later stream sequence's record).
   */
  async adopt(positions: readonly SinkPosition[]): Promise<number> {
    // A worker of an earlier leadership may still be stopping: its last save must come first.
    await Promise.all(this.stoppingWorkers);
    if (this.worker !== null) return 0;
    const configured = new Set(this.configs.map(sinkId));
    let adopted = 0;
    for (const { sink, confirmed } of positions) {
      if (!configured.has(sink)) continue;
      // What an earlier worker of this node reported is older than what the cluster holds now.
      this.reported.delete(sink);
      const own = readConfirmed(this.store, sink);
      if (own !== null && own.seq === confirmed.seq && JSON.stringify(own.marker) === JSON.stringify(confirmed.marker)) continue;
      await saveConfirmed(this.store, sink, confirmed);
      adopted++;
    }
    return adopted;
  }

  /** Lets each sink finish its batch and save its position; gives up after `timeoutMs`. */
  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    this.metrics?.deliveringNow(false);
    if (this.restartTimer !== null) clearTimeout(this.restartTimer);
    this.stopWatching?.();
    const worker = this.worker;
    // None, or one that died and waited to be started again: nothing to stop but the workers
    // stopped earlier, which may still be saving (each gives up after its own timeout).
    if (worker === null) {
      await Promise.all(this.stoppingWorkers);
      return;
    }
    // No longer the current worker: a start() meanwhile spawns a new one, and this one's exit
    // does not restart anything.
    this.worker = null;
    // This worker's own 'stopped' message (a shared field let an older worker's message end a
    // newer stop() before that worker had saved its positions; found by a review).
    const done = new Promise<void>((resolve) => {
      worker.on('message', (message: WorkerMessage) => {
        if (message.type === 'stopped') resolve();
      });
      worker.once('exit', () => resolve());
    });
    const stopping = done.then(() => {
      this.stoppingWorkers.delete(stopping);
    });
    this.stoppingWorkers.add(stopping);
    worker.postMessage({ type: 'stop' } satisfies MainMessage);
    this.signal.wake();
    const timer = setTimeout(() => {
      this.log.warn('delivery did not stop in time; its positions are behind, the sinks know where they are');
      void worker.terminate();
    }, timeoutMs);
    await done;
    clearTimeout(timer);
    await worker.terminate();
  }

  private spawn(): void {
    const data: Omit<DeliveryWorkerData, 'entry'> = {
      dataDir: this.settings.dataDir,
      logLevel: this.settings.logLevel,
      signal: this.signal.buffer,
      sinks: this.configs,
      options: {
        batchRecords: this.settings.deliveryBatchRecords,
        batchBytes: this.settings.deliveryBatchBytes,
        retryMaxMs: this.settings.deliveryRetryMaxMs,
        lingerMs: this.settings.deliveryLingerMs,
        stallTimeoutMs: this.settings.deliveryStallTimeoutMs,
      },
    };
    const worker = startThread(moduleUrl('./delivery-worker', import.meta.url), data, { name: 'delivery' });
    this.worker = worker;
    worker.on('message', (message: WorkerMessage) => {
      if (message.type === 'state') this.metrics?.state(message.sink, message.up);
      else if (message.type === 'delivered') {
        this.metrics?.delivered(message.sink, message.seq, message.records, message.seconds);
        this.noteReported(message.sink, message.confirmed);
      } else if (message.type === 'position') {
        this.metrics?.position(message.sink, message.confirmed.seq);
        this.noteReported(message.sink, message.confirmed);
      }
      else if (message.type === 'stalled') this.metrics?.stalled(message.sink);
      // 'stopped': stop() listens for it.
    });
    worker.on('error', (error) => this.log.error({ err: error }, 'delivery worker failed'));
    this.watch(worker);
    worker.on('exit', (code) => {
      // A worker stopped on purpose (stop() let go of it already) restarts nothing.
      if (this.worker !== worker) return;
      this.worker = null;
      if (this.stopping) return;
      this.log.error({ code }, `delivery worker exited; starting it again in ${RESTART_AFTER_MS} ms`);
      for (const config of this.configs) this.metrics?.state(config.kind, false);
      this.restartTimer = setTimeout(() => {
        this.restartTimer = null;
        if (!this.stopping) this.spawn();
      }, RESTART_AFTER_MS);
      this.restartTimer.unref();
    });
  }

  /** Terminates `worker` (its exit handler starts a new one) when its heartbeat stops. */
  private watch(worker: Worker): void {
    this.stopWatching?.();
    const timeoutMs = this.settings.deliveryStallTimeoutMs;
    this.stopWatching = watchHeartbeat(this.signal, timeoutMs, Math.max(0, STARTUP_ALLOWANCE_MS - timeoutMs), (silentMs) => {
      if (this.worker !== worker || this.stopping) return;
      this.log.error({ silentMs }, `delivery worker stalled: no heartbeat for ${timeoutMs} ms; terminating it`);
      for (const config of this.configs) {
        this.metrics?.stalled(config.kind);
        this.metrics?.state(config.kind, false);
      }
      void worker.terminate();
    });
  }
}
