// A light, steady track-event load in a child process of its own (so that the bench's own work,
// autocannon or the client's serialisation, does not delay its timers and inflate its latencies):
// `ratePerSec` events a second, each timed from send to answer. It runs until its stdin closes,
// then prints {sent, non200, errors, p50, p99, max} as JSON on stdout.
import { spawn } from 'node:child_process';
import { ROOT } from './servers.ts';

export interface PacedResult {
  sent: number;
  non200: number;
  errors: number;
  p50: number;
  p99: number;
  max: number;
}

const TICK_MS = 5;

async function child(url: string, key: string, did: string, ratePerSec: number): Promise<void> {
  const latencies: number[] = [];
  let non200 = 0;
  let errors = 0;
  let owed = 0;
  const body = JSON.stringify({ did, name: 'product_view', timestamp: 1_700_000_000_000, info: [{ name: 'sku', value: 'A-1', type: 'string' }] });
  const one = async (): Promise<void> => {
    const started = performance.now();
    try {
      const res = await fetch(`${url}/msv_cevt`, { method: 'POST', headers: { 'x-service-key': key, 'content-type': 'application/json' }, body });
      await res.arrayBuffer();
      if (res.status !== 200) non200++;
      latencies.push(performance.now() - started);
    } catch {
      errors++;
    }
  };
  const inFlight = new Set<Promise<void>>();
  const timer = setInterval(() => {
    owed += (ratePerSec * TICK_MS) / 1000;
    for (; owed >= 1; owed--) {
      const p = one().finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
  }, TICK_MS);
  // A line on stdin starts the figures over: what was sent before the measured window (its
  // warm-up) is not counted (a review: a second of a quiet server was a third of the samples of a
  // 2.3 s phase, a ninth of an 8 s one). Requests still in flight then are counted when answered.
  process.stdin.setEncoding('utf8').on('data', () => {
    latencies.length = 0;
    non200 = 0;
    errors = 0;
  });
  await new Promise((resolve) => process.stdin.once('end', resolve));
  clearInterval(timer);
  await Promise.all(inFlight);
  latencies.sort((a, b) => a - b);
  const at = (q: number) => Math.round((latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN) * 10) / 10;
  const result: PacedResult = { sent: latencies.length + errors, non200, errors, p50: at(0.5), p99: at(0.99), max: at(1) };
  process.stdout.write(JSON.stringify(result));
}

/** Starts the load; `measureFromNow()` forgets what was sent so far; `stop()` ends it and resolves with its figures. */
export function startPacedTrack(url: string, key: string, did: string, ratePerSec: number): { measureFromNow(): void; stop(): Promise<PacedResult> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, 'child', url, key, did, String(ratePerSec)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  const closed = new Promise<void>((resolve) => proc.once('close', () => resolve()));
  return {
    measureFromNow() {
      proc.stdin!.write('start\n');
    },
    async stop() {
      proc.stdin!.end();
      await closed;
      return JSON.parse(out) as PacedResult;
    },
  };
}

if (process.argv[2] === 'child' && import.meta.url === `file://${process.argv[1]}`) {
  const [, , , url, key, did, rate] = process.argv;
  await child(url!, key!, did!, Number(rate));
}
