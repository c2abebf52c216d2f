// Track events at 256 connections against intake (`npm start` settings, fresh data directory) and
// against the bare uWS yardstick, in one run; prints both and the ratio.
//   npm run bench:track -- [durationSec]
import { BENCH_KEY, startBareUws, startIntake } from './lib/servers.ts';
import { runLoad, type LoadResult } from './lib/load.ts';
import { LAUNCH_BODY } from './lib/bodies.ts';
import { runBench } from './lib/report.ts';

const durationSec = Number(process.argv[2] ?? 10);
const connections = Number(process.argv[3] ?? 256);

function row(name: string, r: LoadResult): string {
  return `| ${name} | ${Math.round(r.requestsPerSec)} | ${r.p50Ms} | ${r.p99Ms} | ${r.non2xx} | ${r.errors} |`;
}

async function main(): Promise<void> {
  const bare = await startBareUws();
  const eventBody = (did: string) =>
    JSON.stringify({ did, name: 'product_view', timestamp: 1700000000000, info: [{ name: 'sku', value: 'A-1', type: 'string' }, { name: 'qty', value: 2, type: 'integer' }] });
  let bareResult: LoadResult;
  try {
    bareResult = await runLoad({ url: bare.url, path: '/msv_cevt', body: eventBody('x'.repeat(21)), connections, durationSec, title: 'bare uWS' });
  } finally {
    await bare.stop();
  }

  const intake = await startIntake();
  let intakeResult: LoadResult;
  try {
    const launch = await fetch(`${intake.url}/mcrs_appl_v1`, {
      method: 'POST',
      headers: { 'x-service-key': BENCH_KEY, 'content-type': 'application/json' },
      body: LAUNCH_BODY,
    });
    const { did } = (await launch.json()) as { did: string };
    intakeResult = await runLoad({
      url: intake.url,
      path: '/msv_cevt',
      body: eventBody(did),
      headers: { 'x-service-key': BENCH_KEY },
      connections,
      durationSec,
      title: 'intake',
    });
  } finally {
    await intake.stop();
  }

  process.stdout.write(
    [
      `track event, ${connections} connections, ${durationSec} s, ${new Date().toISOString()}`,
      '',
      '| server | req/s | p50 ms | p99 ms | non-2xx | errors |',
      '|---|---|---|---|---|---|',
      row('bare uWS (parse JSON, answer)', bareResult),
      row('intake (validate, actor, group-committed fsync)', intakeResult),
      '',
      `throughput ratio intake / bare uWS without LMDB (a quick check, not the CPU-per-request figure of npm run bench): ${(intakeResult.requestsPerSec / bareResult.requestsPerSec).toFixed(3)}`,
      '',
    ].join('\n'),
  );
}

runBench(main);
