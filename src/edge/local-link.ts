// The StateLink of a thread that does the edge work and hands each valid write to a CommandSink in
// the same thread, as a command, without encoding it (HTTP_THREADS=1 on a cluster follower: the
// sink forwards it to the leader). Each answer goes straight back to its request.
import type { CommandKind } from '../handoff/frames.ts';
import type { PendingRequest, StateLink } from '../http/pending-request.ts';
import type { CommandSink } from '../state/command-sink.ts';
import { commandOf, type KeyHashes } from './command-of.ts';

export class LocalLink implements StateLink {
  private nextId = 1;

  constructor(
    private readonly sink: CommandSink,
    private readonly keys: KeyHashes,
  ) {}

  submit(request: PendingRequest, kind: CommandKind, text: string, bytes: Uint8Array | null): void {
    this.sink.run(commandOf(request, this.nextId++, kind, text, bytes, this.keys.keyHashOf(request.serviceKey)), (answer) => request.answerFromState(answer));
  }
}
