// The write gate of a cluster node's edges (issue 21 item 3). The leader takes writes while it
// leads with its lease held, as before (node.refusal()). A follower takes them too, and forwards
// them (leader-link.ts): it refuses (503 with Retry-After) only once it could not reach a leader
// for the whole forward deadline, and its /readyz means "a leader answers it". The state side
// (the CommandExecutor) keeps the node's own gate: only the leader applies.
//
// A follower that cannot read the cluster's keys (cut off from PostgreSQL, still reaching the
// leader) is not ready either: it would answer 401 to a key created since (the leader re-checks
// the key of each forwarded write, so a revoked one stays refused), and CONTRACT.md §12 says
// /readyz is 503 on every node PostgreSQL does not answer. It kept taking traffic (found by a
// review, 2026-11-28). It still forwards the writes sent to it.
import type { WriteGate } from '../http/write-gate.ts';
import type { ClusterNode } from './cluster-node.ts';
import type { LeaderLink } from './leader-link.ts';

/**
 * Keys unread this long, the last read having failed, make a follower not ready: a few failed
 * polls (every KEYS_POLL_MS, 500 ms). A read that succeeds slowly (PostgreSQL busy for every
 * node) must not take every follower out of the load balancer at once, so without a failure
 * only KEYS_HUNG_MS counts: a read that hangs (its query times out after 5 s).
 */
export const KEYS_STALE_MS = 3_000;
export const KEYS_HUNG_MS = 8_000;

/**
 * `leading`: the gate of the node's own state (main.ts: the node's refusal, and the writes
 * waiting for their commit, JOURNAL_MAX_PENDING_RECORDS), which the leader's requests pass too.
 * Until 2026-11-30 the leader here looked at node.refusal() alone, so that limit never reached
 * its own requests (found by a review).
 */
export function forwardingGate(node: Pick<ClusterNode, 'role'>, leading: WriteGate, link: Pick<LeaderLink, 'refusal' | 'notReady'>, keys: { keysAgeMs(): number; readonly keysUnreachable: boolean }): WriteGate {
  return {
    refusal: () => (node.role === 'leader' ? leading.refusal() : link.refusal()),
    notReady: () => {
      if (node.role === 'leader') return leading.notReady();
      const unread = keys.keysAgeMs();
      if ((keys.keysUnreachable && unread > KEYS_STALE_MS) || unread > KEYS_HUNG_MS) return `this node cannot read the cluster's keys from PostgreSQL (last read ${Number.isFinite(unread) ? `${Math.round(unread / 1000)} s ago` : 'never'})`;
      return link.notReady();
    },
  };
}
