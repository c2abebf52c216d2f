// Property (fast-check, over HTTP, two real servers): random interleavings of retries and new
// writes leave the same journal and the same state as the same writes sent once. Server A gets
// every write 1 to 3 times (a burst of concurrent copies, or retries scattered among the later
// writes); server B gets each once, in the same order. A write refused with a 4xx keeps no key
// (CONTRACT §10), so its retries follow it at once, before anything could make them succeed.
// Each run has its own workspace on both servers; journals and state are compared per workspace.
import { before, after, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { exportLines, LAUNCH_INFO, startServer, T0, type TestServer } from './helpers/server.ts';

const RUNS = 25;
const workspaceKey = (run: number) => `property-key-for-run-${run}-0123456789`;
const SERVICE_KEYS = Array.from({ length: RUNS }, (_, run) => `run-${run}:${workspaceKey(run)}`).join(',');

const PRODUCTS = ['p0', 'p1', 'p2', 'p3'];
const COLLECTIONS = ['c0', 'c1'];

type Write =
  | { kind: 'product'; id: string; name: string; price: number | null }
  | { kind: 'productDelete'; id: string }
  | { kind: 'collection'; id: string; name: string }
  | { kind: 'collectionDelete'; id: string }
  | { kind: 'add' | 'remove'; id: string; products: string[] }
  | { kind: 'event'; name: string }
  | { kind: 'identify'; customer: string; value: string | null }
  | { kind: 'push'; token: string };

const writeArb: fc.Arbitrary<Write> = fc.oneof(
  fc.record({ kind: fc.constant('product' as const), id: fc.constantFrom(...PRODUCTS), name: fc.string({ minLength: 1, maxLength: 6 }), price: fc.option(fc.nat(1000), { nil: null }) }),
  fc.record({ kind: fc.constant('productDelete' as const), id: fc.constantFrom(...PRODUCTS) }),
  fc.record({ kind: fc.constant('collection' as const), id: fc.constantFrom(...COLLECTIONS), name: fc.string({ minLength: 1, maxLength: 6 }) }),
  fc.record({ kind: fc.constant('collectionDelete' as const), id: fc.constantFrom(...COLLECTIONS) }),
  fc.record({ kind: fc.constantFrom('add' as const, 'remove' as const), id: fc.constantFrom(...COLLECTIONS), products: fc.subarray(PRODUCTS, { minLength: 1 }) }),
  fc.record({ kind: fc.constant('event' as const), name: fc.string({ minLength: 1, maxLength: 8 }) }),
  fc.record({ kind: fc.constant('identify' as const), customer: fc.constantFrom('u0', 'u1'), value: fc.option(fc.string({ maxLength: 5 }), { nil: null }) }),
  fc.record({ kind: fc.constant('push' as const), token: fc.string({ minLength: 1, maxLength: 8 }) }),
);

interface Step {
  write: Write;
  copies: number;
  /** Copies sent at once (concurrently) instead of as later retries. */
  burst: boolean;
  /** How many writes later each retry comes (when the first answer was 200). */
  delays: number[];
}

const stepArb: fc.Arbitrary<Step> = fc.record({
  write: writeArb,
  copies: fc.integer({ min: 1, max: 3 }),
  burst: fc.boolean(),
  delays: fc.array(fc.nat(6), { minLength: 2, maxLength: 2 }),
});

function request(write: Write, did: string): { method: 'POST' | 'DELETE'; path: string; body: unknown } {
  switch (write.kind) {
    case 'product':
      return { method: 'POST', path: '/product', body: { id: write.id, name: write.name, price: write.price } };
    case 'productDelete':
      return { method: 'DELETE', path: `/product/${write.id}`, body: undefined };
    case 'collection':
      return { method: 'POST', path: '/collection', body: { id: write.id, name: write.name } };
    case 'collectionDelete':
      return { method: 'DELETE', path: `/collection/${write.id}`, body: undefined };
    case 'add':
    case 'remove':
      return { method: 'POST', path: `/collection/${write.id}/products/${write.kind}`, body: { products: write.products } };
    case 'event':
      return { method: 'POST', path: '/msv_cevt', body: { did, name: write.name, timestamp: T0 } };
    case 'identify':
      return { method: 'POST', path: '/msv_cs_id', body: { did, clientCustomerId: write.customer, timestamp: T0, info: [{ name: 'tier', value: write.value, type: 'string' }] } };
    case 'push':
      return { method: 'POST', path: '/mpush_token', body: { did, type: 'fcm', token: write.token, timestamp: T0 } };
  }
}

interface Answer {
  status: number;
  text: string;
  replayed: boolean;
}

async function send(server: TestServer, run: number, did: string, write: Write, idempotencyKey: string | null): Promise<Answer> {
  const { method, path, body } = request(write, did);
  const headers: Record<string, string> = idempotencyKey === null ? {} : { 'idempotency-key': idempotencyKey };
  const res = await server.request(path, body, { method, key: workspaceKey(run), headers });
  return { status: res.status, text: res.text, replayed: res.headers.get('idempotent-replayed') === 'true' };
}

async function launchIn(server: TestServer, run: number): Promise<string> {
  const res = await server.request<{ did: string }>('/mcrs_appl_v1', { timestamp: T0, info: LAUNCH_INFO }, { key: workspaceKey(run) });
  return res.body.did;
}

let a: TestServer;
let b: TestServer;
before(async () => {
  [a, b] = await Promise.all([startServer({ serviceKeys: SERVICE_KEYS }), startServer({ serviceKeys: SERVICE_KEYS })]);
});
after(async () => {
  await a.kill();
  await b.kill();
});

test('random interleavings of retries and new writes leave the journal and state of the writes sent once', async () => {
  let run = 0;
  const scenarios: Step[][] = [];
  await fc.assert(
    fc.asyncProperty(fc.array(stepArb, { minLength: 2, maxLength: 12 }), async (steps) => {
      const r = run++;
      scenarios[r] = steps;
      const [didA, didB] = await Promise.all([launchIn(a, r), launchIn(b, r)]);
      // A: every write 1-3 times, retries interleaved with later writes.
      const later = new Map<number, Array<() => Promise<void>>>();
      const firstAnswers: Answer[] = [];
      const runDue = async (position: number) => {
        for (const retry of later.get(position) ?? []) await retry();
        later.delete(position);
      };
      for (let i = 0; i < steps.length; i++) {
        await runDue(i);
        const { write, copies, burst, delays } = steps[i]!;
        const key = `run-${r}-write-${i}`;
        if (burst) {
          const answers = await Promise.all(Array.from({ length: copies }, () => send(a, r, didA, write, key)));
          assert.equal(new Set(answers.map((x) => `${x.status} ${x.text}`)).size, 1, 'concurrent copies get one answer');
          if (answers[0]!.status === 200) assert.equal(answers.filter((x) => !x.replayed).length, 1, 'one of them is the write');
          firstAnswers.push(answers[0]!);
          continue;
        }
        const first = await send(a, r, didA, write, key);
        firstAnswers.push(first);
        for (let c = 1; c < copies; c++) {
          const retry = async () => {
            const again = await send(a, r, didA, write, key);
            assert.equal(again.status, first.status);
            assert.equal(again.text, first.text, 'a retry gets the first answer');
            assert.equal(again.replayed, first.status === 200);
          };
          if (first.status !== 200) await retry();
          else {
            const at = i + 1 + delays[c - 1]!;
            later.set(at, [...(later.get(at) ?? []), retry]);
          }
        }
      }
      for (const position of [...later.keys()].sort((x, y) => x - y)) await runDue(position);
      // B: each write once, no key.
      for (let i = 0; i < steps.length; i++) {
        const once = await send(b, r, didB, steps[i]!.write, null);
        assert.equal(firstAnswers[i]!.status, once.status, `write ${i} (${steps[i]!.write.kind}): the same status as sent once`);
      }
    }),
    { numRuns: RUNS, seed: Number(process.env.PROPERTY_SEED ?? 20261123) },
  );

  // The journal and the state of each run's workspace, with each server's own ids and times
  // taken out (one export of each kind per server, grouped by workspace).
  const byWorkspace = (server: TestServer, what: string): Map<string, unknown> => {
    const groups = new Map<string, Array<Record<string, unknown>>>();
    for (const line of exportLines<Record<string, unknown>>(server.dataDir, what)) {
      const workspace = String(line.workspace);
      groups.set(workspace, [...(groups.get(workspace) ?? []), line]);
    }
    const normalized = new Map<string, unknown>();
    for (const [workspace, lines] of groups) {
      const ids = new Map<string, string>();
      const id = (value: string): string => {
        if (!ids.has(value)) ids.set(value, `id${ids.size}`);
        return ids.get(value)!;
      };
      normalized.set(
        workspace,
        JSON.parse(
          JSON.stringify(lines, (key, value) => {
            if (key === 'at' || key === 'seq') return undefined;
            if ((key === 'did' || key === 'sid') && typeof value === 'string') return id(value);
            if (key === 'devices' && Array.isArray(value)) return value.map((v) => (typeof v === 'string' ? id(v) : v));
            return value;
          }),
        ),
      );
    }
    return normalized;
  };
  for (const what of ['events', 'devices', 'customers', 'products', 'collections']) {
    const [fromA, fromB] = [byWorkspace(a, what), byWorkspace(b, what)];
    for (let r = 0; r < run; r++) {
      assert.deepEqual(fromA.get(`run-${r}`), fromB.get(`run-${r}`), `${what} of run ${r}: ${JSON.stringify(scenarios[r])}`);
    }
  }
});
