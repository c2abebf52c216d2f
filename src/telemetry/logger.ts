// JSON lines on stdout (pino). Never log request bodies or keys.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'intake' }, timestamp: pino.stdTimeFunctions.epochTime });
}
