// One node of a cluster (CONTRACT.md §12): its role, and the three loops that keep it in step
// with the cluster's journal in PostgreSQL.
//
// - Replication (while not leading): reads the journal after what this node has applied, in
//   order, and hands each batch to the host, which applies it through applyRecord (as live
//   writes and recovery do) and journals it locally. A NOTIFY on the cluster's channel wakes it
//   after commits (the leader sends one at most every COMMIT_NOTIFY_GAP_MS; the node reads
//   REPLICATION_LINGER_MS after it, so one read takes several commits); a poll is the fallback
//   (every second, or every 250 ms while the LISTEN connection is down).
// - Election: a follower reads the lease and, once it has expired (by PostgreSQL's clock), takes
//   it over; the leader renews it about five times per lease, and steps down when it is lost or
//   cannot be renewed within the lease.
// - Promotion: after a takeover the node applies the journal up to the head as of the takeover
//   (no earlier leader can commit after it: lease.ts, cluster-journal.ts), and only then accepts
//   writes, so every write ever answered 200 is seen (read-your-writes and Idempotency-Key
//   replays hold across a leader change).
//
// - Snapshots and retention (cluster-snapshots.ts): each snapshot the leader completes locally is
//   stored in PostgreSQL (off the request path, a few chunks per statement, one upload at a
//   time); a node with nothing applied, or behind the start of the journal, loads the newest one
//   and replicates the journal after it. With JOURNAL_RETENTION_SECONDS set, the leader then
//   trims the journal in PostgreSQL (after each upload, and every minute).
//
// A leader whose commit failed (fenced by a newer epoch, or PostgreSQL unreachable) has applied
// writes the cluster's journal may not hold. It steps down, rebuilds its state from its own data
// directory (which only ever holds records PostgreSQL committed: the leader writes its local copy
// after the commit), and follows again from there: same process, no restart.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { SinkPosition } from '../delivery/delivery.ts';
import { exportLine } from '../journal/export-line.ts';
import { NotLeadingError, type RemoteCommit } from '../journal/journal.ts';
import type { JournalRecord } from '../journal/records.ts';
import type { EntityCounts } from '../journal/snapshot-format.ts';
import type { SnapshotMeta } from '../journal/store.ts';
import { failPointFor, throwPointOnceHere } from '../config/fault-points.ts';
import type { Logger } from '../telemetry/logger.ts';
import { ClusterJournal, FencedError, type StoredBatch } from './cluster-journal.ts';
import { ClusterSnapshots, type StoredSnapshot } from './cluster-snapshots.ts';
import { Lease, type LeaseState } from './lease.ts';
import { closeClient, connectClient, LazyClient } from './pg-client.ts';
import { channelOf, clusterIdentity, ensureClusterRows, ensureSchema } from './schema.ts';
import { readSinkPositions, saveSinkPositions } from './sink-positions.ts';

/** Batches read per round trip while replicating (each at most JOURNAL_MAX_BATCH_RECORDS). */
const REPLICATION_BATCHES = 16;
/**
 * After a NOTIFY a follower waits this long before it reads, so one read takes several commits.
 * Each read has a fixed cost (a round trip, its LMDB transaction and fsync, the wakeups): at
 * 4,000 writes/s, 100 ms instead of 40 took the follower's CPU per applied record from 0.24× the
 * leader's CPU per request to 0.22× (3 alternating pairs of runs, 2026-11-28). What it costs:
 * a follower's own copy lags by up to about twice this. No answer depends on that copy (every
 * endpoint is a write, and a follower forwards writes to the leader); a node taking over reads
 * at once, and `export` on a follower shows what it has applied.
 */
const REPLICATION_LINGER_MS = 100;
/** A follower looks for new batches this often even without a NOTIFY (a lost LISTEN connection). */
const REPLICATION_POLL_MS = 250;
/** ...and this often while its LISTEN connection is up (a NOTIFY wakes it after commits). */
const REPLICATION_POLL_LISTENING_MS = 1_000;
/**
 * A leader's commits NOTIFY the listening nodes at most this often; a commit in between is told
 * by the next NOTIFY, at the latest one gap later (a trailing one). A follower reads
 * REPLICATION_LINGER_MS after a NOTIFY anyway, so more of them only wake it for nothing: at
 * 4,000 writes/s (about 500 commits/s) a NOTIFY per commit cost a follower 14.5 µs of CPU per
 * applied record, one per 40 ms 11.7 (measured, 2026-11-24; the gap follows the linger, 100 ms
 * since 2026-11-28). The first commit after a quiet spell still NOTIFYs at once.
 */
const COMMIT_NOTIFY_GAP_MS = REPLICATION_LINGER_MS;
/** Waits between attempts while PostgreSQL cannot be reached: doubling up to the maximum. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2_000;
/** Renewals per lease; a follower also looks at the lease this often. */
const RENEWALS_PER_LEASE = 5;
/** A follower looks at the lease at least this often (nextLookMs()). */
const FOLLOWER_LOOK_MAX_MS = 500;
/** The LISTEN connection is checked with a query this often: a connection dropped without a word (a NAT's idle timeout) is found, and made again. */
const LISTEN_CHECK_MS = 10_000;
/** A candidate that applies nothing for this many leases gives the lease up (candidateStalled()). */
const CANDIDATE_STALL_LEASES = 3;
/**
 * A follower that saw the lease due to run out tries to take it this long after it should have
 * (by the time left PostgreSQL reported, counted from the read's answer, so already a round trip
 * late): a timer may fire a little early by the wall clock, and a takeover tried before the
 * expiry is refused and read again.
 */
const LEASE_EXPIRY_MARGIN_MS = 10;
/** A follower whose journal reads come back full reads the journal's head at most this often, for its lag (lagRecords). */
const HEAD_READ_EVERY_MS = 1_000;
/** A graceful stop waits this long for the lease release and for the replication loop. */
const RELEASE_TIMEOUT_MS = 1_000;
const STOP_WAIT_MS = 2_000;
/** Client-side limit on one query: a commit, a renewal, a read. */
const QUERY_TIMEOUT_MS = 10_000;
/** The leader trims the journal in PostgreSQL (when retention is set) at least this often. */
const TRIM_EVERY_MS = 60_000;
/** A node that does not lead reads how far the leader trimmed the cluster's journal this often. */
const TRIMMED_CHECK_EVERY_MS = 10_000;
/** The leader copies its sinks' positions to PostgreSQL after each batch a sink confirmed, at most this often (sink-positions.ts). */
const SINK_POSITIONS_GAP_MS = 100;
/** A candidate that could not read the saved sink positions tries again after this (takeSinkPositions). */
const SINK_POSITIONS_RETRY_MS = 250;
/** Journal batches deleted per retention statement (each statement is one short transaction). */
const TRIM_BATCHES_PER_STATEMENT = 1_000;

export type Role = 'follower' | 'candidate' | 'leader' | 'stepping-down' | 'stopped';

/** What a node needs from the rest of the server. */
export interface ClusterHost {
  /** The seq of the last record this node has applied (and journaled locally). */
  appliedSeq(): number;
  /** Applies and journals locally the records of `batch` after appliedSeq(); resolves once they are durable locally when `wait` is set. */
  /** `bytes`: the records as stored, when they are the whole batch read from PostgreSQL. */
  applyBatch(firstSeq: number, records: JournalRecord[], bytes: Uint8Array | null): Promise<void>;
  /** Every record applied so far is durable in the local journal. */
  whenApplied(): Promise<void>;
  /**
   * Starts accepting writes in `epoch`: each journal batch is committed through `commit` (to
   * PostgreSQL) before it is written locally and answered.
   */
  lead(epoch: number, commit: RemoteCommit, commitGapMs: number): void;
  /**
   * Stops accepting writes: the open and in-flight batches fail (503). Resolves to true when
   * writes were applied that PostgreSQL may not hold (then the host must rebuild).
   */
  stopLeading(reason: Error): Promise<boolean>;
  /** Rebuilds the state from the local data directory (snapshot + local journal). */
  rebuild(): Promise<void>;
  /** The last seq committed in the cluster's journal (this node's LMDB copy may be a few batches behind on a leader). */
  committedSeq(): number;
  /** This node's own journal record of `seq` (null when it is not, or no longer, stored). */
  localRecord(seq: number): JournalRecord | null;
  /** The identity of the cluster this data directory belongs to, or null when it records none. */
  clusterId(): string | null;
  /** Records that this data directory belongs to cluster `id` (durable once it resolves). */
  adoptClusterId(id: string): Promise<void>;
  /** Leader only: delivery downstream. */
  leading(on: boolean): void;
  /** Every sink's confirmed position saved on this node (shared through PostgreSQL while it leads). */
  sinkPositions(): SinkPosition[];
  /** Takes positions the cluster saved where they are ahead of this node's own; before delivery starts. */
  adoptSinkPositions(positions: readonly SinkPosition[]): Promise<number>;
  /** Retention keeps every record after this seq (sinks' confirmed position, oldest remembered key − 1); null: no such limit. */
  keepAfter(): number | null;
  /** Hands the chunks of local snapshot `meta` to `each`, a few at a time, in order. */
  readSnapshot(meta: SnapshotMeta, each: (first: number, chunks: Buffer[]) => Promise<void>): Promise<void>;
  /**
   * Joining: makes `source` (a snapshot after this node's applied seq) the newest local snapshot,
   * and rebuilds the state from it: appliedSeq() is then its seq.
   */
  installSnapshot(source: SnapshotSource): Promise<void>;
  /** Records a snapshot join still owes the local journal (its copy was cut short), or null. */
  pendingCopy(): { from: number; to: number } | null;
  /** Finishes that copy from the cluster's journal. */
  finishCopy(source: Pick<SnapshotSource, 'batchesAfter'>): Promise<void>;
}

/** A snapshot stored in PostgreSQL, as a joining node reads it. */
export interface SnapshotSource {
  seq: number;
  /** Records journalFrom..seq are copied into the local journal too (none when seq + 1). */
  journalFrom: number;
  chunks: number;
  bytes: number;
  entities: EntityCounts;
  /** Chunks first.. (at most count; fewer, or none, when the snapshot was replaced meanwhile). */
  readChunks(first: number, count: number): Promise<Buffer[]>;
  /** The cluster journal's batches holding records after `afterSeq` (cluster-journal.ts). */
  batchesAfter(afterSeq: number, maxBatches: number): Promise<StoredBatch[]>;
}

export interface ClusterNodeSettings {
  url: string;
  cluster: string;
  leaseMs: number;
  /** JOURNAL_RETENTION_SECONDS: 0 keeps the whole journal in PostgreSQL. */
  journalRetentionSeconds: number;
  /** CLUSTER_COMMIT_GAP_MS: the least time between the starts of two commits (journal.ts). */
  commitGapMs: number;
}

export interface ClusterMetrics {
  commitSeconds(seconds: number): void;
  renewalFailed(): void;
  /** Leader: a follower's frame of `commands` forwarded writes arrived (forward-endpoint.ts). */
  forwardFrame(commands: number): void;
  /** Follower: a write it took was answered 503 here, not by a leader (leader-link.ts). */
  forwardRefused(): void;
}

/** The local journal is not a prefix of the cluster's, or the data directory is not this cluster's (checkPrefix). */
export class DivergedError extends Error {}

/**
 * Rebuilding the state failed after it was dropped (a join through a snapshot): the node holds
 * an empty or partial state it must not serve, snapshot or lead from. It ends, as after a failed
 * step-down; restarted, it recovers from its data directory, where the joined snapshot is complete.
 */
export class StateLostError extends Error {}

/** Why checkPrefix refuses a data directory, and which kind of refusal it is (the message's cause). */
interface Refusal {
  reason: string;
  /** another-cluster: its identity is another's; diverged: its journal is not the cluster's; unproven: it cannot be compared. */
  kind: 'another-cluster' | 'diverged' | 'unproven';
}

const REFUSAL_CAUSES: Record<Refusal['kind'], string> = {
  'another-cluster': 'It was used by another cluster (or this cluster\'s rows in PostgreSQL were removed and made again).',
  diverged: 'It was used by a single node or by another cluster, or the cluster\'s PostgreSQL lost commits (restored from a backup, or failed over to an asynchronous replica).',
  unproven: 'It may be a single node\'s, whose data would be lost or mixed with the cluster\'s.',
};

function refusedDirectory(cluster: string, refusal: Refusal): DivergedError {
  return new DivergedError(
    `this node's data directory ${refusal.kind === 'unproven' ? 'cannot be shown to be' : 'is not'} a copy of cluster "${cluster}": ${refusal.reason}. ` +
      `${REFUSAL_CAUSES[refusal.kind]} ` +
      `Nothing was changed. Move DATA_DIR aside and start the node again with an empty one: it joins from the cluster. ` +
      `What the old directory holds stays readable with \`npm run export -- events --data-dir <old>\`.`,
  );
}

/**
 * The refusal of a data directory that records cluster identity `mine` when cluster `cluster`
 * is identity `theirs` (null: no such cluster in that PostgreSQL), or null when they agree or
 * cannot be compared. main.ts asks before it makes anything in PostgreSQL (a first start makes
 * the cluster's rows and its first key): a directory started against the wrong database made a
 * cluster and printed a key there, then said "Nothing was changed" (found by a review, 2026-11-29).
 */
export function foreignDirectory(cluster: string, mine: string | null, theirs: string | null, localLastSeq: number): DivergedError | null {
  // '' (a cluster made before identities): its first node gives it one, then checkPrefix decides.
  if (theirs === '') return null;
  if (mine === null) {
    // No identity: a new node's empty directory, or a single node's. The latter, against a
    // cluster that does not exist (an empty journal), is refused as checkPrefix would, but before
    // the cluster is made (a review of this change).
    return theirs === null && localLastSeq > 0
      ? refusedDirectory(cluster, { reason: `it holds records up to seq ${localLastSeq}, but the cluster's journal ends at seq 0 (there is no cluster "${cluster}" in this PostgreSQL yet)`, kind: 'diverged' })
      : null;
  }
  if (theirs === mine) return null;
  const reason =
    theirs === null
      ? `it belongs to another cluster (identity ${mine}; there is no cluster "${cluster}" in this PostgreSQL: check CLUSTER_POSTGRES_URL and CLUSTER_NAME)`
      : `it belongs to another cluster (identity ${mine}; cluster "${cluster}" is ${theirs})`;
  return refusedDirectory(cluster, { reason, kind: 'another-cluster' });
}

/** Where a follower forwards writes (leader-link.ts): the leader of an epoch, as its lease row says. */
export interface LeaderTarget {
  name: string;
  /** Its address (http://host:port), as it wrote it in the lease. */
  url: string;
  /** Its endpoint's secret for that epoch (forward-protocol.ts). */
  secret: string;
  epoch: number;
}

export interface ClusterStatus {
  node: string;
  role: 'leader' | 'follower';
  leader: string | null;
  epoch: number;
  appliedSeq: number;
}

export class ClusterNode {
  private readonly settings: ClusterNodeSettings;
  private readonly host: ClusterHost;
  private readonly log: Logger;
  private readonly metrics: ClusterMetrics;
  readonly journal: ClusterJournal;
  private readonly snapshots: ClusterSnapshots;
  private readonly lease: Lease;
  private readonly commits: LazyClient;
  private readonly leaseClient: LazyClient;
  private readonly reader: LazyClient;
  /** Snapshot uploads and retention: a connection of their own, so they never delay a commit. */
  private readonly upkeep: LazyClient;
  private listener: pg.Client | null = null;
  private name = '';
  private address = '';
  /**
   * The address of a live leader that holds the lease under this node's own name (null: none):
   * another node started with the same NODE_NAME, or this node's previous run until its lease
   * runs out. Such a leader cannot be told apart from this node, so it is no forward target.
   */
  private nameClashAddress: string | null = null;
  private roleNow: Role = 'follower';
  /**
   * Every seq up to this one was trimmed from the cluster's journal by a leader: every sink had
   * confirmed it (a leader trims nothing a sink still needs). 0 when none is known. Read by a
   * node that does not lead, whose own sink positions stop where it last led.
   */
  private clusterTrimmedSeq = 0;
  private trimmedCheckedAtMs = 0;
  private epochNow = 0;
  private leaderName: string | null = null;
  /** Followers: the live leader's lease (address, secret), as last read; null when none is live. */
  private leaderTarget: LeaderTarget | null = null;
  /** Leading: this epoch's secret for forwarded writes (stored in the lease row at the takeover). */
  private ownSecret: string | null = null;
  /** The last seq the journal is known to hold (from NOTIFYs, reads of batches and of the head, takeovers). */
  private knownHeadSeq = 0;
  /** After a takeover: the journal's end as of it; the node leads once it has applied this far. */
  private promoteAt = 0;
  /** As a candidate: the seq applied when it last moved, and when (candidateStalled()). */
  private candidateSeq = 0;
  private candidateProgressAtMs = 0;
  /** When a read on the replication reader's connection last succeeded (read()). */
  private readOkAtMs = -Infinity;
  /** performance.now() until which this node does not take the lease (after a stalled candidacy). */
  private abstainUntilMs = 0;
  /** performance.now() until which the leader's lease surely holds (from its last renewal's send time). */
  private leaseValidUntil = 0;
  /**
   * A follower's view of when the live lease runs out unless renewed (performance.now(), from the
   * time left PostgreSQL reported; null when none is live): its next look at the lease is then.
   */
  private leaseExpiresAtMs: number | null = null;
  /** When the journal's head was last read (performance.now()), for lagRecords while catching up. */
  private headReadAtMs = -Infinity;
  /** A renewal in flight when the lease ran out was counted as failed then (not again when it ends). */
  private renewalCounted = false;
  private running = false;
  private electing = false;
  /** The election round's renewal or takeover in flight, for stop() to wait for. */
  private roundInFlight: Promise<void> = Promise.resolve();
  /** The process is stopping: never take the lease from now on (see leave()). */
  private leaving = false;
  private stopping: Promise<void> | null = null;
  /** Fires when the lease runs out unless renewed meanwhile (armLeaseExpiry()). */
  private leaseTimer: NodeJS.Timeout | null = null;
  private wakeTimer: NodeJS.Timeout | null = null;
  /** When this leader's last NOTIFY was sent (performance.now()), and the trailing one's timer. */
  private lastNotifyAtMs = -Infinity;
  private notifyTimer: NodeJS.Timeout | null = null;
  /** Whether checkPrefix() ran (at start, or at the first round trip when PostgreSQL was down then). */
  private prefixChecked = false;
  /**
   * Told when this node cannot go on (its journal is not a prefix of the cluster's, or a rebuild
   * failed): the process ends with status 1 and a supervisor restarts it; the cluster goes on.
   */
  onFatal: (error: Error) => void = () => undefined;
  /** A step-down in progress (a rebuild may run): a stop waits for it. */
  private steppingDown: Promise<void> | null = null;
  private electAgain = false;
  /** Ends the replication loop's current sleep (set only while it sleeps). */
  private wake: (() => void) | null = null;
  /**
   * A wake-up that came while the loop was not sleeping (reading or applying a batch): its next
   * sleep returns at once. Without it a NOTIFY, or a takeover, that came meanwhile was lost, and
   * the loop slept a whole poll (1 s) with the leader's last commit unread.
   */
  private wakePending = false;
  private electionTimer: NodeJS.Timeout | null = null;
  private replicating: Promise<void> | null = null;
  private renewing = false;
  private replicationErrorLogged = false;
  private electionErrorLogged = false;
  /** This node held nothing when it started: it looks for a snapshot in PostgreSQL first (once). */
  private emptyChecked = false;
  /** The newest local snapshot not uploaded yet, and the upload running (one at a time). */
  private uploadNext: SnapshotMeta | null = null;
  private uploading: Promise<void> | null = null;
  private trimming: Promise<void> | null = null;
  private trimTimer: NodeJS.Timeout | null = null;
  private positionsTimer: NodeJS.Timeout | null = null;
  private positionsSharedAtMs = -Infinity;
  /** The sink positions last saved in PostgreSQL (JSON), so that unchanged ones are not written again. */
  private sharedPositions = '';
  private sharingPositions = false;
  /** A batch was confirmed while a copy was under way: another copy follows. */
  private positionsPending = false;

  constructor(settings: ClusterNodeSettings, host: ClusterHost, log: Logger, metrics: ClusterMetrics) {
    this.settings = settings;
    this.host = host;
    this.log = log.child({ component: 'cluster' });
    this.metrics = metrics;
    this.journal = new ClusterJournal(settings.cluster);
    this.snapshots = new ClusterSnapshots(settings.cluster);
    this.lease = new Lease(settings.cluster, settings.leaseMs);
    const options = (applicationName: string) => ({ queryTimeoutMs: QUERY_TIMEOUT_MS, applicationName });
    this.commits = new LazyClient(settings.url, options('intake-commit'));
    this.leaseClient = new LazyClient(settings.url, options('intake-lease'));
    this.reader = new LazyClient(settings.url, options('intake-replica'));
    this.upkeep = new LazyClient(settings.url, options('intake-snapshot'));
  }

  /** How far a leader trimmed the cluster's journal, as this node last read it (0: nothing known). */
  get clusterTrimmedThroughSeq(): number {
    return this.clusterTrimmedSeq;
  }

  get role(): Role {
    return this.roleNow;
  }

  get epoch(): number {
    return this.epochNow;
  }

  /** Records the cluster's journal holds that this node has not applied (as far as it knows). */
  get lagRecords(): number {
    return Math.max(0, this.knownHeadSeq - this.host.appliedSeq());
  }

  status(): ClusterStatus {
    return {
      node: this.name,
      role: this.roleNow === 'leader' ? 'leader' : 'follower',
      // A candidate holds the lease but takes no writes yet: naming itself leader there (with role
      // "follower") sent scripts that pick the leader from this field to a node that refuses
      // writes (found by a review). Unknown until it leads.
      leader: this.roleNow === 'leader' ? this.name : this.roleNow === 'candidate' ? null : this.leaderName,
      epoch: this.epochNow,
      // On the leader: the last committed (CONTRACT §12), not the last appended to the open batch.
      appliedSeq: this.roleNow === 'leader' ? this.host.committedSeq() : this.host.appliedSeq(),
    };
  }

  /** Writes are accepted: this node leads, has applied the whole journal, and its lease holds. */
  get accepting(): boolean {
    return this.roleNow === 'leader' && performance.now() < this.leaseValidUntil;
  }

  /**
   * Where writes taken here go (leader-link.ts): 'self' while this node accepts them, the live
   * leader while this node follows, null while no leader is known or this node is between roles
   * (a candidate catching up, stepping down).
   */
  forwardTarget(): LeaderTarget | 'self' | null {
    if (this.accepting) return 'self';
    if (this.roleNow !== 'follower') return null;
    return this.leaderTarget;
  }

  /** Why no leader can be forwarded to beyond "none is known", or null: the leader uses this node's name (noteLeader). */
  noLeaderReason(): string | null {
    if (this.nameClashAddress === null || this.roleNow !== 'follower') return null;
    return `the leader holds the lease under this node's own name (${this.name}) at ${this.nameClashAddress}: give every node its own NODE_NAME`;
  }

  /** The secret followers must send with forwarded writes, while this node leads; else null. */
  forwardSecret(): string | null {
    return this.roleNow === 'leader' ? this.ownSecret : null;
  }

  /** Why a write is refused here (503 with Retry-After: 1), or null when it is accepted. */
  refusal(): string | null {
    if (this.accepting) return null;
    if (this.roleNow === 'leader') return 'this node cannot renew its lease as the cluster\'s leader';
    const leader = this.leaderName === null ? 'no leader is known yet' : `the leader is ${this.leaderName}`;
    return `this node is not the cluster's leader (${leader})`;
  }

  /**
   * Connects, creates the tables when missing, and starts replicating. Resolves once the node has
   * caught up with the journal as it was when it started (or at once, when PostgreSQL cannot be
   * reached: replication keeps trying in the background).
   */
  async start(): Promise<void> {
    this.running = true;
    try {
      await this.read(async (client) => {
        await ensureSchema(client);
        await ensureClusterRows(client, this.settings.cluster);
        this.knownHeadSeq = (await this.journal.head(client)).lastSeq;
        await this.checkPrefix(client);
      });
    } catch (error) {
      if (error instanceof DivergedError) throw error;
      this.log.error({ err: error }, 'cannot reach the cluster\'s PostgreSQL; retrying in the background');
    }
    void this.listen();
    this.replicating = this.replicate();
    if (this.settings.journalRetentionSeconds > 0) {
      this.trimTimer = setInterval(() => void this.trimJournal(), TRIM_EVERY_MS);
      this.trimTimer.unref();
    }
    const startedAt = performance.now();
    // Catch up before serving, as a single node recovers before it listens, but never wait
    // forever: a node whose PostgreSQL is down still answers /healthz and /cluster.
    while (this.host.appliedSeq() < this.knownHeadSeq && performance.now() - startedAt < 60_000) await sleep(20);
  }

  /**
   * The data directory must belong to this cluster, and this node's own journal must be a prefix
   * of the cluster's: by the commit order it always is (a leader writes its copy after
   * PostgreSQL committed). If it is not, the directory was used by a single node or another
   * cluster, or PostgreSQL lost commits (restored from a backup, failed over to an asynchronous
   * replica). Following would mix two journals (or a join from the snapshot would delete this
   * one), and leading would fail every commit; the node refuses to start instead, changing
   * nothing, and says what to do.
   *
   * The identity comes first: the prefix check alone cannot tell when there is nothing to
   * compare (retention trimmed the record on either side), and passed such directories. So:
   * - the directory records this cluster's identity: the prefix check, where a trimmed record
   *   is fine (the directory is this cluster's; retention trims on both sides);
   * - it records another identity: refused;
   * - it records none (a single node's, or a node's made before identities), and is empty:
   *   it takes this cluster's identity, and joins;
   * - it records none and holds records: it takes the identity only if its last record is in
   *   the cluster's journal and equal to it (a record carries its server receive time in ms:
   *   an equal one is the same write); refused when it differs, is ahead of the journal, or
   *   cannot be compared because either side trimmed it, since such a directory cannot be told
   *   from a single node's.
   */
  private async checkPrefix(client: pg.Client): Promise<void> {
    const clusterId = await clusterIdentity(client, this.settings.cluster);
    // The rows were removed under this node: not a verdict on its directory; tried again.
    if (clusterId === null) throw new Error(`cluster "${this.settings.cluster}" has no head row in PostgreSQL`);
    const mine = this.host.clusterId();
    const local = this.host.appliedSeq();
    // Another cluster's identity: the refusal main.ts makes before anything is made, when it can.
    const foreign = foreignDirectory(this.settings.cluster, mine, clusterId, local);
    if (foreign !== null) {
      this.prefixChecked = true;
      throw foreign;
    }
    const refusal = local === 0 ? null : await this.divergence(client, local, mine === null);
    if (refusal === null) {
      if (mine === null) {
        await this.host.adoptClusterId(clusterId);
        this.log.info({ clusterId, appliedSeq: local }, local === 0 ? 'this data directory now belongs to the cluster (it was empty)' : 'this data directory now belongs to the cluster (it recorded no identity; its last record is the cluster\'s)');
      }
      this.prefixChecked = true;
      return;
    }
    // Done: a refused directory ends the node.
    this.prefixChecked = true;
    throw refusedDirectory(this.settings.cluster, refusal);
  }

  /**
   * How this node's last record `local` disagrees with the cluster's journal, or null. `strict`
   * (the directory records no identity): a record trimmed on either side is a refusal too.
   */
  private async divergence(client: pg.Client, local: number, strict: boolean): Promise<Refusal | null> {
    const head = await this.journal.head(client);
    if (local > head.lastSeq) return { reason: `it holds records up to seq ${local}, but the cluster's journal ends at seq ${head.lastSeq}`, kind: 'diverged' };
    const [batch] = await this.journal.batchesAfter(client, local - 1, 1);
    const theirs = batch === undefined ? undefined : batch.records[local - batch.firstSeq];
    const mine = this.host.localRecord(local);
    if (theirs !== undefined && mine !== null) {
      return exportLine(local, theirs) === exportLine(local, mine) ? null : { reason: `its record ${local} is not the cluster's record ${local}`, kind: 'diverged' };
    }
    // Trimmed by retention on either side: nothing to compare. Nothing was mixed when the
    // directory is this cluster's; without an identity that is unknown.
    if (!strict) return null;
    const gone = mine === null ? 'its own journal no longer holds it' : 'the cluster\'s journal no longer holds it';
    return { reason: `it records no cluster identity (a single node's directory, or a node's from before cluster identities), and its last record, seq ${local}, cannot be compared with the cluster's: ${gone} (retention)`, kind: 'unproven' };
  }

  /** Takes part in elections from now on, known to the others as `name` at `address`. */
  elect(name: string, address: string): void {
    this.name = name;
    this.address = address;
    this.log.info({ node: name, address, cluster: this.settings.cluster }, 'cluster node: following, in the election');
    const everyMs = Math.max(50, Math.floor(this.settings.leaseMs / RENEWALS_PER_LEASE));
    const tick = (): void => {
      this.electionTimer = setTimeout(() => void this.electionRound().finally(() => this.running && tick()), this.nextLookMs(everyMs));
    };
    void this.electionRound().finally(tick);
  }

  /**
   * Graceful stop. A leader gives its lease up (after the caller has answered what was in
   * flight and drained the journal), so another node leads at once instead of after the lease.
   */
  stop(): Promise<void> {
    // Once: a leader's stop hands over early (main.ts), and the process's stop calls it again.
    this.stopping ??= this.stopNow();
    return this.stopping;
  }

  private async stopNow(): Promise<void> {
    this.leave();
    // A rebuild in progress must finish before the caller takes its final snapshot.
    await this.steppingDown;
    this.running = false;
    if (this.electionTimer !== null) clearTimeout(this.electionTimer);
    if (this.leaseTimer !== null) clearTimeout(this.leaseTimer);
    // A round in flight finishes on its connection before it is closed below (closed under it,
    // the round failed as if PostgreSQL were unreachable); a takeover it completes is released.
    await Promise.race([this.roundInFlight, sleep(RELEASE_TIMEOUT_MS)]);
    const wasLeader = this.roleNow === 'leader' || this.roleNow === 'candidate';
    const epoch = this.epochNow;
    this.roleNow = 'stopped';
    if (this.trimTimer !== null) clearInterval(this.trimTimer);
    if (this.positionsTimer !== null) clearTimeout(this.positionsTimer);
    if (this.notifyTimer !== null) clearTimeout(this.notifyTimer);
    this.notifyTimer = null;
    this.uploadNext = null;
    this.signal();
    if (wasLeader) await this.releaseLease(epoch);
    // Queries in flight (a read, an upload) fail at once instead of running into their timeouts.
    void this.reader.close();
    await Promise.race([this.replicating, sleep(STOP_WAIT_MS)]);
    // An upload stops after its current statement, and stays incomplete in PostgreSQL (nothing
    // reads it; the next complete one removes it).
    await Promise.allSettled([this.uploading, this.trimming]);
    await Promise.all([this.commits.close(), this.leaseClient.close(), this.reader.close(), this.upkeep.close(), closeClient(this.listener)]);
  }

  /**
   * The process has begun a graceful stop (it answers what is in flight, then calls stop()): a
   * follower no longer takes the lease. Without this, a follower stopped together with its leader
   * took over at the leader's release, only to hand over again a moment later: two leader
   * changes for the clients instead of one. A leader goes on renewing until stop() hands over.
   */
  leave(): void {
    this.leaving = true;
  }

  /**
   * When a node looks at the lease next: every lease / RENEWALS_PER_LEASE, but a follower that
   * saw the lease due to run out before that looks just after it does. Looking only at the fixed
   * rate, a follower took over up to a fifth of a lease after the expiry: 1.2 leases after the
   * leader's last renewal, where CONTRACT §12 says one (a review).
   */
  private nextLookMs(everyMs: number): number {
    if (this.roleNow !== 'follower') return everyMs;
    // At most FOLLOWER_LOOK_MAX_MS whatever the lease: a leader's release comes by NOTIFY, and
    // without it (its LISTEN connection down) a follower with a 15 s lease looked every 3 s, past
    // the 2 s CONTRACT §12 gives a graceful stop's handover (a review).
    const lookMs = Math.min(everyMs, FOLLOWER_LOOK_MAX_MS);
    if (this.leaseExpiresAtMs === null) return lookMs;
    return Math.min(lookMs, Math.max(0, this.leaseExpiresAtMs + LEASE_EXPIRY_MARGIN_MS - performance.now()));
  }

  /** Gives the lease up, waiting at most RELEASE_TIMEOUT_MS (PostgreSQL may be unreachable). */
  private async releaseLease(epoch: number): Promise<void> {
    const released = this.leaseClient.use((client) => this.lease.release(client, this.name, epoch, channelOf(this.settings.cluster)));
    try {
      const done = await Promise.race([released.then(() => true), sleep(RELEASE_TIMEOUT_MS).then(() => false)]);
      if (done) this.log.info({ epoch }, 'leader lease released');
      else this.log.warn('could not release the leader lease in time; another node takes over once it expires');
    } catch (error) {
      this.log.warn({ err: error }, 'could not release the leader lease; another node takes over once it expires');
    }
  }

  /** The host's journal failed a commit: step down (and rebuild what was applied but may be lost). */
  commitFailed(error: Error): void {
    if (this.roleNow !== 'leader') return;
    void this.stepDown(error instanceof FencedError ? 'fenced: another node leads' : 'a commit to PostgreSQL failed', error);
  }

  // --- replication ---

  private async replicate(): Promise<void> {
    let retryMs = RETRY_FIRST_MS;
    while (this.running) {
      if (this.roleNow === 'leader' || this.roleNow === 'stepping-down') {
        await this.sleep(REPLICATION_POLL_MS);
        continue;
      }
      let batches: StoredBatch[];
      try {
        if (!this.prefixChecked) await this.read((client) => this.checkPrefix(client));
        // A join whose copy of the records before its snapshot was cut short finishes it first.
        if (this.host.pendingCopy() !== null) {
          await this.host.finishCopy({ batchesAfter: (after, max) => this.read((client) => this.journal.batchesAfter(client, after, max)) });
          this.log.info({ appliedSeq: this.host.appliedSeq() }, 'finished copying the journal records before the joined snapshot');
        }
        // A node that holds nothing loads the newest snapshot first, when there is one: faster
        // than applying the journal from its start (which retention may have trimmed anyway).
        // Tried once: if loading it fails, the journal is applied instead (or, if it no longer
        // reaches back, the snapshot is tried again below).
        if (!this.emptyChecked) {
          const stored = this.host.appliedSeq() === 0 ? await this.newestSnapshotAhead() : null;
          this.emptyChecked = true;
          if (stored !== null) await this.joinFromSnapshot(stored, 'this node holds nothing yet');
        }
        const after = this.host.appliedSeq();
        failPointFor('replication-read');
        // Not this.read(): this read counts as progress (candidateStalled()) only once its batches
        // are applied. A batch is decoded as it is applied (StoredBatch.records), so one that
        // cannot be (a damaged row, a newer version's format) throws below, after the query
        // succeeded; counted then, a candidate stuck behind it renewed its lease for good (found
        // by a review).
        batches = await this.reader.use((client) => this.journal.batchesAfter(client, after, REPLICATION_BATCHES));
        // Nothing after `after`: ask the head whether the journal ends here or was trimmed past
        // it, even when no NOTIFY said it moved. A node that missed the NOTIFYs (its PostgreSQL
        // connections were cut) while retention emptied the journal otherwise read nothing,
        // knew no head beyond its own position (lag 0), and stalled until the next write. One
        // head read per empty read: about one a second on an idle follower.
        if (batches.length === 0 && (await this.trimmedPast(after))) {
          await this.joinOrFail(after, null);
          continue;
        }
        let joined = false;
        for (const batch of batches) {
          const applied = this.host.appliedSeq();
          if (batch.firstSeq > applied + 1) {
            await this.joinOrFail(applied, batch.firstSeq);
            joined = true;
            break;
          }
          if (batch.lastSeq <= applied) continue;
          const from = applied + 1 - batch.firstSeq;
          // A whole batch is stored locally as read (its bytes); a part of one is encoded again.
          // Decoded here, one batch at a time (StoredBatch.records). Crash tests: a batch that
          // cannot be decoded.
          failPointFor('replication-decode');
          const records = batch.records;
          await this.host.applyBatch(applied + 1, from === 0 ? records : records.slice(from), from === 0 ? batch.bytes : null);
          if (batch.lastSeq > this.knownHeadSeq) this.knownHeadSeq = batch.lastSeq;
        }
        this.readOkAtMs = performance.now();
        if (performance.now() - this.trimmedCheckedAtMs >= TRIMMED_CHECK_EVERY_MS) await this.readTrimmed();
        // A full read: more may follow, further than any NOTIFY this node heard (one may have
        // come before its LISTEN, or none while it was cut off). Its lag counts from the head,
        // not from the last batch it read (that showed a node far behind as a few batches behind).
        else if (batches.length === REPLICATION_BATCHES && performance.now() - this.headReadAtMs >= HEAD_READ_EVERY_MS) await this.readHead();
        if (this.replicationErrorLogged) this.log.info({ appliedSeq: this.host.appliedSeq() }, 'replication: reading the cluster\'s journal again');
        this.replicationErrorLogged = false;
        retryMs = RETRY_FIRST_MS;
        if (joined) continue;
      } catch (error) {
        if (error instanceof DivergedError) {
          this.log.fatal({ err: error.message }, 'this node\'s journal is not a copy of the cluster\'s: stopping');
          this.onFatal(error);
          return;
        }
        if (error instanceof StateLostError) {
          this.log.fatal({ err: error.cause ?? error }, 'rebuilding the state from the joined snapshot failed: stopping this node');
          this.onFatal(error);
          return;
        }
        if (!this.replicationErrorLogged) this.log.error({ err: error, appliedSeq: this.host.appliedSeq() }, 'replication: cannot read the cluster\'s journal; retrying');
        this.replicationErrorLogged = true;
        await this.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
        continue;
      }
      if (this.roleNow === 'candidate' && this.host.appliedSeq() >= this.promoteAt) {
        // Outside the read's try above, a failure here ended this loop: the node stayed a
        // candidate renewing the lease for good, and no node could lead (a review).
        try {
          await this.promote();
        } catch (error) {
          this.log.error({ err: error }, 'promotion failed: stepping down');
          // Sitting a lease out: a promotion that keeps failing would take and give up the lease
          // again and again, and another node could lead meanwhile.
          this.abstainUntilMs = performance.now() + this.settings.leaseMs;
          await this.stepDown('the promotion failed', error instanceof Error ? error : new Error(String(error)));
        }
        continue;
      }
      if (batches.length < REPLICATION_BATCHES) await this.sleep(this.listener === null ? REPLICATION_POLL_MS : REPLICATION_POLL_LISTENING_MS);
    }
  }

  /** Reads how far the cluster's journal was trimmed (its first batch, or its head when it holds none). */
  private async readTrimmed(): Promise<void> {
    this.trimmedCheckedAtMs = performance.now();
    const trimmed = await this.read(async (client) => {
      // The head first (as trimmedPast() reads them): read after an empty journal, it could
      // count a commit landed in between as trimmed, and this node's own retention would then
      // drop a record no sink confirmed (found by a review).
      const head = await this.journal.head(client);
      this.noteHead(head.lastSeq);
      const first = await this.journal.firstSeq(client);
      return first !== null ? first - 1 : head.lastSeq;
    });
    if (trimmed > this.clusterTrimmedSeq) this.clusterTrimmedSeq = trimmed;
  }

  /** The journal holds no record after `appliedSeq` although the head is past it: retention trimmed them. */
  private async trimmedPast(appliedSeq: number): Promise<boolean> {
    return this.read(async (client) => {
      const head = await this.journal.head(client);
      this.noteHead(head.lastSeq);
      if (head.lastSeq <= appliedSeq) return false;
      const first = await this.journal.firstSeq(client);
      return first === null || first > appliedSeq + 1;
    });
  }

  private async readHead(): Promise<void> {
    this.headReadAtMs = performance.now();
    const head = await this.read((client) => this.journal.head(client));
    this.noteHead(head.lastSeq);
  }

  /** The journal is known to reach `lastSeq` (read from its head): lag and catching up count from there. */
  private noteHead(lastSeq: number): void {
    if (lastSeq > this.knownHeadSeq) this.knownHeadSeq = lastSeq;
  }

  /** The journal no longer reaches back to `appliedSeq` + 1: join through the newest snapshot, or fail (and retry). */
  private async joinOrFail(appliedSeq: number, journalStartsAt: number | null): Promise<void> {
    const starts = journalStartsAt === null ? 'holds no record after it' : `starts at seq ${journalStartsAt}`;
    const stored = await this.newestSnapshotAhead();
    if (stored !== null) return this.joinFromSnapshot(stored, `the cluster's journal ${starts} (retention)`);
    throw new Error(`the cluster's journal ${starts}, after this node's ${appliedSeq}, and PostgreSQL holds no snapshot that covers the records in between`);
  }

  /** The newest complete snapshot stored in PostgreSQL if it is ahead of what this node has applied, else null. */
  private async newestSnapshotAhead(): Promise<StoredSnapshot | null> {
    const applied = this.host.appliedSeq();
    const stored = await this.read((client) => this.snapshots.newest(client));
    return stored !== null && stored.seq > applied ? stored : null;
  }

  /**
   * Loads a snapshot stored in PostgreSQL: it becomes the node's newest local snapshot, the
   * state is rebuilt from it, and replication goes on after its seq.
   */
  private async joinFromSnapshot(stored: StoredSnapshot, why: string): Promise<void> {
    const applied = this.host.appliedSeq();
    const startedAt = performance.now();
    this.log.info({ snapshot: stored.id, seq: stored.seq, chunks: stored.chunks, bytes: stored.bytes, appliedSeq: applied, why }, 'joining from the snapshot stored in PostgreSQL');
    await this.host.installSnapshot(this.sourceOf(stored));
    if (this.host.appliedSeq() > this.knownHeadSeq) this.knownHeadSeq = this.host.appliedSeq();
    this.log.info({ snapshot: stored.id, seq: stored.seq, appliedSeq: this.host.appliedSeq(), durationMs: Math.round(performance.now() - startedAt) }, 'joined from the snapshot stored in PostgreSQL');
  }

  private sourceOf(stored: StoredSnapshot): SnapshotSource {
    return {
      seq: stored.seq,
      journalFrom: stored.journalFrom,
      chunks: stored.chunks,
      bytes: stored.bytes,
      // No counts stored (none so far): unknown, not zero. Zeros would make the loader, which
      // checks each count against the chunks, refuse the joined snapshot; missing ones it skips.
      entities: stored.entities ?? ({} as EntityCounts),
      readChunks: (first, count) => this.read((client) => this.snapshots.chunks(client, stored.id, first, count)),
      batchesAfter: (afterSeq, maxBatches) => this.read((client) => this.journal.batchesAfter(client, afterSeq, maxBatches)),
    };
  }

  // --- snapshots in PostgreSQL, retention (leader) ---

  /**
   * A local snapshot was completed. The leader stores it in PostgreSQL, in the background; a
   * snapshot completed while an upload runs is stored after it (only the newest is).
   */
  snapshotWritten(meta: SnapshotMeta): void {
    if (this.roleNow !== 'leader' || !this.running) return;
    this.uploadNext = meta;
    this.uploading ??= this.uploadLoop().finally(() => (this.uploading = null));
  }

  private async uploadLoop(): Promise<void> {
    while (this.uploadNext !== null && this.running) {
      const meta = this.uploadNext;
      this.uploadNext = null;
      try {
        await this.upload(meta);
      } catch (error) {
        if (this.running) this.log.error({ err: error, snapshot: meta.id, seq: meta.seq }, 'could not store the snapshot in PostgreSQL; the next snapshot tries again');
        else this.log.info({ snapshot: meta.id, seq: meta.seq }, 'stopping: the snapshot\'s upload to PostgreSQL was cut short');
        continue;
      }
      await this.trimJournal();
    }
  }

  private async upload(meta: SnapshotMeta): Promise<void> {
    const startedAt = performance.now();
    // A node that joins from this snapshot holds the records after it, and also those before it
    // that a sink has not confirmed yet or that a remembered Idempotency-Key names (a retried
    // app launch is answered from its record): it may lead one day.
    const keepAfter = this.host.keepAfter();
    const journalFrom = keepAfter === null ? meta.seq + 1 : Math.min(keepAfter, meta.seq) + 1;
    const id = await this.upkeep.use((client) => this.snapshots.create(client, meta.seq, meta.chunks, meta.bytes, meta.entities, journalFrom));
    if (id === null) {
      this.log.info({ seq: meta.seq }, 'PostgreSQL already holds a snapshot as new as this one');
      return;
    }
    await this.host.readSnapshot(meta, async (first, chunks) => {
      if (!this.running) throw new Error('stopping');
      await this.upkeep.use((client) => this.snapshots.putChunks(client, id, first, chunks));
    });
    await this.upkeep.use((client) => this.snapshots.complete(client, id));
    const removed = await this.upkeep.use((client) => this.snapshots.removeOlder(client, id, meta.seq));
    this.log.info(
      { snapshot: id, localSnapshot: meta.id, seq: meta.seq, journalFrom, chunks: meta.chunks, bytes: meta.bytes, durationMs: Math.round(performance.now() - startedAt), removedSnapshots: removed.snapshots },
      'snapshot stored in PostgreSQL',
    );
  }

  /** Journal retention in PostgreSQL (leader only, JOURNAL_RETENTION_SECONDS > 0). */
  private trimJournal(): Promise<void> {
    if (this.settings.journalRetentionSeconds <= 0 || this.roleNow !== 'leader') return Promise.resolve();
    this.trimming ??= this.trimSteps()
      .catch((error: unknown) => this.log.error({ err: error }, 'journal retention in PostgreSQL failed; tried again later'))
      .finally(() => (this.trimming = null));
    return this.trimming;
  }

  private async trimSteps(): Promise<void> {
    const keepAfter = this.host.keepAfter();
    const total = { batches: 0, records: 0, lastSeq: null as number | null };
    for (;;) {
      if (this.roleNow !== 'leader' || !this.running) break;
      const step = await this.upkeep.use((client) => this.snapshots.trimJournal(client, keepAfter, this.settings.journalRetentionSeconds, TRIM_BATCHES_PER_STATEMENT));
      total.batches += step.batches;
      total.records += step.records;
      if (step.lastSeq !== null) total.lastSeq = step.lastSeq;
      if (step.batches < TRIM_BATCHES_PER_STATEMENT) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (total.batches > 0) {
      this.log.info({ batches: total.batches, records: total.records, trimmedThroughSeq: total.lastSeq, keepAfter, retentionSeconds: this.settings.journalRetentionSeconds }, 'cluster journal trimmed by retention in PostgreSQL');
    }
  }

  /** LISTEN on the cluster's channel: commits and lease releases wake this node. Reconnects. */
  private async listen(): Promise<void> {
    let retryMs = RETRY_FIRST_MS;
    while (this.running) {
      let client: pg.Client | null = null;
      let check: NodeJS.Timeout | null = null;
      try {
        client = await connectClient(this.settings.url, { queryTimeoutMs: QUERY_TIMEOUT_MS, applicationName: 'intake-listen' });
        const lost = new Promise<void>((resolve) => {
          client!.once('end', resolve);
          client!.once('error', () => resolve());
          // A query that fails or times out (QUERY_TIMEOUT_MS) means the connection is gone, even
          // when no packet said so: TCP keep-alive alone took the OS's two hours (a review).
          check = setInterval(() => void client!.query('SELECT 1').catch(() => resolve()), LISTEN_CHECK_MS);
          check.unref();
        });
        client.on('notification', (message) => {
          const payload = message.payload ?? '';
          // A release (graceful stop): take over at once. A takeover: read who leads now.
          if (payload === 'released' || (payload === 'leader' && this.roleNow === 'follower')) void this.electionRound();
          else {
            const seq = Number(payload);
            if (Number.isSafeInteger(seq) && seq > this.knownHeadSeq) this.knownHeadSeq = seq;
            if (this.roleNow !== 'leader') this.wakeSoon();
          }
        });
        await client.query(`LISTEN "${channelOf(this.settings.cluster)}"`);
        this.listener = client;
        retryMs = RETRY_FIRST_MS;
        await lost;
      } catch {
        // PostgreSQL unreachable: the poll keeps replication going meanwhile.
      }
      if (check !== null) clearInterval(check);
      if (this.listener === client) this.listener = null;
      await closeClient(client);
      if (this.running) await sleep(retryMs);
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    }
  }

  // --- election ---

  private async electionRound(): Promise<void> {
    if (!this.running || this.name === '') return;
    if (this.electing) {
      // A release heard while a round runs must not wait for the next tick (handover in ~1 s).
      this.electAgain = true;
      return;
    }
    this.electing = true;
    this.electAgain = false;
    try {
      const round = this.roleNow === 'leader' || this.roleNow === 'candidate' ? this.renew() : this.roleNow === 'follower' ? this.tryTakeOver() : null;
      if (round !== null) {
        this.roundInFlight = round.then(
          () => undefined,
          () => undefined,
        );
        await round;
      }
      if (this.electionErrorLogged) this.log.info('election: PostgreSQL answers again');
      this.electionErrorLogged = false;
    } catch (error) {
      // A round cut short by this node's own stop (stop() closes the lease connection under it:
      // a leader's release wakes every follower's round) is not PostgreSQL being unreachable.
      if (!this.running) return;
      if (!this.electionErrorLogged) this.log.error({ err: error }, 'election: cannot reach the cluster\'s PostgreSQL');
      this.electionErrorLogged = true;
    } finally {
      this.electing = false;
    }
    await this.stepDownIfLeaseRanOut();
    if (this.electAgain) void this.electionRound();
  }

  private async tryTakeOver(): Promise<void> {
    // Unknown until the read answers: a read that fails must not leave a past expiry behind, or
    // the next look would come at once, again and again, while PostgreSQL cannot be reached.
    this.leaseExpiresAtMs = null;
    let state = await this.leaseClient.use((client) => this.lease.read(client));
    this.leaseExpiresAtMs = state.live ? performance.now() + state.remainingMs : null;
    if (!state.exists) {
      // PostgreSQL was unreachable at start (or the rows were removed): create them now, but
      // not for a directory of another cluster, which main.ts refuses before anything is made
      // when PostgreSQL answers at start (a directory already checked here is this cluster's). Before, a node started while PostgreSQL was away made
      // the rows of a cluster that did not exist, and took its lease, before its replication
      // loop compared identities (found by a review).
      const foreign = this.prefixChecked ? null : foreignDirectory(this.settings.cluster, this.host.clusterId(), null, this.host.appliedSeq());
      if (foreign !== null) {
        this.prefixChecked = true;
        this.log.fatal({ err: foreign.message }, 'this node\'s journal is not a copy of the cluster\'s: stopping');
        this.onFatal(foreign);
        return;
      }
      await this.leaseClient.use(async (client) => {
        await ensureSchema(client);
        await ensureClusterRows(client, this.settings.cluster);
      });
      // The replication loop checks the directory against the rows now there; it may be
      // waiting out a retry.
      this.signal();
      state = await this.leaseClient.use((client) => this.lease.read(client));
    }
    this.epochNow = Math.max(this.epochNow, state.epoch);
    this.leaderName = state.live ? state.node : null;
    this.noteLeader(state);
    if (state.live || this.leaving) return;
    // A candidate that stalled sits one lease out, so that another node can take the lease.
    if (performance.now() < this.abstainUntilMs) return;
    // A node whose journal still owes records before its snapshot must not lead (it would
    // deliver around them): it finishes the copy first (replicate()). It still reads the lease
    // above: while the copy runs (or is retried) it knows the leader, forwards writes to it and
    // is ready; before, it stayed without a leader for as long as the copy took.
    if (this.host.pendingCopy() !== null) return;
    // Nor before its directory was checked against the cluster (start() does it when
    // PostgreSQL answers then; else the replication loop, once it does): a directory of another
    // cluster must not take this one's lease on its way to being refused.
    if (!this.prefixChecked) return;
    const sentAt = performance.now();
    // A new secret per epoch: a follower still holding an older one is refused (401) and reads the lease again.
    const secret = randomBytes(24).toString('base64url');
    const taken = await this.leaseClient.use((client) => this.lease.takeOver(client, this.name, this.address, secret, channelOf(this.settings.cluster)));
    if (taken === null) return;
    this.ownSecret = secret;
    this.leaderTarget = null;
    this.leaseValidUntil = sentAt + this.settings.leaseMs;
    this.armLeaseExpiry();
    this.epochNow = taken.epoch;
    this.leaderName = this.name;
    this.promoteAt = taken.lastSeq;
    if (taken.lastSeq > this.knownHeadSeq) this.knownHeadSeq = taken.lastSeq;
    this.candidateSeq = this.host.appliedSeq();
    this.candidateProgressAtMs = performance.now();
    this.roleNow = 'candidate';
    this.log.info({ epoch: taken.epoch, journalSeq: taken.lastSeq, appliedSeq: this.host.appliedSeq() }, 'took the leader lease; applying the journal to its end before accepting writes');
    this.signal();
  }

  /** A follower's view of the live leader, for forwarding; the same object while the lease row says the same. */
  private noteLeader(state: LeaseState): void {
    // The same name at another address: said once per clash, and by /readyz and each refused
    // write while it lasts. Before, such a node stayed unready ("no leader is known") and
    // refused every write with no word of why (found by a review).
    const clash = state.live && state.node === this.name && state.address !== null && state.address !== this.address && this.roleNow === 'follower' ? state.address : null;
    if (clash !== null && clash !== this.nameClashAddress) {
      this.log.error({ node: this.name, leaderAddress: clash, ownAddress: this.address }, `the cluster's leader holds the lease under this node's name (${this.name}) at ${clash}: another node uses this NODE_NAME (names must be unique in a cluster), or this node's previous run, until its lease runs out`);
    }
    this.nameClashAddress = clash;
    const t = this.leaderTarget;
    if (!state.live || state.node === null || state.node === this.name || state.address === null || state.secret === null) this.leaderTarget = null;
    else if (t === null || t.name !== state.node || t.url !== state.address || t.secret !== state.secret || t.epoch !== state.epoch) {
      this.leaderTarget = { name: state.node, url: state.address, secret: state.secret, epoch: state.epoch };
    }
  }

  private async renew(): Promise<void> {
    if (this.renewing) return;
    if (this.roleNow === 'candidate' && this.candidateStalled()) {
      // It renewed as long as it lived, and the caught-up followers never got the lease (a review).
      this.abstainUntilMs = performance.now() + this.settings.leaseMs;
      await this.stepDown(`as the candidate it applied nothing for ${CANDIDATE_STALL_LEASES} leases (seq ${this.host.appliedSeq()} of ${this.promoteAt}): handing the lease to another node`, new NotLeadingError('this node could not apply the cluster\'s journal to its end'));
      return;
    }
    this.renewing = true;
    this.renewalCounted = false;
    const sentAt = performance.now();
    const epoch = this.epochNow;
    try {
      const held = await this.leaseClient.use((client) => this.lease.renew(client, this.name, epoch));
      // A renewal answered after the lease it was to extend ran out came too late: this node has
      // stepped down meanwhile (armLeaseExpiry), so it failed as surely as one that threw.
      if (performance.now() >= this.leaseValidUntil) this.countRenewalFailed();
      if (held) {
        this.leaseValidUntil = sentAt + this.settings.leaseMs;
        this.armLeaseExpiry();
      } else await this.stepDown('the lease was taken over', new NotLeadingError('another node took over as the cluster\'s leader'));
    } catch (error) {
      this.countRenewalFailed();
      throw error;
    } finally {
      this.renewing = false;
    }
  }

  /**
   * Whether this candidate has applied nothing for CANDIDATE_STALL_LEASES leases: its reads of the
   * cluster's journal keep failing (a connection it cannot make, a read past its timeout) while
   * its lease connection works. One that is still applying, however far behind, goes on.
   */
  private candidateStalled(): boolean {
    const applied = this.host.appliedSeq();
    const now = performance.now();
    // Caught up (its promotion under way), or still applying: not stalled. A read of the
    // cluster's PostgreSQL that succeeded counts as progress too: a join through a snapshot
    // reads its chunks for a while before the applied seq moves.
    if (applied >= this.promoteAt || applied !== this.candidateSeq) {
      this.candidateSeq = applied;
      this.candidateProgressAtMs = now;
      return false;
    }
    return now - Math.max(this.candidateProgressAtMs, this.readOkAtMs) >= CANDIDATE_STALL_LEASES * this.settings.leaseMs;
  }

  /** A query on the replication reader's connection; notes when one last succeeded (candidateStalled()). */
  private async read<T>(run: (client: pg.Client) => Promise<T>): Promise<T> {
    const result = await this.reader.use(run);
    this.readOkAtMs = performance.now();
    return result;
  }

  /** intake_cluster_lease_renewal_failures_total, once per renewal (late, hung, or failed). */
  private countRenewalFailed(): void {
    if (this.renewalCounted) return;
    this.renewalCounted = true;
    this.metrics.renewalFailed();
  }

  /** Candidate → leader, once everything committed by earlier leaders is applied here. */
  private async promote(): Promise<void> {
    // Crash tests: a promotion that fails (a sink position that cannot be saved, say).
    throwPointOnceHere('promote');
    await this.host.whenApplied();
    if (this.roleNow !== 'candidate') return;
    await this.takeSinkPositions();
    if (this.roleNow !== 'candidate') return;
    const epoch = this.epochNow;
    this.host.lead(epoch, (firstSeq, records, bytes) => this.commit(epoch, firstSeq, records, bytes), this.settings.commitGapMs);
    this.roleNow = 'leader';
    this.host.leading(true);
    this.log.info({ epoch, appliedSeq: this.host.appliedSeq() }, 'leading: accepting writes');
  }

  /**
   * The sinks' positions the former leaders saved, for this node's delivery to start from
   * (sink-positions.ts). A failed read is tried again every SINK_POSITIONS_RETRY_MS while this
   * node is still the candidate, for up to a lease: it has just reached PostgreSQL to take the
   * lease, so a failure is most likely a blip, and starting from this node's own positions may
   * deliver records again (a review found one failed read was enough). Still failing after that
   * (the renewals held, so PostgreSQL answers): delivery starts from this node's own, and the
   * log says what that may cost.
   */
  private async takeSinkPositions(): Promise<void> {
    const deadlineMs = performance.now() + this.settings.leaseMs;
    for (let attempt = 1; ; attempt++) {
      try {
        // Bounded by what is left of the deadline: a read that hangs (a frozen backend) would
        // otherwise hold the promotion for its whole query timeout, 10 s, not checked until it ends.
        const leftMs = Math.max(1, deadlineMs - performance.now());
        const saved = await withinMs(
          this.read((client) => readSinkPositions(client, this.settings.cluster)),
          leftMs,
        );
        const adopted = await this.host.adoptSinkPositions(saved);
        if (adopted > 0) this.log.info({ positions: saved }, 'delivery starts from the sink positions the former leader saved');
        return;
      } catch (error) {
        if (this.roleNow !== 'candidate') return;
        if (performance.now() + SINK_POSITIONS_RETRY_MS >= deadlineMs) {
          this.log.warn({ err: error, attempts: attempt }, 'could not read the sink positions the former leader saved; delivery starts from this node\'s own (a NATS stream that removes messages may get records again)');
          // Adopting none still waits for this node's earlier delivery workers to save theirs.
          await this.host.adoptSinkPositions([]);
          return;
        }
        if (attempt === 1) this.log.warn({ err: error }, 'could not read the sink positions the former leader saved; trying again');
        await new Promise((resolve) => setTimeout(resolve, SINK_POSITIONS_RETRY_MS));
        if (this.roleNow !== 'candidate') return;
      }
    }
  }

  /**
   * A sink confirmed a batch: the leader copies the positions to PostgreSQL at once, or
   * SINK_POSITIONS_GAP_MS after the last copy (sink-positions.ts). At once matters for the first
   * one: a leader lost before any copy left its successor no position at all.
   */
  sinkPositionsChanged(): void {
    if (this.roleNow !== 'leader' || !this.running || this.positionsTimer !== null) return;
    if (this.sharingPositions) {
      this.positionsPending = true;
      return;
    }
    const delayMs = Math.max(0, this.positionsSharedAtMs + SINK_POSITIONS_GAP_MS - performance.now());
    this.positionsTimer = setTimeout(() => {
      this.positionsTimer = null;
      void this.shareSinkPositions();
    }, delayMs);
    this.positionsTimer.unref();
  }

  private async shareSinkPositions(): Promise<void> {
    if (this.roleNow !== 'leader' || this.sharingPositions) return;
    // The epoch of this leadership, taken now: after a step-down meanwhile, epochNow may be a
    // newer leader's, and this copy must not pass the newer leader's own for its.
    const epoch = this.epochNow;
    const positions = this.host.sinkPositions();
    const text = JSON.stringify(positions);
    if (positions.length === 0 || text === this.sharedPositions) return;
    this.sharingPositions = true;
    this.positionsPending = false;
    this.positionsSharedAtMs = performance.now();
    try {
      await this.upkeep.use((client) => saveSinkPositions(client, this.settings.cluster, epoch, positions));
      this.sharedPositions = text;
    } catch (error) {
      this.log.warn({ err: error }, 'could not save the sink positions in PostgreSQL; trying again after the next batch');
    } finally {
      this.sharingPositions = false;
    }
    if (this.positionsPending) this.sinkPositionsChanged();
  }

  private async commit(epoch: number, firstSeq: number, records: JournalRecord[], bytes: Uint8Array): Promise<void> {
    const startedAt = performance.now();
    const notify = startedAt - this.lastNotifyAtMs >= COMMIT_NOTIFY_GAP_MS;
    if (notify) this.lastNotifyAtMs = startedAt;
    await this.commits.use((client) => this.journal.commit(client, epoch, firstSeq, records, bytes, notify));
    this.metrics.commitSeconds((performance.now() - startedAt) / 1000);
    const lastSeq = firstSeq + records.length - 1;
    if (lastSeq > this.knownHeadSeq) this.knownHeadSeq = lastSeq;
    if (!notify) this.notifyLater(epoch);
  }

  /** The trailing NOTIFY for commits made without one: one gap after the last NOTIFY. */
  private notifyLater(epoch: number): void {
    if (this.notifyTimer !== null) return;
    const delayMs = Math.max(0, this.lastNotifyAtMs + COMMIT_NOTIFY_GAP_MS - performance.now());
    this.notifyTimer = setTimeout(() => {
      this.notifyTimer = null;
      if (this.roleNow !== 'leader' || this.epochNow !== epoch) return;
      this.lastNotifyAtMs = performance.now();
      // Lost, it costs the followers a poll interval at most (REPLICATION_POLL_LISTENING_MS). Its
      // failure is caught inside: the commit connection is closed on an error that reaches use(),
      // and the commits queued behind it would fail with it (a broken connection is found by the
      // next commit).
      void this.commits.use((client) => this.journal.notify(client, this.knownHeadSeq).catch(() => undefined)).catch(() => undefined);
    }, delayMs);
    this.notifyTimer.unref();
  }

  /**
   * Steps down the moment the lease runs out unrenewed, whatever the renewal in flight is doing.
   * Checked only after a round, a renewal stuck on its connection (up to QUERY_TIMEOUT_MS, twice
   * the default lease: a PostgreSQL backend frozen, a network that drops packets) kept this node
   * "leader" in /cluster and its metrics, and delivering, for seconds after another node had
   * taken over (a review). Writes were refused all along (leading() checks the lease).
   */
  private armLeaseExpiry(): void {
    if (this.leaseTimer !== null) clearTimeout(this.leaseTimer);
    this.leaseTimer = setTimeout(
      () => {
        this.leaseTimer = null;
        // Early: a timer counts from the event loop's cached time, which lags behind when the
        // loop was busy as it was armed, so it can fire before the lease has run out by
        // performance.now(). Neither check below held then, and nothing looked again until the
        // hung renewal timed out 10 s later: the node went on as leader, its failure uncounted
        // (a clean CI run under load saw it once). Armed again for what is left.
        if (performance.now() < this.leaseValidUntil) return this.armLeaseExpiry();
        // A renewal still in flight when the lease runs out has failed (it hangs on a frozen
        // backend or a dropping network, up to QUERY_TIMEOUT_MS): counted now, not when (if) it ends.
        if (this.renewing && performance.now() >= this.leaseValidUntil) this.countRenewalFailed();
        if (this.running) void this.stepDownIfLeaseRanOut();
      },
      Math.max(0, this.leaseValidUntil - performance.now()) + 1,
    );
    this.leaseTimer.unref();
  }

  /** A leader (or candidate) whose lease has run out without a renewal stops leading. */
  private async stepDownIfLeaseRanOut(): Promise<void> {
    if ((this.roleNow === 'leader' || this.roleNow === 'candidate') && performance.now() >= this.leaseValidUntil) {
      await this.stepDown('the lease could not be renewed in time', new NotLeadingError('this node lost contact with the cluster\'s PostgreSQL and stopped leading'));
    }
  }

  private stepDown(reason: string, error: Error): Promise<void> {
    if (this.roleNow !== 'leader' && this.roleNow !== 'candidate') return this.steppingDown ?? Promise.resolve();
    // No second step-down can start meanwhile: the role is 'stepping-down' until this one ends.
    this.steppingDown = this.stepDownNow(reason, error)
      .catch((failure: unknown) => {
        // The state is half rebuilt: this node cannot serve or follow. End it (a supervisor
        // restarts it and it recovers from its data directory); the cluster goes on without it.
        this.log.fatal({ err: failure }, 'stepping down failed: stopping this node');
        this.onFatal(failure instanceof Error ? failure : new Error(String(failure)));
      })
      .finally(() => {
        this.steppingDown = null;
      });
    return this.steppingDown;
  }

  private async stepDownNow(reason: string, error: Error): Promise<void> {
    const wasLeader = this.roleNow === 'leader';
    const epoch = this.epochNow;
    this.roleNow = 'stepping-down';
    this.leaderName = null;
    this.leaderTarget = null;
    this.log.warn({ reason, err: error.message, epoch: this.epochNow }, 'stepping down: no longer accepting writes');
    if (wasLeader) this.host.leading(false);
    const lost = wasLeader ? await this.host.stopLeading(error) : false;
    if (lost) {
      const startedAt = performance.now();
      await this.host.rebuild();
      this.log.warn({ appliedSeq: this.host.appliedSeq(), rebuildMs: Math.round(performance.now() - startedAt) }, 'dropped the writes PostgreSQL may not hold: state rebuilt from this node\'s own journal; catching up');
    }
    // Still holding the lease (a failed commit that was not a fence, a lost PostgreSQL): give it
    // up, so that another node need not wait for it to expire.
    if (!(error instanceof FencedError) && this.running) await this.releaseLease(epoch);
    if (this.roleNow === 'stepping-down') this.roleNow = 'follower';
    this.signal();
  }

  /**
   * A commit was heard: read it a moment later, so that one read (one round trip, one local
   * LMDB transaction) takes the leader's next few batches too. Under load the leader commits a
   * small batch every few milliseconds, and a read per commit cost the follower more CPU per
   * record than applying it. A candidate catching up reads at once.
   */
  private wakeSoon(): void {
    if (this.roleNow === 'candidate') return this.signal();
    if (this.wakeTimer !== null) return;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = null;
      this.signal();
    }, REPLICATION_LINGER_MS);
  }

  /** Wakes the replication loop: now if it sleeps, else at its next sleep. */
  private signal(): void {
    if (this.wake !== null) this.wake();
    else this.wakePending = true;
  }

  private sleep(ms: number): Promise<void> {
    if (!this.running) return Promise.resolve();
    if (this.wakePending) {
      this.wakePending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | null = null;
      const done = (): void => {
        if (timer !== null) clearTimeout(timer);
        if (this.wake === done) this.wake = null;
        resolve();
      };
      timer = setTimeout(done, ms);
      this.wake = done;
    });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `promise`, or a rejection once `ms` have passed without its outcome (the timer is cleared either way). */
function withinMs<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${Math.round(ms)} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
