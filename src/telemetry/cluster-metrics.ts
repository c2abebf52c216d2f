// Cluster mode's metrics (CONTRACT.md §12): the node's role, epoch, applied seq and lag, the time
// to commit a batch in PostgreSQL, and lease renewals that failed. Read from the node at scrape
// time, except the two that count events.
import client from 'prom-client';
import type { ClusterMetrics, ClusterStatus } from '../cluster/cluster-node.ts';

export interface ClusterGauges {
  status(): ClusterStatus;
  readonly lagRecords: number;
}

export function clusterMetrics(registry: client.Registry, node: () => ClusterGauges | null): ClusterMetrics {
  const status = () => node()?.status() ?? null;
  new client.Gauge({
    name: 'intake_cluster_role',
    help: 'this node\'s role: 1 for the role it has now (leader or follower), 0 for the other',
    labelNames: ['role'] as const,
    registers: [registry],
    collect() {
      const role = status()?.role ?? 'follower';
      this.labels('leader').set(role === 'leader' ? 1 : 0);
      this.labels('follower').set(role === 'leader' ? 0 : 1);
    },
  });
  new client.Gauge({
    name: 'intake_cluster_node_info',
    help: 'always 1; its labels name this node (NODE_NAME) and the leader it knows of',
    labelNames: ['node', 'leader'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const now = status();
      if (now !== null) this.labels(now.node, now.leader ?? '').set(1);
    },
  });
  const gauge = (name: string, help: string, read: () => number): void => {
    new client.Gauge({ name, help, registers: [registry], collect() { this.set(read()); } });
  };
  gauge('intake_cluster_epoch', 'the epoch this node knows of (it grows by one at each leader change)', () => status()?.epoch ?? 0);
  gauge('intake_cluster_applied_seq', 'the last journal seq this node has applied (on the leader: the last committed)', () => status()?.appliedSeq ?? 0);
  gauge('intake_cluster_lag_records', 'records of the cluster\'s journal this node has not applied yet', () => node()?.lagRecords ?? 0);
  const commitSeconds = new client.Histogram({
    name: 'intake_cluster_commit_duration_seconds',
    help: 'time to commit one journal batch in PostgreSQL (leader)',
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  const renewalFailures = new client.Counter({
    name: 'intake_cluster_lease_renewal_failures_total',
    help: 'lease renewals that failed (PostgreSQL unreachable or too slow)',
    registers: [registry],
  });
  const forwardFrames = new client.Counter({
    name: 'intake_cluster_forward_frames_total',
    help: 'frames of forwarded writes this node received from followers as leader (probes not counted)',
    registers: [registry],
  });
  const forwardCommands = new client.Counter({
    name: 'intake_cluster_forward_commands_total',
    help: 'forwarded writes this node received from followers as leader, a follower\'s retries included',
    registers: [registry],
  });
  const forwardRefused = new client.Counter({
    name: 'intake_cluster_forward_refused_total',
    help: 'writes this node took as a follower and answered 503 itself (no leader took them in time, too many waiting, the leader changed before it answered)',
    registers: [registry],
  });
  return {
    commitSeconds: (seconds) => commitSeconds.observe(seconds),
    renewalFailed: () => renewalFailures.inc(),
    forwardFrame: (commands) => {
      forwardFrames.inc();
      forwardCommands.inc(commands);
    },
    forwardRefused: () => forwardRefused.inc(),
  };
}
