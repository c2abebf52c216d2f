// One table of settings: each is an environment variable with a matching `--flag`.
// A flag wins over the environment, the environment over the default.
import { constants as bufferConstants } from 'node:buffer';
import { availableParallelism } from 'node:os';

export interface Settings {
  host: string;
  port: number;
  httpThreads: number;
  edgeQueueMax: number;
  edgeQueueBytes: number;
  dataDir: string;
  serviceKeys: string;
  bodyLimitBytes: number;
  mappingBodyLimitBytes: number;
  mappingMaxItems: number;
  batchMaxItems: number;
  batchBodyLimitBytes: number;
  journalMaxBatchRecords: number;
  journalMaxCommitsInFlight: number;
  journalMaxPendingRecords: number;
  bodiesHeldMaxBytes: number;
  commitMode: 'group' | 'sync';
  snapshotIntervalMs: number;
  snapshotEveryRecords: number;
  snapshotSliceEntities: number;
  journalRetentionSeconds: number;
  mappingWorkers: number;
  mappingWorkerThresholdBytes: number;
  mappingWorkerTimeoutMs: number;
  mappingWorkerMaxMemoryMb: number;
  mappingWorkerQueueMax: number;
  mappingWorkerQueueBytes: number;
  sinkNatsUrl: string;
  sinkNatsStream: string;
  sinkNatsSubjectPrefix: string;
  sinkPostgresUrl: string;
  sinkPostgresTable: string;
  deliveryBatchRecords: number;
  deliveryBatchBytes: number;
  deliveryRetryMaxMs: number;
  deliveryLingerMs: number;
  deliveryStallTimeoutMs: number;
  idempotencyWindowSeconds: number;
  idempotencyMaxKeys: number;
  rateLimitPerSecond: number;
  rateLimitBurst: number;
  logLevel: string;
  clusterPostgresUrl: string;
  clusterName: string;
  nodeName: string;
  clusterLeaseMs: number;
  clusterForwardTimeoutMs: number;
  clusterCommitGapMs: number;
  clusterAdvertiseUrl: string;
}

type Kind = 'string' | 'integer';

interface SettingSpec {
  key: keyof Settings;
  env: string;
  flag: string;
  kind: Kind;
  defaultValue: string | number;
  /** How the default is shown when it depends on the machine. */
  defaultLabel?: string;
  min?: number;
  max?: number;
  choices?: readonly string[];
  /** A string setting must match this (when not empty); `patternHint` says what it wants. */
  pattern?: RegExp;
  patternHint?: string;
  description: string;
}

const MiB = 1024 * 1024;
/** The largest body a limit may allow: a body is parsed from one string, and V8 cannot make a
 * longer one (about 512 MiB; beyond it the conversion threw, uncaught, and ended the process). */
const MAX_BODY_BYTES = bufferConstants.MAX_STRING_LENGTH;

export const SETTINGS: readonly SettingSpec[] = [
  { key: 'host', env: 'HOST', flag: '--host', kind: 'string', defaultValue: '0.0.0.0', description: 'address to listen on' },
  { key: 'port', env: 'PORT', flag: '--port', kind: 'integer', defaultValue: 8080, min: 0, max: 65535, description: 'TCP port (0 picks a free port); a port another program listens on stops the start (status 2)' },
  { key: 'dataDir', env: 'DATA_DIR', flag: '--data-dir', kind: 'string', defaultValue: './data', description: 'directory of the LMDB journal and key store; one intake process per directory (a second one stops with status 2)' },
  { key: 'serviceKeys', env: 'SERVICE_KEYS', flag: '--service-keys', kind: 'string', defaultValue: '', description: 'keys valid while set: "ws1:key1,ws2:key2" (a bare key belongs to workspace "default"); each key 1 to 256 printable ASCII characters, no space at either end, one workspace per key' },
  { key: 'bodyLimitBytes', env: 'BODY_LIMIT_BYTES', flag: '--body-limit-bytes', kind: 'integer', defaultValue: 1 * MiB, min: 1024, max: 256 * MiB, description: 'request body limit of every endpoint but the two mapping ones (inflated size too)' },
  { key: 'mappingBodyLimitBytes', env: 'MAPPING_BODY_LIMIT_BYTES', flag: '--mapping-body-limit-bytes', kind: 'integer', defaultValue: 16 * MiB, min: 1024, max: MAX_BODY_BYTES, description: 'request body limit of the mapping endpoints (inflated size too)' },
  { key: 'mappingMaxItems', env: 'MAPPING_MAX_ITEMS', flag: '--mapping-max-items', kind: 'integer', defaultValue: 100_000, min: 1, max: 10_000_000, description: 'most product ids in one mapping request' },
  { key: 'batchMaxItems', env: 'BATCH_MAX_ITEMS', flag: '--batch-max-items', kind: 'integer', defaultValue: 1000, min: 1, max: 100_000, description: 'most items (writes) in one POST /batch; more is 422 array.max on requests' },
  { key: 'batchBodyLimitBytes', env: 'BATCH_BODY_LIMIT_BYTES', flag: '--batch-body-limit-bytes', kind: 'integer', defaultValue: 4 * MiB, min: 1024, max: MAX_BODY_BYTES, description: 'request body limit of POST /batch (inflated size too); each item is also held to the limit of its own endpoint' },
  { key: 'journalMaxBatchRecords', env: 'JOURNAL_MAX_BATCH_RECORDS', flag: '--journal-max-batch-records', kind: 'integer', defaultValue: 8192, min: 1, max: 1_000_000, description: 'most journal records committed in one LMDB write (group commit)' },
  { key: 'bodiesHeldMaxBytes', env: 'BODIES_HELD_MAX_BYTES', flag: '--bodies-held-max-bytes', kind: 'integer', defaultValue: 268_435_456, min: 1, max: 17_179_869_184, description: 'bytes of request bodies one HTTP thread holds while they arrive (a body counts from its declared content-length, or as it comes); beyond that, 503 ServiceUnavailableError with Retry-After: 1 before the body is read (a body without a declared length: once it is, connection closed); one body is always taken while none is held' },
  { key: 'journalMaxPendingRecords', env: 'JOURNAL_MAX_PENDING_RECORDS', flag: '--journal-max-pending-records', kind: 'integer', defaultValue: 32_768, min: 1, max: 10_000_000, description: 'writes accepted and not yet durable (waiting for their journal commit: a slow or stalled disk, or PostgreSQL in cluster mode, where a leader counts also those answered whose LMDB copy is behind); beyond that, 503 ServiceUnavailableError with Retry-After: 1, nothing applied, and /readyz 503, until commits catch up' },
  { key: 'journalMaxCommitsInFlight', env: 'JOURNAL_MAX_COMMITS_IN_FLIGHT', flag: '--journal-max-commits-in-flight', kind: 'integer', defaultValue: 1, min: 1, max: 64, description: 'journal batches handed to LMDB and not yet durable (a cluster leader: to PostgreSQL and not yet committed there, with its LMDB copy up to this many batches plus 4 behind them); while that many are, the open batch keeps growing and a batch that fills waits, closed, for its turn' },
  { key: 'commitMode', env: 'COMMIT_MODE', flag: '--commit-mode', kind: 'string', defaultValue: 'group', choices: ['group', 'sync'], description: 'group: writes of one event-loop turn share one fsync (fast); sync: each write is fsync\'d before its request handler returns (one fsync per write, but clients may pipeline writes)' },
  { key: 'snapshotIntervalMs', env: 'SNAPSHOT_INTERVAL_MS', flag: '--snapshot-interval-ms', kind: 'integer', defaultValue: 300_000, min: 0, max: 86_400_000, description: 'take a snapshot this often when anything changed (0: not on a timer)' },
  { key: 'snapshotEveryRecords', env: 'SNAPSHOT_EVERY_RECORDS', flag: '--snapshot-every-records', kind: 'integer', defaultValue: 500_000, min: 0, max: 1_000_000_000, description: 'also take a snapshot once this many records were journaled since the last one, or twice as many as the last snapshot wrote entities if that is more (0: never by count)' },
  { key: 'snapshotSliceEntities', env: 'SNAPSHOT_SLICE_ENTITIES', flag: '--snapshot-slice-entities', kind: 'integer', defaultValue: 250, min: 1, max: 1_000_000, description: 'entities a snapshot writes between two turns of request handling' },
  { key: 'journalRetentionSeconds', env: 'JOURNAL_RETENTION_SECONDS', flag: '--journal-retention-seconds', kind: 'integer', defaultValue: 0, min: 0, max: 100 * 365 * 86_400, description: 'delete journal records older than this once a snapshot covers them (0: keep the journal forever)' },
  { key: 'httpThreads', env: 'HTTP_THREADS', flag: '--http-threads', kind: 'integer', defaultValue: 1, min: 1, max: 64, description: 'edge threads that do the HTTP work (keys, rate limits, body reading, gzip, JSON, schema validation) on one port; with more than 1 the main thread is the state thread (actors, idempotency, journal, snapshots, delivery) and does no HTTP (1: the main thread does everything)' },
  { key: 'edgeQueueMax', env: 'EDGE_QUEUE_MAX', flag: '--edge-queue-max', kind: 'integer', defaultValue: 4096, min: 1, max: 1_000_000, description: 'with HTTP_THREADS above 1: writes one edge thread has handed to the state thread and not had answered yet; beyond that, 503 ServiceUnavailableError with Retry-After, nothing applied' },
  { key: 'edgeQueueBytes', env: 'EDGE_QUEUE_BYTES', flag: '--edge-queue-bytes', kind: 'integer', defaultValue: 256 * MiB, min: 1024, max: 64 * 1024 * MiB, description: 'with HTTP_THREADS above 1: bytes of the bodies of those writes (a big mapping counts until it is answered, its time in a worker\'s queue too); once reached, 503 with Retry-After' },
  { key: 'mappingWorkers', env: 'MAPPING_WORKERS', flag: '--mapping-workers', kind: 'integer', defaultValue: Math.max(1, availableParallelism() - 1), defaultLabel: 'cores - 1, at least 1', min: 0, max: 256, description: 'worker threads that parse, validate and de-duplicate big mapping bodies (0: all on the main thread)' },
  { key: 'mappingWorkerThresholdBytes', env: 'MAPPING_WORKER_THRESHOLD_BYTES', flag: '--mapping-worker-threshold-bytes', kind: 'integer', defaultValue: 65_536, min: 0, max: 1024 * MiB, description: 'mapping bodies larger than this (and every gzip one) go to a worker' },
  { key: 'mappingWorkerTimeoutMs', env: 'MAPPING_WORKER_TIMEOUT_MS', flag: '--mapping-worker-timeout-ms', kind: 'integer', defaultValue: 10_000, min: 1, max: 600_000, description: 'a worker task running longer (counted from when a worker takes it, not while it waits) fails its request with 500 (the worker is replaced)' },
  { key: 'mappingWorkerMaxMemoryMb', env: 'MAPPING_WORKER_MAX_MEMORY_MB', flag: '--mapping-worker-max-memory-mb', kind: 'integer', defaultValue: 512, min: 8, max: 65_536, description: 'heap limit of each worker; a body that might not fit in it (about 10 bytes of heap per byte of JSON, plus 96 per object, array or key) is refused with 413 before it is parsed' },
  { key: 'mappingWorkerQueueMax', env: 'MAPPING_WORKER_QUEUE_MAX', flag: '--mapping-worker-queue-max', kind: 'integer', defaultValue: 64, min: 0, max: 1_000_000, description: 'big mappings that may wait for a busy worker or, parsed, for their catalog\'s turn; beyond that, 503 ServiceUnavailableError with Retry-After, nothing applied (0: none wait)' },
  { key: 'mappingWorkerQueueBytes', env: 'MAPPING_WORKER_QUEUE_BYTES', flag: '--mapping-worker-queue-bytes', kind: 'integer', defaultValue: 256 * MiB, min: 0, max: 64 * 1024 * MiB, description: 'bytes of those waiting mappings (bodies as received, parsed ones at their own size); a body that would take them over this gets 503 with Retry-After' },
  { key: 'sinkNatsUrl', env: 'SINK_NATS_URL', flag: '--sink-nats-url', kind: 'string', defaultValue: '', description: 'deliver the journal to NATS JetStream at this URL, e.g. nats://127.0.0.1:4222 (empty: off)' },
  { key: 'sinkNatsStream', env: 'SINK_NATS_STREAM', flag: '--sink-nats-stream', kind: 'string', defaultValue: 'INTAKE', pattern: /^[A-Za-z0-9_-]{1,64}$/, patternHint: 'letters, digits, _ and -, at most 64', description: 'JetStream stream the NATS sink publishes to (created with subjects <SINK_NATS_SUBJECT_PREFIX>.> when missing)' },
  { key: 'sinkNatsSubjectPrefix', env: 'SINK_NATS_SUBJECT_PREFIX', flag: '--sink-nats-subject-prefix', kind: 'string', defaultValue: 'intake', pattern: /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, patternHint: 'subject tokens of letters, digits, _ and -', description: 'first subject token(s): records go to <prefix>.<workspace>.<kind>, a new stream takes <prefix>.> (two streams cannot share subjects: give each intake on one NATS account its own)' },
  { key: 'sinkPostgresUrl', env: 'SINK_POSTGRES_URL', flag: '--sink-postgres-url', kind: 'string', defaultValue: '', description: 'deliver the journal to PostgreSQL at this URL, e.g. postgres://user@127.0.0.1:5432/db (empty: off)' },
  { key: 'sinkPostgresTable', env: 'SINK_POSTGRES_TABLE', flag: '--sink-postgres-table', kind: 'string', defaultValue: 'intake_events', pattern: /^([A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$/, patternHint: 'table or schema.table, each a plain identifier', description: 'table the PostgreSQL sink inserts into (created when missing)' },
  { key: 'deliveryBatchRecords', env: 'DELIVERY_BATCH_RECORDS', flag: '--delivery-batch-records', kind: 'integer', defaultValue: 2000, min: 1, max: 100_000, description: 'most journal records a sink is handed at once' },
  { key: 'deliveryBatchBytes', env: 'DELIVERY_BATCH_BYTES', flag: '--delivery-batch-bytes', kind: 'integer', defaultValue: 4 * MiB, min: 1024, max: 256 * MiB, description: 'most bytes of exported JSON a sink is handed at once (a single bigger record goes alone)' },
  { key: 'deliveryRetryMaxMs', env: 'DELIVERY_RETRY_MAX_MS', flag: '--delivery-retry-max-ms', kind: 'integer', defaultValue: 5000, min: 10, max: 600_000, description: 'longest wait between two attempts to reach a sink that is down (the wait doubles from 50 ms up to this)' },
  { key: 'deliveryLingerMs', env: 'DELIVERY_LINGER_MS', flag: '--delivery-linger-ms', kind: 'integer', defaultValue: 20, min: 0, max: 10_000, description: 'a sink that has caught up (less than a full batch, and no more records durable) waits this long for more (fewer, bigger batches; 0: deliver at once)' },
  { key: 'deliveryStallTimeoutMs', env: 'DELIVERY_STALL_TIMEOUT_MS', flag: '--delivery-stall-timeout-ms', kind: 'integer', defaultValue: 60_000, min: 100, max: 3_600_000, description: 'a sink call (connect, deliver) that has not returned after this is given up on: the sink is marked down and stalled, its connection dropped and retried; a delivery worker whose heartbeat stops this long is restarted' },
  { key: 'idempotencyWindowSeconds', env: 'IDEMPOTENCY_WINDOW_SECONDS', flag: '--idempotency-window-seconds', kind: 'integer', defaultValue: 86_400, min: 1, max: 90 * 86_400, description: 'how long an Idempotency-Key is remembered (a retry after that is a new write)' },
  { key: 'idempotencyMaxKeys', env: 'IDEMPOTENCY_MAX_KEYS', flag: '--idempotency-max-keys', kind: 'integer', defaultValue: 5_000_000, min: 0, max: 200_000_000, description: 'most Idempotency-Keys remembered, about 47 bytes of memory each; when full the oldest are forgotten first (0: none)' },
  { key: 'rateLimitPerSecond', env: 'RATE_LIMIT_PER_SECOND', flag: '--rate-limit-per-second', kind: 'integer', defaultValue: 0, min: 0, max: 10_000_000, description: 'requests a second each service key may make (a token bucket); over it, 429 RateLimitError with Retry-After (0: no limit)' },
  { key: 'rateLimitBurst', env: 'RATE_LIMIT_BURST', flag: '--rate-limit-burst', kind: 'integer', defaultValue: 0, min: 0, max: 100_000_000, description: 'requests a key may make at once beyond its rate, the bucket size (0: as many as RATE_LIMIT_PER_SECOND)' },
  { key: 'clusterPostgresUrl', env: 'CLUSTER_POSTGRES_URL', flag: '--cluster-postgres-url', kind: 'string', defaultValue: '', description: 'cluster mode: the PostgreSQL that holds the cluster\'s journal, lease and keys, e.g. postgres://user@db:5432/intake (empty: a single node)' },
  { key: 'clusterName', env: 'CLUSTER_NAME', flag: '--cluster-name', kind: 'string', defaultValue: 'intake', pattern: /^[A-Za-z0-9_-]{1,40}$/, patternHint: 'letters, digits, _ and -, at most 40', description: 'cluster mode: nodes with the same URL and name serve one data set (several clusters may share one database)' },
  { key: 'nodeName', env: 'NODE_NAME', flag: '--node-name', kind: 'string', defaultValue: '', defaultLabel: 'host name and port', pattern: /^[\x21-\x7e]{1,128}$/, patternHint: '1 to 128 printable ASCII characters, no spaces', description: 'cluster mode: this node\'s name, unique in its cluster (logs, metrics, GET /cluster)' },
  { key: 'clusterLeaseMs', env: 'CLUSTER_LEASE_MS', flag: '--cluster-lease-ms', kind: 'integer', defaultValue: 5000, min: 250, max: 600_000, description: 'cluster mode: how long a leader that stopped renewing keeps its role (it renews about 5 times per lease)' },
  { key: 'clusterForwardTimeoutMs', env: 'CLUSTER_FORWARD_TIMEOUT_MS', flag: '--cluster-forward-timeout-ms', kind: 'integer', defaultValue: 0, defaultLabel: 'CLUSTER_LEASE_MS + 3000', min: 0, max: 600_000, description: 'cluster mode: how long a follower holds a write it forwards to the leader while no leader answers (a leader change), before it answers 503 with Retry-After (0: CLUSTER_LEASE_MS + 3000)' },
  { key: 'clusterCommitGapMs', env: 'CLUSTER_COMMIT_GAP_MS', flag: '--cluster-commit-gap-ms', kind: 'integer', defaultValue: 2, min: 0, max: 1000, description: 'cluster mode: the least time between the starts of two of the leader\'s commits in PostgreSQL; writes that come meanwhile wait (at most this long, and only while fewer than 64) and go in one commit: fewer commits, less CPU for the leader and PostgreSQL (0: commit as soon as the one before has ended)' },
  { key: 'clusterAdvertiseUrl', env: 'CLUSTER_ADVERTISE_URL', flag: '--cluster-advertise-url', kind: 'string', defaultValue: '', defaultLabel: 'http://HOST:PORT', pattern: /^https?:\/\/(\[[0-9A-Fa-f:.]+\]|[^\s/:[\]@]+)(:[0-9]{1,5})?$/, patternHint: 'http://host:port, no path; an IPv6 address in brackets', description: 'cluster mode: the address other nodes forward writes to while this node leads (empty: http://HOST:PORT, with the host name when HOST is 0.0.0.0 or ::)' },
  { key: 'logLevel', env: 'LOG_LEVEL', flag: '--log-level', kind: 'string', defaultValue: 'info', choices: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], description: 'log level (JSON lines on stdout; debug adds one line per request)' },
];

export class SettingsError extends Error {}

function parseValue(spec: SettingSpec, raw: string, source: string): string | number {
  if (spec.kind === 'integer') {
    if (!/^[0-9]+$/.test(raw)) throw new SettingsError(`${source}: "${raw}" is not a non-negative integer`);
    const n = Number(raw);
    if ((spec.min !== undefined && n < spec.min) || (spec.max !== undefined && n > spec.max)) {
      throw new SettingsError(`${source}: ${n} is outside ${spec.min}..${spec.max}`);
    }
    return n;
  }
  if (spec.choices && !spec.choices.includes(raw)) {
    throw new SettingsError(`${source}: "${raw}" is not one of ${spec.choices.join(', ')}`);
  }
  if (spec.pattern && raw !== '' && !spec.pattern.test(raw)) {
    throw new SettingsError(`${source}: "${raw}" is not valid (${spec.patternHint ?? spec.pattern.source})`);
  }
  return raw;
}

export interface ParsedArgs {
  settings: Settings;
  help: boolean;
}

/** Reads settings from argv (flags) and env. Throws SettingsError on a bad value or an unknown flag. */
export function parseSettings(argv: readonly string[], env: NodeJS.ProcessEnv): ParsedArgs {
  const values: Record<string, string | number> = {};
  for (const spec of SETTINGS) {
    const fromEnv = env[spec.env];
    values[spec.key] = fromEnv !== undefined && fromEnv !== '' ? parseValue(spec, fromEnv, spec.env) : spec.defaultValue;
  }
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') {
      help = true;
      continue;
    }
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const spec = SETTINGS.find((s) => s.flag === name);
    if (!spec) throw new SettingsError(`unknown option ${arg} (see --help)`);
    let raw: string | undefined;
    if (eq !== -1) raw = arg.slice(eq + 1);
    else raw = argv[++i];
    if (raw === undefined) throw new SettingsError(`${name} needs a value`);
    values[spec.key] = parseValue(spec, raw, name);
  }
  return { settings: values as unknown as Settings, help };
}

export function helpText(): string {
  const rows = SETTINGS.map((s) => {
    const def = s.defaultLabel ?? (s.defaultValue === '' ? '(none)' : String(s.defaultValue));
    // What a value may be, as the start checks it (a value outside stops it with status 2): the
    // README's table did not say (an operator's review, 2026-11-29).
    const allowed =
      s.min !== undefined && s.max !== undefined ? `; ${s.min}..${s.max}` : s.choices !== undefined ? `; one of ${s.choices.join(', ')}` : s.patternHint !== undefined ? `; ${s.patternHint}` : '';
    return `  ${(s.flag + ' <value>').padEnd(36)} ${s.env.padEnd(26)} default ${def}${allowed}\n      ${s.description}`;
  });
  return [
    'intake: analytics and catalog intake server',
    '',
    'usage: npm start -- [options]',
    '',
    'Every option is also an environment variable; a flag wins over the environment.',
    '',
    ...rows,
    `  ${'--help'.padEnd(36)} print this text`,
    '',
  ].join('\n');
}
