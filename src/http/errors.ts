// The one table of non-validation errors. README's "Errors" list is checked against it by a test.

export interface ErrorSpec {
  readonly type: string;
  readonly status: number;
  readonly statusLine: string;
  readonly message: string;
  /** The body with the default message, serialized once (a 401 or 404 flood costs no stringify). */
  readonly body: string;
}

function spec(type: string, status: number, reason: string, message: string): ErrorSpec {
  return { type, status, statusLine: `${status} ${reason}`, message, body: JSON.stringify({ type, message }) };
}

export const ERRORS = {
  malformedJson: spec('MalformedJsonError', 400, 'Bad Request', 'request body must be a JSON object'),
  idempotencyKey: spec('IdempotencyKeyError', 400, 'Bad Request', 'Idempotency-Key must be 1 to 255 printable ASCII characters (0x21 to 0x7E)'),
  authentication: spec('AuthenticationError', 401, 'Unauthorized', 'missing or invalid x-service-key'),
  notFound: spec('NotFoundError', 404, 'Not Found', 'no such endpoint'),
  methodNotAllowed: spec('MethodNotAllowedError', 405, 'Method Not Allowed', 'method not allowed on this endpoint'),
  rateLimit: spec('RateLimitError', 429, 'Too Many Requests', 'too many requests for this key; retry after the number of seconds in Retry-After'),
  payloadTooLarge: spec('PayloadTooLargeError', 413, 'Payload Too Large', 'request body is larger than the limit of this endpoint'),
  unsupportedMediaType: spec('UnsupportedMediaTypeError', 415, 'Unsupported Media Type', 'content-type must be application/json, text/plain or absent; content-encoding gzip or identity'),
  internal: spec('InternalError', 500, 'Internal Server Error', 'internal error'),
  serviceUnavailable: spec('ServiceUnavailableError', 503, 'Service Unavailable', 'the journal cannot be written; the write was not accepted'),
} as const satisfies Record<string, ErrorSpec>;

export type ErrorName = keyof typeof ERRORS;

/** `{"type": "...", "message": "..."}`, optionally with a more specific message. */
export function errorBody(error: ErrorSpec, message?: string): string {
  return message === undefined || message === error.message ? error.body : JSON.stringify({ type: error.type, message });
}
