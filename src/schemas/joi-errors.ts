// Maps TypeBox's ValueErrors to Joi-style details (CONTRACT.md §4). Only runs for invalid bodies,
// so clarity wins over speed here.
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors';
import type { TSchema } from '@sinclair/typebox';
import { detail, type BaseKind, type ValidationDetail } from './details.ts';
import { MARK } from './fields.ts';

/** '/info/0/value' → ['info', '0', 'value'] (JSON Pointer unescaping). */
export function pointerToPath(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function variants(schema: TSchema): TSchema[] {
  return (schema.anyOf as TSchema[] | undefined) ?? [];
}

function isLiteralEnum(schema: TSchema): boolean {
  const vs = variants(schema);
  return vs.length > 0 && vs.every((v) => v.const !== undefined);
}

function jsonKind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function schemaKind(schema: TSchema): BaseKind | null {
  switch (schema.type) {
    case 'string':
      return 'string';
    case 'number':
    case 'integer':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'object':
      return 'object';
    case 'array':
      return 'array';
    default:
      return null;
  }
}

/** A union: an enum (any.allowOnly), a nullable, or the timestamp's number-or-string. */
function fromUnion(error: ValueError, path: string[]): ValidationDetail {
  const schema = error.schema;
  const value = error.value;
  const nonNull = variants(schema).filter((v) => v.type !== 'null');
  if (isLiteralEnum(schema) || (nonNull.length === 1 && isLiteralEnum(nonNull[0]!))) {
    const literals = isLiteralEnum(schema) ? variants(schema) : variants(nonNull[0]!);
    return detail.allowOnly(path, value, literals.filter((v) => v.const !== null).map((v) => v.const));
  }
  // Descend into the variant of the value's own JSON kind: its first error is the real one.
  const kind = jsonKind(value);
  const all = variants(schema);
  for (let i = 0; i < all.length; i++) {
    const variant = all[i]!;
    const variantKind = schemaKind(variant);
    if (variantKind !== null && variantKind === kind) {
      const first = error.errors[i]?.First();
      if (first !== undefined) return fromError(first, path);
    }
  }
  const primary = nonNull[0];
  return detail.base((primary && schemaKind(primary)) ?? 'string', path, value);
}

function fromError(error: ValueError, path: string[]): ValidationDetail {
  const { schema, value } = error;
  switch (error.type) {
    case ValueErrorType.ObjectRequiredProperty:
      return detail.required(path);
    case ValueErrorType.ObjectAdditionalProperties:
      return detail.unknownKey(path, value);
    case ValueErrorType.Object:
      return detail.base('object', path, value);
    case ValueErrorType.Array:
      return detail.base('array', path, value);
    case ValueErrorType.ArrayMinItems:
      return detail.arrayMin(path, schema.minItems as number);
    case ValueErrorType.ArrayMaxItems:
      return detail.arrayMax(path, schema.maxItems as number);
    case ValueErrorType.String:
      return detail.base('string', path, value);
    case ValueErrorType.StringMinLength:
      // Every minLength in our schemas is 1: an empty string where a value is required.
      return detail.empty(path, value);
    case ValueErrorType.StringMaxLength:
      return detail.stringMax(path, value, schema.maxLength as number);
    case ValueErrorType.StringPattern:
      return detail.regex(path, value, String(new RegExp(schema.pattern as string)));
    case ValueErrorType.Number:
      return detail.base('number', path, value);
    case ValueErrorType.Integer:
      // 1e400 parses as Infinity: not a number at all to the README (number.base), as `price` says.
      return typeof value === 'number' && Number.isFinite(value) ? detail.integer(path, value) : detail.base('number', path, value);
    case ValueErrorType.NumberMinimum:
    case ValueErrorType.IntegerMinimum:
      return detail.min(path, value, schema.minimum as number);
    case ValueErrorType.NumberMaximum:
    case ValueErrorType.IntegerMaximum:
      return detail.max(path, value, schema.maximum as number);
    case ValueErrorType.Boolean:
      return detail.base('boolean', path, value);
    case ValueErrorType.Literal:
      return detail.allowOnly(path, value, [schema.const]);
    case ValueErrorType.Union:
      return fromUnion(error, path);
    default:
      // Not reachable with our schemas; still a clear, well-formed detail.
      return { message: `"${path.at(-1) ?? 'value'}" is invalid`, path, type: 'any.invalid', context: { key: path.at(-1) ?? 'value', label: path.at(-1) ?? 'value', value } };
  }
}

/** Each object schema's declared keys by position, computed once per schema. */
const declaredIndexes = new WeakMap<TSchema, Map<string, number>>();

function declaredIndex(schema: TSchema): Map<string, number> {
  let index = declaredIndexes.get(schema);
  if (index === undefined) declaredIndexes.set(schema, (index = new Map(Object.keys(schema.properties as object).map((k, i) => [k, i]))));
  return index;
}

/**
 * Position of a path in schema order (declared keys first, unknown keys after in the body's key
 * order, items by index). `ownIndexes` holds each body object's key positions, built once per
 * toDetails call: Object.keys() plus indexOf() per detail made a body of 20,000 unknown keys
 * (250 KB, under the 1 MiB limit) take 28 s to refuse, with the event loop held all along (found
 * by a review, 2026-11-29).
 */
function orderKey(root: TSchema, path: readonly string[], body: unknown, ownIndexes: Map<object, Map<string, number>>): number[] {
  const key: number[] = [];
  let schema: TSchema | undefined = root;
  let value: unknown = body;
  for (const segment of path) {
    if (schema?.anyOf) schema = variants(schema).find((v) => v.type === 'object' || v.type === 'array') ?? schema;
    if (schema?.type === 'array') {
      key.push(Number(segment));
      schema = schema.items as TSchema | undefined;
    } else if (schema?.type === 'object') {
      const known = declaredIndex(schema);
      const i = known.get(segment);
      if (i !== undefined) key.push(i);
      else {
        let own = value !== null && typeof value === 'object' ? ownIndexes.get(value) : undefined;
        if (own === undefined && value !== null && typeof value === 'object') ownIndexes.set(value, (own = new Map(Object.keys(value).map((k, j) => [k, j]))));
        key.push(known.size + (own?.get(segment) ?? 0));
      }
      schema = (schema.properties as Record<string, TSchema>)[segment];
    } else {
      key.push(0);
      schema = undefined;
    }
    value = value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[segment] : undefined;
  }
  return key;
}

function compareKeys(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/**
 * Whether a schema error can become a detail (the first at its path does, unless a value check
 * said something there first): attribute values are judged by their declared type in
 * attribute-values.ts instead. validators.ts's ArrayErrors counts on this.
 */
export function makesDetail(error: ValueError): boolean {
  return error.schema[MARK] !== 'attributeValue' || error.type === ValueErrorType.ObjectRequiredProperty;
}

/** How many raw errors are looked at before giving up on finding more distinct ones. */
const MAX_RAW_ERRORS = 10_000;

/**
 * Turns the schema's errors plus extra details (from the value checks) into the ordered `details`
 * list: one detail per path (the first wins, as Joi reports one error per key), at most `max`.
 */
export function toDetails(
  root: TSchema,
  body: unknown,
  errors: Iterable<ValueError>,
  extra: readonly ValidationDetail[],
  max: number,
): ValidationDetail[] {
  const byPath = new Map<string, ValidationDetail>();
  for (const d of extra) byPath.set(d.path.join('\u0000'), d);
  /** Unknown-key errors kept per object (by its JSON pointer). */
  const unknownKept = new Map<string, number>();
  let seen = 0;
  for (const error of errors) {
    if (error.type === ValueErrorType.ObjectAdditionalProperties) {
      // An object's unknown keys sort after its declared ones, in the body's key order, which is
      // the order TypeBox reports them in: past the first `max` of one object, none can make the
      // answer. They are skipped without counting as looked at, since TypeBox reports them before
      // the declared keys' errors: 10,001 unknown keys used up MAX_RAW_ERRORS and a bad "did"
      // went unreported (found by a review, 2026-11-29).
      const object = error.path.slice(0, error.path.lastIndexOf('/'));
      const kept = unknownKept.get(object) ?? 0;
      if (kept >= max) continue;
      unknownKept.set(object, kept + 1);
    }
    if (++seen > MAX_RAW_ERRORS) break;
    if (!makesDetail(error)) continue;
    const path = pointerToPath(error.path);
    const id = path.join('\u0000');
    if (byPath.has(id)) continue;
    byPath.set(id, fromError(error, path));
  }
  const details = [...byPath.values()];
  const ownIndexes = new Map<object, Map<string, number>>();
  const keyed = details.map((d) => ({ d, k: orderKey(root, d.path, body, ownIndexes) }));
  keyed.sort((a, b) => compareKeys(a.k, b.k));
  return keyed.slice(0, max).map((x) => x.d);
}
