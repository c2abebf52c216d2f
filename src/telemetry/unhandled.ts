// A stray rejected promise is logged, never the end of a thread: no request and no sink's failure
// may end the process or its delivery thread (without a handler, Node turns an unhandled
// rejection into an uncaught exception). The main thread and the delivery worker install it.
import type { Logger } from './logger.ts';

export function logUnhandledRejections(log: Logger): void {
  process.on('unhandledRejection', (reason) => {
    // lmdb-js starts each write batch with a write of its own whose promise nobody holds; when
    // that batch's commit fails, it is rejected unhandled. The failure itself reaches the puts
    // of that commit (the journal's and the delivery positions' report it), so this one is noise.
    if (reason instanceof Error && 'commitError' in reason) return log.debug({ err: reason }, 'lmdb-js: a commit failed (reported where it matters)');
    log.error({ err: reason }, 'unhandled promise rejection');
  });
}
