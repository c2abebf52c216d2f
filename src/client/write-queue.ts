// The bounded in-memory queue: writes wait here until a batch takes them, and count against the
// limits until they are settled (in flight included: that memory is held too). A batch leaves
// when it is full (items or bytes), when its oldest write has waited flushIntervalMs, or on flush().
import { ClientClosedError, QueueFullError } from './errors.ts';
import type { ResolvedOptions } from './options.ts';
import { sendBatch, type BatchSlots, type QueuedWrite, type ServerProgress } from './batch-sender.ts';
import { itemJson, type ItemJson } from './item-json.ts';
import type { WriteMethod } from './types.ts';

/**
 * A held write: one object per write, keeping its promise's own resolve and reject (no closures
 * made per write; they were a fifth of the client's garbage per item, profiled).
 */
class HeldWrite implements QueuedWrite {
  /** performance.now(): a step of the wall clock moves neither the flush timer nor the deadline. */
  readonly enqueuedAtMs = performance.now();
  private settled = false;

  constructor(
    private readonly queue: WriteQueue,
    readonly seq: number,
    readonly method: WriteMethod,
    readonly path: string,
    readonly idempotencyKey: string,
    /** The body's JSON (undefined: none), made once; the batch item is written around it (item-json.ts). */
    readonly bodyJson: string | undefined,
    /** UTF-8 bytes of the whole batch item. */
    readonly bytes: number,
    private readonly onResolve: (value: unknown) => void,
    private readonly onReject: (error: unknown) => void,
  ) {}

  // The caller's promise settles before flush() waiters are woken, so that code awaiting close()
  // finds every write's own handlers already run.
  resolve(value: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.onResolve(value);
    this.queue.release(this);
  }

  reject(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.onReject(error);
    this.queue.release(this);
  }
}

interface FlushWaiter {
  seq: number;
  resolve: () => void;
}

/** What a woken waiter's place holds until the prefix is dropped (no reference to its promise). */
const DONE_WAITER: FlushWaiter = { seq: -1, resolve: () => undefined };

export interface QueueStats {
  /** Writes not yet settled (waiting or in flight). */
  heldItems: number;
  heldBytes: number;
  /** Writes waiting for a batch. */
  waitingItems: number;
  batchesInFlight: number;
}

export class WriteQueue {
  private readonly waiting: HeldWrite[] = [];
  private waitingBytes = 0;
  private heldItems = 0;
  private heldBytes = 0;
  /** Batches holding a slot (being sent, or waiting to retry). */
  private inFlight = 0;
  /** Batches taken from `waiting` and not yet settled: in flight, or made ready for the next slot. */
  private taken = 0;
  private readonly slotWaiters: Array<() => void> = [];
  private nextSeq = 1;
  /** Writes up to this seq leave even in a partial batch (a flush or the timer asked for them). */
  private forceUpToSeq = 0;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Resolvers of flush() calls, each waiting for every write up to its seq to settle; in seq order. */
  private readonly flushWaiters: FlushWaiter[] = [];
  /** flushWaiters before this index are woken already. */
  private flushHead = 0;
  /** Seqs not yet settled, to know when a flush is done (a write may settle out of order with concurrent batches). */
  private readonly unsettled = new Set<number>();
  /** Every seq below this one is settled (amortised O(1) per write, where a scan of `unsettled` would be O(n)). */
  private lowestUnsettledSeq = 1;
  /** When the server last settled one of these writes: a batch's deadline counts from it (batchDeadlineAtMs). */
  private readonly progress: ServerProgress = { lastSettledAtMs: -Infinity };

  constructor(private readonly options: ResolvedOptions) {}

  stats(): QueueStats {
    return { heldItems: this.heldItems, heldBytes: this.heldBytes, waitingItems: this.waiting.length, batchesInFlight: this.inFlight };
  }

  enqueue<T>(method: WriteMethod, path: string, body: unknown, idempotencyKey: string): Promise<T> {
    if (this.closed) return Promise.reject(new ClientClosedError());
    let item: ItemJson;
    try {
      item = itemJson(method, path, body, idempotencyKey);
    } catch (error) {
      // A body JSON cannot carry (a BigInt, a cycle): a rejected promise like every other refusal, not a throw.
      return Promise.reject(error);
    }
    const { bodyJson, bytes } = item;
    if (this.heldItems + 1 > this.options.maxQueueItems) return Promise.reject(new QueueFullError('maxQueueItems', this.options.maxQueueItems));
    // One write bigger than the whole byte limit would never fit: let it through alone when nothing else is held.
    if (this.heldBytes + bytes > this.options.maxQueueBytes && this.heldItems > 0) return Promise.reject(new QueueFullError('maxQueueBytes', this.options.maxQueueBytes));
    return new Promise<T>((resolve, reject) => {
      const write = new HeldWrite(this, this.nextSeq++, method, path, idempotencyKey, bodyJson, bytes, resolve as (value: unknown) => void, reject);
      this.waiting.push(write);
      this.unsettled.add(write.seq);
      this.heldItems++;
      this.heldBytes += bytes;
      this.waitingBytes += bytes;
      this.dispatch();
    });
  }

  /** A write's promise has settled (HeldWrite calls this after the caller's own handlers are queued). */
  release(write: HeldWrite): void {
    this.heldItems--;
    this.heldBytes -= write.bytes;
    this.unsettled.delete(write.seq);
    this.wakeFlushes();
  }

  /** Sends everything queued now, and resolves once all of it is settled (never rejects: each write's promise has its outcome). */
  flush(): Promise<void> {
    const seq = this.nextSeq - 1;
    this.forceUpToSeq = Math.max(this.forceUpToSeq, seq);
    const done = new Promise<void>((resolve) => this.flushWaiters.push({ seq, resolve }));
    this.dispatch();
    this.wakeFlushes();
    return done;
  }

  /** Refuses new writes, then flushes. */
  close(): Promise<void> {
    this.closed = true;
    return this.flush();
  }

  private wakeFlushes(): void {
    if (this.flushHead === this.flushWaiters.length) return;
    while (this.lowestUnsettledSeq < this.nextSeq && !this.unsettled.has(this.lowestUnsettledSeq)) this.lowestUnsettledSeq++;
    const oldest = this.lowestUnsettledSeq < this.nextSeq ? this.lowestUnsettledSeq : Infinity;
    // Waiters are in seq order (each takes the newest seq when it calls): the done ones are a
    // prefix, woken from the head. A release costs O(1) however many flushes wait (a filter of
    // the whole list per settled write made n flush() calls O(n²)).
    const waiters = this.flushWaiters;
    while (this.flushHead < waiters.length && waiters[this.flushHead]!.seq < oldest) {
      const waiter = waiters[this.flushHead]!;
      waiters[this.flushHead++] = DONE_WAITER;
      waiter.resolve();
    }
    // The woken prefix is dropped once it is most of the list (amortised O(1) per waiter).
    if (this.flushHead === waiters.length) {
      waiters.length = 0;
      this.flushHead = 0;
    } else if (this.flushHead > 1024 && this.flushHead * 2 > waiters.length) {
      waiters.splice(0, this.flushHead);
      this.flushHead = 0;
    }
  }

  private batchReady(): boolean {
    const head = this.waiting[0];
    if (head === undefined) return false;
    return this.waiting.length >= this.options.maxBatchItems || this.waitingBytes >= this.options.maxBatchBytes || head.seq <= this.forceUpToSeq;
  }

  /**
   * Batches taken leave as slots allow: up to maxConcurrentBatches in flight, and one more taken
   * ahead, whose body (JSON, gzip) is made while the others are in flight, so that it leaves the
   * moment a slot frees. Made only when a slot freed, a gzip'd batch left some 15 ms later on a
   * busy machine, and four in flight then spent a fifth of the time with fewer (measured).
   */
  private dispatch(): void {
    while (this.taken < this.options.maxConcurrentBatches + 1 && this.batchReady()) {
      const batch = this.take();
      this.taken++;
      void sendBatch(batch, this.options, this.slots, this.progress).finally(() => {
        this.taken--;
        this.dispatch();
      });
    }
    this.armTimer();
  }

  /** A slot for one batch in flight; granted in the order asked, so batches leave in the order taken. */
  private readonly slots: BatchSlots = {
    acquire: () => {
      if (this.inFlight < this.options.maxConcurrentBatches) {
        this.inFlight++;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => this.slotWaiters.push(resolve));
    },
    release: () => {
      const next = this.slotWaiters.shift();
      // The slot passes straight to the batch waiting longest (inFlight unchanged).
      if (next !== undefined) next();
      else this.inFlight--;
    },
  };

  /** The next batch: at least one write, then as many as fit in maxBatchItems and maxBatchBytes. */
  private take(): HeldWrite[] {
    let count = 0;
    let bytes = 0;
    for (const w of this.waiting) {
      if (count >= this.options.maxBatchItems) break;
      if (count > 0 && bytes + w.bytes + 1 > this.options.maxBatchBytes) break;
      count++;
      bytes += w.bytes + 1;
    }
    const batch = this.waiting.splice(0, count);
    for (const w of batch) this.waitingBytes -= w.bytes;
    return batch;
  }

  /** The timer runs while writes wait: it fires when the oldest has waited flushIntervalMs. */
  private armTimer(): void {
    const head = this.waiting[0];
    if (head === undefined || head.seq <= this.forceUpToSeq) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      return;
    }
    if (this.timer !== null) return;
    const delayMs = Math.max(0, head.enqueuedAtMs + this.options.flushIntervalMs - performance.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      // Only writes that have waited long enough leave. The head the timer was set for may have
      // left in a full batch since, and a newer head must wait its own interval (it left at once,
      // after a fraction of it: a review). dispatch() sets the timer again for whatever still waits.
      const now = performance.now();
      for (const w of this.waiting) {
        // In queue order, so oldest first: the first one still young ends the scan.
        if (w.enqueuedAtMs + this.options.flushIntervalMs > now) break;
        this.forceUpToSeq = Math.max(this.forceUpToSeq, w.seq);
      }
      this.dispatch();
    }, delayMs);
  }
}
