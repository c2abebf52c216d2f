// A steady load at a fixed rate. autocannon's `overallRate` gives each connection a quota per
// second and sends it back to back as answers come: 8,000/s from 64 connections arrived as bursts
// in the first 0.3 s of each second, then nothing (a review of the benches, 2026-11-29), so its
// "fixed rate" was saturation for a third of the time and idle for the rest. Here request i is
// due at start + i / rate, and goes out on a free keep-alive connection as soon as it is due (or
// as soon as one frees up); its latency counts from when it was due, so a server that falls
// behind shows it in the percentiles (no coordinated omission). Bodies are prebuilt bytes, sent
// round robin, as the autocannon pools were.
import { connect, type Socket } from 'node:net';
import { percentile } from './stats.ts';

export interface PacedRequest {
  path: string;
  body: Buffer;
  /** Default POST. */
  method?: 'POST' | 'DELETE';
  /** Headers of this request alone, beside PacedOptions.headers. */
  headers?: Record<string, string>;
}

export interface PacedOptions {
  /** http://host:port */
  url: string;
  headers: Record<string, string>;
  connections: number;
  ratePerSec: number;
  seconds: number;
  /**
   * Request i (called POOL_SIZE times before the run, the bodies then sent round robin; with
   * `perRequest`, once for every request as it is sent: fresh Idempotency-Keys, a random mix).
   */
  request: (i: number) => PacedRequest;
  perRequest?: boolean;
}

export interface PacedResult {
  /** Requests answered. */
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  /** Answers by status. */
  statuses: Map<number, number>;
  /** Requests sent and never answered (their connection failed, or the run ended first). */
  errors: number;
}

/** Bodies prepared before the run and sent round robin. */
const POOL_SIZE = 4096;
/** The scheduler looks at the clock this often (Node's timers are no finer). */
const TICK_MS = 1;
/** After the last request is due, answers are waited for this long at most. */
const DRAIN_MS = 5_000;
const HEADER_END = Buffer.from('\r\n\r\n');

interface Connection {
  socket: Socket;
  /** When the request in flight was due (performance.now()), or null when idle. */
  dueAtMs: number | null;
  pending: Buffer;
}

export function pacedLoad(options: PacedOptions): Promise<PacedResult> {
  const target = new URL(options.url);
  const host = target.hostname;
  const port = Number(target.port);
  const headerText = Object.entries(options.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  const bytesOf = (i: number): Buffer => {
    const { path, body, method = 'POST', headers } = options.request(i);
    const own = headers === undefined ? '' : Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    return Buffer.concat([Buffer.from(`${method} ${path} HTTP/1.1\r\nhost: ${target.host}\r\n${headerText}${own}content-length: ${body.length}\r\n\r\n`), body]);
  };
  const pool = options.perRequest === true ? [] : Array.from({ length: POOL_SIZE }, (_, i) => bytesOf(i));
  const total = Math.round(options.ratePerSec * options.seconds);
  const latencies = new Float64Array(total);
  const statuses = new Map<number, number>();
  let answered = 0;
  let scheduled = 0;
  let sent = 0;
  /** Due times of requests due and not sent yet (no free connection), oldest first. */
  const queue: number[] = [];
  const idle: Connection[] = [];
  const connections: Connection[] = [];

  return new Promise((resolve) => {
    let startedAtMs = 0;
    let finished = false;
    let ticker: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      clearInterval(ticker);
      clearTimeout(drainTimer);
      for (const c of connections) c.socket.destroy();
      const elapsedSec = (performance.now() - startedAtMs) / 1000;
      const sorted = Array.from(latencies.subarray(0, answered)).sort((a, b) => a - b);
      const ms = (x: number) => Math.round(x * 10) / 10;
      resolve({ requests: answered, rps: answered / Math.max(elapsedSec, 1e-3), p50: ms(percentile(sorted, 50)), p99: ms(percentile(sorted, 99)), statuses, errors: sent - answered });
    };
    const send = (c: Connection, dueAtMs: number): void => {
      c.dueAtMs = dueAtMs;
      c.socket.write(options.perRequest === true ? bytesOf(sent) : pool[sent % POOL_SIZE]!);
      sent++;
    };
    const free = (c: Connection): void => {
      c.dueAtMs = null;
      const due = queue.shift();
      if (due !== undefined) send(c, due);
      else idle.push(c);
      if (sent === total && connections.every((x) => x.dueAtMs === null)) finish();
    };
    const onData = (c: Connection, chunk: Buffer): void => {
      c.pending = c.pending.length === 0 ? chunk : Buffer.concat([c.pending, chunk]);
      for (;;) {
        const end = c.pending.indexOf(HEADER_END);
        if (end === -1) return;
        const head = c.pending.toString('latin1', 0, end);
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        const size = end + HEADER_END.length + length;
        if (c.pending.length < size) return;
        const status = Number(head.slice(9, 12));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (c.dueAtMs !== null && answered < total) latencies[answered++] = performance.now() - c.dueAtMs;
        c.pending = c.pending.subarray(size);
        free(c);
      }
    };
    const tick = (): void => {
      const due = Math.min(total, Math.floor(((performance.now() - startedAtMs) * options.ratePerSec) / 1000));
      for (; scheduled < due; scheduled++) {
        const dueAtMs = startedAtMs + (scheduled * 1000) / options.ratePerSec;
        const c = idle.pop();
        if (c === undefined) queue.push(dueAtMs);
        else send(c, dueAtMs);
      }
      if (scheduled === total) {
        clearInterval(ticker);
        drainTimer = setTimeout(finish, DRAIN_MS);
      }
    };
    let opened = 0;
    const open = (): void => {
      const c: Connection = { socket: connect({ host, port, noDelay: true }), dueAtMs: null, pending: Buffer.alloc(0) };
      connections.push(c);
      c.socket.on('data', (chunk: Buffer) => onData(c, chunk));
      // A connection that fails or that the server closes is not used again (its request in
      // flight counts as unanswered) and another takes its place. The server closes a keep-alive
      // connection idle for about 10 s (uWS): the connections at the bottom of the idle stack sit
      // that long, and a request later written to one of them was lost (2 of 360,000 in
      // bench:edges at 20:06 on 2026-11-29, counted as non-2xx: the load generator's, not the
      // server's). A close that crosses a request in flight can still lose it.
      let dropped = false;
      const drop = (): void => {
        if (dropped) return;
        dropped = true;
        const wasBusy = c.dueAtMs !== null;
        c.dueAtMs = null;
        const at = idle.indexOf(c);
        if (at !== -1) idle.splice(at, 1);
        connections.splice(connections.indexOf(c), 1);
        c.socket.destroy();
        if (finished) return;
        if (opened === options.connections) open();
        // Its request is not coming back: the run may be over now.
        if (wasBusy && sent === total && connections.every((x) => x.dueAtMs === null)) finish();
      };
      c.socket.on('error', drop);
      c.socket.on('end', drop);
      c.socket.once('connect', () => {
        if (finished) return;
        idle.push(c);
        if (opened < options.connections && ++opened === options.connections) {
          startedAtMs = performance.now();
          ticker = setInterval(tick, TICK_MS);
        }
      });
    };
    for (let n = 0; n < options.connections; n++) open();
  });
}
