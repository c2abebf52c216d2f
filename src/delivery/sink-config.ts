// Which sinks the settings turn on. A sink is off until its URL is set (CONTRACT.md §11). The
// sinks themselves are built in the delivery worker (delivery-worker.ts); the main thread only
// needs to know which are configured (for retention and metrics).
import type { Settings } from '../config/settings.ts';
import type { SinkConfig } from './sink.ts';

export function sinkConfigs(settings: Settings): SinkConfig[] {
  const configs: SinkConfig[] = [];
  if (settings.sinkNatsUrl !== '') configs.push({ kind: 'nats', url: settings.sinkNatsUrl, stream: settings.sinkNatsStream, subjectPrefix: settings.sinkNatsSubjectPrefix });
  if (settings.sinkPostgresUrl !== '') configs.push({ kind: 'postgres', url: settings.sinkPostgresUrl, table: settings.sinkPostgresTable });
  return configs;
}
