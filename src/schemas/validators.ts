// Compiled validators, built once at start. The fast path is one compiled Check plus the attribute
// value loop; the Joi mapping only runs for invalid bodies.
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { SetErrorFunction, ValueErrorType, type ValueError } from '@sinclair/typebox/errors';
import { Kind, Type, type TSchema } from '@sinclair/typebox';
import { checkAttributeEntries } from './attribute-values.ts';
import { detail, MAX_DETAILS, type ValidationDetail } from './details.ts';
import {
  AppLaunchBody,
  CollectionBody,
  IDENTIFY_ONE_OF,
  IdentifyBody,
  IdParam,
  LogoutBody,
  ProductBody,
  PushTokenBody,
  TrackEventBody,
  mappingBody,
} from './endpoints.ts';
import { makesDetail, toDetails } from './joi-errors.ts';

// The details of a 422 are built from each error's type and schema (joi-errors.ts); TypeBox's own
// message for an error is never read, so it is not built either (a 422 costs less).
SetErrorFunction(() => '');

/**
 * How deep JSON may nest (the body object is level 1). No valid body nests more than 5 levels; a
 * deeper one is refused before its 422 is built, because the details carry the offending values
 * and writing a value nested 10,000 deep overflowed the stack (a 500).
 */
export const MAX_JSON_DEPTH = 64;

/** A body nested deeper than MAX_JSON_DEPTH: it cannot be judged, and is answered 400. */
export class BodyTooDeepError extends Error {
  constructor() {
    super(`request body nests deeper than ${MAX_JSON_DEPTH} levels`);
  }
}

/** True when `value` nests deeper than `limit` levels; iterative, stops as soon as it knows. */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    if (depth > limit) return true;
    const children = Array.isArray(node) ? node : Object.values(node);
    for (const child of children) if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
  }
  return false;
}

const EXTRA_SCRATCH: ValidationDetail[] = [];

/** Checks that JSON Schema cannot express; each appends details to `out`. */
type ExtraCheck = (body: Record<string, unknown>, out: ValidationDetail[]) => void;

/** A key as a JSON pointer segment (RFC 6901), as TypeBox escapes it. */
function escapePointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

interface PropertyCheck {
  key: string;
  /** The property's path prefix, escaped as TypeBox escapes it (RFC 6901). */
  pointer: string;
  schema: TSchema;
  check: TypeCheck<TSchema>;
  /** The property's errors, paths relative to it (errorWalk). */
  walk: ErrorWalk;
  required: boolean;
}

/** The schema errors of a value, paths relative to it, as TypeBox's Errors() lists them. */
type ErrorWalk = (value: unknown) => Iterable<ValueError>;

/**
 * The errors of `schema`, walked by ObjectErrors or ArrayErrors where they fit (down to every
 * level: a nested object's unknown keys and an array's failing elements are bounded as the
 * body's own are), else by TypeBox's Errors(). Before 2026-11-30 only the body's own object was:
 * 20,000 unknown keys in a launch's `info`, or 2,000 attribute entries each with 10, held the
 * event loop 100 to 230 ms for a 422 (20 to 30 ms at the top level).
 */
function errorWalk(schema: TSchema, check: TypeCheck<TSchema>): ErrorWalk {
  if (ObjectErrors.fits(schema)) {
    const walker = new ObjectErrors(schema);
    return (value) => walker.errors(value);
  }
  if (ArrayErrors.fits(schema)) {
    const walker = new ArrayErrors(schema);
    return (value) => walker.errors(value);
  }
  return (value) => check.Errors(value);
}

/**
 * The errors TypeBox's Errors() finds for an object schema, in the same order, with less work.
 * Errors() walks every property of the body through nested generators, about 10 µs for a track
 * event with one bad field; a 422 cost more than a journaled 200. Here the object's own errors
 * (required keys, unknown keys, the body not being an object) come from a copy of the schema
 * whose properties accept anything, then each property is checked by its own compiled check and
 * only a property that fails it is walked for errors (paths prefixed, schemas those of the
 * original). A required property is always checked (TypeBox also visits a missing one). (The
 * nested `errors` of a union's error keep paths relative to the property: nothing reads them.)
 */
class ObjectErrors {
  private readonly schema: TSchema;
  private readonly shallow: TypeCheck<TSchema>;
  private readonly shallowSchema: TSchema;
  private readonly properties: PropertyCheck[];
  private readonly byPointer = new Map<string, TSchema>();
  /** additionalProperties: false. */
  private readonly closed: boolean;

  constructor(schema: TSchema) {
    this.schema = schema;
    const props = schema.properties as Record<string, TSchema>;
    const required = new Set<string>((schema.required as string[] | undefined) ?? []);
    this.properties = Object.getOwnPropertyNames(props).map((key) => {
      const pointer = `/${escapePointer(key)}`;
      this.byPointer.set(pointer, props[key]!);
      const check = TypeCompiler.Compile(props[key]!);
      return { key, pointer, schema: props[key]!, check, walk: errorWalk(props[key]!, check), required: required.has(key) };
    });
    // Unknown keys are found by errors() below, not by the shallow check: TypeBox reports every
    // one of them (about 2 µs each: 156 ms of a held event loop for a 1 MiB body of 90,000
    // keys), and only the first MAX_DETAILS can make an answer.
    this.closed = schema.additionalProperties === false;
    this.shallowSchema = { ...schema, additionalProperties: true, properties: Object.fromEntries(Object.keys(props).map((key) => [key, Type.Unknown()])) };
    this.shallow = TypeCompiler.Compile(this.shallowSchema);
  }

  /** Only plain object schemas of known properties (every body schema of ours). */
  static fits(schema: TSchema): boolean {
    return schema[Kind] === 'Object' && typeof schema.properties === 'object' && typeof schema.additionalProperties !== 'object';
  }

  *errors(body: unknown): Generator<ValueError> {
    for (const error of this.shallow.Errors(body)) {
      if (error.type === ValueErrorType.ObjectRequiredProperty) yield { ...error, schema: this.byPointer.get(error.path) ?? error.schema };
      else yield error.schema === this.shallowSchema ? { ...error, schema: this.schema } : error;
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return;
    const record = body as Record<string, unknown>;
    if (this.closed) {
      // In the body's key order, as TypeBox reports them (the order of their details).
      let unknown = 0;
      for (const key of Object.getOwnPropertyNames(record)) {
        const path = `/${escapePointer(key)}`;
        if (this.byPointer.has(path)) continue;
        yield { type: ValueErrorType.ObjectAdditionalProperties, schema: this.schema, path, value: record[key], message: '', errors: [] };
        if (++unknown >= MAX_DETAILS) break;
      }
    }
    for (const p of this.properties) {
      const value = record[p.key];
      if (!p.required && value === undefined) continue;
      if (p.check.Check(value)) continue;
      for (const error of p.walk(value)) yield { ...error, path: p.pointer + error.path };
    }
  }
}

/**
 * An array's errors, as TypeBox's Errors() lists them (its own, then each element's in order),
 * but only until MAX_DETAILS elements have given an error that makes a detail: the details are
 * ordered by position in the body, so a later element's could not make the answer (its path
 * sorts after theirs). Only elements that fail their compiled check are walked.
 */
class ArrayErrors {
  private readonly schema: TSchema;
  private readonly itemCheck: TypeCheck<TSchema>;
  private readonly itemWalk: ErrorWalk;

  constructor(schema: TSchema) {
    this.schema = schema;
    this.itemCheck = TypeCompiler.Compile(schema.items as TSchema);
    this.itemWalk = errorWalk(schema.items as TSchema, this.itemCheck);
  }

  /** Arrays of one item schema, without the checks TypeBox makes after the elements (uniqueItems, contains). */
  static fits(schema: TSchema): boolean {
    return (
      schema[Kind] === 'Array' &&
      typeof schema.items === 'object' &&
      schema.uniqueItems === undefined &&
      schema.contains === undefined &&
      schema.minContains === undefined &&
      schema.maxContains === undefined
    );
  }

  *errors(value: unknown): Generator<ValueError> {
    const schema = this.schema;
    if (!Array.isArray(value)) {
      yield { type: ValueErrorType.Array, schema, path: '', value, message: '', errors: [] };
      return;
    }
    if (typeof schema.minItems === 'number' && !(value.length >= schema.minItems)) yield { type: ValueErrorType.ArrayMinItems, schema, path: '', value, message: '', errors: [] };
    if (typeof schema.maxItems === 'number' && !(value.length <= schema.maxItems)) yield { type: ValueErrorType.ArrayMaxItems, schema, path: '', value, message: '', errors: [] };
    let withDetails = 0;
    for (let i = 0; i < value.length && withDetails < MAX_DETAILS; i++) {
      const element: unknown = value[i];
      if (this.itemCheck.Check(element)) continue;
      let detailed = false;
      for (const error of this.itemWalk(element)) {
        if (!detailed && makesDetail(error)) detailed = true;
        yield { ...error, path: `/${i}${error.path}` };
      }
      if (detailed) withDetails++;
    }
  }
}

export class BodyValidator {
  readonly schema: TSchema;
  private readonly compiled: TypeCheck<TSchema>;
  private readonly extra: ExtraCheck | null;
  private readonly objectErrors: ObjectErrors | null;

  /**
   * `maxDepth`: the deepest body it judges. POST /batch's envelope carries item bodies from its
   * fourth level, each allowed MAX_JSON_DEPTH levels of its own: an envelope refused for another
   * reason was answered 400 "too deep" for an item body 61 to 63 levels deep, which alone (and in
   * a valid envelope) is judged (found by a review).
   */
  constructor(schema: TSchema, extra: ExtraCheck | null = null, private readonly maxDepth = MAX_JSON_DEPTH) {
    this.schema = schema;
    this.compiled = TypeCompiler.Compile(schema);
    this.extra = extra;
    this.objectErrors = ObjectErrors.fits(schema) ? new ObjectErrors(schema) : null;
  }

  /** Every schema error of `body`, as TypeBox's Errors() lists them. */
  errors(body: unknown): Iterable<ValueError> {
    return this.objectErrors === null ? this.compiled.Errors(body) : this.objectErrors.errors(body);
  }

  /**
   * null when valid, else the details (at most 100) for a 422. Throws BodyTooDeepError for a
   * body nested deeper than MAX_JSON_DEPTH (checked only once the body failed: valid bodies are
   * shallow, so the check costs them nothing).
   */
  validate(body: unknown): ValidationDetail[] | null {
    const valid = this.compiled.Check(body);
    // The extra checks write into one scratch array (they run synchronously): a valid body
    // allocates nothing here.
    const scratch = EXTRA_SCRATCH;
    scratch.length = 0;
    if (this.extra !== null && typeof body === 'object' && body !== null && !Array.isArray(body)) {
      this.extra(body as Record<string, unknown>, scratch);
    }
    if (valid && scratch.length === 0) return null;
    const extraDetails = scratch.slice();
    if (nestsDeeperThan(body, this.maxDepth)) throw new BodyTooDeepError();
    return toDetails(this.schema, body, this.errors(body), extraDetails, MAX_DETAILS);
  }
}

const eventInfo: ExtraCheck = (body, out) => checkAttributeEntries(body.info, 'info', out);

const identifyChecks: ExtraCheck = (body, out) => {
  if (!IDENTIFY_ONE_OF.some((key) => Object.hasOwn(body, key))) out.push(detail.missingPeers(IDENTIFY_ONE_OF));
  checkAttributeEntries(body.info, 'info', out);
};

export interface Validators {
  appLaunch: BodyValidator;
  trackEvent: BodyValidator;
  identify: BodyValidator;
  logout: BodyValidator;
  pushToken: BodyValidator;
  product: BodyValidator;
  collection: BodyValidator;
  mapping: BodyValidator;
  id: BodyValidator;
}

export function buildValidators(limits: { mappingMaxItems: number }): Validators {
  return {
    appLaunch: new BodyValidator(AppLaunchBody),
    trackEvent: new BodyValidator(TrackEventBody, eventInfo),
    identify: new BodyValidator(IdentifyBody, identifyChecks),
    logout: new BodyValidator(LogoutBody),
    pushToken: new BodyValidator(PushTokenBody),
    product: new BodyValidator(ProductBody),
    collection: new BodyValidator(CollectionBody),
    mapping: new BodyValidator(mappingBody(limits.mappingMaxItems)),
    id: new BodyValidator(Type.Object({ id: IdParam })),
  };
}

/** The URL `:id` is validated like a body id, with path ["id"]. */
export function validateIdParam(validators: Validators, id: string): ValidationDetail[] | null {
  return validators.id.validate({ id });
}
