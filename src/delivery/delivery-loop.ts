// One delivery loop per sink: read the durable journal records after the sink's position, in
// seq order and in bounded batches, hand them to the sink, and move the position only past what
// the sink confirmed. On any failure: log "down" once, drop the connection, wait (doubling from
// 50 ms up to DELIVERY_RETRY_MAX_MS), connect again and ask the sink what it holds before going
// on; log "back" once it confirms again. The loop holds one batch at a time, whatever the lag.
//
// Where a sink resumes: what the sink itself holds (its newest record) when it holds any, else
// the position saved in LMDB. The saved position is written at most every 200 ms, so after a
// crash it may be behind; the sink's own head is exact, and delivering a record again is refused
// by the sink (PostgreSQL's primary key, JetStream's expected sequence).
import type { Logger } from '../telemetry/logger.ts';
import type { DurableSignal } from './durable-signal.ts';
import type { JournalReader } from './journal-reader.ts';
import { UndeliverableRecordError, SinkMismatchError, type Sink } from './sink.ts';

export interface DeliveryOptions {
  batchRecords: number;
  batchBytes: number;
  retryMaxMs: number;
  /** With less than a full batch ready, wait this long for more before delivering (0: never). */
  lingerMs: number;
}

/** What the loop tells the main thread (metrics). */
export interface DeliveryReport {
  state(sink: string, up: boolean): void;
  delivered(sink: string, seq: number, records: number, seconds: number): void;
  /** Where the sink was found when delivery (re)connected. */
  position(sink: string, seq: number): void;
}

/** The sinks' positions in LMDB. */
export interface Positions {
  get(id: string): number;
  save(id: string, seq: number): Promise<unknown>;
}

const RETRY_FIRST_MS = 50;
/** With nothing to deliver the loop still wakes this often (a stop, a missed wake-up). */
const IDLE_WAIT_MS = 250;
/** The saved position lags the delivered one by at most this (each save is an LMDB commit). */
const SAVE_EVERY_MS = 200;
/** A read that finds nothing although the durable position is ahead waits this long (never spins). */
const NOTHING_STORED_WAIT_MS = 10;

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export class DeliveryLoop {
  private readonly sink: Sink;
  private readonly reader: JournalReader;
  private readonly durable: DurableSignal;
  private readonly positions: Positions;
  private readonly options: DeliveryOptions;
  private readonly report: DeliveryReport;
  private readonly log: Logger;
  /** The seq of the last record the sink confirmed. */
  private position = 0;
  private savedPosition = -1;
  private savedAt = 0;
  private opened = false;
  /** null until the first attempt says which. */
  private up: boolean | null = null;
  private downSince = 0;
  private stopping = false;
  private interruptSleep: (() => void) | null = null;
  private running: Promise<void> | null = null;

  constructor(sink: Sink, reader: JournalReader, durable: DurableSignal, positions: Positions, options: DeliveryOptions, report: DeliveryReport, log: Logger) {
    this.sink = sink;
    this.reader = reader;
    this.durable = durable;
    this.positions = positions;
    this.options = options;
    this.report = report;
    this.log = log;
  }

  start(): void {
    this.running ??= this.run();
  }

  /** Lets the batch in progress finish, saves the position and disconnects. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.interruptSleep?.();
    this.durable.wake();
    await this.running;
    await this.savePosition();
    await this.sink.close();
  }

  private async run(): Promise<void> {
    let retryMs = RETRY_FIRST_MS;
    while (!this.stopping) {
      try {
        if (!this.opened) await this.open();
        let batch = this.read();
        if (batch.length === 0) {
          this.markUp(); // reachable, and nothing to deliver
          if (this.position !== this.savedPosition) await this.savePosition();
          if (this.durable.value > this.position) await this.skipTrimmed();
          else await this.durable.waitBeyond(this.position, IDLE_WAIT_MS);
          continue;
        }
        if (batch.length < this.options.batchRecords && this.options.lingerMs > 0) {
          // Caught up: a few records per batch would cost a round trip (and a PostgreSQL commit)
          // each. Let the batch fill for a moment; delivery is this much later, never slower.
          await this.sleep(this.options.lingerMs);
          batch = this.read();
        }
        const first = batch[0]!.seq;
        if (first !== this.position + 1) {
          this.log.warn({ sink: this.sink.kind, missing: [this.position + 1, first - 1] }, 'records were trimmed from the journal before this sink received them');
        }
        const startedAt = performance.now();
        const confirmed = await this.sink.deliver(batch);
        this.position = batch[confirmed - 1]!.seq;
        this.report.delivered(this.sink.kind, this.position, confirmed, (performance.now() - startedAt) / 1000);
        this.markUp();
        retryMs = RETRY_FIRST_MS;
        if (performance.now() - this.savedAt >= SAVE_EVERY_MS) void this.savePosition();
      } catch (error) {
        this.markDown(error);
        this.opened = false;
        await this.sink.close();
        await this.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, this.options.retryMaxMs);
      }
    }
  }

  /**
   * Durable records follow the position, but none is stored after it: retention trimmed them
   * before this sink got them (its position was behind what retention knew, e.g. a sink that
   * holds less than it once confirmed). Goes on after them, with the log saying which.
   */
  private async skipTrimmed(): Promise<void> {
    const first = this.reader.firstSeq();
    const durable = this.durable.value;
    const gone = Math.min(durable, (first ?? durable + 1) - 1);
    if (gone > this.position) {
      this.log.warn({ sink: this.sink.kind, missing: [this.position + 1, gone] }, 'records were trimmed from the journal before this sink received them');
      this.position = gone;
      this.report.position(this.sink.kind, gone);
    }
    await this.sleep(NOTHING_STORED_WAIT_MS);
  }

  private read(): ReturnType<JournalReader['read']> {
    return this.reader.read(this.position, this.durable.value, this.options.batchRecords, this.options.batchBytes);
  }

  /** Connects and finds where the sink is. */
  private async open(): Promise<void> {
    const head = await this.sink.open();
    const saved = this.positions.get(this.sink.id);
    let start = saved;
    if (head !== null) {
      const durable = this.durable.value;
      if (head.seq > durable) {
        throw new SinkMismatchError(`${this.sink.id} holds seq ${head.seq}, but this journal's last record is ${durable}: it belongs to another journal`);
      }
      const own = this.reader.record(head.seq);
      if (own !== null && !head.matches(own)) {
        throw new SinkMismatchError(`${this.sink.id} holds a different record ${head.seq} than this journal: it belongs to another journal`);
      }
      if (head.seq < saved) {
        this.log.warn({ sink: this.sink.kind, held: head.seq, confirmed: saved }, 'the sink holds fewer records than it confirmed; delivering the missing ones again');
      }
      start = head.seq;
    }
    const firstStored = this.reader.firstSeq();
    if (this.up === null) this.log.info({ sink: this.sink.kind, id: this.sink.id, from: start + 1, journalFirst: firstStored }, 'delivering to sink');
    this.position = start;
    this.savedPosition = saved;
    this.opened = true;
    this.report.position(this.sink.kind, start);
    await this.savePosition();
    // Reachable. After an outage "back" waits for a confirmed batch (or nothing to deliver):
    // a sink that connects but refuses every batch must not log down, back, down, back...
    if (this.up === null) this.markUp();
  }

  // State first, then the log line: whoever reads the line and then /metrics sees the new state.
  private markUp(): void {
    if (this.up === true) return;
    const wasDown = this.up === false;
    this.up = true;
    this.report.state(this.sink.kind, true);
    if (wasDown) this.log.info({ sink: this.sink.kind, downMs: Math.round(performance.now() - this.downSince), seq: this.position }, 'sink back: delivering again');
  }

  private markDown(error: unknown): void {
    if (this.up === false) {
      this.log.debug({ sink: this.sink.kind, err: message(error) }, 'sink still down');
      return;
    }
    this.up = false;
    this.downSince = performance.now();
    this.report.state(this.sink.kind, false);
    // Once per outage. A mismatch or an oversized record needs an operator: an error, not a warning.
    const needsOperator = error instanceof SinkMismatchError || error instanceof UndeliverableRecordError;
    this.log[needsOperator ? 'error' : 'warn']({ sink: this.sink.kind, err: message(error), seq: this.position }, 'sink down: delivery paused (writes go on), retrying');
  }

  private async savePosition(): Promise<void> {
    const seq = this.position;
    if (seq === this.savedPosition) return;
    this.savedPosition = seq;
    this.savedAt = performance.now();
    try {
      await this.positions.save(this.sink.id, seq);
    } catch (error) {
      this.log.error({ sink: this.sink.kind, err: message(error) }, 'saving the delivery position failed');
    }
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.interruptSleep = done;
    });
  }
}
