// Where each sink's confirmed position is saved in LMDB: written by the delivery worker after
// its batches, read by the worker when it starts, by the main thread for retention and metrics,
// and, in cluster mode, shared through PostgreSQL so that a new leader starts where the last one
// got to (cluster/sink-positions.ts).
import type { Database } from 'lmdb';
import type { Store } from '../journal/store.ts';
import type { Confirmed } from './sink.ts';

/**
 * LMDB key of a sink's saved `Confirmed` (seq and marker together, so they always belong to one
 * another). The sink id's own key keeps the seq alone: the main thread reads it for retention
 * and metrics. A sink id starts with its kind (`nats:`, `postgres:`), so this key is no sink id.
 */
function confirmedKey(id: string): string {
  return `confirmed:${id}`;
}

function confirmedDb(store: Store): Database<Confirmed, string> {
  return store.delivery as unknown as Database<Confirmed, string>;
}

/** The sink's saved position, null when nothing was saved (never delivered). */
export function readConfirmed(store: Store, id: string): Confirmed | null {
  const confirmed = confirmedDb(store).get(confirmedKey(id));
  if (confirmed !== undefined) return { seq: confirmed.seq, marker: confirmed.marker ?? null };
  // Saved by an intake before markers: the seq alone.
  const seq = store.delivery.get(id);
  return seq === undefined ? null : { seq, marker: null };
}

/**
 * Saves both keys. Both in one write transaction: lmdb-js commits the writes of one event turn
 * together (eventTurnBatching, on by default). Plain puts, not transaction(): its callback would
 * run on this thread while holding LMDB's write lock, which the journal's commits wait for.
 */
export function saveConfirmed(store: Store, id: string, confirmed: Confirmed): Promise<unknown> {
  const saved = confirmedDb(store).put(confirmedKey(id), confirmed);
  // The same transaction as `saved`, whose promise the caller awaits and reports: this one's
  // rejection (a full disk) is the same failure, and unhandled it ended the delivery thread.
  store.delivery.put(id, confirmed.seq).catch(() => undefined);
  return saved;
}
