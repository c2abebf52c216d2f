// How `npm run import` turns one NDJSON line into one write, and the write's Idempotency-Key.
import { createHash } from 'node:crypto';
import type { IntakeClient } from '../client/index.ts';

export const IMPORT_KINDS = ['products', 'collections', 'memberships'] as const;
export type ImportKind = (typeof IMPORT_KINDS)[number];

/** A line the importer refuses before sending anything (not JSON, not an object, no collection id). */
export class LineError extends Error {}

/**
 * The line's Idempotency-Key: a hash of the import kind, the file's real path, the line number
 * and the line's bytes. The same file imported again gives every line the key it had before, so
 * the server answers lines it already applied from their keys instead of applying them twice
 * (within IDEMPOTENCY_WINDOW_SECONDS). A changed line is a new write with a new key. `salt`
 * (--idempotency-salt) makes every key new, to apply a file again on purpose.
 */
export function lineKey(kind: ImportKind, fileIdentity: string, lineNumber: number, line: string, salt: string): string {
  const hash = createHash('sha256').update(`${kind}\0${fileIdentity}\0${lineNumber}\0${salt}\0`).update(line).digest('base64url');
  return `import-${hash.slice(0, 32)}`;
}

function object(line: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (error) {
    throw new LineError(`not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new LineError('not a JSON object');
  return value as Record<string, unknown>;
}

/**
 * Starts the write of one line and returns its promise. Line forms:
 * - products: a product exactly as POST /product takes it, e.g. {"id":"p1","name":"Shirt","price":20}
 * - collections: a collection exactly as POST /collection takes it
 * - memberships: {"collection":"c1","products":["p1","p2"]} or {"collection":"c1","product":"p1"},
 *   optionally "action":"remove" (default "add"): POST /collection/c1/products/add (or /remove)
 */
export function sendLine(client: IntakeClient, kind: ImportKind, line: string, idempotencyKey: string): Promise<unknown> {
  const value = object(line);
  const options = { idempotencyKey };
  switch (kind) {
    case 'products':
      return client.upsertProduct(value as Parameters<IntakeClient['upsertProduct']>[0], options);
    case 'collections':
      return client.upsertCollection(value as Parameters<IntakeClient['upsertCollection']>[0], options);
    case 'memberships': {
      const { collection, products, product, action, ...rest } = value;
      const unknown = Object.keys(rest);
      if (unknown.length > 0) throw new LineError(`unknown key(s) ${unknown.join(', ')}: a membership line is {"collection", "products" or "product", "action"?}`);
      if (typeof collection !== 'string' || collection === '') throw new LineError('"collection" must be a non-empty string (the collection id)');
      if ((products === undefined) === (product === undefined)) throw new LineError('give exactly one of "products" (an array of product ids) and "product" (one product id)');
      const ids = products === undefined ? [product] : products;
      if (!Array.isArray(ids)) throw new LineError('"products" must be an array of product ids');
      if (action !== undefined && action !== 'add' && action !== 'remove') throw new LineError('"action" must be "add" or "remove"');
      // Ids are not checked here: the server's 422 says exactly which one is wrong.
      return action === 'remove'
        ? client.removeProductsFromCollection(collection, ids as string[], options)
        : client.addProductsToCollection(collection, ids as string[], options);
    }
  }
}
