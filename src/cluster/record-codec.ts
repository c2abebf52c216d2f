// A journal batch as it travels through PostgreSQL: one msgpack value holding the batch's
// records. Self-contained (record structures are defined inline, once per batch), unlike the
// node's LMDB copy, whose msgpack shares structures kept in that LMDB file only. Packed id lists
// of big mappings (packed-ids.ts) keep their extension, so a follower decodes the same arrays.
import { Packr, Unpackr } from 'msgpackr';
import type { JournalRecord } from '../journal/records.ts';
// Registers the packed-ids extension in this thread.
import '../journal/packed-ids.ts';

const packr = new Packr({ useRecords: true });
const unpackr = new Unpackr({ useRecords: true });

export function encodeBatch(records: readonly JournalRecord[]): Buffer {
  return packr.pack(records);
}

export function decodeBatch(bytes: Uint8Array): JournalRecord[] {
  const records = unpackr.unpack(bytes) as JournalRecord[];
  if (!Array.isArray(records)) throw new Error('a cluster journal batch is not an array of records');
  return records;
}
