// An edge thread's side of the leader's internal endpoint (cluster/forward-protocol.ts), with
// HTTP_THREADS > 1: the edge reads a follower's frame and posts it, with its secret, to the state
// thread, which checks and runs it (cluster/forward-endpoint.ts) and posts the answer back.
import type { MessagePort } from 'node:worker_threads';
import type { ForwardReply } from '../cluster/forward-protocol.ts';
import type { EdgeMessage } from '../handoff/thread-messages.ts';
import { ownBytes } from './thread-link.ts';

/** Frames posted to the state thread and not answered yet, at most (followers send a few at a time each). */
const MAX_WAITING = 256;

export class ForwardRelay {
  private nextId = 1;
  private readonly waiting = new Map<number, (reply: ForwardReply) => void>();

  constructor(private readonly port: MessagePort) {}

  handle(secret: string, bytes: Buffer): Promise<ForwardReply> {
    if (this.waiting.size >= MAX_WAITING) {
      return Promise.resolve({ status: 503, text: '{"type":"ServiceUnavailableError","message":"too many forwarded frames are being run"}', retryAfterSeconds: 1 });
    }
    const id = this.nextId++;
    const own = ownBytes(bytes);
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      const message: EdgeMessage = { t: 'forward', id, secret, bytes: own };
      this.port.postMessage(message, [own.buffer as ArrayBuffer]);
    });
  }

  /** The state thread's answer to frame `id`. */
  answered(id: number, reply: ForwardReply): void {
    const done = this.waiting.get(id);
    this.waiting.delete(id);
    done?.(reply);
  }
}
