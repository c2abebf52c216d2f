// Product id lists that are already msgpack-encoded (by a mapping worker). A PackedIds value is
// written into a journal record as those bytes (a copy, no encoding on the main thread) and read
// back as a plain string[]: replay and export never see the difference. Encoding 100,000 ids on
// the main thread took 4-7 ms in one piece, and up to ~28 ms of wall time on a busy machine.
// Importing this module registers the msgpack extension; the store imports it, so every process
// that opens the journal can read such records.
import { addExtension, Packr, Unpackr } from 'msgpackr';

/** msgpack extension type of a packed id list (msgpackr keeps its own types elsewhere). */
const EXT_PACKED_IDS = 0x49;

const packr = new Packr({ useRecords: false });
const unpackr = new Unpackr({ useRecords: false });

export class PackedIds {
  constructor(readonly bytes: Uint8Array) {}
}

addExtension({
  Class: PackedIds,
  type: EXT_PACKED_IDS,
  pack: (value: PackedIds) => value.bytes,
  unpack: (bytes: Uint8Array) => unpackr.unpack(bytes) as string[],
});

export function packIds(ids: readonly string[]): Uint8Array {
  return packr.pack(ids);
}

/**
 * For a journal record's `products`: the packed list, typed as what it decodes to. Only for
 * records that are journaled, never applied in memory from this value.
 */
export function journalProducts(packed: Uint8Array): string[] {
  return new PackedIds(packed) as unknown as string[];
}
