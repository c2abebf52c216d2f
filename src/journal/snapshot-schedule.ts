// When snapshots are taken: on a timer, after a number of journaled records, on SIGUSR2, and at
// graceful stop. After each snapshot, retention (if set) trims what the snapshot covers.
import type { Logger } from '../telemetry/logger.ts';
import type { Journal } from './journal.ts';
import { trimJournal } from './retention.ts';
import type { SnapshotWriter } from './snapshot-writer.ts';
import type { Store } from './store.ts';

export interface ScheduleSettings {
  snapshotIntervalMs: number;
  snapshotEveryRecords: number;
  journalRetentionSeconds: number;
}

/** Retention runs at least this often even when no snapshot is due. */
const TRIM_EVERY_MS = 60_000;
/** A snapshot by count waits for this many records per entity the last snapshot wrote (why: tick()). */
export const RECORDS_PER_ENTITY_WRITTEN = 2;

export class SnapshotSchedule {
  private timer: NodeJS.Timeout | null = null;
  private lastSnapshotAt = Date.now();
  private lastTrimAt = 0;
  private trimming = false;

  constructor(
    private readonly writer: SnapshotWriter,
    private readonly journal: Journal,
    private readonly store: Store,
    private readonly settings: ScheduleSettings,
    private readonly log: Logger,
    /** Records after this seq must be kept whatever their age (undelivered to a sink); null: no such limit. */
    private readonly keepAfter: () => number | null = () => null,
  ) {}

  start(): void {
    const { snapshotIntervalMs } = this.settings;
    const checkEveryMs = snapshotIntervalMs > 0 ? Math.min(1000, snapshotIntervalMs) : 1000;
    this.timer = setInterval(() => this.tick(), checkEveryMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Takes a snapshot now (unless one is running or nothing changed). */
  async snapshotNow(reason: string): Promise<void> {
    this.lastSnapshotAt = Date.now();
    const meta = await this.writer.snapshot(reason);
    if (meta !== null) await this.trim();
  }

  private tick(): void {
    if (this.writer.isRunning) return;
    const { snapshotIntervalMs, snapshotEveryRecords } = this.settings;
    const behind = this.journal.lastAppendedSeq - this.writer.lastCoveredSeq;
    // By count: SNAPSHOT_EVERY_RECORDS, or twice as many records as the last snapshot wrote
    // entities if that is more. A snapshot writes every entity held, and under load each entity
    // written costs about 1.2 µs of CPU (README, Performance), as much as a tenth of a request;
    // with a fixed count that cost per record grew with the state (a million devices every
    // 500,000 records: two devices written per record). This way a snapshot by count writes at
    // most half an entity per record when records change what exists, and 1.5 when each record
    // adds one (app launches: E entities, 2E records later 3E). The price is the tail a restart
    // replays: up to twice the entities of the snapshot it loads, plus what came during the next
    // one; a record replays 2 to 3 times faster than an entity loads (README, Recovery time).
    // With one record per entity (the rule before 2026-11-24 evening) snapshots cost twice as
    // much CPU and the tail was half as long.
    const dueAfterRecords = Math.max(snapshotEveryRecords, RECORDS_PER_ENTITY_WRITTEN * this.writer.lastEntities);
    if (behind > 0 && snapshotEveryRecords > 0 && behind >= dueAfterRecords) {
      void this.snapshotNow(`${behind} records since the last snapshot`);
    } else if (behind > 0 && snapshotIntervalMs > 0 && Date.now() - this.lastSnapshotAt >= snapshotIntervalMs) {
      void this.snapshotNow('interval');
    } else if (Date.now() - this.lastTrimAt >= TRIM_EVERY_MS) {
      void this.trim();
    }
  }

  private async trim(): Promise<void> {
    const retentionMs = this.settings.journalRetentionSeconds * 1000;
    if (retentionMs === 0 || this.trimming) return;
    this.trimming = true;
    this.lastTrimAt = Date.now();
    try {
      const covered = this.writer.lastCoveredSeq;
      const undelivered = this.keepAfter();
      const trimUpTo = undelivered === null ? covered : Math.min(covered, undelivered);
      const report = await trimJournal(this.store, trimUpTo, Date.now() - retentionMs);
      if (report.batches > 0) this.log.info({ ...report, coveredSeq: covered, deliveredSeq: undelivered }, 'journal trimmed by retention');
    } catch (error) {
      this.log.error({ err: error }, 'journal retention failed');
    } finally {
      this.trimming = false;
    }
  }
}
