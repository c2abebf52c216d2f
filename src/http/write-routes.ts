// The 11 write endpoints: each validates its body (and `:id`) with the compiled schemas, then
// hands the write to its actor. Big mapping bodies go to a worker raw (mapping-pool.ts) after
// taking their place in the catalog actor's line.
import type { Intake } from '../actors/intake.ts';
import { unpackIds } from '../actors/mapping-ids.ts';
import { MAX_DETAILS, type ValidationDetail } from '../schemas/details.ts';
import type {
  AppLaunch,
  Collection,
  Identify,
  Logout,
  Mapping,
  Product,
  PushToken,
  TrackEvent,
} from '../schemas/endpoints.ts';
import { validateIdParam, type BodyValidator, type Validators } from '../schemas/validators.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { MappingPool } from '../workers/mapping-pool.ts';
import type { MappingTaskResult } from '../workers/mapping-result.ts';
import type { RouteDoc, WriteRequest, WriteRoute } from './pending-request.ts';

/** Timestamps may arrive as 13-digit strings; the journal and the actors see numbers. */
function normalizeTimestamp(body: Record<string, unknown>): void {
  if (typeof body.timestamp === 'string') body.timestamp = Number(body.timestamp);
}

type Handlers = Pick<WriteRoute, 'handle' | 'offload' | 'handleRaw'>;

function route(
  metrics: Metrics,
  name: string,
  method: WriteRoute['method'],
  pattern: string,
  limit: WriteRoute['limit'],
  doc: RouteDoc,
  handlers: Handlers | WriteRoute['handle'],
): WriteRoute {
  const h = typeof handlers === 'function' ? { handle: handlers } : handlers;
  return { name, method, pattern, limit, hasParam: pattern.includes('/:id'), doc, metrics: metrics.route(name), ...h };
}

/** Validates the body; on failure answers 422 and returns null. */
function valid<T>(validator: BodyValidator, request: WriteRequest, body: Record<string, unknown> | null): T | null {
  const details = validator.validate(body);
  if (details !== null) {
    request.invalid(details);
    return null;
  }
  return body as T;
}

export interface RouteDependencies {
  intake: Intake;
  validators: Validators;
  metrics: Metrics;
  pool: MappingPool;
  mappingMaxItems: number;
}

export function buildWriteRoutes({ intake, validators: v, metrics, pool, mappingMaxItems }: RouteDependencies): WriteRoute[] {
  const { devices, catalog } = intake;
  const withId = (request: WriteRequest, extra: ValidationDetail[] | null): boolean => {
    const idDetails = validateIdParam(v, request.param);
    if (idDetails === null && extra === null) return true;
    request.invalid([...(idDetails ?? []), ...(extra ?? [])].slice(0, MAX_DETAILS));
    return false;
  };

  /** In the catalog's turn, once the worker is done with the body. */
  const afterWorker = (request: WriteRequest, add: boolean, idDetails: ValidationDetail[] | null, result: MappingTaskResult): void | Promise<void> => {
    switch (result.kind) {
      case 'tooLarge':
        return request.payloadTooLarge(result.message);
      case 'malformed':
        return request.malformed(result.message);
      case 'invalid':
        return request.invalid([...(idDetails ?? []), ...result.details].slice(0, MAX_DETAILS));
    }
    if (idDetails !== null) return request.invalid(idDetails);
    if (result.fingerprint !== null) request.idempotency?.fingerprint(result.fingerprint);
    if (catalog.retried(request)) return;
    return unpackIds(result.text, result.lengths, result.firstIndex, result.packed).then((mapping) =>
      catalog.applyMapping(request.workspace, request.param, add, mapping, request.at, request),
    );
  };

  const mapping = (add: boolean): Handlers => ({
    handle(request, body) {
      if (!withId(request, v.mapping.validate(body))) return;
      catalog.mapping(request.workspace, request.param, add, (body as Mapping).products, request.at, request);
    },
    offload: (sizeBytes, encoding) => pool.shouldOffload(sizeBytes, encoding),
    handleRaw(request, bytes) {
      const parsing = pool.parse(bytes, request.encoding, request.limitBytes, mappingMaxItems, request.idempotency !== null);
      // Every worker busy and the queue full: 503 at once. No place in line was taken, nothing
      // is kept, and a 503 depends on no write, so it need not wait for the writes before it.
      if (parsing === null) return request.workersBusy(pool.retryAfterSeconds());
      const idDetails = validateIdParam(v, request.param);
      // The place in line is taken now, on arrival; the worker's result is applied in it.
      const fill = catalog.reserve(request.workspace, request);
      parsing.then(
        (result) => fill(() => afterWorker(request, add, idDetails, result)),
        (error: unknown) => fill(() => request.crashed(error)),
      );
    },
  });

  return [
    route(metrics, 'app_launch', 'post', '/mcrs_appl_v1', 'body', { summary: 'App launch: creates a device when no usable did is sent; returns did and a new sid', body: v.appLaunch.schema, launch: true }, (request, body) => {
      const data = valid<AppLaunch>(v.appLaunch, request, body);
      if (data === null) return;
      normalizeTimestamp(body!);
      devices.appLaunch(request.workspace, data, request.at, request);
    }),
    route(metrics, 'track_event', 'post', '/msv_cevt', 'body', { summary: 'Track a custom event of an active device', body: v.trackEvent.schema }, (request, body) => {
      const data = valid<TrackEvent>(v.trackEvent, request, body);
      if (data === null) return;
      normalizeTimestamp(body!);
      devices.trackEvent(request.workspace, data, request.at, request);
    }),
    route(metrics, 'identify', 'post', '/msv_cs_id', 'body', { summary: 'Link a device to a customer and merge customer attributes', body: v.identify.schema }, (request, body) => {
      const data = valid<Identify>(v.identify, request, body);
      if (data === null) return;
      normalizeTimestamp(body!);
      devices.identify(request.workspace, data, request.at, request);
    }),
    route(metrics, 'logout', 'post', '/logout', 'body', { summary: 'End a device: later requests with its did get device.loggedOut', body: v.logout.schema }, (request, body) => {
      const data = valid<Logout>(v.logout, request, body);
      if (data !== null) devices.logout(request.workspace, data, request.at, request);
    }),
    route(metrics, 'push_token', 'post', '/mpush_token', 'body', { summary: 'Save the latest push token of a type for a device', body: v.pushToken.schema }, (request, body) => {
      const data = valid<PushToken>(v.pushToken, request, body);
      if (data === null) return;
      normalizeTimestamp(body!);
      devices.pushToken(request.workspace, data, request.at, request);
    }),
    route(metrics, 'product_upsert', 'post', '/product', 'body', { summary: 'Create or merge-update a product', body: v.product.schema }, (request, body) => {
      const data = valid<Product>(v.product, request, body);
      if (data !== null) catalog.productUpsert(request.workspace, data, request.at, request);
    }),
    route(metrics, 'product_delete', 'del', '/product/:id', 'none', { summary: 'Delete a product and its memberships (200 whether or not it existed)', body: null }, (request) => {
      if (withId(request, null)) catalog.productDelete(request.workspace, request.param, request.at, request);
    }),
    route(metrics, 'collection_upsert', 'post', '/collection', 'body', { summary: 'Create or merge-update a collection', body: v.collection.schema }, (request, body) => {
      const data = valid<Collection>(v.collection, request, body);
      if (data !== null) catalog.collectionUpsert(request.workspace, data, request.at, request);
    }),
    route(metrics, 'collection_delete', 'del', '/collection/:id', 'none', { summary: 'Delete a collection and its memberships (200 whether or not it existed)', body: null }, (request) => {
      if (withId(request, null)) catalog.collectionDelete(request.workspace, request.param, request.at, request);
    }),
    route(metrics, 'collection_products_add', 'post', '/collection/:id/products/add', 'mapping', { summary: 'Add products to a collection: all exist or nothing changes', body: v.mapping.schema }, mapping(true)),
    route(metrics, 'collection_products_remove', 'post', '/collection/:id/products/remove', 'mapping', { summary: 'Remove products from a collection; non-members are ignored', body: v.mapping.schema }, mapping(false)),
  ];
}
