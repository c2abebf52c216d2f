// A separate process that loops 100,000-id mapping requests (add, then remove) until it gets
// SIGTERM, then prints what it got done as one JSON line. It runs apart from the load generator
// that measures latency, so its own allocations (1.3 MB bodies) cannot pause that measurement.
// Once its first request is answered it prints the line "started": its own start-up (tsx, building
// the body) is over by then, and the caller starts measuring only after that.
//   node --import tsx bench/lib/mapping-client.ts <url> <key> <collection> <ids>
const [url, key, collection, idCount] = process.argv.slice(2) as [string, string, string, string];
const body = JSON.stringify({ products: Array.from({ length: Number(idCount) }, (_, k) => `p${k}`) });
let stopped = false;
let ids = 0;
let requests = 0;
let failures = 0;
const started = performance.now();
process.on('SIGTERM', () => (stopped = true));

for (let n = 0; !stopped; n++) {
  const res = await fetch(`${url}/collection/${collection}/products/${n % 2 === 0 ? 'add' : 'remove'}`, {
    method: 'POST',
    headers: { 'x-service-key': key, 'content-type': 'application/json' },
    body,
  });
  await res.arrayBuffer();
  if (res.status === 200) {
    ids += Number(idCount);
    requests++;
  } else failures++;
  if (n === 0) process.stdout.write('started\n');
}
process.stdout.write(`${JSON.stringify({ ids, requests, failures, seconds: (performance.now() - started) / 1000 })}\n`);
