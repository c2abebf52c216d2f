// Whether this server takes writes now, and whether it is ready (GET /readyz). A single node
// refuses writes only once its journal has failed; a cluster node also while it is not the
// cluster's leader (CONTRACT.md §12). A refused write gets 503 ServiceUnavailableError, with
// Retry-After when trying again soon makes sense (a leader change takes about a second).

export interface Refusal {
  message: string;
  /** Whole seconds for Retry-After, or null for none. */
  retryAfterSeconds: number | null;
}

export interface WriteGate {
  /** Why a write is refused now, or null while writes are accepted. */
  refusal(): Refusal | null;
  /** Why GET /readyz answers 503, or null when it answers 200. */
  notReady(): string | null;
}
