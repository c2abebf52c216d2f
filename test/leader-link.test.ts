// A follower's LeaderLink (cluster/leader-link.ts) when the leader's machine is gone: its SYNs go
// unanswered (a listener whose accept queue is full drops them, as a dead host or a partition
// does), so a POST to it never connects. Such a POST sent nothing: its writes go to the next
// leader, unkeyed ones too. Before 2026-11-29 it counted as "may have been applied" once cut off
// (the next leader known, or its timeout), and the unkeyed writes got an ambiguous 503 (found by
// a review). The next leader here is a plain HTTP server that answers each command 200.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { LeaderLink } from '../src/cluster/leader-link.ts';
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

test('a POST to a leader that never accepted the connection sent nothing: its unkeyed writes go to the next leader, not 503', async (t) => {
  const hole = await blackHole();
  t.after(() => hole.close());
  let applied = 0;
  const next = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const { frame } = frameFromBytes(Buffer.concat(chunks));
      const answers = new AnswerWriter();
      for (const c of readCommands(frame)) {
        applied++;
        answers.add({ id: c.id, status: 200, body: '{"success":true}', header: '', headerValue: '', close: false });
      }
      res.end(answers.take());
    });
  });
  await new Promise<void>((resolve) => next.listen(0, '127.0.0.1', resolve));
  t.after(() => next.close());
  const startedAt = performance.now();
  const gone = { name: 'gone', url: `http://127.0.0.1:${hole.port}`, secret: 's5', epoch: 5 };
  const newLeader = { name: 'new', url: `http://127.0.0.1:${(next.address() as AddressInfo).port}`, secret: 's6', epoch: 6 };
  const link = new LeaderLink({
    origin: 'f/1',
    // The old leader for 1.5 s (a lease running out), then the new one.
    target: () => (performance.now() - startedAt < 1_500 ? gone : newLeader),
    local: { run: () => assert.fail('this node does not lead') },
    forwardTimeoutMs: 8_000,
    keysRemembered: true,
    log: pino({ level: 'silent' }),
  });
  t.after(() => link.stop());
  const command = (idempotencyKey: string): Command => ({ id: 1, kind: 'json', route: 'track_event', workspace: 'ws', keyHash: 'h', param: '', at: Date.now(), requestId: 'r', idempotencyKey, scope: [1, 2, 3], fingerprint: [4, 5], gzip: false, text: '{}', bytes: null });
  const answers = await Promise.all(['', 'key-1'].map((key) => new Promise<Answer>((resolve) => link.run(command(key), resolve))));
  assert.deepEqual(answers.map((a) => [a.status, a.body]), [[200, '{"success":true}'], [200, '{"success":true}']], 'both applied by the new leader: the unkeyed write too');
  assert.equal(applied, 2);
});
