// The leader's side of forwarding (issue 21 item 3): a frame of commands a follower validated
// (forward-protocol.ts) is checked (this node leads, the secret is this epoch's), each command is
// run through the state's CommandSink in order, unless the dedup table already saw it (a retry),
// and the POST is answered once every command of the frame has its answer. A new command's key
// is checked again against this node's keys: the follower authenticated it with the keys it last
// read, which stay in force there while it cannot reach PostgreSQL, and a revoked key must stop
// working on every node within 1 s (CONTRACT.md §12). A leader reads the keys (it reaches
// PostgreSQL, or it cannot commit). Runs on the state
// thread: the main thread's HTTP server calls it directly (HTTP_THREADS=1), an edge thread posts
// the bytes to the state thread, which calls it (HTTP_THREADS>1).
import { AnswerWriter, FrameError, readCommands, type Answer, type Command } from '../handoff/frames.ts';
import { frameFromBytes } from '../handoff/wire.ts';
import { ERRORS, errorBody } from '../http/errors.ts';
import type { CommandSink } from '../state/command-sink.ts';
import type { Logger } from '../telemetry/logger.ts';
import { ForwardDedup } from './forward-dedup.ts';
import { judgeForward, sameSecret, type ForwardAdmission, type ForwardReply, type ForwardVerdict } from './forward-protocol.ts';

/** What the endpoint needs of the cluster node. */
export interface ForwardingLeader {
  /** Why writes are not taken here now (not leading, lease not held), or null. */
  refusal(): string | null;
  /** This epoch's secret while leading, else null. */
  forwardSecret(): string | null;
}

/** What the endpoint needs of the keys: the workspace of a key by its sha256 (Authenticator). */
export interface ForwardKeys {
  workspaceOfHash(hash: string): string | null;
}

/** A write whose key no longer names its workspace here: answered as a direct request with that key is (401, nothing applied). */
function unauthorized(id: number): Answer {
  return { id, status: ERRORS.authentication.status, body: ERRORS.authentication.body, header: '', headerValue: '', close: false };
}

export class ForwardEndpoint {
  constructor(
    private readonly node: ForwardingLeader,
    private readonly sink: CommandSink,
    private readonly keys: ForwardKeys,
    private readonly log: Logger,
    private readonly metrics: { forwardFrame(commands: number): void } | null = null,
    private readonly dedup = new ForwardDedup(),
  ) {}

  /**
   * What becomes of a forward with `secret` (judgeForward), from its header alone: the HTTP layer
   * never keeps the body of one that fails (it kept up to the endpoint's limit, 16 MiB or more,
   * for anyone who could reach the port; found by a review): it drains it unkept and answers 401
   * at its end (answered at once, a follower still sending got EPIPE, not the 401; another
   * review). A node not leading drains it too and answers 503, which tells a follower to look for
   * the leader again.
   */
  judge(secret: string): ForwardVerdict {
    return judgeForward(this.admission(), secret);
  }

  /** What judge() judges by, for edge threads (they hold the connections, HTTP_THREADS > 1). */
  admission(): ForwardAdmission {
    return { open: this.node.refusal() !== null, secret: this.node.forwardSecret() };
  }

  /** `secret` is this epoch's (false while not leading). */
  private secretHolds(secret: string): boolean {
    const own = this.node.forwardSecret();
    return own !== null && sameSecret(secret, own);
  }

  handle(secret: string, bytes: Buffer): Promise<ForwardReply> {
    const refusal = this.node.refusal();
    if (refusal !== null) return Promise.resolve({ status: 503, text: errorBody(ERRORS.serviceUnavailable, refusal), retryAfterSeconds: 1 });
    if (!this.secretHolds(secret)) {
      return Promise.resolve({ status: 401, text: errorBody(ERRORS.authentication, 'not this epoch\'s cluster secret'), retryAfterSeconds: null });
    }
    let origin: string;
    let commands: Command[];
    try {
      const decoded = frameFromBytes(bytes);
      origin = decoded.origin;
      commands = readCommands(decoded.frame);
    } catch (error) {
      if (!(error instanceof FrameError)) throw error;
      this.log.error({ err: error }, 'a forwarded frame does not parse (a follower of another version?); nothing of it applied');
      return Promise.resolve({ status: 400, text: errorBody(ERRORS.malformedJson, `not a frame of commands: ${error.message}`), retryAfterSeconds: null });
    }
    // An empty frame is a follower's probe: this node leads and the secret holds.
    if (commands.length === 0) return Promise.resolve({ status: 200, text: '', retryAfterSeconds: null });
    this.metrics?.forwardFrame(commands.length);
    return new Promise((resolve) => {
      const answers: Answer[] = new Array<Answer>(commands.length);
      let open = commands.length;
      const now = performance.now();
      for (let i = 0; i < commands.length; i++) {
        const command = commands[i]!;
        const reply = (answer: Answer): void => {
          answers[i] = answer;
          if (--open > 0) return;
          const writer = new AnswerWriter();
          for (const a of answers) writer.add(a);
          resolve({ status: 200, text: writer.take(), retryAfterSeconds: null });
        };
        // A retry the table saw is answered from it, whatever became of its key: it may have
        // been applied. Only a new command is checked (a map lookup).
        const fresh = this.dedup.take(origin, command.id, reply, now);
        if (fresh === null) continue;
        if (this.keys.workspaceOfHash(command.keyHash) !== command.workspace) fresh(unauthorized(command.id));
        else this.sink.run(command, fresh);
      }
    });
  }
}
