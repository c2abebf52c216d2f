// The product ids of a mapping request, de-duplicated in order of first occurrence, each with
// the index of that first occurrence (product.notFound details point at it).
//
// A worker's result stays packed: one string of all the ids and their lengths. Each id becomes a
// string of its own only while its slice is applied (IdReader), and is garbage by the next turn.
// Unpacking all 100,000 of a big mapping up front kept them alive for the whole mapping (some
// 3 MB promoted to the old generation per request), and the major GCs that followed were the
// longest pauses of track events under a mapping client (issue 19).

/** Reads a mapping's ids in order, one at a time. */
export interface IdReader {
  next(): string;
}

export class MappingIds {
  private constructor(
    /** The distinct ids, or null while they are packed in `text`. */
    private readonly ids: string[] | null,
    private readonly text: string,
    private readonly lengths: Uint16Array | null,
    /** Index in the request's `products` of each id's first occurrence. */
    readonly firstIndex: ArrayLike<number>,
    /** The ids already msgpack-encoded (by a worker), for the journal record. */
    readonly packed: Uint8Array | undefined,
  ) {}

  /** De-duplicates on this thread (bodies small enough not to need a worker). */
  static distinct(products: readonly string[]): MappingIds {
    const { ids, firstIndex } = dedupe(products);
    return new MappingIds(ids, '', null, firstIndex, undefined);
  }

  /** A worker's compact result: every id concatenated in `text`, each `lengths[i]` long. */
  static packedIds(text: string, lengths: Uint16Array, firstIndex: Uint32Array, packed: Uint8Array): MappingIds {
    return new MappingIds(null, text, lengths, firstIndex, packed);
  }

  /** How many distinct ids. */
  get count(): number {
    return this.ids !== null ? this.ids.length : this.lengths!.length;
  }

  /** Reads the ids from the first; a packed id is sliced out of the text as it is read. */
  reader(): IdReader {
    const ids = this.ids;
    if (ids !== null) {
      let i = 0;
      return { next: () => ids[i++]! };
    }
    const { text } = this;
    const lengths = this.lengths!;
    let i = 0;
    let position = 0;
    return {
      next: () => {
        const start = position;
        position += lengths[i++]!;
        return text.slice(start, position);
      },
    };
  }

  /** Every id as a string (for mappings small enough to be applied in one turn). */
  list(): string[] {
    if (this.ids !== null) return this.ids;
    const reader = this.reader();
    return Array.from({ length: this.count }, () => reader.next());
  }
}

/** The distinct ids in order of first occurrence, and the index of each one's first occurrence. */
export function dedupe(products: readonly string[]): { ids: string[]; firstIndex: number[] } {
  const seen = new Set<string>();
  const ids: string[] = [];
  const firstIndex: number[] = [];
  for (let i = 0; i < products.length; i++) {
    const id = products[i]!;
    const size = seen.size;
    seen.add(id);
    if (seen.size === size) continue;
    ids.push(id);
    firstIndex.push(i);
  }
  return { ids, firstIndex };
}

/** De-duplicates on this thread (bodies small enough not to need a worker). */
export function distinctIds(products: readonly string[]): MappingIds {
  return MappingIds.distinct(products);
}

/** A worker's compact result, as it is (asynchronous for the caller's sake: nothing to wait for). */
export function unpackIds(text: string, lengths: Uint16Array, firstIndex: Uint32Array, packed: Uint8Array): Promise<MappingIds> {
  return Promise.resolve(MappingIds.packedIds(text, lengths, firstIndex, packed));
}
