// The one outside form of a journal record: the JSON object `npm run export -- events` prints,
// and exactly what every delivery sink receives (CONTRACT.md §8, §11). Keys in a fixed order:
// seq, kind, workspace, at, then did, sid and customer for device records, then data. Fields a
// record carries for internal use only (none are printed) never leave through here.
import type { JournalRecord } from './records.ts';

export interface ExportedRecord {
  seq: number;
  kind: JournalRecord['kind'];
  workspace: string;
  at: number;
  did?: string;
  sid?: string;
  customer?: string | null;
  data: unknown;
}

export function exportRecord(seq: number, record: JournalRecord): ExportedRecord {
  if ('did' in record) {
    return { seq, kind: record.kind, workspace: record.workspace, at: record.at, did: record.did, sid: record.sid, customer: record.customer, data: record.data };
  }
  return { seq, kind: record.kind, workspace: record.workspace, at: record.at, data: record.data };
}

/** The exported line without its newline. */
export function exportLine(seq: number, record: JournalRecord): string {
  return JSON.stringify(exportRecord(seq, record));
}
