// One delivery loop per sink: read the durable journal records after the sink's position, in
// seq order and in bounded batches, hand them to the sink, and move the position only past what
// the sink confirmed. On any failure: log "down" once, drop the connection, wait (doubling from
// 50 ms up to DELIVERY_RETRY_MAX_MS), connect again and ask the sink what it holds before going
// on; log "back" once it confirms again. The loop holds one batch at a time, whatever the lag.
//
// Where a sink resumes: where the sink says it stands (Sink.open), given the last record it
// confirmed as the loop knows it: kept in memory (exact across reconnects of one process) and
// saved in LMDB with the sink's marker (for a restart): after every batch when the sink keeps no
// position of its own (NATS), at most every 200 ms when it does (PostgreSQL). A sink that holds
// nothing (a new or recreated stream or table) gets the whole retained journal; one that removed
// what it was given (a WorkQueue stream, a consumer deleting rows) does not get it again.
//
// Every sink call (open, deliver, close) has a deadline, DELIVERY_STALL_TIMEOUT_MS: a server that
// keeps the connection but answers nothing (frozen, a hung disk) must not keep the sink "up". Past
// the deadline the loop counts a stall, marks the sink down, drops the connection and retries as
// for an outage. The call it gave up on may still finish later; that is harmless: the sink's
// close() cuts it off from the next connection's state (Sink.close), and on the server side
// whatever it stored is where the next open() looks (NATS: every message expects its exact
// predecessor, so a late one lands in its place in the chain or nowhere; PostgreSQL: the next
// open() ends the abandoned connection's backend before it reads the position, a row is stored
// once (primary key, verified), and the position row never moves backwards).
import type { Logger } from '../telemetry/logger.ts';
import type { DurableSignal } from './durable-signal.ts';
import type { JournalReader } from './journal-reader.ts';
import { UndeliverableRecordError, SinkMismatchError, SinkStallError, type Confirmed, type Sink, type SinkMarker } from './sink.ts';

export interface DeliveryOptions {
  batchRecords: number;
  batchBytes: number;
  retryMaxMs: number;
  /** With less than a full batch ready, wait this long for more before delivering (0: never). */
  lingerMs: number;
  /** A sink call (open, deliver, close) not done after this is given up on: a stall. */
  stallTimeoutMs: number;
}

/** What the loop tells the main thread (metrics). */
export interface DeliveryReport {
  state(sink: string, up: boolean): void;
  /** `confirmed`: the sink's position after the batch (seq and marker), as it will be saved. */
  delivered(sink: string, seq: number, records: number, seconds: number, confirmed: Confirmed): void;
  /**
   * Where the sink was found when delivery (re)connected, or the position moved past records
   * retention trimmed: the sink's position from now on (seq and marker), as it will be saved,
   * even when lower than one reported before (a stream deleted and created again).
   */
  position(sink: string, confirmed: Confirmed): void;
  /** A sink call did not return within the stall timeout. */
  stalled(sink: string): void;
}

/** The sinks' positions in LMDB: the last record each confirmed, with the sink's marker. */
export interface Positions {
  /** null: nothing saved (never delivered). */
  get(id: string): Confirmed | null;
  save(id: string, confirmed: Confirmed): Promise<unknown>;
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
  /** The sink's marker of `position`. */
  private marker: SinkMarker | null = null;
  /** What the sink confirmed last, as open() is told: null until anything was (LMDB says). */
  private confirmed: Confirmed | null;
  private savedPosition = -1;
  private savedMarker: SinkMarker | null = null;
  private savedAt = 0;
  private opened = false;
  /** null until the first attempt says which. */
  private up: boolean | null = null;
  private downSince = 0;
  /** What this outage logged so far: each kind of failure once per outage. */
  private readonly logged = new Set<'outage' | 'operator' | 'stall'>();
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
    this.confirmed = positions.get(sink.id);
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
    await this.closeSink();
  }

  private async run(): Promise<void> {
    let retryMs = RETRY_FIRST_MS;
    while (!this.stopping) {
      try {
        if (!this.opened) await this.open();
        let batch = this.read();
        if (batch.length === 0) {
          // Idle: a connection that closed meanwhile is a sink down now (intake_sink_up 0, the
          // log), not at the next record (found by a review: 10 s of NATS down went unseen).
          if (!this.sink.connected()) throw new Error('the connection to the sink was lost while there was nothing to deliver');
          this.markUp(); // reachable, and nothing to deliver
          await this.savePosition();
          if (this.durable.value > this.position) await this.skipTrimmed();
          else await this.durable.waitBeyond(this.position, IDLE_WAIT_MS);
          continue;
        }
        if (batch.length < this.options.batchRecords && this.options.lingerMs > 0 && batch[batch.length - 1]!.seq >= this.durable.value) {
          // Caught up: a few records per batch would cost a round trip (and a PostgreSQL commit)
          // each. Let the batch fill for a moment; delivery is this much later, never slower. Only
          // when the read reached the durable end: a batch cut short by DELIVERY_BATCH_BYTES (big
          // records) or by a gap has more behind it, and waited each time before 2026-11-29
          // (found by a review: a backlog of big records went a batch per DELIVERY_LINGER_MS).
          await this.sleep(this.options.lingerMs);
          batch = this.read();
        }
        const first = batch[0]!.seq;
        if (first !== this.position + 1) {
          this.log.warn({ sink: this.sink.kind, missing: [this.position + 1, first - 1] }, 'records were trimmed from the journal before this sink received them');
        }
        const startedAt = performance.now();
        const delivered = await this.call('deliver', () => this.sink.deliver(batch));
        this.position = batch[delivered.records - 1]!.seq;
        this.marker = delivered.marker;
        this.confirmed = { seq: this.position, marker: this.marker };
        this.report.delivered(this.sink.kind, this.position, delivered.records, (performance.now() - startedAt) / 1000, this.confirmed);
        this.markUp();
        retryMs = RETRY_FIRST_MS;
        if (!this.sink.keepsPosition || performance.now() - this.savedAt >= SAVE_EVERY_MS) void this.savePosition();
      } catch (error) {
        if (error instanceof SinkStallError) this.report.stalled(this.sink.kind);
        this.markDown(error);
        this.opened = false;
        await this.closeSink();
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
      this.report.position(this.sink.kind, { seq: gone, marker: this.marker });
    }
    await this.sleep(NOTHING_STORED_WAIT_MS);
  }

  private read(): ReturnType<JournalReader['read']> {
    return this.reader.read(this.position, this.durable.value, this.options.batchRecords, this.options.batchBytes);
  }

  /**
   * Runs one sink call with the stall deadline. A call given up on keeps running; its result or
   * error is dropped (see the top of this file for why that is harmless).
   */
  private async call<T>(what: string, run: () => Promise<T>): Promise<T> {
    const timeoutMs = this.options.stallTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const work = run();
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new SinkStallError(`${what} did not return within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([work, deadline]);
    } finally {
      clearTimeout(timer);
      work.catch(() => undefined);
    }
  }

  /** close() with the deadline too (a frozen server may never say goodbye); not counted as a stall. */
  private async closeSink(): Promise<void> {
    try {
      await this.call('close', () => this.sink.close());
    } catch {
      // given up on: the connection is dropped on our side all the same
    }
  }

  /** Connects and finds where the sink is. */
  private async open(): Promise<void> {
    const confirmed = this.confirmed;
    const found = await this.call('open', () => this.sink.open(confirmed));
    const durable = this.durable.value;
    if (found.seq > durable) {
      throw new SinkMismatchError(`${this.sink.id} holds seq ${found.seq}, but this journal's last record is ${durable}: it belongs to another journal`);
    }
    if (found.matches !== null && found.seq > 0) {
      const own = this.reader.record(found.seq);
      if (own !== null && !found.matches(own)) {
        throw new SinkMismatchError(`${this.sink.id} holds a different record ${found.seq} than this journal: it belongs to another journal`);
      }
    }
    const before = confirmed?.seq ?? 0;
    if (found.how === 'new' && before > 0) {
      this.log.warn({ sink: this.sink.kind, id: this.sink.id, confirmed: before }, 'the sink holds none of the records it confirmed (a new, recreated or deleted stream or table, another database): delivering the retained journal from its first record');
    } else if (found.seq < before) {
      this.log.warn({ sink: this.sink.kind, held: found.seq, confirmed: before }, 'the sink holds fewer records than it confirmed; delivering the missing ones again');
    }
    const firstStored = this.reader.firstSeq();
    if (this.up === null) this.log.info({ sink: this.sink.kind, id: this.sink.id, from: found.seq + 1, how: found.how, journalFirst: firstStored }, 'delivering to sink');
    this.position = found.seq;
    this.marker = found.marker;
    this.confirmed = { seq: found.seq, marker: found.marker };
    this.opened = true;
    this.report.position(this.sink.kind, this.confirmed);
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
    this.logged.clear();
    this.report.state(this.sink.kind, true);
    if (wasDown) this.log.info({ sink: this.sink.kind, downMs: Math.round(performance.now() - this.downSince), seq: this.position }, 'sink back: delivering again');
  }

  private markDown(error: unknown): void {
    if (this.up !== false) {
      this.up = false;
      this.downSince = performance.now();
      this.report.state(this.sink.kind, false);
    }
    // Once per outage and kind: an operator must hear of a mismatch or an oversized record (an
    // error) and of a stall (an error: a server that holds connections and answers nothing
    // needs a look) also when the sink was already down for an ordinary reason; an ordinary
    // reason (a warning) is logged only as the first line of an outage.
    const kind = error instanceof SinkStallError ? 'stall' : error instanceof SinkMismatchError || error instanceof UndeliverableRecordError ? 'operator' : 'outage';
    if (this.logged.has(kind) || (kind === 'outage' && this.logged.size > 0)) {
      this.log.debug({ sink: this.sink.kind, err: message(error) }, 'sink still down');
      return;
    }
    this.logged.add(kind);
    const fields = { sink: this.sink.kind, err: message(error), seq: this.position };
    if (kind === 'stall') this.log.error(fields, `sink stalled: ${message(error)}; dropped the connection, delivery paused (writes go on), retrying`);
    else this.log[kind === 'operator' ? 'error' : 'warn'](fields, 'sink down: delivery paused (writes go on), retrying');
  }

  private async savePosition(): Promise<void> {
    const seq = this.position;
    const marker = this.marker;
    if (seq === this.savedPosition && marker === this.savedMarker) return;
    this.savedPosition = seq;
    this.savedMarker = marker;
    this.savedAt = performance.now();
    try {
      await this.positions.save(this.sink.id, { seq, marker });
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
