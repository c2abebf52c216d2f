// Where the commands of edges go on the state side: the CommandExecutor (this node holds the
// state: a single node, or the leader), or, on a follower, what forwards them to the leader.
import type { Answer, Command } from '../handoff/frames.ts';

export interface CommandSink {
  /** Runs (or forwards) `command`; `reply` gets its answer once, when it is known. */
  run(command: Command, reply: (answer: Answer) => void): void;
}
