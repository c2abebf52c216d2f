// What goes to a mapping worker and what comes back (both threads import these types).
import type { MessagePort } from 'node:worker_threads';
import type { Fingerprint } from '../idempotency/claim.ts';
import type { ValidationDetail } from '../schemas/details.ts';

export interface MappingTask {
  /** The raw body, transferred (not copied) to the worker. */
  bytes: ArrayBuffer;
  gzip: boolean;
  limitBytes: number;
  maxItems: number;
  /** The request has an Idempotency-Key: return the fingerprint of the decoded body. */
  fingerprint: boolean;
  /** Told (one message) when a worker starts the task: its timeout counts from then. */
  started: MessagePort;
}

export type MappingTaskResult =
  | { kind: 'tooLarge' | 'malformed'; message: string }
  | { kind: 'invalid'; details: ValidationDetail[] }
  | {
      kind: 'ok';
      /** Every distinct id, concatenated in order of first occurrence. */
      text: string;
      /** Length of each id in `text` (ids have at most 50 characters). */
      lengths: Uint16Array;
      /** Index in the request's `products` of each id's first occurrence. */
      firstIndex: Uint32Array;
      /** The distinct ids, msgpack-encoded for the journal record (packed-ids.ts). */
      packed: Uint8Array;
      /** bodyFingerprint() of the inflated body, when the task asked for it. */
      fingerprint: Fingerprint | null;
    };
