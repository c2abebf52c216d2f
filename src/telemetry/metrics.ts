// Prometheus metrics (prom-client). What every request counts (its route and status, its
// latency) is kept in plain typed arrays and turned into samples only when /metrics is read:
// prom-client's labelled counters and histograms cost about half a microsecond per request.
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import client from 'prom-client';

/** Upper bounds of the request latency buckets, in seconds. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
/** Statuses are three digits: one slot each. */
const STATUS_SLOTS = 600;
/** The event-loop delay histogram's sampling period (nodejs_eventloop_lag_* metrics). */
const EVENT_LOOP_SAMPLE_MS = 100;

/** One route's requests: per status, and a latency histogram (non-cumulative counts). */
export class RouteMetrics {
  readonly route: string;
  readonly statuses = new Float64Array(STATUS_SLOTS);
  /** One count per bucket, and one more for +Inf. */
  readonly latency = new Float64Array(LATENCY_BUCKETS.length + 1);
  latencySumSeconds = 0;

  constructor(route: string) {
    this.route = route;
  }

  observe(status: number, startedAtMs: number): void {
    this.statuses[status] = this.statuses[status]! + 1;
    const seconds = (performance.now() - startedAtMs) / 1000;
    this.latencySumSeconds += seconds;
    let bucket = 0;
    while (bucket < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[bucket]!) bucket++;
    this.latency[bucket] = this.latency[bucket]! + 1;
  }
}

interface Sample {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
}

/** A metric prom-client's registry can print (it asks for `get()` at scrape time). */
function scraped(registry: client.Registry, name: string, help: string, type: 'counter' | 'histogram', samples: () => Sample[]): void {
  registry.registerMetric({ name, get: async () => ({ name, help, type, values: samples(), aggregator: 'sum' }) } as unknown as client.Metric);
}

/** An unlabelled gauge or counter whose value is read from plain state when /metrics is scraped. */
function readAtScrape(registry: client.Registry, type: 'gauge' | 'counter', name: string, help: string, read: () => number): void {
  if (type === 'gauge') {
    new client.Gauge({ name, help, registers: [registry], collect() { this.set(read()); } });
    return;
  }
  new client.Counter({ name, help, registers: [registry], collect() { this.reset(); this.inc(read()); } });
}

export interface StateCounts {
  devices(): number;
  products(): number;
  collections(): number;
}

/** prom-client's event-loop delay histogram figures, all set by the collect of `nodejs_eventloop_lag_seconds`. */
const LAG_FIGURES = ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'].map((figure) => `nodejs_eventloop_lag_${figure}_seconds`);

/**
 * prom-client resets its event-loop histogram at every scrape. A scrape within
 * EVENT_LOOP_SAMPLE_MS of the one before (two Prometheus servers of an HA pair, a curl by hand)
 * found no sample and reported min 9.2e9 s, max 0 and mean NaN (found by a review); such a
 * scrape now repeats the figures of the last scrape that had samples.
 */
function repeatLagOverEmptyWindows(registry: client.Registry): void {
  const lag = registry.getSingleMetric('nodejs_eventloop_lag_seconds') as unknown as { collect?: (this: unknown) => unknown } | undefined;
  const figures = LAG_FIGURES.map((name) => registry.getSingleMetric(name) as client.Gauge | undefined);
  const original = lag?.collect;
  if (lag === undefined || original === undefined || figures.some((gauge) => gauge === undefined)) return;
  const gauges = figures as client.Gauge[];
  let last: number[] | null = null;
  // Synchronous: the registry reads every gauge right after this collect returns (its gets run
  // together), so the figures are caught as prom-client sets them and set once, decided here.
  lag.collect = function collect(this: unknown): unknown {
    const caught: number[] = gauges.map(() => Number.NaN);
    const sets = gauges.map((gauge) => gauge.set);
    gauges.forEach((gauge, i) => {
      gauge.set = ((labelsOrValue: unknown, value?: number) => {
        caught[i] = typeof labelsOrValue === 'number' ? labelsOrValue : (value ?? Number.NaN);
      }) as client.Gauge['set'];
    });
    let result: unknown;
    try {
      result = original.call(this);
    } finally {
      gauges.forEach((gauge, i) => (gauge.set = sets[i]!));
    }
    // The mean of no sample is NaN: nothing was measured since the last scrape.
    if (!Number.isNaN(caught[2]!)) last = caught;
    const values = last ?? caught;
    gauges.forEach((gauge, i) => gauge.set(values[i]!));
    return result;
  };
}

export class Metrics {
  readonly registry = new client.Registry();
  private readonly routes: RouteMetrics[] = [];
  /** POST /batch items by the route they named ("unknown": none) and their status, one slot per status. */
  private readonly batchItems = new Map<string, Float64Array>();
  readonly commitSeconds = new client.Histogram({
    name: 'intake_journal_commit_duration_seconds',
    help: 'journal batch commit latency (LMDB write until fsync)',
    buckets: [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
    registers: [this.registry],
  });
  readonly batchRecords = new client.Histogram({
    name: 'intake_journal_batch_records',
    help: 'records per journal batch (group commit size)',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384],
    registers: [this.registry],
  });
  readonly journalFailures = new client.Counter({
    name: 'intake_journal_failures_total',
    help: 'journal commits that failed (the server then refuses writes)',
    registers: [this.registry],
  });

  /**
   * `counts` null: an edge thread's metrics, only what its requests count (the state thread sums
   * them into its own at scrape); process-wide figures (CPU, memory) are the main thread's alone.
   */
  constructor(counts: StateCounts | null) {
    // The event-loop delay histogram samples with a timer: at prom-client's 10 ms it woke an idle
    // server 100 times a second (18 ms of CPU a second on this VM, where a wakeup costs ~12 µs,
    // against 2 for the bare uWS + LMDB yardstick). At 100 ms a sustained lag still shows, a
    // single stall shorter than 100 ms may not.
    if (counts !== null) {
      client.collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
      repeatLagOverEmptyWindows(this.registry);
    }
    const routes = this.routes;
    scraped(this.registry, 'intake_requests_total', 'HTTP requests by route and status', 'counter', () => {
      const samples: Sample[] = [];
      for (const r of routes) r.statuses.forEach((count, status) => count > 0 && samples.push({ value: count, labels: { route: r.route, status } }));
      return samples;
    });
    const batchItems = this.batchItems;
    scraped(this.registry, 'intake_batch_items_total', 'items of POST /batch by the route they named and the status they got', 'counter', () => {
      const samples: Sample[] = [];
      for (const [route, statuses] of batchItems) statuses.forEach((count, status) => count > 0 && samples.push({ value: count, labels: { route, status } }));
      return samples;
    });
    scraped(this.registry, 'intake_request_duration_seconds', 'time from request start to response, by route', 'histogram', () => {
      const samples: Sample[] = [];
      const name = 'intake_request_duration_seconds';
      for (const r of routes) {
        let cumulative = 0;
        LATENCY_BUCKETS.forEach((le, i) => {
          cumulative += r.latency[i]!;
          samples.push({ metricName: `${name}_bucket`, value: cumulative, labels: { le, route: r.route } });
        });
        cumulative += r.latency[LATENCY_BUCKETS.length]!;
        samples.push({ metricName: `${name}_bucket`, value: cumulative, labels: { le: '+Inf', route: r.route } });
        samples.push({ metricName: `${name}_sum`, value: r.latencySumSeconds, labels: { route: r.route } });
        samples.push({ metricName: `${name}_count`, value: cumulative, labels: { route: r.route } });
      }
      return samples;
    });
    if (counts === null) return;
    const gauge = (name: string, help: string, read: () => number) => readAtScrape(this.registry, 'gauge', name, help, read);
    // The heap right after a major GC is about what the state needs (the rest is garbage).
    let heapAfterMajorGc = 0;
    const observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        if (((entry as unknown as { detail?: { kind?: number } }).detail)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
          heapAfterMajorGc = getHeapStatistics().used_heap_size;
        }
      }
    });
    observer.observe({ entryTypes: ['gc'] });
    gauge('intake_heap_used_after_major_gc_bytes', 'V8 heap in use right after the last major GC (live data, roughly)', () => heapAfterMajorGc);
    gauge('intake_devices', 'devices held in memory, all workspaces', () => counts.devices());
    gauge('intake_products', 'products held in memory, all workspaces', () => counts.products());
    gauge('intake_collections', 'collections held in memory, all workspaces', () => counts.collections());
  }

  /** Counts one item of a POST /batch (plain arrays, like the routes: a batch counts 1,000 at once). */
  batchItem(route: string, status: number): void {
    let statuses = this.batchItems.get(route);
    if (statuses === undefined) this.batchItems.set(route, (statuses = new Float64Array(STATUS_SLOTS)));
    statuses[status] = statuses[status]! + 1;
  }

  /** The edge threads running (HTTP_THREADS; 1 when the main thread does the HTTP work itself). */
  watchHttpThreads(running: () => number): void {
    readAtScrape(this.registry, 'gauge', 'intake_http_threads', 'threads doing the HTTP work (edge threads; 1: the main thread)', running);
  }

  /**
   * The exposition text of this registry summed with the edge threads' own (prom-client JSON):
   * counters and histograms add up, so /metrics counts every thread's requests.
   */
  async summedWith(edges: unknown[]): Promise<string> {
    if (edges.length === 0) return this.registry.metrics();
    // A metric only this thread has and prom-client would drop in a sum ('omit': its
    // process_start_time_seconds, meant for a cluster of processes) is this process's own: kept
    // as it is ('first'; this registry comes first). Before, /metrics with HTTP_THREADS > 1 had
    // no process_start_time_seconds (uptime and restart alerts saw nothing; found by a review).
    const own = (await this.registry.getMetricsAsJSON()).map((metric) => (metric.aggregator === 'omit' ? { ...metric, aggregator: 'first' as const } : metric));
    const summed = client.AggregatorRegistry.aggregate([own, ...(edges as client.MetricObjectWithValues<client.MetricValue<string>>[][])]);
    return summed.metrics();
  }

  /** Shares of /metrics (getMetricsAsJSON's) summed into one share. */
  static async foldShares(shares: unknown[]): Promise<unknown> {
    return client.AggregatorRegistry.aggregate(shares as client.MetricObjectWithValues<client.MetricValue<string>>[][]).getMetricsAsJSON();
  }

  route(name: string): RouteMetrics {
    const metrics = new RouteMetrics(name);
    this.routes.push(metrics);
    return metrics;
  }

  /**
   * Requests refused by a rate limit, all keys together (read at scrape). No workspace or key
   * label: /metrics needs no key and reveals no workspace data (CONTRACT.md §3).
   */
  watchRateLimits(limits: { readonly limited: number }): void {
    readAtScrape(this.registry, 'counter', 'intake_rate_limited_total', 'requests answered 429 RateLimitError, all service keys together', () => limits.limited);
  }

  /** Idempotency-Key replays, conflicts, forgotten and held keys, read from plain counts at scrape. */
  watchRetries(counts: { replays: number; conflicts: number }, keys: { size: number; forgotten: number }): void {
    const counter = (name: string, help: string, read: () => number) => readAtScrape(this.registry, 'counter', name, help, read);
    counter('intake_idempotency_replays_total', 'requests answered with the first answer of their Idempotency-Key', () => counts.replays);
    counter('intake_idempotency_conflicts_total', 'requests refused: their Idempotency-Key was used for a different request', () => counts.conflicts);
    counter('intake_idempotency_forgotten_keys_total', 'Idempotency-Keys forgotten (older than the window, or the oldest when the table was full)', () => keys.forgotten);
    readAtScrape(this.registry, 'gauge', 'intake_idempotency_keys', 'Idempotency-Keys remembered now', () => keys.size);
  }

  /** Big mappings held beside those in a worker (MAPPING_WORKER_QUEUE_MAX bounds them), read at scrape. */
  watchMappings(pool: { readonly waiting: number; readonly startedWorkers: number }): void {
    readAtScrape(this.registry, 'gauge', 'intake_mapping_waiting', 'big mapping requests waiting: bodies for a mapping worker, parsed mappings for their catalog\'s turn', () => pool.waiting);
    readAtScrape(this.registry, 'gauge', 'intake_mapping_workers', 'mapping worker threads started and loaded (they start with the first big mapping body)', () => pool.startedWorkers);
  }
}

/** Per sink: delivered seq, lag, up, batch latency (CONTRACT.md §11). Fed by the delivery worker's reports. */
export class SinkMetrics {
  private readonly deliveredSeq = new Map<string, number>();
  /**
   * This node delivers (a single node always; in cluster mode the leader). The position, lag and
   * up gauges have no samples on a node that does not: a follower's position stops where it last
   * led, and its lag grew without end (found by a review), a false alarm on every follower.
   */
  private delivering = { now: false };
  private readonly batchSeconds: client.Histogram<'sink'>;
  private readonly records: client.Counter<'sink'>;
  private readonly up: client.Gauge<'sink'>;
  private readonly stalls: client.Counter<'sink'>;

  /** `durableSeq` is the journal's durable position; `saved` each sink's position at start. */
  constructor(registry: client.Registry, saved: ReadonlyMap<string, number>, durableSeq: () => number) {
    for (const [sink, seq] of saved) this.deliveredSeq.set(sink, seq);
    const delivered = this.deliveredSeq;
    const delivering = this.delivering;
    new client.Gauge({
      name: 'intake_sink_delivered_seq',
      help: 'seq of the last journal record the sink confirmed',
      labelNames: ['sink'] as const,
      registers: [registry],
      collect() {
        this.reset();
        if (delivering.now) for (const [sink, seq] of delivered) this.labels(sink).set(seq);
      },
    });
    new client.Gauge({
      name: 'intake_sink_lag_records',
      help: 'durable journal records the sink has not confirmed yet',
      labelNames: ['sink'] as const,
      registers: [registry],
      collect() {
        this.reset();
        if (!delivering.now) return;
        const durable = durableSeq();
        for (const [sink, seq] of delivered) this.labels(sink).set(Math.max(0, durable - seq));
      },
    });
    this.up = new client.Gauge({ name: 'intake_sink_up', help: '1 while the sink confirms deliveries, 0 while it is down', labelNames: ['sink'] as const, registers: [registry] });
    this.batchSeconds = new client.Histogram({
      name: 'intake_sink_batch_duration_seconds',
      help: 'time from handing a batch to the sink until it confirmed it',
      labelNames: ['sink'] as const,
      buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
      registers: [registry],
    });
    this.records = new client.Counter({ name: 'intake_sink_delivered_records_total', help: 'journal records the sink confirmed since start', labelNames: ['sink'] as const, registers: [registry] });
    this.stalls = new client.Counter({ name: 'intake_sink_stalls_total', help: 'sink calls given up on after DELIVERY_STALL_TIMEOUT_MS, and delivery worker restarts for a missing heartbeat', labelNames: ['sink'] as const, registers: [registry] });
    for (const sink of saved.keys()) this.stalls.labels(sink).inc(0);
  }

  stalled(sink: string): void {
    this.stalls.labels(sink).inc();
  }

  state(sink: string, up: boolean): void {
    if (this.delivering.now) this.up.labels(sink).set(up ? 1 : 0);
  }

  /** Delivery starts (each sink down until it confirms) or stops on this node. */
  deliveringNow(on: boolean): void {
    this.delivering.now = on;
    this.up.reset();
    if (on) for (const sink of this.deliveredSeq.keys()) this.up.labels(sink).set(0);
  }

  /** Where the sink is found to be when delivery (re)connects. */
  position(sink: string, seq: number): void {
    this.deliveredSeq.set(sink, seq);
  }

  delivered(sink: string, seq: number, records: number, seconds: number): void {
    this.deliveredSeq.set(sink, seq);
    this.records.labels(sink).inc(records);
    this.batchSeconds.labels(sink).observe(seconds);
  }
}
