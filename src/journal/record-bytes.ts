// Journal records as bytes, in LMDB (store.ts) and in PostgreSQL (cluster/record-codec.ts).
// Written here as msgpack with msgpackr's record extension, so msgpackr reads it as it reads the
// journals its own encoder wrote before: an object's key list is defined once per batch
// (`0xd4 0x72 id` then the keys) and each object of that shape is its id byte then its values.
// Besides objects: arrays, strings, numbers, booleans, nil, undefined, byte strings (an
// Idempotency-Key's hashes) and the packed id lists of big mappings (extension 0x49,
// packed-ids.ts).
//
// Why not msgpackr's own encoder: it writes every string shorter than 64 characters with a
// JavaScript loop over charCodeAt, and in the running server that loop ran 5-7 times slower than
// in a process doing nothing else: 7.3-7.8 µs of main-thread CPU per product record in the LMDB
// put, against 1.0-1.9 µs for the same records elsewhere (one Packr per build of msgpackr shares
// its code and type feedback; the strings a server holds come in many internal representations,
// and a microbenchmark that mixes them into the records makes that loop 2x slower for good).
// Here a short ASCII string is written by a loop that calls charCodeAt through a reference to
// it (no lookup on the string, so the strings' representations do not matter), and every other
// string by Buffer's native UTF-8 writer.
import { Unpackr } from 'msgpackr';
import { PackedIds } from './packed-ids.ts';

/** msgpack extension type of a packed id list (packed-ids.ts). */
const EXT_PACKED_IDS = 0x49;
/** The scratch buffer starts here and doubles; a batch's bytes are copied out of it. */
const INITIAL_BYTES = 64 * 1024;
/** A scratch buffer grown past this (a batch of big mappings) is not kept for the next batch. */
const MAX_KEPT_BYTES = 4 * 1024 * 1024;
/**
 * msgpackr's one-byte record ids: 0x40 + 0..63. Past 64 shapes in one batch the ids are used
 * again, each defined anew (msgpackr's reader takes the newest definition of an id, as msgpackr's
 * encoder does the same). Every object is a record, never a msgpack map: readers without
 * `mapsAsObjects` (the previous release's, lmdb-js's default) would read a map as a Map.
 */
const FIRST_RECORD_ID = 0x40;
const MAX_RECORD_IDS = 64;
/**
 * Key lists seen, as a tree of keys (one node per key prefix), kept across batches so that a
 * shape is found with one map lookup per key. Bounded: past this many nodes, an object of a new
 * shape (free-form attribute objects, say) has its key list written out each time.
 */
const MAX_SHAPE_NODES = 4096;
/**
 * The shapes written last, checked first: an object's keys compared with a recent shape's keys
 * (property names are internalized strings, so mostly pointer compares) instead of one map lookup
 * per key down the tree. An app launch record is three objects of 7, 3 and 12 keys; the lookups
 * were about 0.5 µs of it in the server (profiled).
 */
const RECENT_SHAPES = 8;
/** ASCII strings up to this many units are written by a loop (str 8 header), longer by Buffer's native writer. */
const SHORT_ASCII_UNITS = 96;
/** Byte strings up to this long are copied by a loop. */
const SHORT_COPY_BYTES = 32;

interface Shape {
  readonly next: Map<string, Shape>;
  /** The batch (encode call) this shape was last defined in, and its id there. */
  batch: number;
  id: number;
  /** Its keys as a msgpack array, once it was written. */
  keysBytes: Uint8Array | null;
  /** Its key list, once an object of this shape was written (for the recent-shapes check). */
  keys: readonly string[] | null;
}

const charCodeAt = String.prototype.charCodeAt;

const newShape = (): Shape => ({ next: new Map(), batch: 0, id: 0, keysBytes: null, keys: null });

/** Buffer's native UTF-8 writer without `write`'s argument checks (not in Node's typings). */
type Utf8Writer = Buffer & { utf8Write(text: string, offset: number, length: number): number };

/** Writes values as journal bytes; one per module (encodeRecords), or one of a test's own. */
export class RecordWriter {
  private buffer: Buffer = Buffer.allocUnsafe(INITIAL_BYTES);
  private readonly shapes = newShape();
  private shapeNodes = 1;
  /** Up to RECENT_SHAPES shapes, each with its keys set; replaced in turn. */
  private readonly recent: Shape[] = [];
  private nextRecent = 0;
  /** Counts encode calls: a shape defined in an earlier batch is defined again. */
  private batch = 0;
  private nextRecordId = 0;
  /** The shape each record id was last given to (null: an uncached key list). */
  private readonly idOwners: Array<Shape | null> = [];
  private view = new DataView(this.buffer.buffer, this.buffer.byteOffset, this.buffer.byteLength);
  private at = 0;

  encode(value: unknown): Buffer {
    this.at = 0;
    this.batch++;
    this.nextRecordId = 0;
    this.value(value);
    // A copy of its own: lmdb-js writes a value from the buffer it is given, after this returns.
    const bytes = Buffer.from(this.buffer.subarray(0, this.at));
    if (this.buffer.length > MAX_KEPT_BYTES) this.use(Buffer.allocUnsafe(INITIAL_BYTES));
    return bytes;
  }

  private use(buffer: Buffer): void {
    this.buffer = buffer;
    this.view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  }

  private room(bytes: number): void {
    if (this.at + bytes <= this.buffer.length) return;
    let size = this.buffer.length * 2;
    while (size < this.at + bytes) size *= 2;
    const bigger = Buffer.allocUnsafe(size);
    this.buffer.copy(bigger, 0, 0, this.at);
    this.use(bigger);
  }

  private value(value: unknown): void {
    switch (typeof value) {
      case 'string':
        return this.string(value);
      case 'number':
        return this.number(value);
      case 'boolean':
        this.room(1);
        this.buffer[this.at++] = value ? 0xc3 : 0xc2;
        return;
      case 'undefined':
        // msgpackr's encoding of undefined (fixext 1, type 0), which it reads back as undefined.
        this.room(3);
        this.buffer[this.at++] = 0xd4;
        this.buffer[this.at++] = 0;
        this.buffer[this.at++] = 0;
        return;
      case 'object':
        if (value === null) {
          this.room(1);
          this.buffer[this.at++] = 0xc0;
        } else if (Array.isArray(value)) this.array(value);
        else if (value instanceof PackedIds) this.extension(EXT_PACKED_IDS, value.bytes);
        else if (value instanceof Uint8Array) this.bytes(value);
        else this.object(value as Record<string, unknown>);
        return;
      default:
        throw new TypeError(`a journal record cannot hold a ${typeof value}`);
    }
  }

  private number(value: number): void {
    this.room(9);
    const buffer = this.buffer;
    if (value >>> 0 === value) {
      // 0x40-0x7f are record ids in this format: those integers take a uint8.
      if (value < FIRST_RECORD_ID) buffer[this.at++] = value;
      else if (value < 0x100) {
        buffer[this.at++] = 0xcc;
        buffer[this.at++] = value;
      } else if (value < 0x10000) {
        buffer[this.at++] = 0xcd;
        this.view.setUint16(this.at, value);
        this.at += 2;
      } else {
        buffer[this.at++] = 0xce;
        this.view.setUint32(this.at, value);
        this.at += 4;
      }
    } else if (value >> 0 === value) {
      if (value >= -0x20) buffer[this.at++] = value & 0xff;
      else if (value >= -0x80) {
        buffer[this.at++] = 0xd0;
        buffer[this.at++] = value & 0xff;
      } else if (value >= -0x8000) {
        buffer[this.at++] = 0xd1;
        this.view.setInt16(this.at, value);
        this.at += 2;
      } else {
        buffer[this.at++] = 0xd2;
        this.view.setInt32(this.at, value);
        this.at += 4;
      }
    } else {
      buffer[this.at++] = 0xcb;
      this.view.setFloat64(this.at, value);
      this.at += 8;
    }
  }

  /** The header is chosen from the length in UTF-16 units and widened when the bytes need it. */
  private string(value: string): void {
    const units = value.length;
    this.room(units * 3 + 5);
    const start = this.at;
    if (units < 32 && this.ascii(value, start + 1)) {
      this.buffer[start] = 0xa0 | units;
      this.at = start + 1 + units;
      return;
    }
    // Up to SHORT_ASCII_UNITS (a URL, a description) the loop costs less than the native call.
    if (units >= 32 && units <= SHORT_ASCII_UNITS && this.ascii(value, start + 2)) {
      this.buffer[start] = 0xd9;
      this.buffer[start + 1] = units;
      this.at = start + 2 + units;
      return;
    }
    const header = units < 32 ? 1 : units < 0x100 ? 2 : units < 0x10000 ? 3 : 5;
    let written = (this.buffer as Utf8Writer).utf8Write(value, start + header, this.buffer.length - start - header);
    let size = header;
    const needed = written < 32 ? 1 : written < 0x100 ? 2 : written < 0x10000 ? 3 : 5;
    if (needed > header) {
      this.buffer.copyWithin(start + needed, start + header, start + header + written);
      size = needed;
    }
    const buffer = this.buffer;
    if (size === 1) buffer[start] = 0xa0 | written;
    else if (size === 2) {
      buffer[start] = 0xd9;
      buffer[start + 1] = written;
    } else if (size === 3) {
      buffer[start] = 0xda;
      this.view.setUint16(start + 1, written);
    } else {
      buffer[start] = 0xdb;
      this.view.setUint32(start + 1, written);
    }
    written += size;
    this.at = start + written;
  }

  /**
   * Writes a short string at `at` if every unit of it is ASCII, one byte each; false (nothing
   * promised about the bytes written) when it is not. charCodeAt is called through a reference
   * to it, not looked up on each string: a lookup on strings of many internal representations
   * is what made msgpackr's loop slow (the header comment).
   */
  private ascii(value: string, at: number): boolean {
    const buffer = this.buffer;
    for (let i = 0; i < value.length; i++) {
      const unit = charCodeAt.call(value, i);
      if (unit >= 0x80) return false;
      buffer[at + i] = unit;
    }
    return true;
  }

  /** An array's or a map's header: `fix | n` below 16, else `op16` then a uint16, or `op16 + 1` then a uint32. */
  private countHeader(n: number, fix: number, op16: number): void {
    this.room(5);
    if (n < 16) this.buffer[this.at++] = fix | n;
    else if (n < 0x10000) {
      this.buffer[this.at++] = op16;
      this.view.setUint16(this.at, n);
      this.at += 2;
    } else {
      this.buffer[this.at++] = op16 + 1;
      this.view.setUint32(this.at, n);
      this.at += 4;
    }
  }

  private array(values: readonly unknown[]): void {
    const n = values.length;
    this.countHeader(n, 0x90, 0xdc);
    for (let i = 0; i < n; i++) this.value(values[i]);
  }

  /** An object as a record of its shape when it can be, else as a plain map. */
  private object(object: Record<string, unknown>): void {
    const recent = this.recentShapeOf(object);
    if (recent !== undefined) {
      this.shapeHeader(recent, recent.keys!);
      // The values in the keys' order: a keyed load inside a for-in over the same object is a
      // load by the enum cache's index, and nothing is allocated.
      for (const key in object) this.value(object[key]);
      return;
    }
    // Own enumerable keys in one native call (a for-in count, then a for-in with hasOwn checks,
    // cost 1.9 µs of an app launch record's 5.3 in a profile).
    const keys = Object.keys(object);
    const n = keys.length;
    this.shapeHeader(this.shapeOf(keys), keys);
    // The values in the keys' order, in one native call (a keyed load per key cost more).
    const values = Object.values(object);
    for (let i = 0; i < n; i++) this.value(values[i]);
  }

  /** An object's header: its shape's record id, after the shape's definition if this batch has none yet (`shape` undefined: keys written out). */
  private shapeHeader(shape: Shape | undefined, keys: readonly string[]): void {
    if (shape !== undefined && shape.batch === this.batch) {
      this.room(1);
      this.buffer[this.at++] = FIRST_RECORD_ID + shape.id;
    } else {
      const id = this.takeRecordId(shape ?? null);
      this.room(3);
      this.buffer[this.at++] = 0xd4;
      this.buffer[this.at++] = 0x72;
      this.buffer[this.at++] = FIRST_RECORD_ID + id;
      if (shape === undefined) this.array(keys);
      else {
        shape.batch = this.batch;
        shape.id = id;
        if (shape.keysBytes === null) {
          const start = this.at;
          this.array(keys);
          shape.keysBytes = Uint8Array.prototype.slice.call(this.buffer, start, this.at);
        } else this.copy(shape.keysBytes);
      }
    }
  }

  /**
   * One of the shapes written last whose keys are the object's own enumerable keys in order, found
   * without allocating (Object.keys and Object.values allocated two arrays per object, a fifth of
   * what a batch item allocates in the server: a heap profile). Only for plain objects (their
   * prototype has no enumerable keys, so for-in walks exactly Object.keys). Records are data:
   * JSON.parse'd bodies and objects this server builds. A getter that deletes a later key while
   * its value is written, or an enumerable key added to Object.prototype, would make the values
   * disagree with the shape (Object.values read them all first); neither occurs in a record.
   */
  private recentShapeOf(object: Record<string, unknown>): Shape | undefined {
    const prototype: unknown = Object.getPrototypeOf(object);
    if (prototype !== Object.prototype && prototype !== null) return undefined;
    const recent = this.recent;
    for (let r = 0; r < recent.length; r++) {
      const known = recent[r]!.keys!;
      let i = 0;
      for (const key in object) {
        if (key !== known[i]) {
          i = -1;
          break;
        }
        i++;
      }
      if (i === known.length) return recent[r];
    }
    return undefined;
  }

  /** The shape of an object with these keys (none: the tree's root), or undefined past the tree's limit. */
  private shapeOf(keys: readonly string[]): Shape | undefined {
    const n = keys.length;
    const recent = this.recent;
    for (let r = 0; r < recent.length; r++) {
      const known = recent[r]!.keys!;
      if (known.length !== n) continue;
      let i = 0;
      while (i < n && known[i] === keys[i]) i++;
      if (i === n) return recent[r];
    }
    let shape: Shape | undefined = this.shapes;
    for (let i = 0; i < n && shape !== undefined; i++) {
      let next: Shape | undefined = shape.next.get(keys[i]!);
      if (next === undefined && this.shapeNodes < MAX_SHAPE_NODES) {
        next = newShape();
        shape.next.set(keys[i]!, next);
        this.shapeNodes++;
      }
      shape = next;
    }
    if (shape !== undefined) {
      shape.keys ??= keys.slice();
      recent[this.nextRecent] = shape;
      this.nextRecent = (this.nextRecent + 1) % RECENT_SHAPES;
    }
    return shape;
  }

  /** The next record id, in turn; the shape that held it in this batch must be defined again. */
  private takeRecordId(owner: Shape | null): number {
    const id = this.nextRecordId;
    this.nextRecordId = (id + 1) % MAX_RECORD_IDS;
    const previous = this.idOwners[id];
    // Only if it still holds this id: a shape that held it in an earlier batch, and was defined
    // in this one under another id, stays defined (found by a test: past 64 shapes such a shape
    // was written out again, a few more bytes each batch, though every reader read them right).
    if (previous !== undefined && previous !== null && previous.batch === this.batch && previous.id === id) previous.batch = 0;
    this.idOwners[id] = owner;
    return id;
  }

  /** A few bytes written before: a loop costs less than a native copy at these sizes. */
  private copy(bytes: Uint8Array): void {
    const n = bytes.length;
    this.room(n);
    const buffer = this.buffer;
    let at = this.at;
    for (let i = 0; i < n; i++) buffer[at++] = bytes[i]!;
    this.at = at;
  }

  /** A bin's or an ext's length (room reserved by the caller): `op8` then a uint8, `op8 + 1` then a uint16, or `op8 + 2` then a uint32. */
  private lengthHeader(n: number, op8: number): void {
    if (n < 0x100) {
      this.buffer[this.at++] = op8;
      this.buffer[this.at++] = n;
    } else if (n < 0x10000) {
      this.buffer[this.at++] = op8 + 1;
      this.view.setUint16(this.at, n);
      this.at += 2;
    } else {
      this.buffer[this.at++] = op8 + 2;
      this.view.setUint32(this.at, n);
      this.at += 4;
    }
  }

  private bytes(bytes: Uint8Array): void {
    const n = bytes.byteLength;
    this.room(n + 5);
    this.lengthHeader(n, 0xc4);
    // An Idempotency-Key's 20 bytes of hashes: a loop costs less than a native copy (copy()).
    if (n <= SHORT_COPY_BYTES) return this.copy(bytes);
    this.buffer.set(bytes, this.at);
    this.at += n;
  }

  /** fixext for 1, 2, 4, 8 and 16 bytes, else ext 8/16/32 (as msgpackr writes an extension). */
  private extension(type: number, data: Uint8Array): void {
    const n = data.byteLength;
    this.room(n + 6);
    const fixed = n === 1 ? 0xd4 : n === 2 ? 0xd5 : n === 4 ? 0xd6 : n === 8 ? 0xd7 : n === 16 ? 0xd8 : 0;
    if (fixed !== 0) this.buffer[this.at++] = fixed;
    else this.lengthHeader(n, 0xc7);
    this.buffer[this.at++] = type;
    this.buffer.set(data, this.at);
    this.at += n;
  }
}

const writer = new RecordWriter();
// Maps read as plain objects; byte strings copied out of the buffer they are read from (lmdb-js
// reuses it), as lmdb-js's own decoder does.
const reader = new Unpackr({ mapsAsObjects: true, copyBuffers: true } as ConstructorParameters<typeof Unpackr>[0]);

/** A journal batch (or any value a record holds) as msgpack bytes, a buffer of their own. */
export function encodeRecords(value: unknown): Buffer {
  return writer.encode(value);
}

/** What encodeRecords wrote, or what msgpackr wrote before it (record structures included). */
export function decodeRecords(bytes: Uint8Array, options?: unknown): unknown {
  return reader.decode(bytes, options as never);
}
