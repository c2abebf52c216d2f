// The messages between the main (state) thread and its edge threads, besides the frames of
// commands and answers themselves (frames.ts). Control messages are rare (a key change, a gate
// change, a scrape, a stop): plain objects are fine for them.
import type { KeyRecord } from '../auth/key-store.ts';
import type { ForwardAdmission } from '../cluster/forward-protocol.ts';
import type { Refusal } from '../http/write-gate.ts';

export interface GateState {
  refusal: Refusal | null;
  notReady: string | null;
  /**
   * Cluster mode: which forwards the leader's internal endpoint reads (a wrong secret gets 401
   * before its body is read); null on a single node.
   */
  forward: ForwardAdmission | null;
}

/** What an edge thread needs to start (workerData). */
export interface EdgeStart {
  index: number;
  /** The raw settings: the edge parses them as the main thread did. */
  argv: string[];
  env: Record<string, string | undefined>;
  /** The port to listen on: the first edge's port when the setting is 0 (ephemeral). */
  port: number;
  keys: KeyRecord[];
  gate: GateState;
  /** StateHeartbeat's buffer: the state thread's stamp, for /readyz. */
  heartbeat: SharedArrayBuffer;
  /** SharedRateLimits' buffer (null: no rate limit). */
  rateLimits: SharedArrayBuffer | null;
  openApiJson: string;
  clustered: boolean;
  /** 0: one of the first edges; n: the n-th replacement in a row for an edge that failed. */
  attempt: number;
}

/** Edge → state. */
export type EdgeMessage =
  | { t: 'listening'; port: number }
  | { t: 'listen-failed'; message: string }
  | { t: 'commands'; text: string; blobs: Uint8Array[] }
  /** An edge asks for what the state thread knows: /metrics (summed over threads) or /cluster. */
  | { t: 'ask'; id: number; what: 'metrics' | 'cluster' }
  /** Its share of /metrics (prom-client's JSON), for a scrape under way. */
  | { t: 'metrics'; id: number; json: unknown }
  /**
   * Cluster mode: a follower's forwarded frame, as received on the leader's internal endpoint
   * (cluster/forward-protocol.ts), with the secret it came with; the state thread answers `forwarded`.
   */
  | { t: 'forward'; id: number; secret: string; bytes: Uint8Array }
  | { t: 'settled' }
  | { t: 'closed' };

/** State → edge. */
export type StateMessage =
  | { t: 'answers'; text: string }
  | { t: 'keys'; keys: KeyRecord[] }
  | { t: 'gate'; gate: GateState }
  | { t: 'collect'; id: number }
  | { t: 'told'; id: number; status: number; text: string; contentType: string }
  /** The answer to a `forward`: what the endpoint answers the follower. */
  | { t: 'forwarded'; id: number; status: number; text: string; retryAfterSeconds: number | null }
  /** Stop accepting (listen socket closed; new requests on open connections get 503 and close). */
  | { t: 'stop' }
  /** Tell `settled` once no request is in flight, or after `timeoutMs`. */
  | { t: 'settle'; timeoutMs: number }
  /** Close every connection; the thread then ends. */
  | { t: 'close' }
  /** End as after a bug (close every connection, exit 1: another thread takes its place): its frame could not be read. */
  | { t: 'fail'; message: string };
