// The one message format between the edge and the state (issue 21): a validated write travels as a
// command, its answer comes back as an answer. Edge threads post frames to the state thread
// (edge-link.ts); a follower posts the same frames to the leader's internal endpoint over HTTP
// (wire.ts). Commands are batched: one frame per event-loop turn of the sender.
//
// A frame is one string of length-prefixed fields (`<length>:<text>`, the length in UTF-16 code
// units), plus the byte bodies some commands carry (a batch, a big mapping for the workers) as
// separate blobs. Strings, not objects: posting one string to another thread is one copy, and
// structured-cloning an array of objects costs several times that (measured in bench/handoff.ts).
// Any field may hold any character (ids are the client's), so nothing is delimited by a character.

/**
 * What the state does with a command's body:
 * - `json`: JSON text the edge validated: parsed and applied (`text`);
 * - `none`: a route without a body (DELETE): applied;
 * - `bytes`: validated JSON as bytes, for a route that also reads the raw bytes (POST /batch);
 * - `raw`: bytes the edge did not parse, for the route's own raw path (a big mapping: the
 *   mapping workers parse and validate it), still `encoding`-encoded.
 */
export type CommandKind = 'json' | 'none' | 'bytes' | 'raw';

const KIND_CODES: Record<CommandKind, string> = { json: 'j', none: 'n', bytes: 'b', raw: 'r' };
// A Map, not an object: a kind field such as `__proto__` or `toString` must not name anything.
const KINDS = new Map<string, CommandKind>([['j', 'json'], ['n', 'none'], ['b', 'bytes'], ['r', 'raw']]);

export interface Command {
  /** Unique per sender (an edge thread, a follower's process): an answer names its command. */
  id: number;
  kind: CommandKind;
  /** The write route's name (metrics label), e.g. "track_event", "batch". */
  route: string;
  workspace: string;
  /**
   * sha256 (hex) of the x-service-key the edge authenticated the write with, the form the key
   * stores hold keys in: a leader checks a follower's forwarded write against its own keys
   * (forward-endpoint.ts), since the follower's may be stale (it cannot reach PostgreSQL).
   */
  keyHash: string;
  /** The decoded `:id` ('' for routes without one). */
  param: string;
  /** Server receive time, Unix ms, taken by the edge (journaled as `at`). */
  at: number;
  requestId: string;
  /** The Idempotency-Key ('' for none), its scope hash and the body fingerprint (claim.ts). */
  idempotencyKey: string;
  scope: readonly [number, number, number];
  fingerprint: readonly [number, number];
  /** `raw` only: the body's content-encoding. */
  gzip: boolean;
  /** `json`: the body's text. */
  text: string;
  /** `bytes`, `raw`: the body. */
  bytes: Uint8Array | null;
}

export interface Answer {
  id: number;
  status: number;
  /** The JSON body. */
  body: string;
  /** At most one extra header ('' for none): retry-after, idempotent-replayed. */
  header: string;
  headerValue: string;
  /** Close the connection after this answer (a 413). */
  close: boolean;
}

/** Commands (with their blobs) or answers, ready to post to a thread or send to a node. */
export interface Frame {
  text: string;
  blobs: Uint8Array[];
}

/** No field is longer than a frame can be (a batch body is at most 64 MiB). */
const MAX_FIELD_LENGTH = 1 << 30;

function field(value: string): string {
  return value.length + ':' + value;
}

/** Reads length-prefixed fields from a frame's text. */
class FieldReader {
  private at = 0;
  constructor(private readonly text: string) {}

  get done(): boolean {
    return this.at >= this.text.length;
  }

  string(): string {
    const text = this.text;
    let length = 0;
    let c = text.charCodeAt(this.at++);
    while (c !== 58) {
      // NaN (past the end) fails both comparisons: test for a digit, not for a non-digit.
      if (!(c >= 48 && c <= 57) || length > MAX_FIELD_LENGTH) throw new FrameError(`bad field length at ${this.at - 1}`);
      length = length * 10 + (c - 48);
      c = text.charCodeAt(this.at++);
    }
    const end = this.at + length;
    if (end > text.length) throw new FrameError('a field runs past the end of the frame');
    const value = text.slice(this.at, end);
    this.at = end;
    return value;
  }

  number(): number {
    const value = Number(this.string());
    if (!Number.isFinite(value)) throw new FrameError('a number field is not a number');
    return value;
  }
}

/** A frame that does not parse: a bug or a foreign sender; nothing of it is applied. */
export class FrameError extends Error {}

/** Collects the commands of one turn into one frame. */
export class CommandWriter {
  private text = '';
  private blobs: Uint8Array[] = [];
  count = 0;

  add(c: Command): void {
    let blob = -1;
    if (c.bytes !== null) {
      blob = this.blobs.length;
      this.blobs.push(c.bytes);
    }
    this.text +=
      field(String(c.id)) +
      field(KIND_CODES[c.kind]) +
      field(c.route) +
      field(c.workspace) +
      field(c.keyHash) +
      field(c.param) +
      field(String(c.at)) +
      field(c.requestId) +
      field(c.idempotencyKey) +
      (c.idempotencyKey === '' ? '' : field(`${c.scope[0]},${c.scope[1]},${c.scope[2]},${c.fingerprint[0]},${c.fingerprint[1]}`)) +
      field(c.gzip ? '1' : '0') +
      field(c.text) +
      field(String(blob));
    this.count++;
  }

  /** The frame so far; the writer starts empty again. */
  take(): Frame {
    const frame = { text: this.text, blobs: this.blobs };
    this.text = '';
    this.blobs = [];
    this.count = 0;
    return frame;
  }
}

const NO_SCOPE: readonly [number, number, number] = [0, 0, 0];
const NO_PRINT: readonly [number, number] = [0, 0];

/** Every command of a frame, in order. Throws FrameError on a malformed frame (before any is returned). */
export function readCommands(frame: Frame): Command[] {
  const r = new FieldReader(frame.text);
  const out: Command[] = [];
  while (!r.done) {
    const id = r.number();
    const kind = KINDS.get(r.string());
    if (kind === undefined) throw new FrameError('unknown command kind');
    const route = r.string();
    const workspace = r.string();
    const keyHash = r.string();
    const param = r.string();
    const at = r.number();
    const requestId = r.string();
    const idempotencyKey = r.string();
    let scope = NO_SCOPE;
    let fingerprint = NO_PRINT;
    if (idempotencyKey !== '') {
      const words = r.string().split(',').map(Number);
      if (words.length !== 5 || words.some((w) => !Number.isInteger(w) || w < 0 || w > 0xffffffff)) throw new FrameError('bad idempotency hashes');
      scope = [words[0]!, words[1]!, words[2]!];
      fingerprint = [words[3]!, words[4]!];
    }
    const gzip = r.string() === '1';
    const text = r.string();
    const blob = r.number();
    let bytes: Uint8Array | null = null;
    if (blob >= 0) {
      bytes = frame.blobs[blob] ?? null;
      if (bytes === null) throw new FrameError('a command names a blob the frame does not hold');
    }
    if ((kind === 'bytes' || kind === 'raw') !== (bytes !== null)) throw new FrameError(`a ${kind} command ${bytes === null ? 'without' : 'with'} bytes`);
    out.push({ id, kind, route, workspace, keyHash, param, at, requestId, idempotencyKey, scope, fingerprint, gzip, text, bytes });
  }
  return out;
}

/** Collects answers into one frame (answers carry no blobs). */
export class AnswerWriter {
  private text = '';
  count = 0;

  add(a: Answer): void {
    this.text += field(String(a.id)) + field(String(a.status)) + field(a.header) + (a.header === '' ? '' : field(a.headerValue)) + field(a.close ? '1' : '0') + field(a.body);
    this.count++;
  }

  take(): string {
    const text = this.text;
    this.text = '';
    this.count = 0;
    return text;
  }
}

export function readAnswers(text: string): Answer[] {
  const r = new FieldReader(text);
  const out: Answer[] = [];
  while (!r.done) {
    const id = r.number();
    const status = r.number();
    const header = r.string();
    const headerValue = header === '' ? '' : r.string();
    const close = r.string() === '1';
    const body = r.string();
    out.push({ id, status, body, header, headerValue, close });
  }
  return out;
}
