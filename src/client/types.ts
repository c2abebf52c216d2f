// The client's request and answer types, derived from the server's own TypeBox schemas (type-only
// imports: nothing of TypeBox is loaded at run time, so the client needs no dependency).
import type { Static } from '@sinclair/typebox';
import type { ValidationDetail } from '../schemas/details.ts';
import type {
  AppLaunch,
  BatchItem,
  BatchResult,
  Collection,
  Identify,
  Logout,
  Mapping,
  Product,
  PushToken,
  TrackEvent,
} from '../schemas/endpoints.ts';
import type { LaunchResult, Success } from '../schemas/openapi.ts';

export type { AppLaunch, BatchItem, BatchResult, Collection, Identify, Logout, Mapping, Product, PushToken, TrackEvent, ValidationDetail };

/** What app launch answers: the device id (new when none usable was sent) and a new session id. */
export type LaunchAnswer = Static<typeof LaunchResult>;
/** What every other write answers. */
export type SuccessAnswer = Static<typeof Success>;

export type WriteMethod = 'POST' | 'DELETE';

/** Per-write options. */
export interface WriteOptions {
  /**
   * The write's Idempotency-Key (1 to 255 characters 0x21-0x7E). Default: a key unique to this
   * write (the client's random 128-bit prefix and a counter, `<22 characters>.<count>`).
   * Give your own when the write may be sent again by a later process (an import re-run): the
   * server then recognises it within its window (IDEMPOTENCY_WINDOW_SECONDS, one day by default).
   */
  idempotencyKey?: string;
}
