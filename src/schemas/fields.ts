// Building blocks shared by the endpoint schemas. The `x-intake` keyword marks the schemas whose
// errors the Joi mapper (joi-errors.ts) treats specially; JSON Schema keeps unknown keywords as
// annotations, so they also show up harmlessly in /openapi.json.
import { Type, type TSchema, type TLiteral, type TUnion, type TNull } from '@sinclair/typebox';
import { TIMESTAMP_PATTERN } from './details.ts';

export const MARK = 'x-intake';
export type Mark = 'timestamp' | 'attributeValue';

/** A string that must not be empty (`any.empty`) and has a maximum length (`string.max`). */
export const NonEmptyString = (maxLength: number, description?: string) =>
  Type.String({ minLength: 1, maxLength, ...(description ? { description } : {}) });

/** A string that may be empty, with a maximum length. */
export const BoundedString = (maxLength: number, description?: string) =>
  Type.String({ maxLength, ...(description ? { description } : {}) });

export const Nullable = <T extends TSchema>(schema: T): TUnion<[T, TNull]> => Type.Union([schema, Type.Null()]);

/** One of a fixed list of strings (`any.allowOnly`). */
export const OneOf = <const V extends readonly [string, ...string[]]>(values: V, description?: string) =>
  Type.Union(values.map((v) => Type.Literal(v)) as TLiteral<V[number]>[], description ? { description } : {});

export const TIMESTAMP_MIN = 1_000_000_000_000;
export const TIMESTAMP_MAX = 9_999_999_999_999;

/** Unix milliseconds, 13 digits, as a number or a string of 13 digits; stored as a number. */
export const Timestamp = () =>
  Type.Union(
    [
      Type.Integer({ minimum: TIMESTAMP_MIN, maximum: TIMESTAMP_MAX }),
      Type.String({ pattern: TIMESTAMP_PATTERN.source }),
    ],
    { [MARK]: 'timestamp' satisfies Mark, description: 'Unix time in milliseconds, 13 digits (number or string)' },
  );

export const DID_MAX_LENGTH = 64;
export const Did = () => NonEmptyString(DID_MAX_LENGTH, 'device id issued by app launch');

export const ATTRIBUTE_TYPES = ['integer', 'float', 'double', 'long', 'boolean', 'date', 'string'] as const;
export type AttributeType = (typeof ATTRIBUTE_TYPES)[number];
export const ATTRIBUTE_VALUE_MAX_LENGTH = 100;
export const ATTRIBUTE_NAME_MAX_LENGTH = 120;
export const ATTRIBUTES_MAX_ITEMS = 256;

/**
 * An attribute entry. `value` is checked structurally here and against its declared `type` in
 * attribute-values.ts (JSON Schema cannot say "the kind of value depends on a sibling's value").
 */
export const AttributeEntry = () =>
  Type.Object(
    {
      name: NonEmptyString(ATTRIBUTE_NAME_MAX_LENGTH),
      value: Type.Union(
        [Type.String({ maxLength: ATTRIBUTE_VALUE_MAX_LENGTH }), Type.Number(), Type.Boolean(), Type.Null()],
        {
          [MARK]: 'attributeValue' satisfies Mark,
          description:
            'of the kind `type` names: integer (32-bit) and long (safe integer) an integer, float and double a number, boolean a boolean, date a "YYYY-MM-DD HH:MM:SS" string, string a string of at most 100 characters; null allowed',
        },
      ),
      type: OneOf(ATTRIBUTE_TYPES),
    },
    { additionalProperties: false },
  );

export const Attributes = () => Type.Array(AttributeEntry(), { maxItems: ATTRIBUTES_MAX_ITEMS });
