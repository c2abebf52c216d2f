// A follower's LeaderLink (cluster/leader-link.ts) when the leader's machine is gone: its SYNs go
// unanswered (a listener whose accept queue is full drops them, as a dead host or a partition
// does), so a POST to it never connects. Such a POST sent nothing: its writes go to the next
// leader, unkeyed ones too. Before 2026-11-29 it counted as "may have been applied" once cut off
// (the next leader known, or its timeout), and the unkeyed writes got an ambiguous 503 (found by
// a review). The next leader here is a plain HTTP server that answers each command 200.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { LeaderTarget } from '../src/cluster/cluster-node.ts';
import { LeaderLink, type LinkLimits } from '../src/cluster/leader-link.ts';
import { AnswerWriter, readCommands, type Answer, type Command } from '../src/handoff/frames.ts';
import { frameFromBytes } from '../src/handoff/wire.ts';

/** A TCP port on 127.0.0.1 that never completes a connection: listen(0), the queue filled, never accepted. */
async function blackHole(): Promise<{ port: number; close: () => void }> {
  const child = spawn('python3', ['-c', `
import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0)
fill = []
for i in range(4):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(s.getsockname())
    except BlockingIOError: pass
    fill.append(c)
print(s.getsockname()[1], flush=True)
time.sleep(120)
`], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout.setEncoding('utf8').once('data', (d: string) => resolve(Number(d.trim())));
    child.once('exit', (code) => reject(new Error(`the black hole exited (${code})`)));
  });
  return { port, close: () => child.kill('SIGKILL') };
}

/**
 * A leader that answers every command of each POSTed frame 200 after `delayMs`; counts the POSTs
 * and the commands. Closed after the test.
 */
async function stubLeader(t: TestContext, delayMs = 0, answerBody = '{"success":true}'): Promise<{ url: string; posts: () => number; applied: () => number }> {
  let posts = 0;
  let applied = 0;
  const server = http.createServer((req, res) => {
    posts++;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const { frame } = frameFromBytes(Buffer.concat(chunks));
      const answers = new AnswerWriter();
      for (const c of readCommands(frame)) {
        applied++;
        answers.add({ id: c.id, status: 200, body: answerBody, header: '', headerValue: '', close: false });
      }
      setTimeout(() => res.end(answers.take()), delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posts: () => posts, applied: () => applied };
}

/** A follower's link that forwards to `target()` (never leads itself), stopped after the test. */
function followerLink(t: TestContext, origin: string, target: () => LeaderTarget | null, forwardTimeoutMs: number, limits: Partial<LinkLimits> = {}): LeaderLink {
  const link = new LeaderLink({ origin, target, local: { run: () => assert.fail('this node does not lead') }, forwardTimeoutMs, keysRemembered: true, log: pino({ level: 'silent' }), limits });
  t.after(() => link.stop());
  return link;
}

/** A forwarded track event with this Idempotency-Key ('' : none). */
const command = (idempotencyKey: string): Command => ({ id: 1, kind: 'json', route: 'track_event', workspace: 'ws', keyHash: 'h', param: '', at: Date.now(), requestId: 'r', idempotencyKey, scope: [1, 2, 3], fingerprint: [4, 5], gzip: false, text: '{}', bytes: null });

test('a POST to a leader that never accepted the connection sent nothing: its unkeyed writes go to the next leader, not 503', async (t) => {
  const hole = await blackHole();
  t.after(() => hole.close());
  const next = await stubLeader(t);
  const startedAt = performance.now();
  const gone = { name: 'gone', url: `http://127.0.0.1:${hole.port}`, secret: 's5', epoch: 5 };
  const newLeader = { name: 'new', url: next.url, secret: 's6', epoch: 6 };
  // The old leader for 1.5 s (a lease running out), then the new one.
  const link = followerLink(t, 'f/1', () => (performance.now() - startedAt < 1_500 ? gone : newLeader), 8_000);
  const answers = await Promise.all(['', 'key-1'].map((key) => new Promise<Answer>((resolve) => link.run(command(key), resolve))));
  assert.deepEqual(answers.map((a) => [a.status, a.body]), [[200, '{"success":true}'], [200, '{"success":true}']], 'both applied by the new leader: the unkeyed write too');
  assert.equal(next.applied(), 2);
});

test('a frame in flight waits for its latest deadline: a command near its end gets its 503 at its own deadline, and the fresh ones of its frame are answered by a slow leader in one POST', async (t) => {
  // Before, the POST's timeout was the frame's earliest deadline: here 300 ms left to the first
  // command, a leader answering in 600 ms, so the POST was cut off, the second command went
  // again in a second POST (a review).
  const slow = await stubLeader(t, 600);
  const startedAt = performance.now();
  const leader = { name: 'slow', url: slow.url, secret: 's1', epoch: 1 };
  // No leader known for 1.7 s (a takeover), then one that answers in 600 ms.
  const link = followerLink(t, 'f/2', () => (performance.now() - startedAt < 1_700 ? null : leader), 2_000);
  const answered = (key: string) => new Promise<{ answer: Answer; atMs: number }>((resolve) => link.run(command(key), (answer) => resolve({ answer, atMs: performance.now() - startedAt })));
  const old = answered('old');
  await new Promise((resolve) => setTimeout(resolve, 1_600));
  const fresh = answered('fresh');
  const [a, b] = await Promise.all([old, fresh]);
  assert.equal(a.answer.status, 503, `the old command gets its 503: ${a.answer.body}`);
  assert.match(a.answer.body, /may or may not have been applied/);
  // The upper bound leaves room for a late timer on a loaded machine; the POST count below is what tells the old code apart.
  assert.ok(a.atMs >= 1_990 && a.atMs < 2_500, `at its own deadline (2,000 ms): ${a.atMs.toFixed(0)} ms`);
  assert.deepEqual([b.answer.status, b.answer.body], [200, '{"success":true}'], 'the fresh one: the leader\'s answer');
  assert.equal(slow.posts(), 1, 'one POST: the frame was not cut short by the old command\'s deadline');
});

test('a leader\'s answer longer than maxAnswerBytes is cut off: its writes get 503 "may or may not have been applied", and are not sent again', async (t) => {
  // A broken or impostor leader could otherwise grow the follower's memory without end.
  const wordy = await stubLeader(t, 0, JSON.stringify({ success: true, padding: 'x'.repeat(64 * 1024) }));
  const leader = { name: 'wordy', url: wordy.url, secret: 's1', epoch: 1 };
  const link = followerLink(t, 'f/3', () => leader, 2_000, { maxAnswerBytes: 16 * 1024 });
  const answers = await Promise.all(['', 'key-1'].map((key) => new Promise<Answer>((resolve) => link.run(command(key), resolve))));
  for (const answer of answers) {
    assert.equal(answer.status, 503, answer.body);
    assert.match(answer.body, /longer than 16384 bytes; the write may or may not have been applied/);
  }
  assert.equal(wordy.posts(), 1, 'one POST: a keyed write sent again would get the same answer');
  // Within the limit, the same leader's answer is read whole.
  const roomy = followerLink(t, 'f/4', () => leader, 2_000, { maxAnswerBytes: 1024 * 1024 });
  const answer = await new Promise<Answer>((resolve) => roomy.run(command('key-2'), resolve));
  assert.equal(answer.status, 200);
  assert.equal(answer.body.length, JSON.stringify({ success: true, padding: 'x'.repeat(64 * 1024) }).length);
});

test('the link logs "can be reached again" only after it logged that it could not: not when this node takes the lead at start', async (t) => {
  const lines: string[] = [];
  let target: LeaderTarget | 'self' | null = 'self';
  const link = new LeaderLink({
    origin: 'n1',
    target: () => target,
    local: { run: () => undefined },
    forwardTimeoutMs: 5_000,
    keysRemembered: true,
    log: pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }),
  });
  t.after(() => link.stop());
  const until = async (what: string, check: () => boolean) => {
    for (const started = performance.now(); !check(); ) {
      if (performance.now() - started > 5_000) assert.fail(`timed out waiting for ${what}: ${lines.join('')}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const logged = (msg: string) => lines.filter((line) => (JSON.parse(line) as { msg: string }).msg === msg).length;
  const AGAIN = 'the cluster\'s leader can be reached again';
  const CANNOT = 'cannot forward writes to the cluster\'s leader now; waiting for one';
  // Leading from the start: the probe (every 0.5 s) finds "self" twice, and says nothing.
  await new Promise((resolve) => setTimeout(resolve, 1_200));
  assert.equal(logged(AGAIN), 0, lines.join(''));
  // No leader known: the warning; a leader again (this node): its end.
  target = null;
  await until('the warning', () => logged(CANNOT) === 1);
  target = 'self';
  await until('the end of the warning', () => logged(AGAIN) === 1);
});
