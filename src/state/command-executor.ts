// The state thread's door: runs the commands edges send (edge threads of this process, or, on the
// leader, followers' forwards), in the order they come, through the routes' state halves
// (`apply`, or `handleRaw` for a big mapping's raw body). Each answer goes to `reply` once it is
// known (a 200 once durable), for the sender to send on.
import type { Workspaces } from '../actors/workspace.ts';
import type { Answer, Command } from '../handoff/frames.ts';
import { bodyLimitBytes, parseJson, parseJsonBytes } from '../http/body.ts';
import type { WriteRoute } from '../http/pending-request.ts';
import type { WriteGate } from '../http/write-gate.ts';
import type { Settings } from '../config/settings.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { CommandSink } from './command-sink.ts';
import { StateRequest } from './state-request.ts';

export class CommandExecutor implements CommandSink {
  private readonly routes = new Map<string, WriteRoute>();

  constructor(
    routes: readonly WriteRoute[],
    private readonly workspaces: Workspaces,
    private readonly gate: WriteGate,
    private readonly settings: Pick<Settings, 'bodyLimitBytes' | 'mappingBodyLimitBytes' | 'batchBodyLimitBytes'>,
    private readonly log: Logger,
  ) {
    for (const route of routes) this.routes.set(route.name, route);
  }

  run(command: Command, reply: (answer: Answer) => void): void {
    const route = this.routes.get(command.route);
    if (route === undefined) {
      this.log.error({ route: command.route, reqId: command.requestId }, 'a command names no write route');
      reply({ id: command.id, status: 500, body: '{"type":"InternalError","message":"internal error"}', header: '', headerValue: '', close: false });
      return;
    }
    const limitBytes = route.limit === 'none' ? 0 : bodyLimitBytes(route.limit, this.settings);
    const request = new StateRequest(command, route, this.workspaces.get(command.workspace), limitBytes, reply, this.log);
    // The edge checked the gate before it read the body; the role or the journal may have changed since.
    const refusal = this.gate.refusal();
    if (refusal !== null) return request.refused(refusal);
    try {
      switch (command.kind) {
        case 'json':
          return route.apply(request, parseJson(command.text, route.nestedBodyDepth) as Record<string, unknown>);
        case 'none':
          return route.apply(request, null);
        case 'bytes': {
          const raw = Buffer.from(command.bytes!.buffer, command.bytes!.byteOffset, command.bytes!.byteLength);
          const parsed = parseJsonBytes(raw, route.nestedBodyDepth);
          request.rawBody = raw;
          request.rawSlices = parsed.slices;
          try {
            return route.apply(request, parsed.value as Record<string, unknown>);
          } finally {
            request.rawBody = null;
            request.rawSlices = null;
          }
        }
        case 'raw':
          if (route.handleRaw === undefined) throw new Error(`route ${route.name} takes no raw body`);
          return route.handleRaw(request, Buffer.from(command.bytes!.buffer, command.bytes!.byteOffset, command.bytes!.byteLength));
        default:
          // readCommands() admits the four kinds only; a command must get an answer whatever it is
          // (a forward without one waits out the follower's deadline), so: crashed(), a 500.
          throw new Error(`unknown command kind ${String(command.kind satisfies never)}`);
      }
    } catch (error) {
      request.crashed(error);
    }
  }
}
