// JSON lines on stdout (pino). Never log request bodies or keys. Written synchronously: the
// server logs only events (start, snapshots, failures, stop), never per request, and the last
// lines before process.exit() must not be lost.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'intake' }, timestamp: pino.stdTimeFunctions.epochTime }, pino.destination({ dest: 1, sync: true }));
}
