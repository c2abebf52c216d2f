// A follower's CommandSink (issue 21 item 3): the writes this node validated go to the leader's
// internal endpoint (forward-protocol.ts), and each answer to its reply, so the client gets the
// leader's answer. The commands of one event-loop turn go as one frame; several POSTs may be in
// flight, on connections kept alive. node:http, not fetch: fetch (undici) cost about 340 µs more
// CPU per POST on this machine (a POST per turn at low rates is most of a forward's cost).
//
// Each command gets an id of this link's own (unique per process; the origin names the node and
// the process), kept across retries, so that the leader's dedup table (forward-dedup.ts) answers a
// retry instead of applying it again. What happens to a POST that gets no answer:
// - not sent (connection refused, no leader known), or refused as a whole (503: the node does not
//   lead; 401: an older epoch's secret): nothing of it was applied; its commands wait and go again,
//   to whichever node leads;
// - sent, no answer (timeout, connection lost): it may have been applied. Its commands go again to
//   the same leader (same epoch), which answers from its dedup table. If the leader changed
//   meanwhile, the new one cannot know: a command with an Idempotency-Key goes to it anyway (its
//   key table, replicated, answers a replay: the same safety a client's own retry has); one
//   without gets 503 with Retry-After (it may or may not have been applied, as 503 says).
// Each command waits at most `forwardTimeoutMs` from its arrival, then gets 503 with Retry-After.
// When this node itself leads ('self'), waiting commands are run here, by `local`.
import http from 'node:http';
import https from 'node:https';
import type { Answer, Command } from '../handoff/frames.ts';
import { CommandWriter, FrameError, readAnswers } from '../handoff/frames.ts';
import { frameToBytes } from '../handoff/wire.ts';
import type { Refusal } from '../http/write-gate.ts';
import type { CommandSink } from '../state/command-sink.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { LeaderTarget } from './cluster-node.ts';
import { FORWARD_PATH, FORWARD_SECRET_HEADER, FRAME_MAX_BYTES, FRAME_MAX_COMMANDS } from './forward-protocol.ts';

export interface LinkLimits {
  /** Commands taken and not answered yet (waiting and in flight); more get 503 at once. */
  maxPendingCommands: number;
  /** The same in bytes of bodies. */
  maxPendingBytes: number;
  maxFrameCommands: number;
  /** A frame stops growing past this (a single bigger command goes alone). */
  maxFrameBytes: number;
  maxPostsInFlight: number;
  /**
   * A leader's answer to one POST is read up to this many bytes; a longer one is cut off and its
   * writes get 503 ("may or may not have been applied"). Its answers are the routes' own (a batch's
   * holds one result per item), so a frame's are some MB at most: the limit only stops a broken or
   * impostor leader from growing this process's memory without end.
   */
  maxAnswerBytes: number;
}

export const DEFAULT_LINK_LIMITS: LinkLimits = {
  maxPendingCommands: 10_000,
  maxPendingBytes: 256 * 1024 * 1024,
  maxFrameCommands: FRAME_MAX_COMMANDS,
  maxFrameBytes: FRAME_MAX_BYTES,
  maxPostsInFlight: 8,
  maxAnswerBytes: 64 * 1024 * 1024,
};

/** While no leader can take a frame, waiting commands are looked at again this often. */
const RETRY_MS = 50;
/** A POST gets at least this long, even for commands close to their deadline. */
const MIN_POST_TIMEOUT_MS = 250;
/** Without a successful exchange for this long, the leader is probed with an empty frame. */
const PROBE_IDLE_MS = 1_000;
const PROBE_TIMEOUT_MS = 2_000;
/** /readyz on a follower: 200 while a leader answered within this long at least (see readyWithinMs). */
const MIN_READY_WITHIN_MS = 3_000;
/**
 * A POST to a leader that has since been replaced (a newer epoch in the lease) gets this long to
 * be answered, then is given up on: the old leader is frozen or cut off (it can commit nothing
 * more), and the writes in it that carry an Idempotency-Key can go to the new one.
 */
const REPLACED_LEADER_GRACE_MS = 1_000;
/** Counted per command besides its body: the fields of its frame entry. */
const COMMAND_OVERHEAD_BYTES = 256;
/** A graceful stop waits this long at most for the answers of the writes it cut short (they are 503s made here). */
const STOP_ANSWERS_MS = 1_000;

/** A leader may have applied `f`: a POST of it got no answer, now or before a leader change. */
function mayHaveReached(f: Forward): boolean {
  return f.sentTo !== null || f.sentBefore;
}

function stoppingMessage(mayBeApplied: boolean): string {
  return mayBeApplied ? 'the server is shutting down; the leader did not answer, the write may or may not have been applied' : 'the server is shutting down; the write was not forwarded, nothing was applied';
}

/** Errors whose connection never carried the request: nothing of it reached the leader. */
const NOT_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
/** An idle kept-alive connection is closed by us after this, before uWS's own 10 s idle timeout does (a POST sent as it closes would be in doubt). */
const IDLE_SOCKET_MS = 5_000;
/** The error a POST that timed out is destroyed with. */
const TIMED_OUT = 'FORWARD_TIMEOUT';

export interface LeaderLinkOptions {
  /** This node's name and a random per-process nonce: the leader's dedup key with each id. */
  origin: string;
  /** The leader now (ClusterNode.forwardTarget()). */
  target: () => LeaderTarget | 'self' | null;
  /** Runs commands here when this node leads (the CommandExecutor). */
  local: CommandSink;
  forwardTimeoutMs: number;
  /** Why `target()` is null when there is more to say than "no leader is known" (ClusterNode.noLeaderReason). */
  noTargetReason?: () => string | null;
  /**
   * /readyz is 200 while a leader answered within this long (at least MIN_READY_WITHIN_MS). A
   * leader that died is replaced a lease after its last renewal: main.ts gives CLUSTER_LEASE_MS
   * + 2 s, so that a follower stays in the load balancer through a leader change and holds the
   * writes it gets for the new leader (with 3 s, haproxy had no ready node for the last second or
   * two of a failover and answered 503 itself: 1 and 23 of ~1,300 writes in two runs, 0 in
   * four with this window; measured with three nodes).
   */
  readyWithinMs?: number;
  /** Idempotency-Keys are remembered (IDEMPOTENCY_MAX_KEYS > 0): a keyed command may go to a new leader. */
  keysRemembered: boolean;
  log: Logger;
  limits?: Partial<LinkLimits>;
  /** A write was answered 503 here (not by a leader): counted in /metrics. */
  onRefused?: () => void;
}

interface Forward {
  /** Sent with this link's id (`command.id` is this link's id too); the edge's own id answers it. */
  readonly command: Command;
  readonly edgeId: number;
  readonly reply: (answer: Answer) => void;
  readonly deadlineMs: number;
  readonly bytes: number;
  /** The leader a POST of it went to without an answer (it may be applied there), or null. */
  sentTo: LeaderTarget | null;
  /** An earlier leader may have applied it (a keyed write sent again to a new one): a 503 must not say "nothing was applied". */
  sentBefore: boolean;
  done: boolean;
}

type Outcome =
  | { kind: 'answered'; text: string }
  | { kind: 'refused'; status: number; text: string }
  | { kind: 'failed'; status: number; text: string }
  | { kind: 'not-sent'; reason: string }
  | { kind: 'lost'; reason: string }
  | { kind: 'too-large'; status: number };

function sameTarget(a: LeaderTarget | null, b: LeaderTarget): boolean {
  return a !== null && a.url === b.url && a.secret === b.secret;
}

function unavailable(id: number, message: string): Answer {
  return { id, status: 503, body: JSON.stringify({ type: 'ServiceUnavailableError', message }), header: 'retry-after', headerValue: '1', close: false };
}

function errorCode(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? code : ((error as { name?: string }).name ?? 'Error');
}

export class LeaderLink implements CommandSink {
  private readonly options: LeaderLinkOptions;
  private readonly limits: LinkLimits;
  private nextId = 1;
  /** Commands not in flight, oldest first. */
  private waiting: Forward[] = [];
  private pendingCommands = 0;
  private pendingBytes = 0;
  private posts = 0;
  /** POSTs under way (probes too), to give up on those to a replaced leader. */
  private readonly exchanges = new Set<{ target: LeaderTarget; abort: () => void; replacedAtMs: number | null }>();
  private scheduled = false;
  private retryTimer: NodeJS.Timeout | null = null;
  /** A leader that refused (or could not be reached) is tried again only after RETRY_MS. */
  private blocked: { target: LeaderTarget; untilMs: number } | null = null;
  private readonly probeTimer: NodeJS.Timeout;
  private probing = false;
  private lastOkMs = -Infinity;
  /** /readyz: 200 while a leader answered within this long (LeaderLinkOptions.readyWithinMs, at least MIN_READY_WITHIN_MS). */
  private readonly readyWithinMs: number;
  /** Since when no exchange with a leader succeeded (null: the last one did), and why. */
  private failingSinceMs: number | null = null;
  private failure = '';
  /**
   * The failing period's warning was logged: only then is its end worth a line. The period a link
   * starts in ("no leader is known yet") is silent, and a node that then took the lead itself
   * logged that "the cluster's leader can be reached again" (found by a README-only audit).
   */
  private failureLogged = false;
  private stopped = false;
  /** Set by stop(): called once every write taken has its answer. */
  private answeredAll: (() => void) | null = null;
  /** Connections to the leader, kept alive: one per POST in flight at most, and one for the probe. */
  private readonly agents: { http: http.Agent; https: https.Agent };

  constructor(options: LeaderLinkOptions) {
    this.options = options;
    this.readyWithinMs = Math.max(MIN_READY_WITHIN_MS, options.readyWithinMs ?? 0);
    this.limits = { ...DEFAULT_LINK_LIMITS, ...options.limits };
    const agentOptions = { keepAlive: true, maxSockets: this.limits.maxPostsInFlight + 1, timeout: IDLE_SOCKET_MS };
    this.agents = { http: new http.Agent(agentOptions), https: new https.Agent(agentOptions) };
    this.failingSinceMs = performance.now();
    this.failure = 'no leader is known yet';
    this.probeTimer = setInterval(() => this.probe(), PROBE_IDLE_MS / 2);
    this.probeTimer.unref();
  }

  run(command: Command, reply: (answer: Answer) => void): void {
    // UTF-8 bytes, as the frame travels and as the leader's limit counts it: text.length (UTF-16
    // units) packed frames of CJK text three times over the leader's limit (413: every write in
    // the frame got 503; found by a review).
    const bytes = COMMAND_OVERHEAD_BYTES + Buffer.byteLength(command.text, 'utf8') + (command.bytes?.byteLength ?? 0);
    if (this.stopped || this.pendingCommands >= this.limits.maxPendingCommands || this.pendingBytes + bytes > this.limits.maxPendingBytes) {
      this.options.onRefused?.();
      return reply(unavailable(command.id, this.stopped ? 'the server is shutting down' : 'too many writes are waiting to be forwarded to the cluster\'s leader; nothing was applied'));
    }
    const id = this.nextId++;
    this.pendingCommands++;
    this.pendingBytes += bytes;
    this.waiting.push({ command: { ...command, id }, edgeId: command.id, reply, deadlineMs: performance.now() + this.options.forwardTimeoutMs, bytes, sentTo: null, sentBefore: false, done: false });
    // One frame per turn: the commands of this turn go together after it.
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  /** Commands taken and not answered yet. */
  get pending(): number {
    return this.pendingCommands;
  }

  /** Writes are refused before their body is read once no leader could be reached for the whole deadline. */
  refusal(): Refusal | null {
    if (this.failingSinceMs === null || performance.now() - this.failingSinceMs <= this.options.forwardTimeoutMs) return null;
    return { message: `this node cannot reach the cluster's leader to forward writes to it (${this.failure})`, retryAfterSeconds: 1 };
  }

  /**
   * Why /readyz is 503 on this follower: no leader answered for readyWithinMs. Not at the first
   * failed exchange: a leader that died takes a lease to be replaced, and meanwhile a follower
   * holds the writes it is sent and forwards them to the new leader; unready at once, it left the
   * load balancer with no node (haproxy's own 503s) for most of that (found by a walkthrough of
   * the README, which said 3 s).
   */
  notReady(): string | null {
    // Refusing writes at once (no leader for a whole CLUSTER_FORWARD_TIMEOUT_MS, which may be
    // under the ready window) is not ready, however recently a leader answered.
    const refusal = this.refusal();
    if (refusal !== null) return refusal.message;
    if (performance.now() - this.lastOkMs <= this.readyWithinMs) return null;
    return this.failingSinceMs !== null ? `this node cannot reach the cluster's leader (${this.failure})` : 'the cluster\'s leader has not answered this node lately';
  }

  /**
   * Graceful stop: nothing more is taken; what waits gets 503, and so does what is in flight (its
   * POST is cut: the leader may or may not have applied it). Resolves once every write taken has
   * its answer (at most STOP_ANSWERS_MS). Before, a POST in flight came back as lost and was put
   * back in the queue that no longer flushed: its clients got no answer at all (found by a review).
   */
  stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.probeTimer);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    const waiting = this.waiting;
    this.waiting = [];
    for (const exchange of this.exchanges) exchange.abort();
    this.agents.http.destroy();
    this.agents.https.destroy();
    for (const f of waiting) this.refuse(f, stoppingMessage(mayHaveReached(f)));
    if (this.pendingCommands === 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.answeredAll = resolve;
      setTimeout(resolve, STOP_ANSWERS_MS).unref();
    });
  }

  /** Answered 503 here: no leader took it (or may have, unknown), or the link is full or stopping. */
  private refuse(f: Forward, message: string): void {
    this.options.onRefused?.();
    this.finish(f, unavailable(f.edgeId, message));
  }

  private finish(f: Forward, answer: Answer): void {
    if (f.done) return;
    f.done = true;
    this.pendingCommands--;
    this.pendingBytes -= f.bytes;
    f.reply(answer);
    if (this.pendingCommands === 0) this.answeredAll?.();
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.stopped) return;
    const now = performance.now();
    this.expire(now);
    if (this.waiting.length === 0) return;
    const target = this.options.target();
    // Before the POSTs' limit: a node that leads now runs what it holds at once, even while its
    // POSTs to the old leader still hang (they waited for their grace period; a review).
    if (target === 'self') return this.runHere();
    if (this.posts >= this.limits.maxPostsInFlight) return;
    if (target === null) {
      this.failing(this.noTarget());
      return this.retryLater();
    }
    if (this.blocked !== null && sameTarget(this.blocked.target, target) && now < this.blocked.untilMs) return this.retryLater();
    this.settleAcross(target);
    while (this.waiting.length > 0 && this.posts < this.limits.maxPostsInFlight) this.post(target, this.takeFrame());
  };

  /** Waiting commands past their deadline get 503 (those in flight get theirs from expireInFlight). */
  private expire(now: number): void {
    if (this.waiting.length === 0 || this.waiting.every((f) => f.deadlineMs > now)) return;
    const keep: Forward[] = [];
    for (const f of this.waiting) {
      if (f.deadlineMs > now) keep.push(f);
      else if (!mayHaveReached(f)) this.refuse(f, `no leader took the write within ${this.options.forwardTimeoutMs} ms (a leader change, or the leader cannot be reached); nothing was applied`);
      else this.refuse(f, this.noAnswerMessage());
    }
    this.waiting = keep;
  }

  /**
   * Commands that may have been applied by an earlier leader: a keyed one goes to the new leader
   * too (a replay if it was applied), an unkeyed one cannot, and gets 503.
   */
  private settleAcross(target: LeaderTarget | 'self'): void {
    const keep: Forward[] = [];
    for (const f of this.waiting) {
      if (f.sentTo === null || (target !== 'self' && sameTarget(f.sentTo, target))) keep.push(f);
      else if (f.command.idempotencyKey !== '' && this.options.keysRemembered) {
        f.sentTo = null;
        f.sentBefore = true;
        keep.push(f);
      } else this.refuse(f, 'the leader changed before it answered; the write may or may not have been applied: retry it with an Idempotency-Key to be safe');
    }
    this.waiting = keep;
  }

  /** This node leads now: what waits runs here. */
  private runHere(): void {
    this.settleAcross('self');
    const waiting = this.waiting;
    this.waiting = [];
    for (const f of waiting) this.options.local.run(f.command, (answer) => this.finish(f, { ...answer, id: f.edgeId }));
  }

  private takeFrame(): Forward[] {
    const frame: Forward[] = [];
    let bytes = 0;
    let n = 0;
    while (n < this.waiting.length && frame.length < this.limits.maxFrameCommands) {
      const f = this.waiting[n]!;
      if (frame.length > 0 && bytes + f.bytes > this.limits.maxFrameBytes) break;
      frame.push(f);
      bytes += f.bytes;
      n++;
    }
    this.waiting = n === this.waiting.length ? [] : this.waiting.slice(n);
    return frame;
  }

  private retryLater(): void {
    if (this.retryTimer !== null || this.stopped) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.flush();
    }, RETRY_MS);
  }

  /**
   * The POST waits for the frame's latest deadline, and each command of it that reaches its own
   * deadline first gets its 503 then (expireInFlight). With the earliest deadline as the POST's
   * timeout, one command near its end (it waited for a leader) cut short a frame of fresh ones:
   * they went again, and a leader slower than what that one had left never answered a frame
   * (found by a review).
   */
  private post(target: LeaderTarget, frame: Forward[]): void {
    this.posts++;
    const writer = new CommandWriter();
    let latestMs = -Infinity;
    for (const f of frame) {
      writer.add(f.command);
      if (f.deadlineMs > latestMs) latestMs = f.deadlineMs;
    }
    const body = frameToBytes(this.options.origin, writer.take());
    // Whole milliseconds, as timers take them.
    const timeoutMs = Math.max(MIN_POST_TIMEOUT_MS, Math.ceil(latestMs - performance.now()));
    const expiry = this.expireInFlight(frame);
    void this.exchange(target, body, timeoutMs).then((outcome) => {
      clearTimeout(expiry.timer);
      this.posts--;
      this.settle(target, frame, outcome);
      this.flush();
    });
  }

  /** Answers 503 to each command of a frame in flight once its own deadline passes (the POST goes on for the others; its answer to this one is then ignored). */
  private expireInFlight(frame: Forward[]): { timer: NodeJS.Timeout | undefined } {
    const expiry: { timer: NodeJS.Timeout | undefined } = { timer: undefined };
    const arm = (): void => {
      const now = performance.now();
      let nextMs = Infinity;
      for (const f of frame) {
        if (f.done) continue;
        if (f.deadlineMs <= now) this.refuse(f, this.noAnswerMessage());
        else if (f.deadlineMs < nextMs) nextMs = f.deadlineMs;
      }
      // Re-armed for what is left, also when a timer fires before its time by performance.now()
      // (a timer counts from the event loop's cached time).
      if (nextMs !== Infinity) expiry.timer = setTimeout(arm, Math.max(1, Math.ceil(nextMs - now)));
    };
    arm();
    return expiry;
  }

  private noAnswerMessage(): string {
    return `the leader did not answer within ${this.options.forwardTimeoutMs} ms; the write may or may not have been applied: retry it with the same Idempotency-Key`;
  }

  /** One POST to the leader's endpoint; never rejects. */
  private exchange(target: LeaderTarget, body: Buffer, timeoutMs: number): Promise<Outcome> {
    return new Promise((resolve) => {
      let settled = false;
      let timer: NodeJS.Timeout | undefined;
      const entry = { target, abort: () => undefined as void, replacedAtMs: null as number | null };
      const done = (outcome: Outcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.exchanges.delete(entry);
        resolve(outcome);
      };
      const secure = target.url.startsWith('https:');
      let req: http.ClientRequest;
      try {
        req = (secure ? https : http).request(target.url + FORWARD_PATH, {
          method: 'POST',
          agent: secure ? this.agents.https : this.agents.http,
          headers: { [FORWARD_SECRET_HEADER]: target.secret, 'content-type': 'application/octet-stream', 'content-length': body.length },
        });
      } catch (error) {
        // A URL that cannot be requested at all (a bad CLUSTER_ADVERTISE_URL): nothing was sent.
        return done({ kind: 'not-sent', reason: errorCode(error) });
      }
      timer = setTimeout(() => req.destroy(Object.assign(new Error('the leader did not answer in time'), { code: TIMED_OUT })), timeoutMs);
      entry.abort = () => req.destroy(Object.assign(new Error('another node leads now'), { code: 'LEADER_REPLACED' }));
      this.exchanges.add(entry);
      // Whether the connection was ever made (a kept-alive one was): a POST cut off while still
      // connecting (a leader machine gone, its SYNs unanswered, until the timeout or the next
      // leader) sent nothing, and counted as "may have been applied", so its unkeyed writes got
      // an ambiguous 503 instead of going to the next leader (found by a review).
      let connected = false;
      req.on('socket', (socket) => {
        if (!socket.connecting) connected = true;
        else socket.once('connect', () => (connected = true));
      });
      req.on('error', (error) => {
        const code = errorCode(error);
        done(!connected || NOT_SENT_CODES.has(code) ? { kind: 'not-sent', reason: code } : { kind: 'lost', reason: code });
      });
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let answerBytes = 0;
        res.on('data', (chunk: Buffer) => {
          answerBytes += chunk.length;
          if (answerBytes <= this.limits.maxAnswerBytes) return void chunks.push(chunk);
          done({ kind: 'too-large', status: res.statusCode ?? 0 });
          chunks.length = 0;
          req.destroy();
        });
        res.on('error', (error) => done({ kind: 'lost', reason: errorCode(error) }));
        // A response cut off before its end (the connection closed) is 'aborted', then 'close'.
        res.on('close', () => {
          if (!res.complete) return done({ kind: 'lost', reason: 'the answer was cut off' });
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status === 200) done({ kind: 'answered', text });
          else if (status === 503 || status === 401) done({ kind: 'refused', status, text });
          else done({ kind: 'failed', status, text });
        });
      });
      req.end(body);
    });
  }

  private settle(target: LeaderTarget, frame: Forward[], outcome: Outcome): void {
    switch (outcome.kind) {
      case 'answered': {
        let answers: Answer[];
        try {
          answers = readAnswers(outcome.text);
        } catch (error) {
          if (!(error instanceof FrameError)) throw error;
          // Not what the leader sent (a bug): as if the answer were lost.
          this.options.log.error({ err: error, leader: target.name }, 'the leader\'s answer to forwarded writes does not parse');
          return this.again(target, frame, true);
        }
        this.ok();
        const byId = new Map<number, Forward>();
        for (const f of frame) byId.set(f.command.id, f);
        for (const answer of answers) {
          const f = byId.get(answer.id);
          if (f === undefined) continue;
          byId.delete(answer.id);
          this.finish(f, { ...answer, id: f.edgeId });
        }
        // Every command is answered; any left over (a bug) goes again, to be answered from the dedup table.
        if (byId.size > 0) this.again(target, [...byId.values()], true);
        return;
      }
      case 'refused':
        // Nothing applied: the node stopped leading (503) or leads in a newer epoch than we know (401).
        this.failing(outcome.status === 401 ? 'the leader refused this node\'s secret (a newer epoch)' : `the node ${target.name} does not take writes now`);
        return this.again(target, frame, false);
      case 'not-sent':
        this.failing(`${outcome.reason} from ${target.url}`);
        return this.again(target, frame, false);
      case 'lost':
        this.failing(`no answer from ${target.url} (${outcome.reason})`);
        return this.again(target, frame, true);
      case 'too-large':
        // Sent again, a keyed write would replay the same answer: nothing to retry that would go better.
        this.options.log.error({ leader: target.name, status: outcome.status, maxAnswerBytes: this.limits.maxAnswerBytes }, 'the leader\'s answer to forwarded writes is longer than the limit');
        for (const f of frame) this.refuse(f, `the cluster leader's answer was longer than ${this.limits.maxAnswerBytes} bytes; the write may or may not have been applied`);
        return;
      case 'failed':
        // The leader took the frame and could not run it (another version, a bug): nothing to
        // retry that would go better. The client may retry.
        this.options.log.error({ leader: target.name, status: outcome.status, answer: outcome.text.slice(0, 500) }, 'the leader refused forwarded writes');
        // 400 (not a frame) and 413 come before any command runs; a 500 (the leader's handler
        // threw) may come after some of the frame's commands ran (found by a review).
        for (const f of frame) this.refuse(f, `the cluster's leader refused the forwarded write (${outcome.status}); ${outcome.status >= 500 ? 'it may or may not have been applied' : 'nothing was applied'}`);
        return;
    }
  }

  /** Puts `frame` back in front of the queue; `mayBeApplied`: the leader may have run it. */
  private again(target: LeaderTarget, frame: Forward[], mayBeApplied: boolean): void {
    const back = frame.filter((f) => !f.done);
    if (this.stopped) {
      for (const f of back) this.refuse(f, stoppingMessage(mayBeApplied || mayHaveReached(f)));
      return;
    }
    if (mayBeApplied) for (const f of back) f.sentTo = target;
    this.waiting = back.concat(this.waiting);
    this.blocked = { target, untilMs: performance.now() + RETRY_MS };
  }

  private noTarget(): string {
    return this.options.noTargetReason?.() ?? 'no leader is known';
  }

  private ok(): void {
    this.lastOkMs = performance.now();
    this.blocked = null;
    if (this.failureLogged) this.options.log.info('the cluster\'s leader can be reached again');
    this.failureLogged = false;
    this.failingSinceMs = null;
  }

  private failing(reason: string): void {
    this.failure = reason;
    if (this.failingSinceMs !== null) return;
    this.failingSinceMs = performance.now();
    this.failureLogged = true;
    this.options.log.warn({ reason }, 'cannot forward writes to the cluster\'s leader now; waiting for one');
  }

  /** POSTs to a leader that another has replaced get REPLACED_LEADER_GRACE_MS more, then are given up on (their writes may have been applied). */
  private giveUpOnReplaced(now: LeaderTarget | 'self' | null): void {
    if (now === null || this.exchanges.size === 0) return;
    const at = performance.now();
    for (const exchange of this.exchanges) {
      if (now !== 'self' && sameTarget(exchange.target, now)) continue;
      exchange.replacedAtMs ??= at;
      if (at - exchange.replacedAtMs >= REPLACED_LEADER_GRACE_MS) exchange.abort();
    }
  }

  /** An idle follower checks now and then that a leader answers (/readyz), with an empty frame. */
  private probe(): void {
    if (this.stopped) return;
    const target = this.options.target();
    this.giveUpOnReplaced(target);
    if (this.probing) return;
    if (target === 'self') return this.ok();
    if (target === null) return this.failing(this.noTarget());
    if (performance.now() - this.lastOkMs < PROBE_IDLE_MS && this.failingSinceMs === null) return;
    if (this.posts > 0) return; // a forward under way tells as much
    this.probing = true;
    const body = frameToBytes(this.options.origin, { text: '', blobs: [] });
    void this.exchange(target, body, PROBE_TIMEOUT_MS).then((outcome) => {
      this.probing = false;
      if (outcome.kind === 'answered') {
        this.ok();
        // Commands waiting for this leader need not wait out the block.
        if (this.waiting.length > 0) this.flush();
      } else if (outcome.kind === 'refused') this.failing(outcome.status === 401 ? 'the leader refused this node\'s secret (a newer epoch)' : `the node ${target.name} does not take writes now`);
      else if (outcome.kind === 'failed') this.failing(`the leader answers ${outcome.status}`);
      else if (outcome.kind === 'too-large') this.failing(`the leader's answer is longer than ${this.limits.maxAnswerBytes} bytes`);
      else this.failing(`${outcome.reason} from ${target.url}`);
    });
  }
}
