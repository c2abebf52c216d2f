// Bodies being received are bounded per HTTP thread (BODIES_HELD_MAX_BYTES), not only one by one:
// until 2026-11-30, 40 connections each sending a 16 MiB mapping slowly held 640 MB for as long as
// they kept sending (a review). A body with a declared length is refused from its head (503,
// Retry-After: 1, before it is read); one without is counted as it comes and refused when it
// passes the limit (503 once the rest is read, connection closed); one body is always taken while
// no other is held.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { KEY_A, startServer, type TestServer } from './helpers/server.ts';

const MAX = 1_000_000;

function open(server: TestServer): Promise<{ socket: Socket; answer: Promise<string> }> {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1', () => {
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      const answer = new Promise<string>((done) => {
        const check = (): void => {
          const text = Buffer.concat(chunks).toString('latin1');
          const end = text.indexOf('\r\n\r\n');
          const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? -1);
          if (end >= 0 && length >= 0 && text.length >= end + 4 + length) done(text.slice(0, end + 4 + length));
        };
        socket.on('data', check);
        socket.on('close', () => done(Buffer.concat(chunks).toString('latin1')));
      });
      resolve({ socket, answer });
    });
    socket.on('error', () => {});
  });
}

const head = (length: number | null) =>
  `POST /collection/c1/products/add HTTP/1.1\r\nHost: x\r\nx-service-key: ${KEY_A}\r\ncontent-type: application/json\r\n${length === null ? 'transfer-encoding: chunked' : `content-length: ${length}`}\r\n\r\n`;
/** A mapping body of exactly `bytes` bytes (its padding is an unknown key: 422, not 503). */
const body = (bytes: number) => {
  const start = '{"products":["p"],"pad":"';
  return start + 'x'.repeat(bytes - start.length - 2) + '"}';
};
const status = (answer: string) => Number(answer.slice(9, 12));

/** `text` in chunks of `pieceChars` (chunked encoding), `gapMs` apart, then the last chunk. */
async function sendChunked(socket: Socket, text: string, pieceChars: number, gapMs: number): Promise<void> {
  for (let at = 0; at < text.length; at += pieceChars) {
    const piece = text.slice(at, at + pieceChars);
    socket.write(`${piece.length.toString(16)}\r\n${piece}\r\n`);
    if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
  }
  socket.write('0\r\n\r\n');
}

for (const threads of ['1', '2']) {
  describe(`bodies held while they arrive (HTTP_THREADS=${threads})`, () => {
    test('a body that would pass BODIES_HELD_MAX_BYTES is refused from its head (503, Retry-After: 1); taken again once the first is answered', async () => {
      // The budget is each edge thread's, and the kernel decides which edge takes a connection:
      // with two edges this test opens 16 holders, so that every edge holds one (the others are
      // refused from their heads already).
      const server = await startServer({ env: { HTTP_THREADS: threads, BODIES_HELD_MAX_BYTES: String(MAX) } });
      try {
        const holders = await Promise.all(Array.from({ length: threads === '1' ? 1 : 16 }, () => open(server)));
        const held = body(900_000);
        for (const h of holders) h.socket.write(head(held.length) + held.slice(0, 100_000));
        await new Promise((resolve) => setTimeout(resolve, 300));
        const second = await open(server);
        const wanted = body(200_000);
        second.socket.write(head(wanted.length));
        const refused = await second.answer;
        assert.equal(status(refused), 503, refused.slice(0, 300));
        assert.match(refused, /\r\nretry-after: 1\r\n/i);
        assert.match(refused, /BODIES_HELD_MAX_BYTES/);
        second.socket.destroy();
        for (const h of holders) h.socket.write(held.slice(100_000));
        const statuses = await Promise.all(holders.map(async (h) => status(await h.answer)));
        assert.ok(statuses.every((s) => s === 422 || s === 503), statuses.join());
        assert.ok(statuses.filter((s) => s === 422).length >= Number(threads), statuses.join());
        if (threads === '1') assert.deepEqual(statuses, [422]);
        for (const h of holders) h.socket.destroy();
        const again = await open(server);
        again.socket.write(head(wanted.length) + wanted);
        assert.equal(status(await again.answer), 422, 'taken once the first body is answered');
        again.socket.destroy();
      } finally {
        await server.stop();
      }
    });
  });
}

test('a chunked body is counted as it comes: past BODIES_HELD_MAX_BYTES beside another body, 503 and the connection closed; alone, it is taken whatever its size', async () => {
  const server = await startServer({ env: { BODIES_HELD_MAX_BYTES: String(MAX) } });
  try {
    const holder = await open(server);
    const held = body(900_000);
    holder.socket.write(head(held.length) + held.slice(0, 100_000));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const chunked = await open(server);
    chunked.socket.write(head(null));
    const big = body(600_000);
    await sendChunked(chunked.socket, big, 50_000, 20);
    const refused = await chunked.answer;
    assert.equal(status(refused), 503, refused.slice(0, 300));
    assert.match(refused, /\r\nretry-after: 1\r\n/i);
    holder.socket.write(held.slice(100_000));
    assert.equal(status(await holder.answer), 422);
    // Alone: a chunked body bigger than the limit (under the route's own) is taken.
    const alone = await open(server);
    alone.socket.write(head(null));
    const bigger = body(1_500_000);
    await sendChunked(alone.socket, bigger, 100_000, 0);
    assert.equal(status(await alone.answer), 422);
    for (const s of [holder, chunked, alone]) s.socket.destroy();
  } finally {
    await server.stop();
  }
});
