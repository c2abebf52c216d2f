// A command from an edge (a thread of this process, or a follower node) as the state thread runs
// it: the same WriteRequest/Reply the routes and the actors speak to for a request sent alone
// (write-call.ts), answered by handing an Answer back to the edge that holds the client's socket.
import type { Workspace } from '../actors/workspace.ts';
import type { Answer, Command } from '../handoff/frames.ts';
import type { BatchRequest } from '../http/batch.ts';
import type { WriteRoute } from '../http/pending-request.ts';
import type { SendOptions } from '../http/respond.ts';
import { WriteCall } from '../http/write-call.ts';
import { IdempotencyClaim } from '../idempotency/claim.ts';
import type { Logger } from '../telemetry/logger.ts';

export class StateRequest extends WriteCall implements BatchRequest {
  readonly workspace: Workspace;
  readonly id: number;
  /** A batch's tokens were taken by the edge (rate limits are the edge's work). */
  readonly serviceKey = '';
  private readonly sink: (answer: Answer) => void;
  private done = false;

  constructor(command: Command, route: WriteRoute, workspace: Workspace, limitBytes: number, sink: (answer: Answer) => void, log: Logger) {
    const claim = command.idempotencyKey === '' ? null : IdempotencyClaim.fromParts(command.idempotencyKey, command.scope, command.fingerprint);
    super(route, command.param, command.at, limitBytes, command.gzip ? 'gzip' : 'identity', claim, command.requestId, log);
    this.id = command.id;
    this.workspace = workspace;
    this.sink = sink;
  }

  protected answer(code: number, _statusLine: string, body: string, options?: SendOptions): void {
    if (this.done) return;
    this.done = true;
    const header = options?.header;
    this.sink({ id: this.id, status: code, body, header: header?.[0] ?? '', headerValue: header?.[1] ?? '', close: options?.close ?? false });
  }
}
