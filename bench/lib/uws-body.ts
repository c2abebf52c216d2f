// Body reading for the yardstick servers: collects the chunks uWS hands over (copying all but
// the last, which uWS reclaims after the callback) and gives the whole body once.
import type { HttpResponse } from 'uWebSockets.js';

export function readBody(res: HttpResponse, onBody: (body: Buffer) => void): void {
  let chunks: Buffer[] | null = null;
  res.onData((chunk, isLast) => {
    if (!isLast) {
      (chunks ??= []).push(Buffer.from(chunk.slice(0)));
      return;
    }
    const last = Buffer.from(chunk);
    onBody(chunks === null ? last : Buffer.concat([...chunks, last]));
  });
}
