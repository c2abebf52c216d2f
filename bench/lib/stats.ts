// Medians for the benches' rounds (each bench had its own copy of one of these two).

/** The middle value; with an even count, the mean of the two middle ones. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The middle value; with an even count, the upper of the two middle ones (always a measured value). */
export function upperMedian(values: readonly number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

/** The p-th percentile (nearest rank) of values sorted ascending; NaN when there are none. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * `first` then `second` in even rounds, the other way round in odd ones: what one run leaves
 * behind (the page cache's writeback, a warm JIT) falls on both sides alike.
 */
export async function alternately(round: number, first: () => Promise<unknown>, second: () => Promise<unknown>): Promise<void> {
  if (round % 2 === 0) {
    await first();
    await second();
  } else {
    await second();
    await first();
  }
}
