// The product ids of a mapping request, de-duplicated in order of first occurrence, each with
// the index of that first occurrence (product.notFound details point at it).
export interface MappingIds {
  ids: string[];
  firstIndex: ArrayLike<number>;
  /** `ids` already msgpack-encoded (by a worker), for the journal record. */
  packed?: Uint8Array;
}

/** De-duplicates on this thread (bodies small enough not to need a worker). */
export function distinctIds(products: readonly string[]): MappingIds {
  const seen = new Set<string>();
  const ids: string[] = [];
  const firstIndex: number[] = [];
  for (let i = 0; i < products.length; i++) {
    const id = products[i]!;
    if (seen.has(id)) continue;
    seen.add(id);
    ids.push(id);
    firstIndex.push(i);
  }
  return { ids, firstIndex };
}

/** Ids turned into strings per turn when unpacking a worker's result. */
const UNPACK_SLICE = 20_000;

/** Unpacks a worker's compact result, a slice per event-loop turn. */
export async function unpackIds(text: string, lengths: Uint16Array, firstIndex: Uint32Array, packed: Uint8Array): Promise<MappingIds> {
  const ids = new Array<string>(lengths.length);
  let position = 0;
  for (let i = 0; i < lengths.length; i++) {
    const end = position + lengths[i]!;
    ids[i] = text.slice(position, end);
    position = end;
    if (i % UNPACK_SLICE === UNPACK_SLICE - 1) await new Promise((resolve) => setImmediate(resolve));
  }
  return { ids, firstIndex, packed };
}
