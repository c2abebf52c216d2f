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

export function buildOpenApi(routes: readonly DocumentedRoute[], version: string): unknown {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = route.pattern.replace(/:([A-Za-z]+)/g, '{$1}');
    const responses: Record<string, unknown> = {
      '200': {
        description: 'accepted and durably journaled',
        content: json(ref(route.doc.launch ? 'LaunchResult' : 'Success')),
      },
      '401': errorResponse(ERRORS.authentication.message),
      '422': { description: 'validation error (schema, then references to stored state)', content: json(ref('ValidationError')) },
      '503': errorResponse('the journal cannot be written, or the server is shutting down'),
    };
    if (route.limit !== 'none') {
      responses['400'] = errorResponse('body empty, not JSON, not an object, or not valid gzip');
      responses['413'] = errorResponse(`${ERRORS.payloadTooLarge.message} (the connection is closed)`);
      responses['415'] = errorResponse(ERRORS.unsupportedMediaType.message);
    }
    paths[path] ??= {};
    paths[path]![route.method === 'del' ? 'delete' : 'post'] = {
      summary: route.doc.summary,
      ...(route.hasParam ? { parameters: [{ name: 'id', in: 'path', required: true, schema: plain(IdParam) }] } : {}),
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
