// The 11 write endpoints, each in two halves: `validate` checks its body (and `:id`) with the
// compiled schemas (an edge's work, CONTRACT.md 4xx answers), `apply` hands the valid write to its
// actor (the state's work). One thread runs both; with edge threads or on a follower the valid
// write travels between them as a command (src/handoff/). Big mapping bodies go to a worker raw (mapping-pool.ts) after
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
import { MappingPoolClosedError, type MappingPool } from '../workers/mapping-pool.ts';
import type { MappingTaskResult } from '../workers/mapping-result.ts';
import type { Encoding } from './body.ts';
import type { RouteDoc, WriteRequest, WriteRoute } from './pending-request.ts';

/** Timestamps may arrive as 13-digit strings; the journal and the actors see numbers. */
function normalizeTimestamp(body: Record<string, unknown>): void {
  if (typeof body.timestamp === 'string') body.timestamp = Number(body.timestamp);
}

type Handlers = Pick<WriteRoute, 'validate' | 'apply' | 'offload' | 'handleRaw'>;

function route(
  metrics: Metrics,
  name: string,
  method: WriteRoute['method'],
  pattern: string,
  limit: WriteRoute['limit'],
  doc: RouteDoc,
  handlers: Handlers,
): WriteRoute {
  return { name, method, pattern, limit, hasParam: pattern.includes('/:id'), doc, metrics: metrics.route(name), ...handlers };
}

/** Validates the body; on failure answers 422 and returns false. */
function valid(validator: BodyValidator, request: WriteRequest, body: Record<string, unknown> | null): boolean {
  const details = validator.validate(body);
  if (details === null) return true;
  request.invalid(details);
  return false;
}

export interface RouteDependencies {
  /** The state: null on an edge thread, which only validates (apply is never called there). */
  intake: Intake | null;
  validators: Validators;
  metrics: Metrics;
  /** Null on an edge thread: a body it would offload goes to the state thread raw. */
  pool: MappingPool | null;
  /** Whether a mapping body of this size and encoding goes to a mapping worker raw. */
  offload: (sizeBytes: number, encoding: Encoding) => boolean;
  mappingMaxItems: number;
}

/** The state side of the routes, called only where the state is (never on an edge thread). */
function stateOf(intake: Intake | null): Intake {
  if (intake === null) throw new Error('a write was applied on an edge thread');
  return intake;
}

export function buildWriteRoutes({ intake, validators: v, metrics, pool, offload, mappingMaxItems }: RouteDependencies): WriteRoute[] {
  const withId = (request: WriteRequest, extra: ValidationDetail[] | null): boolean => {
    const idDetails = validateIdParam(v, request.param);
    if (idDetails === null && extra === null) return true;
    request.invalid([...(idDetails ?? []), ...(extra ?? [])].slice(0, MAX_DETAILS));
    return false;
  };
  const devices = () => stateOf(intake).devices;
  const catalog = () => stateOf(intake).catalog;

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
    if (catalog().retried(request)) return;
    return unpackIds(result.text, result.lengths, result.firstIndex, result.packed).then((mapping) =>
      catalog().applyMapping(request.workspace, request.param, add, mapping, request.at, request),
    );
  };

  const mapping = (add: boolean): Handlers => ({
    validate: (request, body) => withId(request, v.mapping.validate(body)),
    apply(request, body) {
      catalog().mapping(request.workspace, request.param, add, (body as Mapping).products, request.at, request);
    },
    offload,
    handleRaw(request, bytes) {
      const parsing = pool!.parse(bytes, request.encoding, request.limitBytes, mappingMaxItems, request.idempotency !== null);
      // Every worker busy and the queue full: 503 at once. No place in line was taken, nothing
      // is kept, and a 503 depends on no write, so it need not wait for the writes before it.
      if (parsing === null) return request.workersBusy(pool!.retryAfterSeconds());
      const idDetails = validateIdParam(v, request.param);
      // The place in line is taken now, on arrival; the worker's result is applied in it, and
      // counts against the pool's limits until its turn comes (mapping-pool.ts).
      const fill = catalog().reserve(request.workspace, request);
      parsing.result.then(
        (result) =>
          fill(() => {
            parsing.release();
            return afterWorker(request, add, idDetails, result);
          }),
        (error: unknown) =>
          fill(() => {
            parsing.release();
            if (error instanceof MappingPoolClosedError) request.refused({ message: error.message, retryAfterSeconds: 1 });
            else request.crashed(error);
          }),
      );
    },
  });

  /** A body route: the edge validates against `validator`; the state applies. */
  const body = (validator: BodyValidator, apply: WriteRoute['apply']): Handlers => ({ validate: (request, b) => valid(validator, request, b), apply });
  /** A route with `:id` and no body. */
  const byId = (apply: WriteRoute['apply']): Handlers => ({ validate: (request) => withId(request, null), apply });

  return [
    route(metrics, 'app_launch', 'post', '/mcrs_appl_v1', 'body', { summary: 'App launch: creates a device when no usable did is sent; returns did and a new sid', body: v.appLaunch.schema, launch: true }, body(v.appLaunch, (request, b) => {
      normalizeTimestamp(b!);
      devices().appLaunch(request.workspace, b as unknown as AppLaunch, request.at, request);
    })),
    route(metrics, 'track_event', 'post', '/msv_cevt', 'body', { summary: 'Track a custom event of an active device', body: v.trackEvent.schema }, body(v.trackEvent, (request, b) => {
      normalizeTimestamp(b!);
      devices().trackEvent(request.workspace, b as unknown as TrackEvent, request.at, request);
    })),
    route(metrics, 'identify', 'post', '/msv_cs_id', 'body', { summary: 'Link a device to a customer and merge customer attributes', body: v.identify.schema }, body(v.identify, (request, b) => {
      normalizeTimestamp(b!);
      devices().identify(request.workspace, b as unknown as Identify, request.at, request);
    })),
    route(metrics, 'logout', 'post', '/logout', 'body', { summary: 'End a device: later requests with its did get device.loggedOut', body: v.logout.schema }, body(v.logout, (request, b) => {
      devices().logout(request.workspace, b as unknown as Logout, request.at, request);
    })),
    route(metrics, 'push_token', 'post', '/mpush_token', 'body', { summary: 'Save the latest push token of a type for a device', body: v.pushToken.schema }, body(v.pushToken, (request, b) => {
      normalizeTimestamp(b!);
      devices().pushToken(request.workspace, b as unknown as PushToken, request.at, request);
    })),
    route(metrics, 'product_upsert', 'post', '/product', 'body', { summary: 'Create or merge-update a product', body: v.product.schema }, body(v.product, (request, b) => {
      catalog().productUpsert(request.workspace, b as unknown as Product, request.at, request);
    })),
    route(metrics, 'product_delete', 'del', '/product/:id', 'none', { summary: 'Delete a product and its memberships (200 whether or not it existed)', body: null }, byId((request) => {
      catalog().productDelete(request.workspace, request.param, request.at, request);
    })),
    route(metrics, 'collection_upsert', 'post', '/collection', 'body', { summary: 'Create or merge-update a collection', body: v.collection.schema }, body(v.collection, (request, b) => {
      catalog().collectionUpsert(request.workspace, b as unknown as Collection, request.at, request);
    })),
    route(metrics, 'collection_delete', 'del', '/collection/:id', 'none', { summary: 'Delete a collection and its memberships (200 whether or not it existed)', body: null }, byId((request) => {
      catalog().collectionDelete(request.workspace, request.param, request.at, request);
    })),
    route(metrics, 'collection_products_add', 'post', '/collection/:id/products/add', 'mapping', { summary: 'Add products to a collection: all exist or nothing changes', body: v.mapping.schema }, mapping(true)),
    route(metrics, 'collection_products_remove', 'post', '/collection/:id/products/remove', 'mapping', { summary: 'Remove products from a collection; non-members are ignored', body: v.mapping.schema }, mapping(false)),
  ];
}
