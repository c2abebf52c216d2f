// /openapi.json, made from the same TypeBox schemas that validate requests (one source of truth).
import { Type, type TSchema } from '@sinclair/typebox';
import { ERRORS } from '../http/errors.ts';
import { IdParam } from './endpoints.ts';

export interface DocumentedRoute {
  method: 'post' | 'del';
  pattern: string;
  hasParam: boolean;
  limit: 'body' | 'mapping' | 'none';
  doc: { summary: string; body: TSchema | null; launch?: boolean };
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

const ErrorBody = Type.Object({ type: Type.String(), message: Type.String() });
const Success = Type.Object({ success: Type.Literal(true) });
const LaunchResult = Type.Object({
  did: Type.String({ description: 'the device id; new when none usable was sent' }),
  sid: Type.String({ description: 'a new session id' }),
});

/** JSON Schema without TypeBox's symbol keys (JSON round trip drops them). */
function plain(schema: TSchema): unknown {
  return JSON.parse(JSON.stringify(schema));
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: unknown) => ({ 'application/json': { schema } });

function errorResponse(description: string) {
  return { description, content: json(ref('Error')) };
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
        headers: { 'idempotent-replayed': { description: 'present (`true`) when this answer is the replay of an earlier request with the same Idempotency-Key', schema: { type: 'string', enum: ['true'] } } },
        content: json(ref(route.doc.launch ? 'LaunchResult' : 'Success')),
      },
      '400': errorResponse(`${ERRORS.idempotencyKey.message} (IdempotencyKeyError)`),
      '401': errorResponse(ERRORS.authentication.message),
      '422': { description: 'validation error (schema, then references to stored state)', content: json(ref('ValidationError')) },
      '503': errorResponse('the journal cannot be written, or the server is shutting down'),
    };
    if (route.limit !== 'none') {
      responses['400'] = errorResponse('IdempotencyKeyError: a malformed Idempotency-Key; MalformedJsonError: body empty, not JSON, not an object, or not valid gzip');
      responses['413'] = errorResponse(`${ERRORS.payloadTooLarge.message} (the connection is closed)`);
      responses['415'] = errorResponse(ERRORS.unsupportedMediaType.message);
    }
    paths[path] ??= {};
    paths[path]![route.method === 'del' ? 'delete' : 'post'] = {
      summary: route.doc.summary,
      parameters: [...(route.hasParam ? [{ name: 'id', in: 'path', required: true, schema: plain(IdParam) }] : []), IDEMPOTENCY_KEY],
      ...(route.doc.body !== null ? { requestBody: { required: true, content: json(plain(route.doc.body)) } } : {}),
      responses,
    };
  }
  const open = { security: [] };
  paths['/healthz'] = { get: { ...open, summary: 'liveness', responses: { '200': { description: 'the process serves' } } } };
  paths['/readyz'] = {
    get: {
      ...open,
      summary: 'readiness: 200 while writes are accepted',
      responses: { '200': { description: 'ready' }, '503': errorResponse('shutting down or journal failed') },
    },
  };
  paths['/metrics'] = {
    get: { ...open, summary: 'Prometheus metrics', responses: { '200': { description: 'text/plain; version=0.0.4' } } },
  };
  paths['/openapi.json'] = { get: { ...open, summary: 'this document', responses: { '200': { description: 'OpenAPI 3.1' } } } };
  return {
    openapi: '3.1.0',
    info: { title: 'intake', version, description: 'Mobile-app analytics and catalog intake. Every write answers 200 only once durably journaled.' },
    security: [{ serviceKey: [] }],
    components: {
      securitySchemes: { serviceKey: { type: 'apiKey', in: 'header', name: 'x-service-key' } },
      schemas: { ValidationError: plain(ValidationError), Error: plain(ErrorBody), Success: plain(Success), LaunchResult: plain(LaunchResult) },
    },
    paths,
  };
}
