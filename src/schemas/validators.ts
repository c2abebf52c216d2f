// Compiled validators, built once at start. The fast path is one compiled Check plus the attribute
// value loop; the Joi mapping only runs for invalid bodies.
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { Type, type TSchema } from '@sinclair/typebox';
import { checkAttributeEntries } from './attribute-values.ts';
import { detail, MAX_DETAILS, type ValidationDetail } from './details.ts';
import {
  AppLaunchBody,
  CollectionBody,
  IdentifyBody,
  IdParam,
  LogoutBody,
  ProductBody,
  PushTokenBody,
  TrackEventBody,
  mappingBody,
} from './endpoints.ts';
import { toDetails } from './joi-errors.ts';

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

export class BodyValidator {
  readonly schema: TSchema;
  private readonly compiled: TypeCheck<TSchema>;
  private readonly extra: ExtraCheck | null;

  constructor(schema: TSchema, extra: ExtraCheck | null = null) {
    this.schema = schema;
    this.compiled = TypeCompiler.Compile(schema);
    this.extra = extra;
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
    if (nestsDeeperThan(body, MAX_JSON_DEPTH)) throw new BodyTooDeepError();
    return toDetails(this.schema, body, this.compiled.Errors(body), extraDetails, MAX_DETAILS);
  }
}

const eventInfo: ExtraCheck = (body, out) => checkAttributeEntries(body.info, 'info', out);

const identifyChecks: ExtraCheck = (body, out) => {
  if (!Object.hasOwn(body, 'clientCustomerId') && !Object.hasOwn(body, 'info')) {
    out.push(detail.missingPeers(['clientCustomerId', 'info']));
  }
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
