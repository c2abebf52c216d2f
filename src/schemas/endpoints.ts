// Request body schemas of the 11 endpoints (interface-spec.md §4 with CONTRACT.md §5's rules).
import { Type, type Static } from '@sinclair/typebox';
import {
  Attributes,
  BoundedString,
  Did,
  NonEmptyString,
  Nullable,
  OneOf,
  Timestamp,
} from './fields.ts';

const closed = { additionalProperties: false } as const;

const LAUNCH_STRING_MAX = 256;
const launchString = () => BoundedString(LAUNCH_STRING_MAX);
const utmValue = () => Type.Optional(Nullable(BoundedString(LAUNCH_STRING_MAX)));

export const LaunchInfo = Type.Object(
  {
    appVersionCode: Type.Number(),
    appVersionName: launchString(),
    sdkVersion: Type.Number(),
    firstTime: Type.Boolean({ description: 'true when this is the first launch' }),
    deviceType: launchString(),
    deviceManufacturer: launchString(),
    deviceModel: launchString(),
    deviceCarrier: launchString(),
    osName: launchString(),
    osVersion: launchString(),
    platform: OneOf(['ANDROID', 'IOS']),
    language: launchString(),
    referrer: Type.Optional(BoundedString(2048, 'traffic source')),
    utmInfo: Type.Optional(Type.Object({ us: utmValue(), um: utmValue(), uc: utmValue() }, closed)),
  },
  closed,
);

export const AppLaunchBody = Type.Object(
  {
    timestamp: Timestamp(),
    info: LaunchInfo,
    did: Type.Optional(Nullable(Did())),
  },
  { ...closed, description: 'absent, null, unknown or logged-out did: a new device is created' },
);

export const TrackEventBody = Type.Object(
  {
    did: Did(),
    name: NonEmptyString(120, 'event name'),
    timestamp: Timestamp(),
    info: Type.Optional(Attributes()),
  },
  closed,
);

/**
 * An identify needs at least one of these (CONTRACT §5). One list, read three ways: validators.ts
 * checks it (object.missing), /openapi.json states it as an anyOf of required lists (openapi.ts
 * turns AT_LEAST_ONE_OF into that), and the Identify type requires one of them. Before
 * 2026-11-29 only the check knew it: the document and the client's type let `{did, timestamp}`
 * through, which the server refuses (found by a review).
 */
export const IDENTIFY_ONE_OF = ['clientCustomerId', 'info'] as const;
/** The schema keyword (an annotation to JSON Schema) listing keys of which one must be present. */
export const AT_LEAST_ONE_OF = 'x-at-least-one-of';

export const IdentifyBody = Type.Object(
  {
    did: Did(),
    clientCustomerId: Type.Optional(NonEmptyString(256, "the customer's id in the caller's system")),
    timestamp: Timestamp(),
    info: Type.Optional(Attributes()),
  },
  { ...closed, description: 'at least one of clientCustomerId and info', [AT_LEAST_ONE_OF]: IDENTIFY_ONE_OF },
);

export const LogoutBody = Type.Object({ did: Did() }, closed);

export const PushTokenBody = Type.Object(
  {
    did: Did(),
    type: OneOf(['fcm', 'apns']),
    token: NonEmptyString(4096),
    timestamp: Timestamp(),
  },
  closed,
);

export const PRODUCT_STATUSES = ['inStock', 'outOfStock'] as const;
const price = () => Type.Optional(Nullable(Type.Number({ minimum: 0 })));

export const ProductBody = Type.Object(
  {
    id: NonEmptyString(50, "the caller's product id"),
    name: Type.Optional(NonEmptyString(2000, 'required when the product is created')),
    image: Type.Optional(Nullable(BoundedString(1000))),
    description: Type.Optional(Nullable(BoundedString(2000))),
    url: Type.Optional(Nullable(BoundedString(1000))),
    price: price(),
    originalHigherPrice: price(),
    vendor: Type.Optional(Nullable(BoundedString(1000))),
    status: Type.Optional(Nullable(OneOf(PRODUCT_STATUSES))),
  },
  { ...closed, description: 'merge-upsert: present fields are set, null clears, absent fields are kept' },
);

export const CollectionBody = Type.Object(
  {
    id: NonEmptyString(50, "the caller's collection id"),
    name: Type.Optional(NonEmptyString(2000, 'required when the collection is created')),
    image: Type.Optional(Nullable(BoundedString(1000))),
    url: Type.Optional(Nullable(BoundedString(1000))),
  },
  { ...closed, description: 'merge-upsert: present fields are set, null clears, absent fields are kept' },
);

export const ID_MAX_LENGTH = 50;
/** The `:id` URL parameter of the DELETE and mapping endpoints, validated like a body id. */
export const IdParam = NonEmptyString(ID_MAX_LENGTH);

export const mappingBody = (maxItems: number) =>
  Type.Object(
    { products: Type.Array(NonEmptyString(ID_MAX_LENGTH), { minItems: 1, maxItems }) },
    { ...closed, description: 'duplicate ids are ignored' },
  );

/** The methods a batch item may have (CONTRACT.md §13): those of the write endpoints. */
export const BATCH_METHODS = ['POST', 'DELETE'] as const;

/** One write of a POST /batch, as it would be sent alone. */
export const BatchItemBody = Type.Object(
  {
    method: OneOf(BATCH_METHODS),
    path: Type.String({
      minLength: 1,
      pattern: '^/',
      description: "the write endpoint's path, :id filled in and percent-encoded as in a URL (e.g. /product/sku%2F1); an unknown path is the item's 404, another endpoint's method its 405",
    }),
    body: Type.Optional(Type.Unknown({ description: 'the body the request alone would send: a JSON object; absent for DELETE' })),
    idempotencyKey: Type.Optional(
      Type.String({ description: 'the Idempotency-Key the request alone would send (same scope: workspace, method, path); a malformed one is the item\'s 400 IdempotencyKeyError' }),
    ),
  },
  closed,
);

export const batchBody = (maxItems: number) =>
  Type.Object(
    { requests: Type.Array(BatchItemBody, { minItems: 1, maxItems }) },
    { ...closed, description: 'writes applied in order, each exactly as if sent alone' },
  );

/** The 200 answer of a POST /batch: one result per item, in item order. */
export const BatchResults = Type.Object({
  results: Type.Array(
    Type.Object({
      status: Type.Integer({ description: 'the status the item would get alone: 200, 400, 404, 405, 413, 422, or 500/503' }),
      body: Type.Object({}, { additionalProperties: true, description: 'the body the item would get alone: {"success": true}, {"did", "sid"}, an error body or a ValidationError' }),
      replayed: Type.Optional(Type.Literal(true, { description: 'present when the item was answered from its Idempotency-Key' })),
    }),
  ),
});

export type BatchItem = Static<typeof BatchItemBody>;
export type BatchResult = Static<typeof BatchResults>['results'][number];

export type AppLaunch = Static<typeof AppLaunchBody>;
export type TrackEvent = Static<typeof TrackEventBody>;
/** `T` with at least one of the keys `K` present. */
type WithOneOf<T, K extends keyof T> = T & { [P in K]: { [Q in P]-?: Exclude<T[Q], undefined> } }[K];
export type Identify = WithOneOf<Static<typeof IdentifyBody>, (typeof IDENTIFY_ONE_OF)[number]>;
export type Logout = Static<typeof LogoutBody>;
export type PushToken = Static<typeof PushTokenBody>;
export type Product = Static<typeof ProductBody>;
export type Collection = Static<typeof CollectionBody>;
export type Mapping = Static<ReturnType<typeof mappingBody>>;
export type LaunchInfoValue = Static<typeof LaunchInfo>;
