// An edge thread's link to the state thread: each valid write becomes a command, the commands of
// one event-loop turn go as one frame (one postMessage), and each answer finds its request by id.
// Commands and answers keep their order, so a connection's writes are applied in the order it
// sent them, and a write sent after a 200 sees that write (CONTRACT.md, read-your-writes).
import type { MessagePort } from 'node:worker_threads';
import { CommandWriter, readAnswers } from '../handoff/frames.ts';
import type { CommandKind } from '../handoff/frames.ts';
import type { EdgeMessage } from '../handoff/thread-messages.ts';
import type { PendingRequest, StateLink } from '../http/pending-request.ts';
import { commandOf, type KeyHashes } from './command-of.ts';


/** Bytes that own their whole ArrayBuffer, so it can be transferred (a pooled Buffer's cannot). */
export function ownBytes(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && !(bytes.buffer instanceof SharedArrayBuffer) ? bytes : new Uint8Array(bytes);
}

/** Under load a frame waits up to this long for more commands (Node's timers have 1 ms steps). */
const LINGER_MS = 1;
/** A frame that has this many commands goes at once. */
const FLUSH_COMMANDS = 64;

/** How many writes, and how many bytes of their bodies, may wait for the state thread (settings). */
export interface EdgeQueueLimits {
  edgeQueueMax: number;
  edgeQueueBytes: number;
}

interface Waiting {
  request: PendingRequest;
  bytes: number;
}

export class ThreadLink implements StateLink {
  private nextId = 1;
  private readonly waiting = new Map<number, Waiting>();
  private bytesWaiting = 0;
  private readonly writer = new CommandWriter();
  private scheduled = false;
  private timer: NodeJS.Timeout | null = null;
  /** performance.now() of the last frame sent. */
  private flushedAt = -Infinity;

  constructor(
    private readonly port: MessagePort,
    private readonly keys: KeyHashes,
    private readonly limits: EdgeQueueLimits,
  ) {}

  /** Requests sent and not answered yet. */
  get pending(): number {
    return this.waiting.size;
  }

  /**
   * Why a new write must not be taken now, or null. An edge reads and parses writes as fast as
   * its clients send them; with one thread the event loop could not take more than it applied,
   * but an edge can while the state thread falls behind (a stall, a burst of big mappings), and
   * clients that time out and retry add to it. Without a limit that backlog grew until the
   * process ran out of memory (found by a review). Checked before a body is read, and again
   * when it has been: the last write taken may go over the bytes by one body.
   */
  backlog(): string | null {
    if (this.waiting.size >= this.limits.edgeQueueMax) return `this edge thread has ${this.waiting.size} writes waiting for the state thread (EDGE_QUEUE_MAX)`;
    if (this.bytesWaiting >= this.limits.edgeQueueBytes) return `this edge thread has ${this.bytesWaiting} bytes of writes waiting for the state thread (EDGE_QUEUE_BYTES)`;
    return null;
  }

  submit(request: PendingRequest, kind: CommandKind, text: string, bytes: Uint8Array | null): void {
    const id = this.nextId++;
    // UTF-16 units for the text, about its bytes in memory (a Latin-1 string takes one each).
    const size = text.length + (bytes === null ? 0 : bytes.byteLength);
    this.waiting.set(id, { request, bytes: size });
    this.bytesWaiting += size;
    this.writer.add(commandOf(request, id, kind, text, bytes === null ? null : ownBytes(bytes), this.keys.keyHashOf(request.serviceKey)));
    if (this.scheduled) {
      if (this.writer.count >= FLUSH_COMMANDS) this.flush();
      return;
    }
    this.scheduled = true;
    // One frame per turn: the requests of this turn (uWS's poll phase) go together after it.
    // While writes keep coming (a frame went out less than LINGER_MS ago), a little later: each
    // frame costs both threads a wakeup (measured: 5 to 10 µs of CPU each, more than a small
    // write's own hand-off), and the write waits for a journal commit (1 to 3 ms) anyway.
    if (performance.now() - this.flushedAt < LINGER_MS) this.timer = setTimeout(this.flush, LINGER_MS);
    else setImmediate(this.flush);
  }

  /** Sends what waits for the next frame now (before the edge tells the state thread it has settled). */
  flushNow(): void {
    if (this.scheduled) this.flush();
  }

  private readonly flush = (): void => {
    this.flushedAt = performance.now();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.scheduled = false;
    if (this.writer.count === 0) return;
    const frame = this.writer.take();
    const message: EdgeMessage = { t: 'commands', text: frame.text, blobs: frame.blobs };
    this.port.postMessage(message, frame.blobs.map((b) => b.buffer as ArrayBuffer));
  };

  answers(text: string): void {
    for (const answer of readAnswers(text)) {
      const waiting = this.waiting.get(answer.id);
      if (waiting === undefined) continue;
      this.waiting.delete(answer.id);
      this.bytesWaiting -= waiting.bytes;
      waiting.request.answerFromState(answer);
    }
  }
}
