// /openapi.json, made from the same TypeBox schemas that validate requests (one source of truth).
import { Type, type TSchema } from '@sinclair/typebox';
import { ERRORS } from '../http/errors.ts';
import { AT_LEAST_ONE_OF, IdParam } from './endpoints.ts';

export interface DocumentedRoute {
  method: 'post' | 'del';
  pattern: string;
  hasParam: boolean;
  limit: 'body' | 'mapping' | 'batch' | 'none';
  doc: { summary: string; body: TSchema | null; launch?: boolean; result?: TSchema };
}

const ValidationError = Type.Object({
  type: Type.Literal('ValidationError'),
  details: Type.Array(
    Type.Object({
      message: Type.String(),
      path: Type.Array(Type.String()),
      type: Type.String({ description: 'Joi-style kind, e.g. any.required, any.allowOnly, string.max, device.notFound' }),
      context: Type.Object({ key: Type.String(), label: Type.String() }, { additionalProperties: true }),
    }),
    { maxItems: 100 },
  ),
});

const ErrorBody = Type.Object({
  type: Type.Union(Object.values(ERRORS).map((error) => Type.Literal(error.type)), { description: 'the kind of error (the table in the README says when each comes)' }),
  message: Type.String(),
});
export const Success = Type.Object({ success: Type.Literal(true) });
export const LaunchResult = Type.Object({
  did: Type.String({ description: 'the device id; new when none usable was sent' }),
  sid: Type.String({ description: 'a new session id' }),
});

/**
 * JSON Schema without TypeBox's symbol keys (a JSON round trip drops them), with every list of
 * allowed strings (TypeBox's union of literals, which validation keeps) written as an `enum`, the
 * form code generators turn into enumerations.
 */
function plain(schema: TSchema): unknown {
  return JSON.parse(JSON.stringify(schema), (_key, value: unknown) => {
    if (typeof value === 'object' && value !== null && Array.isArray((value as Record<string, unknown>)[AT_LEAST_ONE_OF])) {
      // endpoints.ts's "at least one of these keys", in JSON Schema's words.
      const { [AT_LEAST_ONE_OF]: keys, ...rest } = value as Record<string, unknown>;
      return { ...rest, anyOf: (keys as string[]).map((key) => ({ required: [key] })) };
    }
    if (typeof value !== 'object' || value === null || !Array.isArray((value as { anyOf?: unknown }).anyOf)) return value;
    const { anyOf, ...rest } = value as { anyOf: Array<Record<string, unknown>> } & Record<string, unknown>;
    const literals = anyOf.every((branch) => typeof branch.const === 'string');
    return literals ? { ...rest, type: 'string', enum: anyOf.map((branch) => branch.const) } : value;
  });
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });

/** CONTRACT §9. */
const REQUEST_ID = {
  name: 'x-request-id',
  in: 'header',
  required: false,
  description: 'Your id for this request (1 to 128 printable ASCII characters): echoed on the answer and written on the server\'s log lines about it; without a usable one the server makes one up.',
  schema: { type: 'string', minLength: 1, maxLength: 128 },
};
const REQUEST_ID_HEADER = { 'x-request-id': { description: 'the request\'s id: yours when usable, else a new one', schema: { type: 'string' } } };

/** Every answer but the write's 200: the error body, with the x-request-id header. */
function errorResponse(description: string) {
  return { description, headers: REQUEST_ID_HEADER, content: json(ref('Error')) };
}

/** CONTRACT §10. */
const IDEMPOTENCY_KEY = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description:
    'Makes retries safe: a later request with the same key (same workspace, method and path) and the same body gets the first answer again, ' +
    'with `idempotent-replayed: true`, and changes nothing; with another body, 422 idempotency.reused. Kept for IDEMPOTENCY_WINDOW_SECONDS ' +
    '(default 86400) and at most IDEMPOTENCY_MAX_KEYS keys; only 200 answers are kept.',
  schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7E]+$' },
};

export function buildOpenApi(routes: readonly DocumentedRoute[], version: string): unknown {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = route.pattern.replace(/:([A-Za-z]+)/g, '{$1}');
    const responses: Record<string, unknown> = {
      '200': {
        description: 'accepted and durably journaled (or, with `idempotent-replayed: true`, the first answer of this Idempotency-Key)',
        headers: { ...REQUEST_ID_HEADER, 'idempotent-replayed': { description: 'present (`true`) when this answer is the replay of an earlier request with the same Idempotency-Key', schema: { type: 'string', enum: ['true'] } } },
        content: json(route.doc.result !== undefined ? plain(route.doc.result) : ref(route.doc.launch ? 'LaunchResult' : 'Success')),
      },
      '400': errorResponse(`${ERRORS.idempotencyKey.message} (IdempotencyKeyError)`),
      '401': errorResponse(ERRORS.authentication.message),
      '422': { description: 'validation error (schema, then references to stored state)', headers: REQUEST_ID_HEADER, content: json(ref('ValidationError')) },
      '429': {
        ...errorResponse(`${ERRORS.rateLimit.message} (RateLimitError; only with RATE_LIMIT_PER_SECOND set)`),
        headers: { ...REQUEST_ID_HEADER, 'retry-after': { description: 'whole seconds, at least 1', schema: { type: 'integer', minimum: 1 } } },
      },
      '500': errorResponse('a bug, or a mapping worker that failed (InternalError); logged, nothing applied'),
      '503': {
        ...errorResponse('the journal cannot be written, or the server is shutting down; with Retry-After: every mapping worker is busy, or (cluster mode) no leader can take the write now'),
        headers: { ...REQUEST_ID_HEADER, 'retry-after': { description: 'whole seconds, at least 1 (when the write may be retried soon)', schema: { type: 'integer', minimum: 1 } } },
      },
    };
    if (route.hasParam) responses['404'] = errorResponse('a malformed percent-escape in :id (NotFoundError)');
    if (route.limit !== 'none') {
      responses['400'] = errorResponse('IdempotencyKeyError: a malformed Idempotency-Key; MalformedJsonError: body empty, not JSON, not an object, not valid gzip, or nested deeper than 64 levels');
      responses['413'] = errorResponse(`${ERRORS.payloadTooLarge.message} (the connection is closed)`);
      responses['415'] = errorResponse(ERRORS.unsupportedMediaType.message);
    }
    paths[path] ??= {};
    paths[path]![route.method === 'del' ? 'delete' : 'post'] = {
      summary: route.doc.summary,
      parameters: [...(route.hasParam ? [{ name: 'id', in: 'path', required: true, schema: plain(IdParam) }] : []), IDEMPOTENCY_KEY, REQUEST_ID],
      ...(route.doc.body !== null ? { requestBody: { required: true, content: json(plain(route.doc.body)) } } : {}),
      responses,
    };
  }
  const open = { security: [], parameters: [REQUEST_ID] };
  const status = (value: string) => ({ description: `{"status": "${value}"}`, headers: REQUEST_ID_HEADER, content: json({ type: 'object', properties: { status: { type: 'string', enum: [value] } }, required: ['status'] }) });
  paths['/healthz'] = { get: { ...open, summary: 'liveness', responses: { '200': status('ok') } } };
  paths['/readyz'] = {
    get: {
      ...open,
      summary: 'readiness: 200 while writes are accepted',
      responses: { '200': status('ready'), '503': errorResponse('shutting down or journal failed; in cluster mode also: no leader can be reached, or the node is still catching up with the cluster') },
    },
  };
  paths['/cluster'] = {
    get: {
      ...open,
      summary: 'cluster mode: this node\'s view of the cluster (role, leader, epoch, applied and committed positions)',
      responses: { '200': { description: 'the cluster status, JSON', headers: REQUEST_ID_HEADER, content: json({ type: 'object' }) }, '404': errorResponse('not in cluster mode (CLUSTER_POSTGRES_URL is not set)') },
    },
  };
  paths['/metrics'] = {
    get: { ...open, summary: 'Prometheus metrics', responses: { '200': { description: 'Prometheus text format', headers: REQUEST_ID_HEADER, content: { 'text/plain': { schema: { type: 'string' } } } } } },
  };
  paths['/openapi.json'] = { get: { ...open, summary: 'this document', responses: { '200': { description: 'OpenAPI 3.1', headers: REQUEST_ID_HEADER, content: json({ type: 'object' }) } } } };
  return {
    openapi: '3.1.0',
    info: {
      title: 'intake',
      version,
      // JSON Schema counts a string's length in code points; the server counts UTF-16 code
      // units, as Joi's string.max does (CONTRACT §4's messages are Joi's), and no keyword says
      // so: 26 emoji are 26 characters to a generated validator and 52 to the server (a review,
      // 2026-11-29).
      description:
        'Mobile-app analytics and catalog intake. Every write answers 200 only once durably journaled. String lengths (minLength, maxLength) count UTF-16 code units, as Joi does: a character outside the Basic Multilingual Plane (most emoji) counts 2.',
    },
    security: [{ serviceKey: [] }],
    components: {
      securitySchemes: { serviceKey: { type: 'apiKey', in: 'header', name: 'x-service-key', description: 'the service key of a workspace (every write endpoint; missing, unknown or revoked: 401)' } },
      schemas: { ValidationError: plain(ValidationError), Error: plain(ErrorBody), Success: plain(Success), LaunchResult: plain(LaunchResult) },
    },
    paths,
  };
}
