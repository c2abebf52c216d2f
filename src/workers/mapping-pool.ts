// The piscina pool that takes big mapping bodies off the main thread. The body's bytes are
// transferred to the worker (not copied); a task that takes too long is aborted, a worker that
// dies (crash, heap limit) is replaced by piscina, and either way that request gets a 500.
import { Piscina } from 'piscina';
import type { Encoding } from '../http/body.ts';
import type { MappingTask, MappingTaskResult } from './mapping-result.ts';
import { moduleUrl } from './threads.ts';

export interface MappingPoolSettings {
  mappingWorkers: number;
  mappingWorkerThresholdBytes: number;
  mappingWorkerTimeoutMs: number;
  mappingWorkerMaxMemoryMb: number;
}

/** How much lower the workers' scheduling priority is than the main thread's (Linux nice). */
const WORKER_NICE_INCREMENT = 10;

/** A body's own ArrayBuffer (so it can be transferred), copying only when the Buffer is a view. */
function ownBuffer(body: Buffer): ArrayBuffer {
  const whole = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength;
  return (whole ? body.buffer : body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength)) as ArrayBuffer;
}

export class MappingPool {
  private readonly pool: Piscina<MappingTask, MappingTaskResult> | null;
  private readonly settings: MappingPoolSettings;

  constructor(settings: MappingPoolSettings) {
    this.settings = settings;
    const threads = settings.mappingWorkers;
    this.pool =
      threads === 0
        ? null
        : new Piscina<MappingTask, MappingTaskResult>({
            filename: moduleUrl('./mapping-task', import.meta.url),
            minThreads: threads,
            maxThreads: threads,
            idleTimeout: Number.POSITIVE_INFINITY,
            resourceLimits: { maxOldGenerationSizeMb: settings.mappingWorkerMaxMemoryMb },
            // Parsing a big body is never urgent; answering small requests is. On a busy machine
            // the OS gives the event loop the core first.
            niceIncrement: WORKER_NICE_INCREMENT,
          });
  }

  get enabled(): boolean {
    return this.pool !== null;
  }

  /** Big bodies, and every gzip one (inflating can be heavy whatever the wire size), go to a worker. */
  shouldOffload(sizeBytes: number, encoding: Encoding): boolean {
    return this.pool !== null && (sizeBytes > this.settings.mappingWorkerThresholdBytes || encoding === 'gzip');
  }

  parse(body: Buffer, encoding: Encoding, limitBytes: number, maxItems: number, fingerprint: boolean): Promise<MappingTaskResult> {
    if (this.pool === null) return Promise.reject(new Error('the mapping worker pool is off'));
    const bytes = ownBuffer(body);
    return this.pool.run(
      { bytes, gzip: encoding === 'gzip', limitBytes, maxItems, fingerprint },
      { transferList: [bytes], signal: AbortSignal.timeout(this.settings.mappingWorkerTimeoutMs) },
    );
  }

  async close(): Promise<void> {
    await this.pool?.destroy();
  }
}
