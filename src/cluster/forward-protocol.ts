// The leader's internal endpoint for followers' forwarded writes (issue 21 item 3): its path, its
// header, its limit and its answer. Not a public API: not in /openapi.json, not a batch path, and
// refused without the current epoch's secret (forward-endpoint.ts).
//
// POST FORWARD_PATH, header FORWARD_SECRET_HEADER: <the secret the leader stored in its lease
// row>, body: frameToBytes(origin, frame) (handoff/wire.ts). Answers:
// - 200, body: the answers frame text (handoff/frames.ts AnswerWriter), one answer per command;
//   an empty frame (a probe) gets an empty 200;
// - 503 (with Retry-After): this node does not take writes now (not the leader, stopping);
//   nothing of the frame was applied;
// - 401: not this epoch's secret (a follower that read an older lease); nothing was applied;
// - 400 (not a frame), 413 (too big): nothing was applied.
import { timingSafeEqual } from 'node:crypto';
import type { Settings } from '../config/settings.ts';

export const FORWARD_PATH = '/_cluster/commands';
export const FORWARD_SECRET_HEADER = 'x-intake-cluster-secret';

/** What the endpoint answers, whichever thread holds the connection. */
export interface ForwardReply {
  status: number;
  /** The answers frame text (200), or a JSON error body. */
  text: string;
  /** Whole seconds for Retry-After (a 503), or null. */
  retryAfterSeconds: number | null;
}

/** A follower packs commands into one frame up to this many bytes (one bigger command goes alone)... */
export const FRAME_MAX_BYTES = 4 * 1024 * 1024;
/** ...and up to this many commands. */
export const FRAME_MAX_COMMANDS = 1024;
/** Room for the fields of a frame's commands besides their bodies. */
const FRAME_OVERHEAD_BYTES = 1024 * 1024;

/**
 * The largest forwarded frame a leader reads: one command with the largest body any endpoint
 * takes (a follower sends such a command alone), or a full frame, plus the commands' fields.
 */
export function forwardLimitBytes(settings: Pick<Settings, 'bodyLimitBytes' | 'mappingBodyLimitBytes' | 'batchBodyLimitBytes'>): number {
  return Math.max(settings.bodyLimitBytes, settings.mappingBodyLimitBytes, settings.batchBodyLimitBytes, FRAME_MAX_BYTES) + FRAME_OVERHEAD_BYTES;
}

/**
 * What a forward is judged by from its header alone, before its body (up to forwardLimitBytes) is
 * read: while the node does not take writes (`open`) any secret passes, and the body is drained
 * unkept for a 503; otherwise only this epoch's `secret` (none: nothing). Plain data, so the
 * state thread can post it to its edge threads, which hold the connections (HTTP_THREADS > 1).
 */
export interface ForwardAdmission {
  open: boolean;
  secret: string | null;
}

/**
 * What becomes of a forward, by its header: `read` (this epoch's secret, on the leader);
 * `refuse`, 401 before its body; `drain`, the node does not lead: its body is read and dropped as
 * it comes, and it gets 503. Such a node cannot judge the secret (it does not know the epoch the
 * follower thinks leads), and used to keep up to 16 MiB a request for anyone who reached its port
 * (found by a review, 2026-11-28). Not answered before the body's end: closing a connection with
 * unread bytes resets it, and a follower counts a reset as "may have been applied".
 */
export type ForwardVerdict = 'read' | 'refuse' | 'drain';

export function judgeForward(admission: ForwardAdmission, secret: string): ForwardVerdict {
  if (admission.open) return 'drain';
  return admission.secret !== null && sameSecret(secret, admission.secret) ? 'read' : 'refuse';
}

/** `sent` is `own`, compared in constant time. */
export function sameSecret(sent: string, own: string): boolean {
  const a = Buffer.from(sent);
  const b = Buffer.from(own);
  return a.length === b.length && timingSafeEqual(a, b);
}
