// Waiting on what a server shows from outside: a /metrics sample, or any condition.
import type { TestServer } from './server.ts';

/** A metric's value from /metrics (the first sample with these labels), or null. */
export async function metric(server: TestServer, name: string, labels: Record<string, string> = {}): Promise<number | null> {
  const text = (await server.request('/metrics')).text;
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!(rest.startsWith('{') || rest.startsWith(' '))) continue;
    if (wanted.every((pair) => rest.includes(pair))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return null;
}

/** Polls `probe` every 50 ms until it returns something other than null or false. */
export async function until<T>(what: string, probe: () => Promise<T | null | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
