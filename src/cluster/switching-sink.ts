// The state side of a cluster node's edges: while this node leads, their commands run here (the
// CommandExecutor); while it follows, they go to the leader (leader-link.ts). Roles change at
// run time, so the choice is made per command.
import type { Answer, Command } from '../handoff/frames.ts';
import type { CommandSink } from '../state/command-sink.ts';

export class SwitchingSink implements CommandSink {
  constructor(
    private readonly leading: () => boolean,
    private readonly here: CommandSink,
    private readonly leader: CommandSink,
  ) {}

  run(command: Command, reply: (answer: Answer) => void): void {
    (this.leading() ? this.here : this.leader).run(command, reply);
  }
}
