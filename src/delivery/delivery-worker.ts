// The delivery worker thread: every configured sink's loop runs here, off the main thread, so
// reading the journal, serializing records and talking to NATS and PostgreSQL never take time
// from requests. It opens the same LMDB environment (lmdb-js shares it between threads), reads
// the durable position the main thread publishes (durable-signal.ts), saves each sink's position
// in LMDB, and reports progress to the main thread for /metrics. It beats a heartbeat into the
// shared buffer (durable-signal.ts): the main thread restarts a worker whose beats stop.
import { parentPort, workerData } from 'node:worker_threads';
import { openStore } from '../journal/store.ts';
import { createLogger } from '../telemetry/logger.ts';
import { logUnhandledRejections } from '../telemetry/unhandled.ts';
import { DeliveryLoop, type DeliveryOptions, type DeliveryReport, type Positions } from './delivery-loop.ts';
import { DurableSignal, heartbeatMs } from './durable-signal.ts';
import { JournalReader } from './journal-reader.ts';
import { NatsSink } from './nats-sink.ts';
import { readConfirmed, saveConfirmed } from './positions.ts';
import { PostgresSink } from './postgres-sink.ts';
import type { Confirmed, Sink, SinkConfig } from './sink.ts';

export interface DeliveryWorkerData {
  /** This module's URL, for thread-entry.cjs. */
  entry: string;
  dataDir: string;
  logLevel: string;
  /** DurableSignal's buffer. */
  signal: SharedArrayBuffer;
  sinks: SinkConfig[];
  options: DeliveryOptions;
}

export type WorkerMessage =
  | { type: 'state'; sink: string; up: boolean }
  | { type: 'delivered'; sink: string; seq: number; records: number; seconds: number; confirmed: Confirmed }
  | { type: 'position'; sink: string; confirmed: Confirmed }
  | { type: 'stalled'; sink: string }
  | { type: 'stopped' };

export type MainMessage = { type: 'stop' };

function createSink(config: SinkConfig): Sink {
  return config.kind === 'nats' ? new NatsSink(config) : new PostgresSink(config);
}

function main(): void {
  const port = parentPort;
  if (port === null) throw new Error('delivery-worker.ts runs as a worker thread');
  const data = workerData as DeliveryWorkerData;
  const store = openStore(data.dataDir);
  const log = createLogger(data.logLevel).child({ component: 'delivery' });
  logUnhandledRejections(log);
  const post = (message: WorkerMessage): void => port.postMessage(message);
  const report: DeliveryReport = {
    state: (sink, up) => post({ type: 'state', sink, up }),
    delivered: (sink, seq, records, seconds, confirmed) => post({ type: 'delivered', sink, seq, records, seconds, confirmed }),
    position: (sink, confirmed) => post({ type: 'position', sink, confirmed }),
    stalled: (sink) => post({ type: 'stalled', sink }),
  };
  const positions: Positions = {
    get: (id) => readConfirmed(store, id),
    save: (id, confirmed) => saveConfirmed(store, id, confirmed),
  };
  // Room for two full delivery batches: sinks that keep up read the same records one after the other.
  const reader = new JournalReader(store.journal, 2 * data.options.batchRecords, 2 * data.options.batchBytes);
  const durable = new DurableSignal(data.signal);
  durable.beat();
  setInterval(() => durable.beat(), heartbeatMs(data.options.stallTimeoutMs));
  const loops = data.sinks.map((config) => new DeliveryLoop(createSink(config), reader, durable, positions, data.options, report, log));
  for (const loop of loops) loop.start();
  port.on('message', (message: MainMessage) => {
    if (message.type !== 'stop') return;
    void Promise.all(loops.map((loop) => loop.stop())).then(() => post({ type: 'stopped' }));
  });
}

main();
