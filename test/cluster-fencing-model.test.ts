// Model test (fast-check) of cluster mode's lease and fencing (CONTRACT.md §12) against the real
// PostgreSQL: two or three would-be leaders, each with its own connection and its own belief (the
// epoch it thinks it holds, the last seq it thinks the journal has), run random commands —
// takeOver, renew, release, commit a batch at the seq it believes is next (now and then at a wrong
// one), catch up, freeze and then commit with a stale epoch, and waits past the lease — some of
// them at once on different nodes, so that their statements really race in PostgreSQL. Nothing is
// mocked. Each run has its own cluster name, and its rows are deleted afterwards.
// FENCING_RUNS (default 40) and PROPERTY_SEED change the runs; the whole property stops after 20 s.
//
// After every step the journal, the head row and the lease are read back and checked against
// what was acknowledged: the journal is contiguous from seq 1, epochs never go down along it,
// every commit that resolved is in it exactly and nothing else is, head and lease agree, no seq
// was acknowledged twice, a takeover never happened while another node's lease was live, and no
// commit resolved after a later epoch's takeover had returned. A step run alone is also checked
// against the model's prediction (a commit resolves exactly when the node's epoch and end of
// journal are the head's, and so on).
//
// Deterministic tests cover a commit waiting on the head row's lock while a takeover runs,
// batches that start inside (or past the end of) existing ones, and seqs past 2^31.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import type pg from 'pg';
import { ClusterJournal, FencedError } from '../src/cluster/cluster-journal.ts';
import { Lease } from '../src/cluster/lease.ts';
import { closeClient, connectClient } from '../src/cluster/pg-client.ts';
import { decodeBatch } from '../src/cluster/record-codec.ts';
import { channelOf, ensureClusterRows, ensureSchema, SCHEMA } from '../src/cluster/schema.ts';
import type { JournalRecord } from '../src/journal/records.ts';
import { SHARED_POSTGRES_URL } from './helpers/sinks.ts';

const RUNS = Number(process.env.FENCING_RUNS ?? process.env.PROPERTY_RUNS ?? 40);
const SEED = Number(process.env.PROPERTY_SEED ?? 20261211);
/** Local time and PostgreSQL's clock_timestamp() are compared only as intervals; this absorbs clock jitter. */
const MARGIN_MS = 10;
const NODE_NAMES = ['A', 'B', 'C'] as const;

// ---- connections, opened once and shared by every run (each run has its own cluster name)

let nodeClients: pg.Client[] = [];
let checker: pg.Client;
let locker: pg.Client;
const pids = new Map<pg.Client, number>();

async function open(name: string): Promise<pg.Client> {
  const client = await connectClient(SHARED_POSTGRES_URL, { queryTimeoutMs: 15_000, applicationName: `fencing-model-${name}` });
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  pids.set(client, rows[0]!.pid);
  return client;
}

before(async () => {
  nodeClients = await Promise.all(NODE_NAMES.map((name) => open(name)));
  checker = await open('checker');
  locker = await open('locker');
  await ensureSchema(checker);
});

after(async () => {
  for (const client of [...nodeClients, checker, locker]) await closeClient(client);
});

const newClusterName = (): string => `fm${randomBytes(6).toString('hex')}`;

async function createCluster(cluster: string): Promise<void> {
  await ensureClusterRows(checker, cluster);
}

async function dropCluster(cluster: string): Promise<void> {
  for (const table of ['journal', 'head', 'lease']) await checker.query(`DELETE FROM ${SCHEMA}.${table} WHERE cluster = $1`, [cluster]);
}

/** Records that say who made them: product deletes whose id is `<node>:<counter>`. */
function makeRecords(node: string, from: number, count: number): JournalRecord[] {
  return Array.from({ length: count }, (_, i) => ({ kind: 'product_delete' as const, workspace: 'fencing-model', at: from + i, data: { id: `${node}:${from + i}` } }));
}

const idOf = (record: JournalRecord): string => (record.data as { id: string }).id;

// ---- what happened, as the model saw it

interface LeaseEvent {
  node: string;
  epoch: number;
  kind: 'takeOver' | 'renew' | 'release';
  /** performance.now() before the call and after it resolved. */
  start: number;
  end: number;
  /** takeOver: the journal's end it returned. */
  lastSeq?: number;
}

interface CommitAttempt {
  node: string;
  epoch: number;
  firstSeq: number;
  lastSeq: number;
  records: JournalRecord[];
  start: number;
  end: number;
}

interface ModelNode {
  name: string;
  client: pg.Client;
  /** The epoch it got from its last successful takeover (0: never led). */
  epoch: number;
  /** The journal's end as it believes it. */
  lastSeq: number;
  counter: number;
}

interface World {
  cluster: string;
  leaseMs: number;
  lease: Lease;
  journal: ClusterJournal;
  nodes: ModelNode[];
  /** The model: the head's epoch and end, and who holds the lease. */
  model: { epoch: number; lastSeq: number; holder: string | null };
  leaseLog: LeaseEvent[];
  acked: CommitAttempt[];
  refused: CommitAttempt[];
  /** For failure messages. */
  trace: string[];
}

function newWorld(cluster: string, leaseMs: number, nodeCount: number): World {
  return {
    cluster,
    leaseMs,
    lease: new Lease(cluster, leaseMs),
    journal: new ClusterJournal(cluster),
    nodes: NODE_NAMES.slice(0, nodeCount).map((name, i) => ({ name, client: nodeClients[i]!, epoch: 0, lastSeq: 0, counter: 1 })),
    model: { epoch: 0, lastSeq: 0, holder: null },
    leaseLog: [],
    acked: [],
    refused: [],
    trace: [],
  };
}

function lastLeaseEvent(world: World, epoch: number): LeaseEvent | undefined {
  // Every successful event of one epoch is by the one node that took it, one after the other.
  return world.leaseLog.filter((event) => event.epoch === epoch).at(-1);
}

// ---- commands

type NodeCommand =
  | { kind: 'takeOver'; node: number; lag: number }
  | { kind: 'renew'; node: number; lag: number }
  | { kind: 'release'; node: number; lag: number }
  /** `skew` ≠ 0: the node has a wrong idea of the journal's end and commits at lastSeq + 1 + skew. */
  | { kind: 'commit'; node: number; lag: number; size: number; skew: number }
  | { kind: 'catchUp'; node: number; lag: number }
  /** The node stops (no renewals, nothing) for `pct`% of the lease, then commits with what it believed. */
  | { kind: 'freeze'; node: number; lag: number; pct: number; size: number };

type Step = { kind: 'wait'; pct: number } | { kind: 'run'; commands: NodeCommand[] };

const nodeIndex = fc.integer({ min: 0, max: 2 });
const lag = fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 4 }) });
const skew = fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: -3, max: 2 }) });
const nodeCommand: fc.Arbitrary<NodeCommand> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('takeOver' as const), node: nodeIndex, lag }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('renew' as const), node: nodeIndex, lag }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('release' as const), node: nodeIndex, lag }) },
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('commit' as const), node: nodeIndex, lag, size: fc.integer({ min: 1, max: 5 }), skew }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('catchUp' as const), node: nodeIndex, lag }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('freeze' as const), node: nodeIndex, lag, pct: fc.integer({ min: 50, max: 200 }), size: fc.integer({ min: 1, max: 5 }) }),
  },
);
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), pct: fc.integer({ min: 20, max: 180 }) }) },
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('run' as const), commands: fc.array(nodeCommand, { minLength: 1, maxLength: 1 }) }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('run' as const), commands: fc.array(nodeCommand, { minLength: 2, maxLength: 3 }) }) },
);
/** The race that matters: a wait about the lease's length, then a takeover and a commit (and maybe a renew) at once. */
const race: fc.Arbitrary<Step[]> = fc
  .record({
    pct: fc.integer({ min: 70, max: 140 }),
    taker: nodeIndex,
    committer: nodeIndex,
    renewer: fc.option(nodeIndex),
    size: fc.integer({ min: 1, max: 5 }),
    lags: fc.tuple(lag, lag, lag),
  })
  .map(({ pct, taker, committer, renewer, size, lags: [l1, l2, l3] }): Step[] => [
    { kind: 'wait', pct },
    {
      kind: 'run',
      commands: [
        { kind: 'takeOver', node: taker, lag: l1 },
        { kind: 'commit', node: committer, lag: l2, size, skew: 0 },
        ...(renewer === null ? [] : [{ kind: 'renew' as const, node: renewer, lag: l3 }]),
      ],
    },
  ]);
const scenario: fc.Arbitrary<Scenario> = fc.record({
  nodeCount: fc.integer({ min: 2, max: 3 }),
  leaseMs: fc.integer({ min: 40, max: 80 }),
  steps: fc
    .array(fc.oneof({ weight: 5, arbitrary: step.map((s) => [s]) }, { weight: 1, arbitrary: race }), { minLength: 6, maxLength: 16, size: 'max' })
    .map((groups) => groups.flat()),
});

type Scenario = { nodeCount: number; leaseMs: number; steps: Step[] };

type Expect = 'ok' | 'refused' | 'either';

/** What the model says a command run alone must do. */
function predict(world: World, node: ModelNode, command: NodeCommand, start: number): Expect {
  const { model } = world;
  switch (command.kind) {
    case 'takeOver': {
      if (model.epoch === 0) return 'ok';
      const last = lastLeaseEvent(world, model.epoch);
      if (last === undefined) throw new Error(`no lease event of epoch ${model.epoch}`);
      if (last.kind === 'release' || start - last.end > world.leaseMs + MARGIN_MS) return 'ok';
      // Refused while live; the exact bound is checked afterwards (invariant 6) with the call's end.
      return 'either';
    }
    case 'renew':
    case 'release':
      return node.epoch > 0 && node.epoch === model.epoch && node.name === model.holder ? 'ok' : 'refused';
    case 'commit':
    case 'freeze': {
      const skew = command.kind === 'commit' ? command.skew : 0;
      return node.epoch === model.epoch && node.lastSeq + skew === model.lastSeq ? 'ok' : 'refused';
    }
    case 'catchUp':
      return 'ok';
  }
}

function check(expect: Expect, ok: boolean, what: string, world: World): void {
  if (expect === 'either') return;
  assert.equal(ok ? 'ok' : 'refused', expect, `${what}: the model expected ${expect}\n${world.trace.join('\n')}`);
}

async function commitAs(world: World, node: ModelNode, size: number, skew: number, alone: boolean): Promise<void> {
  if (node.epoch === 0) {
    world.trace.push(`${node.name} commit skipped (never led)`);
    return; // A node that never took the lease believes it is no leader: it commits nothing.
  }
  const firstSeq = node.lastSeq + 1 + skew;
  const records = makeRecords(node.name, node.counter, size);
  node.counter += size;
  const attempt: Omit<CommitAttempt, 'end'> = { node: node.name, epoch: node.epoch, firstSeq, lastSeq: firstSeq + size - 1, records, start: 0 };
  const expect: Expect = alone ? predict(world, node, { kind: 'commit', node: 0, lag: 0, size, skew }, 0) : 'either';
  attempt.start = performance.now();
  let ok: boolean;
  try {
    await world.journal.commit(node.client, node.epoch, firstSeq, records);
    ok = true;
  } catch (error) {
    if (!(error instanceof FencedError)) throw error;
    ok = false;
  }
  const done: CommitAttempt = { ...attempt, end: performance.now() };
  (ok ? world.acked : world.refused).push(done);
  world.trace.push(`${node.name} commit e${done.epoch} ${done.firstSeq}..${done.lastSeq} → ${ok ? 'ok' : 'fenced'}`);
  if (ok) node.lastSeq = done.lastSeq;
  check(expect, ok, `${node.name} commit e${done.epoch} ${done.firstSeq}..${done.lastSeq}`, world);
}

async function catchUp(world: World, node: ModelNode): Promise<void> {
  let seq = node.lastSeq;
  for (;;) {
    const batches = await world.journal.batchesAfter(node.client, seq, 2);
    if (batches.length === 0) break;
    for (const batch of batches) {
      assert.equal(batch.firstSeq, seq + 1, `${node.name} catching up after ${seq} read a batch at ${batch.firstSeq}`);
      assert.equal(batch.records.length, batch.lastSeq - batch.firstSeq + 1);
      seq = batch.lastSeq;
    }
  }
  world.trace.push(`${node.name} catchUp ${node.lastSeq} → ${seq}`);
  node.lastSeq = seq;
}

async function runCommand(world: World, command: NodeCommand, alone: boolean): Promise<void> {
  const node = world.nodes[command.node % world.nodes.length]!;
  if (command.lag > 0) await sleep(command.lag);
  switch (command.kind) {
    case 'takeOver': {
      const start = performance.now();
      const expect = alone ? predict(world, node, command, start) : 'either';
      const result = await world.lease.takeOver(node.client, node.name, `${node.name}.local`);
      const end = performance.now();
      world.trace.push(`${node.name} takeOver → ${result === null ? 'refused' : `e${result.epoch} at ${result.lastSeq}`}`);
      if (result !== null) {
        world.leaseLog.push({ node: node.name, epoch: result.epoch, kind: 'takeOver', start, end, lastSeq: result.lastSeq });
        node.epoch = result.epoch;
        node.lastSeq = result.lastSeq; // The journal's end as of the takeover (a real node would catch up to it).
      }
      check(expect, result !== null, `${node.name} takeOver`, world);
      return;
    }
    case 'renew':
    case 'release': {
      const start = performance.now();
      const expect = alone ? predict(world, node, command, start) : 'either';
      const ok =
        command.kind === 'renew'
          ? await world.lease.renew(node.client, node.name, node.epoch)
          : await world.lease.release(node.client, node.name, node.epoch, channelOf(world.cluster));
      const end = performance.now();
      world.trace.push(`${node.name} ${command.kind} e${node.epoch} → ${ok ? 'ok' : 'refused'}`);
      if (ok) world.leaseLog.push({ node: node.name, epoch: node.epoch, kind: command.kind, start, end });
      check(expect, ok, `${node.name} ${command.kind} e${node.epoch}`, world);
      return;
    }
    case 'commit':
      return commitAs(world, node, command.size, command.skew, alone);
    case 'freeze':
      world.trace.push(`${node.name} freezes ${Math.round((world.leaseMs * command.pct) / 100)} ms`);
      await sleep(Math.round((world.leaseMs * command.pct) / 100));
      return commitAs(world, node, command.size, 0, alone);
    case 'catchUp':
      await catchUp(world, node);
      if (alone) assert.equal(node.lastSeq, world.model.lastSeq, `${node.name} caught up to the journal's end\n${world.trace.join('\n')}`);
      return;
  }
}

async function runStep(world: World, s: Step): Promise<void> {
  if (s.kind === 'wait') {
    const ms = Math.round((world.leaseMs * s.pct) / 100);
    world.trace.push(`wait ${ms} ms`);
    await sleep(ms);
    return;
  }
  // One command per node in a step (a node does one thing at a time): a command for a busy node
  // goes to the next free one, or is dropped when every node is busy.
  const busy = new Set<number>();
  const commands: NodeCommand[] = [];
  for (const command of s.commands) {
    const n = world.nodes.length;
    const index = [0, 1, 2].map((offset) => (command.node + offset) % n).find((i) => !busy.has(i));
    if (index === undefined) continue;
    busy.add(index);
    commands.push({ ...command, node: index });
  }
  if (commands.length > 1) world.trace.push(`-- at once: ${commands.map((c) => `${world.nodes[c.node % world.nodes.length]!.name} ${c.kind}`).join(', ')}`);
  // allSettled: nothing of this run may still be running when the run's rows are deleted.
  const results = await Promise.allSettled(commands.map((command) => runCommand(world, command, commands.length === 1)));
  for (const result of results) if (result.status === 'rejected') throw result.reason;
  // The model follows what happened.
  const newest = world.leaseLog.filter((event) => event.kind === 'takeOver').reduce<LeaseEvent | null>((a, b) => (a === null || b.epoch > a.epoch ? b : a), null);
  if (newest !== null && newest.epoch > world.model.epoch) world.model = { ...world.model, epoch: newest.epoch, holder: newest.node };
  for (const ack of world.acked) if (ack.lastSeq > world.model.lastSeq) world.model.lastSeq = ack.lastSeq;
}

// ---- the invariants

interface Row {
  firstSeq: number;
  lastSeq: number;
  epoch: number;
  records: JournalRecord[];
}

async function readJournal(cluster: string): Promise<Row[]> {
  const { rows } = await checker.query<{ first_seq: string; last_seq: string; epoch: string; records: Buffer }>(
    `SELECT first_seq, last_seq, epoch, records FROM ${SCHEMA}.journal WHERE cluster = $1 ORDER BY first_seq`,
    [cluster],
  );
  return rows.map((row) => ({ firstSeq: Number(row.first_seq), lastSeq: Number(row.last_seq), epoch: Number(row.epoch), records: decodeBatch(row.records) }));
}

async function readHead(cluster: string): Promise<{ epoch: number; lastSeq: number }> {
  const { rows } = await checker.query<{ epoch: string; last_seq: string }>(`SELECT epoch, last_seq FROM ${SCHEMA}.head WHERE cluster = $1`, [cluster]);
  assert.ok(rows[0], 'the head row is there');
  return { epoch: Number(rows[0].epoch), lastSeq: Number(rows[0].last_seq) };
}

/** 1–2: contiguous from seq 1, epochs never decrease; returns the journal's end. */
function checkJournalShape(rows: Row[], context: string): number {
  let end = 0;
  let epoch = 0;
  for (const row of rows) {
    assert.equal(row.firstSeq, end + 1, `1. batch ${row.firstSeq}..${row.lastSeq} follows seq ${end}: no gap, no overlap${context}`);
    assert.ok(row.lastSeq >= row.firstSeq);
    assert.equal(row.records.length, row.lastSeq - row.firstSeq + 1, `batch ${row.firstSeq}..${row.lastSeq} holds one record per seq`);
    assert.ok(row.epoch >= epoch, `2. batch ${row.firstSeq}..${row.lastSeq} of epoch ${row.epoch} after a batch of epoch ${epoch}${context}`);
    end = row.lastSeq;
    epoch = row.epoch;
  }
  return end;
}

async function checkInvariants(world: World): Promise<void> {
  const context = `\n${world.trace.join('\n')}`;
  const rows = await readJournal(world.cluster);
  const end = checkJournalShape(rows, context);

  // 3. Every acknowledged commit is in the journal exactly; nothing else is; refused ones wrote nothing.
  const byFirst = new Map(rows.map((row) => [row.firstSeq, row]));
  for (const ack of world.acked) {
    const row = byFirst.get(ack.firstSeq);
    assert.ok(row, `3. acknowledged ${ack.node} e${ack.epoch} ${ack.firstSeq}..${ack.lastSeq} is in the journal${context}`);
    assert.deepEqual({ lastSeq: row.lastSeq, epoch: row.epoch, records: row.records }, { lastSeq: ack.lastSeq, epoch: ack.epoch, records: ack.records }, `3. acknowledged batch at ${ack.firstSeq} as committed${context}`);
  }
  assert.equal(rows.length, world.acked.length, `3. the journal holds only acknowledged batches${context}`);
  const stored = new Set(rows.flatMap((row) => row.records.map(idOf)));
  for (const refused of world.refused) {
    for (const record of refused.records) assert.ok(!stored.has(idOf(record)), `3. refused ${refused.node} e${refused.epoch} ${refused.firstSeq}.. wrote ${idOf(record)}${context}`);
  }

  // 4. The head is the journal's end, in the lease's epoch; and the model agrees.
  const head = await readHead(world.cluster);
  const lease = await world.lease.read(checker);
  assert.equal(head.lastSeq, end, `4. head.last_seq is the last batch's last_seq${context}`);
  assert.equal(head.epoch, lease.epoch, `4. head.epoch is the lease's epoch${context}`);
  assert.deepEqual({ epoch: head.epoch, lastSeq: head.lastSeq, holder: lease.node }, world.model, `the model's head and lease holder${context}`);

  // 5. No seq acknowledged twice (so never by two epochs).
  const owner = new Map<number, CommitAttempt>();
  for (const ack of world.acked) {
    for (let seq = ack.firstSeq; seq <= ack.lastSeq; seq++) {
      const other = owner.get(seq);
      assert.equal(other, undefined, `5. seq ${seq} acknowledged to ${other?.node} e${other?.epoch} and to ${ack.node} e${ack.epoch}${context}`);
      owner.set(seq, ack);
    }
  }

  const takeOvers = world.leaseLog.filter((event) => event.kind === 'takeOver');
  for (const takeOver of takeOvers) {
    // 6. A takeover only of an expired or released lease: not within leaseMs of the previous holder's renewal.
    const previous = world.leaseLog.filter((event) => event.epoch === takeOver.epoch - 1).at(-1);
    if (previous !== undefined && previous.kind !== 'release') {
      assert.ok(
        takeOver.end >= previous.start + world.leaseMs - MARGIN_MS,
        `6. ${takeOver.node} took epoch ${takeOver.epoch} ${Math.round(previous.start + world.leaseMs - takeOver.end)} ms before ${previous.node}'s ${previous.kind} of epoch ${previous.epoch} expired (lease ${world.leaseMs} ms)${context}`,
      );
    }
    // The new leader's view holds every earlier epoch's acknowledged commit, and no later one.
    for (const ack of world.acked) {
      if (ack.epoch < takeOver.epoch) assert.ok(ack.lastSeq <= takeOver.lastSeq!, `takeover of e${takeOver.epoch} at ${takeOver.lastSeq} misses acknowledged e${ack.epoch} ${ack.firstSeq}..${ack.lastSeq}${context}`);
      else assert.ok(ack.firstSeq > takeOver.lastSeq!, `takeover of e${takeOver.epoch} at ${takeOver.lastSeq} already holds e${ack.epoch} ${ack.firstSeq}..${ack.lastSeq}${context}`);
      // Fencing in real time: once a later epoch's takeover returned, an older epoch's commit sent after it never resolves.
      if (ack.epoch < takeOver.epoch) assert.ok(!(takeOver.end < ack.start), `e${ack.epoch} commit ${ack.firstSeq}..${ack.lastSeq} by ${ack.node}, sent after e${takeOver.epoch}'s takeover returned, resolved${context}`);
    }
  }
  // Epochs are handed out one by one.
  assert.deepEqual(takeOvers.map((event) => event.epoch).sort((a, b) => a - b), takeOvers.map((_, i) => i + 1), `epochs 1, 2, 3, … each handed out once${context}`);
}

/** At the end of a run: batchesAfter from every position starts with the batch holding the next seq. */
async function checkReads(world: World): Promise<void> {
  const rows = await readJournal(world.cluster);
  assert.equal(await world.journal.firstSeq(checker), rows.length === 0 ? null : 1);
  const end = rows.at(-1)?.lastSeq ?? 0;
  for (let after = 0; after <= end; after++) {
    const batches = await world.journal.batchesAfter(checker, after, 3);
    const expected = rows.filter((row) => row.lastSeq > after).slice(0, 3);
    // Each batch carries its records' bytes as stored (a follower keeps them as they are), and
    // its records are those bytes decoded (StoredBatch.records): the spread reads them.
    assert.deepEqual(
      batches.map(({ bytes: _bytes, ...batch }) => batch),
      expected,
      `batchesAfter(${after})`,
    );
  }
  assert.deepEqual(await world.journal.head(checker), await readHead(world.cluster));
}

async function withCluster<T>(run: (cluster: string) => Promise<T>): Promise<T> {
  const cluster = newClusterName();
  await createCluster(cluster);
  try {
    return await run(cluster);
  } finally {
    await dropCluster(cluster);
  }
}

async function waitUntilBlocked(client: pg.Client): Promise<void> {
  const pid = pids.get(client)!;
  const deadline = performance.now() + 5_000;
  for (;;) {
    const { rows } = await checker.query<{ wait_event_type: string | null }>('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [pid]);
    if (rows[0]?.wait_event_type === 'Lock') return;
    assert.ok(performance.now() < deadline, `backend ${pid} never waited on a lock`);
    await sleep(2);
  }
}

type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

async function settle<T>(promise: Promise<T>): Promise<Settled<T>> {
  try {
    return { ok: true, value: await promise };
  } catch (error) {
    return { ok: false, error };
  }
}

describe('cluster fencing (model, real PostgreSQL)', () => {
  test('random interleavings of would-be leaders keep one contiguous, fenced journal', async (t) => {
    const stats = { runs: 0, steps: 0, concurrentSteps: 0, takeOvers: 0, leaderChanges: 0, refusedTakeOvers: 0, acked: 0, fenced: 0, fencedStaleEpoch: 0, commitsRacingTakeOver: 0, records: 0 };
    const runScenario = ({ nodeCount, leaseMs, steps }: Scenario): Promise<void> =>
      withCluster(async (cluster) => {
        const world = newWorld(cluster, leaseMs, nodeCount);
        world.trace.push(`cluster ${cluster}, ${nodeCount} nodes, lease ${leaseMs} ms`);
        for (const s of steps) {
          await runStep(world, s);
          await checkInvariants(world);
        }
        await checkReads(world);
        const takeOvers = world.leaseLog.filter((event) => event.kind === 'takeOver');
        stats.runs++;
        stats.steps += steps.length;
        stats.concurrentSteps += steps.filter((s) => s.kind === 'run' && s.commands.length > 1).length;
        stats.takeOvers += takeOvers.length;
        stats.leaderChanges += takeOvers.filter((event, i) => i > 0 && takeOvers[i - 1]!.node !== event.node).length;
        stats.refusedTakeOvers += world.trace.filter((line) => line.endsWith('takeOver → refused')).length;
        stats.acked += world.acked.length;
        stats.records += world.model.lastSeq;
        stats.fenced += world.refused.length;
        // Refused because a later epoch had been taken (not only because its idea of the end was wrong).
        stats.fencedStaleEpoch += world.refused.filter((attempt) => takeOvers.some((event) => event.epoch > attempt.epoch && event.start < attempt.end)).length;
        // Commit attempts of an older epoch in flight while a takeover ran (either outcome is fine).
        stats.commitsRacingTakeOver += [...world.acked, ...world.refused].filter((attempt) =>
          takeOvers.some((event) => event.epoch > attempt.epoch && event.start < attempt.end && attempt.start < event.end),
        ).length;
      });
    // interruptAfterTimeLimit abandons a run that is under way (it races it with a timer): wait for
    // it, so that it deletes its rows before the connections close.
    const inflight = new Set<Promise<void>>();
    try {
      await fc.assert(
        fc.asyncProperty(scenario, (input) => {
          const run = runScenario(input);
          inflight.add(run);
          const forget = (): void => void inflight.delete(run);
          run.then(forget, forget);
          return run;
        }),
        { numRuns: RUNS, seed: SEED, interruptAfterTimeLimit: 20_000 },
      );
    } finally {
      await Promise.allSettled([...inflight]);
    }
    t.diagnostic(JSON.stringify(stats));
    // The runs did exercise leader changes, commits and fenced commits of stale epochs.
    assert.ok(stats.leaderChanges > 0 && stats.acked > stats.runs / 2 && stats.fencedStaleEpoch > 0, `too little happened: ${JSON.stringify(stats)}`);
  });

  for (const first of ['commit', 'takeover'] as const) {
    test(`an old leader's commit waiting on the head row's lock while a takeover runs (${first} queued first)`, async (t) => {
      await withCluster(async (cluster) => {
        const leaseMs = 50;
        const lease = new Lease(cluster, leaseMs);
        const journal = new ClusterJournal(cluster);
        const [a, b] = nodeClients as [pg.Client, pg.Client];
        const taken = await lease.takeOver(a, 'A', 'a');
        assert.deepEqual(taken, { epoch: 1, lastSeq: 0 });
        await journal.commit(a, 1, 1, makeRecords('A', 1, 2));
        await sleep(leaseMs + 20); // A freezes past its lease.

        await locker.query('BEGIN');
        let commit: Promise<Settled<void>>;
        let takeOver: Promise<Settled<{ epoch: number; lastSeq: number } | null>>;
        const stale = makeRecords('A', 3, 3);
        try {
          await locker.query(`SELECT * FROM ${SCHEMA}.head WHERE cluster = $1 FOR UPDATE`, [cluster]);
          if (first === 'commit') {
            commit = settle(journal.commit(a, 1, 3, stale));
            await waitUntilBlocked(a);
            takeOver = settle(lease.takeOver(b, 'B', 'b'));
            await waitUntilBlocked(b);
          } else {
            takeOver = settle(lease.takeOver(b, 'B', 'b'));
            await waitUntilBlocked(b);
            commit = settle(journal.commit(a, 1, 3, stale));
            await waitUntilBlocked(a);
          }
        } finally {
          await locker.query('COMMIT');
        }
        const [committed, tookOver] = await Promise.all([commit, takeOver]);
        assert.ok(tookOver.ok && tookOver.value !== null, 'the takeover of the expired lease succeeds');
        assert.equal(tookOver.value.epoch, 2);
        // B catches up from what it had (nothing) after the takeover.
        const seen = await journal.batchesAfter(b, 0, 100);
        const rows = await readJournal(cluster);
        checkJournalShape(rows, '');
        if (committed.ok) {
          t.diagnostic('the old leader committed before the takeover; the new leader reads it');
          assert.equal(tookOver.value.lastSeq, 5);
          assert.deepEqual(seen.map((batch) => [batch.firstSeq, batch.lastSeq, batch.epoch]), [[1, 2, 1], [3, 5, 1]]);
          assert.deepEqual(seen[1]!.records, stale);
        } else {
          t.diagnostic('the old leader was fenced');
          assert.ok(committed.error instanceof FencedError, `refused with FencedError, not ${String(committed.error)}`);
          assert.equal(tookOver.value.lastSeq, 2);
          assert.deepEqual(seen.map((batch) => [batch.firstSeq, batch.lastSeq, batch.epoch]), [[1, 2, 1]]);
          assert.ok(!rows.some((row) => row.records.some((record) => idOf(record).startsWith('A:') && record.at >= 3)), 'nothing of the fenced commit is stored');
        }
        // Either way the old leader commits nothing more, and the new one goes on at the end.
        const end = tookOver.value.lastSeq;
        await assert.rejects(journal.commit(a, 1, end + 1, makeRecords('A', 10, 1)), FencedError);
        await journal.commit(b, 2, end + 1, makeRecords('B', 1, 2));
        await assert.rejects(journal.commit(a, 1, end + 3, makeRecords('A', 11, 1)), FencedError);
        assert.deepEqual(await journal.head(checker), { epoch: 2, lastSeq: end + 2 });
        checkJournalShape(await readJournal(cluster), '');
      });
    });
  }

  test('a batch never overlaps another: commits starting inside, on, or past existing batches are refused', async () => {
    await withCluster(async (cluster) => {
      const lease = new Lease(cluster, 40);
      const journal = new ClusterJournal(cluster);
      const [a, b, c] = nodeClients as [pg.Client, pg.Client, pg.Client];
      assert.equal((await lease.takeOver(a, 'A', 'a'))?.epoch, 1);
      await journal.commit(a, 1, 1, makeRecords('A', 1, 5));
      await journal.commit(a, 1, 6, makeRecords('A', 6, 2));
      const before = await readJournal(cluster);
      // The leader itself, with a wrong idea of the journal's end.
      for (const [firstSeq, size] of [[3, 2], [4, 5], [1, 1], [1, 9], [6, 1], [7, 3], [9, 1], [0, 2], [2, 1]] as const) {
        await assert.rejects(journal.commit(a, 1, firstSeq, makeRecords('X', 100 + firstSeq * 10, size)), FencedError, `commit at ${firstSeq}..${firstSeq + size - 1}`);
      }
      assert.deepEqual(await readJournal(cluster), before);

      // Several commits of one epoch (several connections) racing for the same and next seqs: one
      // contiguous journal, whichever wins.
      let next = 8;
      const acked: Row[] = [];
      for (let round = 0; round < 8; round++) {
        const tries = [
          { client: a, firstSeq: next, size: 1 + (round % 3) },
          { client: b, firstSeq: next, size: 2 },
          { client: c, firstSeq: next + 1, size: 1 },
          { client: checker, firstSeq: next - 1, size: 3 },
        ].map((attempt, i) => ({ ...attempt, records: makeRecords(`R${round}.${i}`, attempt.firstSeq, attempt.size) }));
        const results = await Promise.allSettled(tries.map((attempt) => journal.commit(attempt.client, 1, attempt.firstSeq, attempt.records)));
        results.forEach((result, i) => {
          const attempt = tries[i]!;
          if (result.status === 'fulfilled') acked.push({ firstSeq: attempt.firstSeq, lastSeq: attempt.firstSeq + attempt.size - 1, epoch: 1, records: attempt.records });
          else assert.ok(result.reason instanceof FencedError, String(result.reason));
        });
        const rows = await readJournal(cluster);
        next = checkJournalShape(rows, '') + 1;
      }
      const rows = await readJournal(cluster);
      assert.deepEqual(rows.slice(2), acked.sort((x, y) => x.firstSeq - y.firstSeq));
      assert.deepEqual(await journal.head(checker), { epoch: 1, lastSeq: next - 1 });

      // A new leader, and the old one trying to slip a batch in at the end or inside.
      await sleep(60);
      const taken = await lease.takeOver(b, 'B', 'b');
      assert.deepEqual(taken, { epoch: 2, lastSeq: next - 1 });
      await assert.rejects(journal.commit(a, 1, next, makeRecords('A', 500, 1)), FencedError);
      await journal.commit(b, 2, next, makeRecords('B', 1, 2));
      await assert.rejects(journal.commit(a, 1, next + 2, makeRecords('A', 501, 1)), FencedError);
      await assert.rejects(journal.commit(b, 2, next + 1, makeRecords('B', 3, 2)), FencedError);
      await assert.rejects(journal.commit(b, 2, next, makeRecords('B', 5, 1)), FencedError);
      const final = await readJournal(cluster);
      checkJournalShape(final, '');
      assert.equal(final.at(-1)?.lastSeq, next + 1);
    });
  });

  test('sequence numbers past 2^31 (bigint columns) commit and read back', async () => {
    await withCluster(async (cluster) => {
      const lease = new Lease(cluster, 40);
      const journal = new ClusterJournal(cluster);
      const [a] = nodeClients as [pg.Client];
      const end = 2 ** 31 - 2;
      // A journal that has come a long way (trimmed by retention): set its end directly.
      await checker.query(`UPDATE ${SCHEMA}.head SET last_seq = $2 WHERE cluster = $1`, [cluster, end]);
      const taken = await lease.takeOver(a, 'A', 'a');
      assert.deepEqual(taken, { epoch: 1, lastSeq: end });
      await journal.commit(a, 1, end + 1, makeRecords('A', 1, 1)); // up to 2^31 - 1
      await journal.commit(a, 1, end + 2, makeRecords('A', 2, 3)); // 2^31 .. 2^31 + 2
      await journal.commit(a, 1, end + 5, makeRecords('A', 5, 1));
      await assert.rejects(journal.commit(a, 1, end + 3, makeRecords('A', 9, 1)), FencedError);
      assert.deepEqual(await journal.head(checker), { epoch: 1, lastSeq: end + 5 });
      assert.deepEqual((await journal.batchesAfter(a, end, 10)).map((batch) => [batch.firstSeq, batch.lastSeq]), [[end + 1, end + 1], [end + 2, end + 4], [end + 5, end + 5]]);
      assert.deepEqual((await journal.batchesAfter(a, end + 2, 10)).map((batch) => batch.firstSeq), [end + 2, end + 5]);
      assert.deepEqual(await journal.batchesAfter(a, end + 5, 10), []);
      assert.equal(await journal.firstSeq(a), end + 1);
    });
  });
});
