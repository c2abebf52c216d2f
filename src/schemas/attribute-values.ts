// Checks an attribute entry's `value` against its declared `type` (CONTRACT.md §5). Runs after the
// structural schema check, on valid and invalid bodies alike; its details replace whatever the
// schema said about the same `value`.
import { ATTRIBUTE_TYPES, ATTRIBUTE_VALUE_MAX_LENGTH, type AttributeType } from './fields.ts';
import { detail, type ValidationDetail } from './details.ts';

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
const DATE_SHAPE = /^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})$/;

function isAttributeType(t: unknown): t is AttributeType {
  return typeof t === 'string' && (ATTRIBUTE_TYPES as readonly string[]).includes(t);
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** A real calendar date and time in the form YYYY-MM-DD HH:MM:SS. */
export function isDateTime(value: string): boolean {
  const m = DATE_SHAPE.exec(value);
  if (m === null) return false;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  return (
    year >= 1 &&
    month >= 1 &&
    month <= 12 &&
    day >= 1 &&
    day <= daysInMonth(year, month) &&
    Number(m[4]) <= 23 &&
    Number(m[5]) <= 59 &&
    Number(m[6]) <= 59
  );
}

/** The violation of one value of a known type, or null when it is fine. */
export function checkAttributeValue(type: AttributeType, value: unknown, path: readonly string[]): ValidationDetail | null {
  if (value === null) return null;
  switch (type) {
    case 'integer':
    case 'long':
      if (typeof value !== 'number' || !Number.isFinite(value)) return detail.base('number', path, value);
      if (!Number.isInteger(value)) return detail.integer(path, value);
      if (type === 'long') return Number.isSafeInteger(value) ? null : detail.unsafe(path, value);
      if (value < INT32_MIN) return detail.min(path, value, INT32_MIN);
      if (value > INT32_MAX) return detail.max(path, value, INT32_MAX);
      return null;
    case 'float':
    case 'double':
      return typeof value === 'number' && Number.isFinite(value) ? null : detail.base('number', path, value);
    case 'boolean':
      return typeof value === 'boolean' ? null : detail.base('boolean', path, value);
    case 'date':
      if (typeof value !== 'string') return detail.base('string', path, value);
      return isDateTime(value) ? null : detail.dateFormat(path, value);
    case 'string':
      if (typeof value !== 'string') return detail.base('string', path, value);
      return value.length > ATTRIBUTE_VALUE_MAX_LENGTH ? detail.stringMax(path, value, ATTRIBUTE_VALUE_MAX_LENGTH) : null;
  }
}

/**
 * A value whose entry has no usable `type` must still be something some type allows: a string of
 * at most 100 characters, a finite number, a boolean or null.
 */
export function checkUntypedValue(value: unknown, path: readonly string[]): ValidationDetail | null {
  if (value === null || typeof value === 'boolean') return null;
  if (typeof value === 'number') return Number.isFinite(value) ? null : detail.base('number', path, value);
  if (typeof value !== 'string') return detail.base('string', path, value);
  return value.length > ATTRIBUTE_VALUE_MAX_LENGTH ? detail.stringMax(path, value, ATTRIBUTE_VALUE_MAX_LENGTH) : null;
}

const ENTRY_VALUE_PATH: string[] = ['', '', 'value'];

/**
 * Appends the value violations of an `info` array to `out`; these replace whatever the schema said
 * about the same values. Entries that are not objects, or lack `value`, are left to the schema.
 */
export function checkAttributeEntries(entries: unknown, basePath: string, out: ValidationDetail[]): void {
  if (!Array.isArray(entries)) return;
  for (let i = 0; i < entries.length; i++) {
    const entry: unknown = entries[i];
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) continue;
    const record = entry as Record<string, unknown>;
    if (!Object.hasOwn(record, 'value')) continue;
    // One path array for every entry (details copy it): a valid body allocates none.
    const path = ENTRY_VALUE_PATH;
    path[0] = basePath;
    path[1] = String(i);
    const found = isAttributeType(record.type) ? checkAttributeValue(record.type, record.value, path) : checkUntypedValue(record.value, path);
    if (found !== null) out.push(found);
  }
}
