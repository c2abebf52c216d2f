// Runs in a piscina worker: the heavy part of a big mapping request. Inflates (gzip), parses and
// validates the body against the same compiled schema and Joi-style mapping the main thread
// uses, de-duplicates the ids, and returns them compactly: one string of all distinct ids, their
// lengths, and the index of each one's first occurrence (for product.notFound details).
import { getHeapStatistics } from 'node:v8';
import { resourceLimits } from 'node:worker_threads';
import { inflateBody, parseJsonObject, type Encoding } from '../http/body.ts';
import { bodyFingerprint } from '../idempotency/claim.ts';
import { dedupe } from '../actors/mapping-ids.ts';
import { packIds } from '../journal/packed-ids.ts';
import { mappingBody } from '../schemas/endpoints.ts';
import { BodyTooDeepError, BodyValidator } from '../schemas/validators.ts';
import type { MappingTask, MappingTaskResult } from './mapping-result.ts';

const validators = new Map<number, BodyValidator>();

/**
 * Heap a body may need while it is parsed and de-duplicated, per byte of JSON (short strings
 * cost ~24 bytes each, plus array slots and the de-duplication set).
 */
const HEAP_BYTES_PER_BODY_BYTE = 10;

/**
 * Heap each object, array or key costs beyond its bytes of JSON: `{}` is 3 bytes of a list and
 * some 60 bytes of heap, so a 16 MiB list of them was estimated at 160 MB by its bytes and took
 * more than 1 GB (the worker died: 500; found by a review, 2026-11-29).
 */
const HEAP_BYTES_PER_CONTAINER_OR_KEY = 96;

/** Objects, arrays and keys (colons) in `raw` outside strings: one pass over the bytes. */
function containersAndKeys(raw: Buffer): number {
  let count = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i]!;
    if (inString) {
      if (b === 0x5c) i++; // a backslash: the next byte is escaped
      else if (b === 0x22) inString = false;
    } else if (b === 0x22) inString = true;
    else if (b === 0x7b || b === 0x5b || b === 0x3a) count++;
  }
  return count;
}

/**
 * V8 cannot stop a worker in the middle of JSON.parse: a worker that reaches its heap limit
 * there takes the whole process down with it, instead of being replaced. So a body that might
 * not fit is refused before parsing: 413, since it is too large for this server to judge (until
 * 2026-11-29 a 500, and bodies of millions of tiny objects passed the estimate and killed the
 * worker, also a 500).
 */
function heapRoomRefusal(raw: Buffer): string | null {
  // The old generation's limit is the one a parse runs into (heap_size_limit also counts the
  // young generation, which can be much larger than the old one's limit here).
  const { heap_size_limit, used_heap_size } = getHeapStatistics();
  const oldLimitMb = resourceLimits.maxOldGenerationSizeMb;
  const limit = oldLimitMb !== undefined && oldLimitMb > 0 ? oldLimitMb * 2 ** 20 : heap_size_limit;
  const needed = raw.length * HEAP_BYTES_PER_BODY_BYTE + containersAndKeys(raw) * HEAP_BYTES_PER_CONTAINER_OR_KEY;
  if (used_heap_size + needed <= limit) return null;
  return `this ${raw.length}-byte mapping body needs about ${Math.ceil(needed / 2 ** 20)} MB to parse, more than a mapping worker's heap allows (MAPPING_WORKER_MAX_MEMORY_MB); a valid one needs far less`;
}

function validatorFor(maxItems: number): BodyValidator {
  let validator = validators.get(maxItems);
  if (validator === undefined) validators.set(maxItems, (validator = new BodyValidator(mappingBody(maxItems))));
  return validator;
}

export default function parseMapping(task: MappingTask): MappingTaskResult {
  // The main thread starts this task's timeout now, not when it handed the task over (a
  // replacement worker may still have been starting then).
  task.started.postMessage(null);
  const encoding: Encoding = task.gzip ? 'gzip' : 'identity';
  const inflated = inflateBody(Buffer.from(task.bytes), encoding, task.limitBytes);
  if (!inflated.ok) return { kind: inflated.error, message: inflated.message };
  const noRoom = heapRoomRefusal(inflated.raw);
  if (noRoom !== null) return { kind: 'tooLarge', message: noRoom };
  const decoded = parseJsonObject(inflated.raw);
  if (!decoded.ok) return { kind: decoded.error, message: decoded.message };
  let details: ReturnType<BodyValidator['validate']>;
  try {
    details = validatorFor(task.maxItems).validate(decoded.body);
  } catch (error) {
    if (error instanceof BodyTooDeepError) return { kind: 'malformed', message: error.message };
    throw error;
  }
  if (details !== null) return { kind: 'invalid', details };
  const { ids, firstIndex } = dedupe(decoded.body.products as string[]);
  const lengths = new Uint16Array(ids.length);
  for (let i = 0; i < ids.length; i++) lengths[i] = ids[i]!.length;
  const fingerprint = task.fingerprint ? bodyFingerprint(inflated.raw) : null;
  return { kind: 'ok', text: ids.join(''), lengths, firstIndex: Uint32Array.from(firstIndex), packed: packIds(ids), fingerprint };
}
