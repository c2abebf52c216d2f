// Memory of a running server from outside: anonymous RSS from /proc, and the V8 heap right after
// its last major GC (a metric the server exports), once it has settled.
import { readFileSync } from 'node:fs';
import type { RunningServer } from './servers.ts';

export function rssAnonBytes(pid: number): number {
  const kb = /^RssAnon:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kb) * 1024;
}

/** A metric's value (the sample without labels). */
export async function metricValue(server: RunningServer, name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return Number(new RegExp(`^${name} ([0-9.e+]+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}

/**
 * Heap and RSS once the server has been idle long enough for V8 to collect (its memory reducer
 * runs a major GC a few seconds after allocation stops).
 */
export async function settledMemory(server: RunningServer): Promise<{ heap: number; rss: number }> {
  const before = await metricValue(server, 'intake_heap_used_after_major_gc_bytes');
  for (let waited = 0; waited < 60_000; waited += 1000) {
    await new Promise((r) => setTimeout(r, 1000));
    const heap = await metricValue(server, 'intake_heap_used_after_major_gc_bytes');
    if (heap !== before && waited >= 5000) break;
  }
  await new Promise((r) => setTimeout(r, 2000));
  return { heap: await metricValue(server, 'intake_heap_used_after_major_gc_bytes'), rss: rssAnonBytes(server.child.pid!) };
}
