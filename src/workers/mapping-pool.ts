// The piscina pool that takes big mapping bodies off the main thread. The body's bytes are
// transferred to the worker (not copied); a task that takes too long is aborted, a worker that
// dies (crash, heap limit) is replaced by piscina, and either way that request gets a 500.
//
// A task is handed to piscina only when a worker is free, so piscina's own queue stays empty, and
// its timeout (MAPPING_WORKER_TIMEOUT_MS) starts when the worker says it started the task, not
// while the task waits (issue 17: a burst of big or gzip mappings got 500 for requests that never
// ran). Bodies wait in our own FIFO queue instead, bounded in tasks (MAPPING_WORKER_QUEUE_MAX)
// and in bytes as received (MAPPING_WORKER_QUEUE_BYTES); when it is full, parse() refuses the
// body at once and the request gets 503 with Retry-After.
//
// A parsed mapping then waits for its turn in its catalog's line, which can be long: workers
// parse faster than a catalog applies big mappings (in slices, paced beside other writes). Those
// results count against the same two limits until the route releases them (their turn has
// come), in place of their bodies, at their own size: before, they were counted nowhere, and a
// burst of big mappings to one catalog held 1.2 GB with limits of 2 bodies and 8 MiB (found by
// a review). The one a catalog is applying no longer counts: it would hold back other
// catalogs' mappings for as long as it takes.
import { MessageChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { Encoding } from '../http/body.ts';
import type { MappingTask, MappingTaskResult } from './mapping-result.ts';
import { moduleUrl } from './threads.ts';

export interface MappingPoolSettings {
  mappingWorkers: number;
  mappingWorkerThresholdBytes: number;
  mappingWorkerTimeoutMs: number;
  mappingWorkerMaxMemoryMb: number;
  mappingWorkerQueueMax: number;
  mappingWorkerQueueBytes: number;
}

/** How much lower the workers' scheduling priority is than the main thread's (Linux nice). */
const WORKER_NICE_INCREMENT = 10;

/** Retry-After of a refused body: the queue's expected wait, within these bounds (seconds). */
const RETRY_AFTER_MIN_S = 1;
const RETRY_AFTER_MAX_S = 60;
/** What a task is assumed to take before any has finished; then a moving average (weight of the newest). */
const FIRST_TASK_MS_GUESS = 1000;
const TASK_MS_WEIGHT = 0.2;

/** Entries already started are dropped from the front of the queue once there are this many. */
const COMPACT_AFTER = 1024;
/**
 * close() waits at most this long for the workers to finish loading the task module. Node 20
 * aborts the whole process (FATAL ERROR: v8::Module::IsGraphAsync) when a worker is terminated
 * while it is still loading its ES module through require(): a SIGTERM right after a start
 * exited 134 instead of 0 (found 2026-11-24: 5 of 135 stops sent right after the first answer,
 * and a cluster test that stops a node right after it joined).
 */
const CLOSE_WAIT_FOR_LOAD_MS = 5_000;
/** Runs an empty body (answered "malformed" at once) on a worker: it settles once that worker has loaded. */
function loadProbe(pool: Piscina<MappingTask, MappingTaskResult>): Promise<unknown> {
  const { port1, port2 } = new MessageChannel();
  const task: MappingTask = { bytes: new ArrayBuffer(0), gzip: false, limitBytes: 1, maxItems: 1, fingerprint: false, started: port2 };
  return pool.run(task, { transferList: [task.bytes, port2] }).finally(() => port1.close());
}

/** A body's own ArrayBuffer (so it can be transferred), copying only when the Buffer is a view. */
function ownBuffer(body: Buffer): ArrayBuffer {
  const whole = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength;
  return (whole ? body.buffer : body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength)) as ArrayBuffer;
}

interface Waiting {
  task: Omit<MappingTask, 'started'>;
  resolve(result: MappingTaskResult): void;
  reject(error: unknown): void;
}

/**
 * The server is stopping: a body still waiting for a worker, or in one when the workers end, was
 * not applied, and its request gets 503 with Retry-After (it got 500 InternalError, logged as a
 * failure, before; found by a review).
 */
export class MappingPoolClosedError extends Error {
  constructor() {
    super('the server is shutting down; the mapping was not applied');
  }
}

/** A body taken by parse(): its result, and release(), called when its catalog's turn comes (or it failed). */
export interface MappingTicket {
  readonly result: Promise<MappingTaskResult>;
  release(): void;
}

/** About what a parsed mapping holds while it waits for its catalog's turn (its ids as one string, their lengths and indexes, the packed copy). */
function resultBytes(result: MappingTaskResult): number {
  if (result.kind === 'ok') return result.text.length * 2 + result.lengths.byteLength + result.firstIndex.byteLength + result.packed.byteLength;
  return result.kind === 'invalid' ? 64 * result.details.length : result.message.length * 2;
}

/**
 * Whether a mapping body goes to a worker raw: a function of the settings alone, so an edge thread
 * (which has no pool; it sends such a body to the state thread raw) decides as the pool would.
 */
export function offloadsMapping(settings: Pick<MappingPoolSettings, 'mappingWorkers' | 'mappingWorkerThresholdBytes'>, sizeBytes: number, encoding: Encoding): boolean {
  return settings.mappingWorkers > 0 && (sizeBytes > settings.mappingWorkerThresholdBytes || encoding === 'gzip');
}

export class MappingPool {
  /**
   * Made at the first body that needs a worker, not at start: a worker loads its own copy of
   * the schemas (TypeBox's 218 modules among them), about 320 ms of CPU (measured 2026-11-28),
   * which every start paid and most servers never use. The first big mapping waits for it once.
   */
  private pool: Piscina<MappingTask, MappingTaskResult> | null = null;
  private readonly settings: MappingPoolSettings;
  /** Tasks handed to piscina and not settled: at most one per worker. */
  private running = 0;
  private queue: Array<Waiting | null> = [];
  private head = 0;
  private queuedBytes = 0;
  /** close() was called: tasks that fail from now on failed because the workers are ending. */
  private closing = false;
  /** Parsed results not yet released (waiting for their catalog's turn), and their bytes. */
  private parsedHeld = 0;
  private parsedHeldBytes = 0;
  /** Moving average of how long a task takes in a worker, for Retry-After. */
  private taskMs = FIRST_TASK_MS_GUESS;
  /** Settles once every worker has run a loadProbe() (so has loaded the task module): see close(). */
  private loaded: Promise<unknown> = Promise.resolve();
  /** Load probes answered (about the workers that have loaded: piscina may give two probes to one). */
  private loadedWorkers = 0;

  constructor(settings: MappingPoolSettings) {
    this.settings = settings;
  }

  get enabled(): boolean {
    return this.settings.mappingWorkers > 0;
  }

  /** The workers, started at the first call. */
  private workers(): Piscina<MappingTask, MappingTaskResult> {
    if (this.pool !== null) return this.pool;
    const threads = this.settings.mappingWorkers;
    const pool = new Piscina<MappingTask, MappingTaskResult>({
      filename: moduleUrl('./mapping-task', import.meta.url),
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: Number.POSITIVE_INFINITY,
      resourceLimits: { maxOldGenerationSizeMb: this.settings.mappingWorkerMaxMemoryMb },
      // Parsing a big body is never urgent; answering small requests is. On a busy machine
      // the OS gives the event loop the core first.
      niceIncrement: WORKER_NICE_INCREMENT,
    });
    // One probe per worker at once: piscina gives a worker one task at a time. Queued before
    // any real task, so they settle once the workers have loaded.
    this.loaded = Promise.allSettled(Array.from({ length: threads }, () => loadProbe(pool).then(() => this.loadedWorkers++)));
    this.pool = pool;
    return pool;
  }

  /** Big bodies, and every gzip one (inflating can be heavy whatever the wire size), go to a worker. */
  shouldOffload(sizeBytes: number, encoding: Encoding): boolean {
    return offloadsMapping(this.settings, sizeBytes, encoding);
  }

  /** Workers that have loaded the task module: none until the first body that needs one. */
  get startedWorkers(): number {
    return this.loadedWorkers;
  }

  /** Bodies waiting for a worker. */
  get queued(): number {
    return this.queue.length - this.head;
  }

  /** Mappings held beside those in a worker: bodies waiting for one, and results waiting to be applied. */
  get waiting(): number {
    return this.queued + this.parsedHeld;
  }

  /**
   * Hands the body to a free worker, or queues it for the next one. Returns null, keeping
   * nothing, when every worker is busy and the queue is full (MAPPING_WORKER_QUEUE_MAX bodies,
   * or this one would take it over MAPPING_WORKER_QUEUE_BYTES): the caller answers 503 with
   * retryAfterSeconds().
   */
  parse(body: Buffer, encoding: Encoding, limitBytes: number, maxItems: number, fingerprint: boolean): MappingTicket | null {
    if (!this.enabled) return { result: Promise.reject(new Error('the mapping worker pool is off')), release: () => undefined };
    const mustWait = this.running >= this.settings.mappingWorkers || this.waiting > 0;
    if (mustWait && (this.waiting >= this.settings.mappingWorkerQueueMax || this.queuedBytes + this.parsedHeldBytes + body.byteLength > this.settings.mappingWorkerQueueBytes)) return null;
    const bytes = ownBuffer(body);
    const task = { bytes, gzip: encoding === 'gzip', limitBytes, maxItems, fingerprint };
    // From its result until release(): held at its own size.
    const ticket = { state: 'parsing' as 'parsing' | 'held' | 'released', bytes: 0 };
    const result = new Promise<MappingTaskResult>((resolve, reject) => {
      this.queue.push({ task, resolve, reject });
      this.queuedBytes += bytes.byteLength;
      this.startWaiting();
    }).then((parsed) => {
      if (ticket.state === 'parsing') {
        ticket.state = 'held';
        ticket.bytes = resultBytes(parsed);
        this.parsedHeld++;
        this.parsedHeldBytes += ticket.bytes;
      }
      return parsed;
    });
    const release = (): void => {
      if (ticket.state === 'held') {
        this.parsedHeld--;
        this.parsedHeldBytes -= ticket.bytes;
      }
      ticket.state = 'released';
    };
    return { result, release };
  }

  /** Whole seconds (1 to 60) until the queue has likely room again: what it holds, at the recent pace. */
  retryAfterSeconds(): number {
    const workers = Math.max(1, this.settings.mappingWorkers);
    // Parsed mappings waiting for their turn are counted as if they were still to parse: their
    // wait is their catalog's, of the same order.
    const seconds = Math.ceil((((this.queued + this.running + this.parsedHeld) / workers) * this.taskMs) / 1000);
    return Math.min(RETRY_AFTER_MAX_S, Math.max(RETRY_AFTER_MIN_S, seconds));
  }

  /** Starts queued tasks, oldest first, while a worker is free. */
  private startWaiting(): void {
    while (this.running < this.settings.mappingWorkers && this.head < this.queue.length) {
      const next = this.queue[this.head]!;
      this.queue[this.head++] = null;
      this.queuedBytes -= next.task.bytes.byteLength;
      // A body that comes while the server stops starts no workers.
      if (this.closing) {
        next.reject(new MappingPoolClosedError());
        continue;
      }
      this.running++;
      this.run(this.workers(), next);
    }
    if (this.head >= COMPACT_AFTER) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }

  /**
   * Hands one task to piscina (a worker is free, or being replaced after a failure). Its timeout
   * starts when the worker says it has started the task: the time a replacement worker takes to
   * start is not the task's (under load that can be seconds, and counting it made every task
   * after a timeout time out too).
   */
  private run(pool: Piscina<MappingTask, MappingTaskResult>, waiting: Waiting): void {
    const { port1, port2 } = new MessageChannel();
    const abort = new AbortController();
    const timeoutMs = this.settings.mappingWorkerTimeoutMs;
    let startedAt = performance.now();
    let timer: NodeJS.Timeout | null = null;
    port1.once('message', () => {
      startedAt = performance.now();
      timer = setTimeout(() => abort.abort(new Error(`the mapping worker took longer than MAPPING_WORKER_TIMEOUT_MS (${timeoutMs} ms)`)), timeoutMs);
    });
    const task: MappingTask = { ...waiting.task, started: port2 };
    const done = (): void => {
      if (timer !== null) clearTimeout(timer);
      port1.close();
      this.taskDone(startedAt);
    };
    pool.run(task, { transferList: [task.bytes, port2], signal: abort.signal }).then(
      (result) => {
        done();
        waiting.resolve(result);
      },
      (error: unknown) => {
        done();
        waiting.reject(this.closing ? new MappingPoolClosedError() : error);
      },
    );
  }

  private taskDone(startedAt: number): void {
    this.running--;
    this.taskMs += (performance.now() - startedAt - this.taskMs) * TASK_MS_WEIGHT;
    this.startWaiting();
  }

  /** Fails the bodies still waiting (the server is stopping), then ends the workers. */
  async close(): Promise<void> {
    this.closing = true;
    const waiting = this.queue.slice(this.head);
    this.queue = [];
    this.head = 0;
    this.queuedBytes = 0;
    for (const entry of waiting) entry?.reject(new MappingPoolClosedError());
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.loaded, new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_FOR_LOAD_MS)))]);
    clearTimeout(timer);
    await this.pool?.destroy();
  }
}
