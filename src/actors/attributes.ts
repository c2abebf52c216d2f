// Attribute bags of customers and anonymous device profiles: a later value for the same name wins,
// a null value removes the name (CONTRACT.md §6, identify).
import type { AttributeType } from '../schemas/fields.ts';

export interface AttributeValue {
  type: AttributeType;
  value: string | number | boolean;
}

export interface AttributeEntryInput {
  name: string;
  type: AttributeType;
  value: string | number | boolean | null;
}

export type AttributeBag = Map<string, AttributeValue>;

export function mergeAttributes(bag: AttributeBag, entries: readonly AttributeEntryInput[]): void {
  for (const entry of entries) {
    if (entry.value === null) bag.delete(entry.name);
    else bag.set(entry.name, { type: entry.type, value: entry.value });
  }
}

export function attributesToJson(bag: AttributeBag): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = Object.create(null);
  for (const [name, value] of bag) out[name] = value;
  return out;
}
