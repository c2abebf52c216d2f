// Yardstick: the bare uWebSockets.js server plus a group-committed LMDB write. Bodies are parsed
// and queued; one commit is in flight at a time, holding every body queued since the previous
// one (one LMDB value per commit, like intake's journal batches), and each request is answered
// after the commit holding it is durable (lmdb-js defaults: the promise resolves after fsync).
// This is what durable writes cost with nothing else: intake should come close, and beat it
// where it overlaps commits.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import uWS, { type HttpResponse } from 'uWebSockets.js';
import { readBody } from './lib/uws-body.ts';

const port = Number(process.env.PORT ?? 0);
const db = open({ path: join(process.env.DATA_DIR ?? mkdtempSync(join(tmpdir(), 'bare-lmdb-')), 'yardstick.mdb') });
const SUCCESS = '{"success":true}';

interface Waiting {
  res: HttpResponse;
  aborted: boolean;
}

let queuedBodies: unknown[] = [];
let queuedWaiters: Waiting[] = [];
let committing = false;
let seq = 1;

function commitQueued(): void {
  if (committing || queuedBodies.length === 0) return;
  committing = true;
  const bodies = queuedBodies;
  const waiters = queuedWaiters;
  queuedBodies = [];
  queuedWaiters = [];
  const key = seq;
  seq += bodies.length;
  void db.put(key, bodies).then(() => {
    for (const w of waiters) {
      if (w.aborted) continue;
      w.res.cork(() => w.res.writeStatus('200 OK').writeHeader('content-type', 'application/json').end(SUCCESS));
    }
    committing = false;
    commitQueued();
  });
}

uWS
  .App()
  .post('/*', (res) => {
    const waiting: Waiting = { res, aborted: false };
    res.onAborted(() => {
      waiting.aborted = true;
    });
    readBody(res, (body) => {
      let parsed: unknown;
      try {
        parsed = JSON.parse(body.toString('utf8'));
      } catch {
        res.cork(() => res.writeStatus('400 Bad Request').end());
        return;
      }
      queuedBodies.push(parsed);
      queuedWaiters.push(waiting);
      // Commit at the end of this event-loop turn if nothing is in flight.
      if (queuedBodies.length === 1) setImmediate(commitQueued);
    });
  })
  .listen('127.0.0.1', port, (socket) => {
    if (socket === false) {
      process.stderr.write('bare-uws-lmdb: cannot listen\n');
      process.exit(1);
    }
    process.stdout.write(`${JSON.stringify({ msg: 'listening', port: uWS.us_socket_local_port(socket) })}\n`);
  });
