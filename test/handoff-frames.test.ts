// The one message format between edges and the state (src/handoff/): any commands and answers,
// with any characters in their fields (ids, keys and bodies are the client's), come back exactly
// as they were written, through a thread's frame and through the bytes a follower sends; a frame
// cut short or tampered with is refused whole (FrameError), never half read.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { AnswerWriter, CommandWriter, FrameError, readAnswers, readCommands, type Answer, type Command } from '../src/handoff/frames.ts';
import { frameFromBytes, frameToBytes } from '../src/handoff/wire.ts';

const u32 = fc.integer({ min: 0, max: 0xffffffff });
const anyText = fc.string({ unit: 'binary', maxLength: 40 });

const command: fc.Arbitrary<Command> = fc
  .record({
    id: fc.nat(),
    kind: fc.constantFrom('json', 'none', 'bytes', 'raw') as fc.Arbitrary<Command['kind']>,
    route: fc.constantFrom('track_event', 'app_launch', 'batch', 'collection_products_add'),
    workspace: anyText,
    keyHash: anyText,
    param: anyText,
    at: fc.nat(),
    requestId: anyText,
    idempotencyKey: anyText,
    scope: fc.tuple(u32, u32, u32),
    fingerprint: fc.tuple(u32, u32),
    gzip: fc.boolean(),
    text: fc.string({ unit: 'grapheme', maxLength: 200 }),
    bytes: fc.uint8Array({ maxLength: 64 }),
  })
  .map((c) => {
    const withBytes = c.kind === 'bytes' || c.kind === 'raw';
    const keyed = c.idempotencyKey !== '';
    return { ...c, text: withBytes ? '' : c.text, bytes: withBytes ? c.bytes : null, scope: keyed ? c.scope : [0, 0, 0], fingerprint: keyed ? c.fingerprint : [0, 0] } as Command;
  });

const answer: fc.Arbitrary<Answer> = fc
  .record({ id: fc.nat(), status: fc.constantFrom(200, 400, 413, 422, 429, 500, 503), body: fc.string({ unit: 'grapheme', maxLength: 200 }), header: fc.constantFrom('', 'retry-after', 'idempotent-replayed'), headerValue: anyText, close: fc.boolean() })
  .map((a) => ({ ...a, headerValue: a.header === '' ? '' : a.headerValue }));

const plain = (c: Command) => ({ ...c, bytes: c.bytes === null ? null : [...c.bytes] });

test('commands round-trip through a frame and through its bytes, in order', () => {
  fc.assert(
    fc.property(fc.array(command, { maxLength: 20 }), fc.string({ maxLength: 30 }), (commands, origin) => {
      const writer = new CommandWriter();
      for (const c of commands) writer.add(c);
      assert.equal(writer.count, commands.length);
      const frame = writer.take();
      assert.equal(writer.count, 0);
      assert.deepEqual(readCommands(frame).map(plain), commands.map(plain));
      const sent = frameFromBytes(frameToBytes(origin, frame));
      assert.equal(sent.origin, origin);
      assert.deepEqual(readCommands(sent.frame).map(plain), commands.map(plain));
    }),
  );
});

test('answers round-trip through a frame, in order', () => {
  fc.assert(
    fc.property(fc.array(answer, { maxLength: 20 }), (answers) => {
      const writer = new AnswerWriter();
      for (const a of answers) writer.add(a);
      assert.deepEqual(readAnswers(writer.take()), answers);
    }),
  );
});

test('a command kind that is not one of the four, `__proto__` and `toString` included, is refused (it named an object\'s property and left a forward unanswered)', () => {
  const writer = new CommandWriter();
  writer.add({ id: 1, kind: 'json', route: 'track_event', workspace: 'w', keyHash: 'h', param: '', at: 0, requestId: 'r', idempotencyKey: '', scope: [0, 0, 0], fingerprint: [0, 0], gzip: false, text: '{}', bytes: null });
  const frame = writer.take();
  assert.equal(readCommands(frame)[0]!.kind, 'json');
  for (const kind of ['__proto__', 'toString', 'constructor', 'x', '']) {
    const text = frame.text.replace('1:j', `${kind.length}:${kind}`);
    assert.throws(() => readCommands({ text, blobs: [] }), FrameError, kind);
  }
});

test('a frame cut short, or naming a blob it lacks, is refused whole', () => {
  fc.assert(
    fc.property(fc.array(command, { minLength: 1, maxLength: 5 }), fc.nat(), (commands, cutAt) => {
      const writer = new CommandWriter();
      for (const c of commands) writer.add(c);
      const frame = writer.take();
      const cut = cutAt % frame.text.length;
      // Cutting at a command boundary leaves a valid shorter frame; anywhere else must throw.
      let parsed: Command[] | null = null;
      try {
        parsed = readCommands({ text: frame.text.slice(0, cut), blobs: frame.blobs });
      } catch (error) {
        assert.ok(error instanceof FrameError, String(error));
      }
      if (parsed !== null) assert.deepEqual(parsed.map(plain), commands.slice(0, parsed.length).map(plain));
      if (frame.blobs.length > 0) assert.throws(() => readCommands({ text: frame.text, blobs: [] }), FrameError);
      const bytes = frameToBytes('node-a', frame);
      assert.throws(() => frameFromBytes(bytes.subarray(0, bytes.length - 1)), FrameError);
    }),
  );
});
