// Joi-style validation details: one builder per row of CONTRACT.md §4's table.
// Every 422 the service sends is made of these, so wording lives in one place.

export interface ValidationDetail {
  message: string;
  path: string[];
  type: string;
  context: Record<string, unknown>;
}

export type BaseKind = 'string' | 'number' | 'boolean' | 'object' | 'array';

const ARTICLE: Record<BaseKind, string> = {
  string: 'a string',
  number: 'a number',
  boolean: 'a boolean',
  object: 'an object',
  array: 'an array',
};

/** Joi's key and label: the last path segment, or "value" at the root. */
function keyOf(path: readonly string[]): string {
  return path.length === 0 ? 'value' : path[path.length - 1]!;
}

function make(type: string, path: readonly string[], text: string, extra?: Record<string, unknown>): ValidationDetail {
  const key = keyOf(path);
  return {
    message: `"${key}" ${text}`,
    path: [...path],
    type,
    context: extra === undefined ? { key, label: key } : { key, label: key, ...extra },
  };
}

export const TIMESTAMP_PATTERN = /^[1-9][0-9]{12}$/;
export const DATE_FORM = 'YYYY-MM-DD HH:MM:SS';

export const detail = {
  required: (path: readonly string[]) => make('any.required', path, 'is required'),
  allowOnly: (path: readonly string[], value: unknown, valids: readonly unknown[]) =>
    make('any.allowOnly', path, `must be one of [${valids.join(', ')}]`, { value, valids: [...valids] }),
  empty: (path: readonly string[], value: unknown) => make('any.empty', path, 'is not allowed to be empty', { value }),
  unknownKey: (path: readonly string[], value: unknown) => make('object.allowUnknown', path, 'is not allowed', { value }),
  base: (kind: BaseKind, path: readonly string[], value: unknown) =>
    make(`${kind}.base`, path, `must be ${ARTICLE[kind]}`, { value }),
  stringMax: (path: readonly string[], value: unknown, limit: number) =>
    make('string.max', path, `length must be less than or equal to ${limit} characters long`, { value, limit }),
  integer: (path: readonly string[], value: unknown) => make('number.integer', path, 'must be an integer', { value }),
  unsafe: (path: readonly string[], value: unknown) => make('number.unsafe', path, 'must be a safe number', { value }),
  min: (path: readonly string[], value: unknown, limit: number) =>
    make('number.min', path, `must be larger than or equal to ${limit}`, { value, limit }),
  max: (path: readonly string[], value: unknown, limit: number) =>
    make('number.max', path, `must be less than or equal to ${limit}`, { value, limit }),
  arrayMin: (path: readonly string[], limit: number) =>
    make('array.min', path, `must contain at least ${limit} items`, { limit }),
  arrayMax: (path: readonly string[], limit: number) =>
    make('array.max', path, `must contain less than or equal to ${limit} items`, { limit }),
  regex: (path: readonly string[], value: unknown, pattern: string) =>
    make('string.regex.base', path, `with value "${String(value)}" fails to match the required pattern: ${pattern}`, {
      value,
      pattern,
    }),
  dateFormat: (path: readonly string[], value: unknown) =>
    make('date.format', path, `must be a date in the form ${DATE_FORM}`, { value }),
  missingPeers: (peers: readonly string[]) =>
    make('object.missing', [], `must contain at least one of [${peers.join(', ')}]`, { peers: [...peers] }),
  deviceNotFound: (value: string) => make('device.notFound', ['did'], 'is not a known device', { value }),
  deviceLoggedOut: (value: string) =>
    make('device.loggedOut', ['did'], 'was logged out; call app launch without a did', { value }),
  collectionNotFound: (value: string) => make('collection.notFound', ['id'], 'is not a known collection', { value }),
  productNotFound: (index: number, id: string): ValidationDetail => {
    const key = String(index);
    return {
      message: `product "${id}" is not known`,
      path: ['products', key],
      type: 'product.notFound',
      context: { key, label: key, value: id },
    };
  },
  /** CONTRACT §10: the key was kept for a request with another body. */
  idempotencyReused: (value: string): ValidationDetail => ({
    message: '"Idempotency-Key" was used for a different request',
    path: ['headers', 'idempotency-key'],
    type: 'idempotency.reused',
    context: { key: 'idempotency-key', label: 'idempotency-key', value },
  }),
};

/** The most details one 422 carries (CONTRACT §4). */
export const MAX_DETAILS = 100;

export function validationBody(details: readonly ValidationDetail[]): string {
  return JSON.stringify({ type: 'ValidationError', details });
}
