// A journal batch as it travels through PostgreSQL: one msgpack value holding the batch's
// records, written as the node's LMDB copy writes them (journal/record-bytes.ts). Packed id lists
// of big mappings (packed-ids.ts) keep their extension, so a follower decodes the same arrays.
import { decodeRecords, encodeRecords } from '../journal/record-bytes.ts';
import type { JournalRecord } from '../journal/records.ts';
// Registers the packed-ids extension in this thread.
import '../journal/packed-ids.ts';

export function encodeBatch(records: readonly JournalRecord[]): Buffer {
  return encodeRecords(records);
}

export function decodeBatch(bytes: Uint8Array): JournalRecord[] {
  const records = decodeRecords(bytes) as JournalRecord[];
  if (!Array.isArray(records)) throw new Error('a cluster journal batch is not an array of records');
  return records;
}
