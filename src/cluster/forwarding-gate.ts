// The write gate of a cluster node's edges (issue 21 item 3). The leader takes writes while it
// leads with its lease held, as before (node.refusal()). A follower takes them too, and forwards
// them (leader-link.ts): it refuses (503 with Retry-After) only once it could not reach a leader
// for the whole forward deadline, and its /readyz means "a leader answers it". The state side
// (the CommandExecutor) keeps the node's own gate: only the leader applies.
import type { WriteGate } from '../http/write-gate.ts';
import type { ClusterNode } from './cluster-node.ts';
import type { LeaderLink } from './leader-link.ts';

export function forwardingGate(node: Pick<ClusterNode, 'role' | 'refusal'>, link: Pick<LeaderLink, 'refusal' | 'notReady'>): WriteGate {
  return {
    refusal: () => {
      if (node.role !== 'leader') return link.refusal();
      const reason = node.refusal();
      return reason === null ? null : { message: reason, retryAfterSeconds: 1 };
    },
    notReady: () => (node.role === 'leader' ? node.refusal() : link.notReady()),
  };
}
