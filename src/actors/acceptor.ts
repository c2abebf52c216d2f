// How a live write ends: accepted (applied to memory, journaled, answered 200 once durable) or
// refused (a 422 answered once every write it may have observed is durable).
import type { CommitWaiter, Journal } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import type { ValidationDetail } from '../schemas/details.ts';
import { applyRecord } from './apply.ts';
import type { ProfileInterner } from './interner.ts';
import type { Workspaces } from './workspace.ts';

/** The HTTP side of one write: what to answer, and when (via CommitWaiter). */
export interface Reply extends CommitWaiter {
  /** The 200 body, sent once the write is durable. */
  succeed(body: string): void;
  /** A 422, sent once the writes it observed are durable. */
  reject(details: ValidationDetail[]): void;
  /** A bug or a lost worker: 500, logged; nothing of the write was applied. */
  crashed(error: unknown): void;
}

export const SUCCESS_BODY = '{"success":true}';

export class Acceptor {
  constructor(
    readonly workspaces: Workspaces,
    readonly interner: ProfileInterner,
    readonly journal: Journal,
  ) {}

  accept(record: JournalRecord, reply: Reply, body: string): void {
    applyRecord(this.workspaces, this.interner, record);
    this.journalApplied(record, reply, body);
  }

  /** For a write whose change to memory was already made (a staged mapping's commit). */
  journalApplied(record: JournalRecord, reply: Reply, body: string): void {
    reply.succeed(body);
    this.journal.append(record, reply);
  }

  refuse(details: ValidationDetail[], reply: Reply): void {
    reply.reject(details);
    if (!this.journal.afterPending(reply)) reply.committed();
  }
}
