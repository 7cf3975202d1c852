/**
 * Errors thrown by the onceq client. Every error answer of the server has
 * the body `{"error": "<CODE>", "message": "..."}` (docs/API.md, "Errors");
 * the client throws the class that CODE maps to, all subclasses of
 * {@link OnceqError}. Failing to reach the server is {@link TransportError}.
 */

export interface ErrorInit {
  code: string;
  status: number;
  requestId?: string | undefined;
  retryAfterMs?: number | undefined;
  cause?: unknown;
}

/** Base class of every error the client throws. */
export class OnceqError extends Error {
  /** The server's stable error code (`NOT_FOUND`, ...), or `TRANSPORT`. */
  readonly code: string;
  /** The HTTP status; 0 when no answer was received. */
  readonly status: number;
  /** The answer's `X-Request-Id`, to quote in reports. */
  readonly requestId: string | undefined;

  constructor(message: string, init: ErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status;
    this.requestId = init.requestId;
  }
}

/** 400 INVALID_ARGUMENT: malformed request, or unknown topic on produce/consume. */
export class InvalidArgument extends OnceqError {}
/** 401 UNAUTHENTICATED: no bearer token, or an unknown one. */
export class Unauthorized extends OnceqError {}
/** 403 PERMISSION_DENIED: the token lacks the scope or the topic. */
export class Forbidden extends OnceqError {}
/** 404 NOT_FOUND: unknown topic (topic URLs, ack), path or key. */
export class NotFound extends OnceqError {}
/** 405 METHOD_NOT_ALLOWED (a client bug). */
export class MethodNotAllowed extends OnceqError {}
/** 409: thrown as is for ALREADY_EXISTS; {@link Fenced} for FAILED_PRECONDITION. */
export class Conflict extends OnceqError {}
/**
 * 409 FAILED_PRECONDITION: you no longer hold that delivery (the lease went
 * to another consumer, the attempt or fencing token is not the current one,
 * the key was committed by another delivery). Nothing changed: stop.
 */
export class Fenced extends Conflict {}
/** 413 PAYLOAD_TOO_LARGE. */
export class PayloadTooLarge extends OnceqError {}

/**
 * 503 UNAVAILABLE (shutting down, storage not writable), and the base of
 * {@link ResourceExhausted} (429). Retry after `retryAfterMs`; the client
 * already did, `retries` times, before throwing it.
 */
export class Unavailable extends OnceqError {
  readonly retryAfterMs: number;
  constructor(message: string, init: ErrorInit) {
    super(message, init);
    this.retryAfterMs = init.retryAfterMs ?? 1000;
  }
}
/** 429 RESOURCE_EXHAUSTED: backpressure or a topic limit. */
export class ResourceExhausted extends Unavailable {}
/** 500 INTERNAL: a bug in onceq; report it with `requestId`. */
export class InternalError extends OnceqError {}

/** The server could not be reached, or the connection broke (after retries). */
export class TransportError extends OnceqError {
  constructor(message: string, cause?: unknown) {
    super(message, { code: "TRANSPORT", status: 0, cause });
  }
}

type ErrorClass = new (message: string, init: ErrorInit) => OnceqError;

const byCode: Record<string, ErrorClass> = {
  INVALID_ARGUMENT: InvalidArgument,
  UNAUTHENTICATED: Unauthorized,
  PERMISSION_DENIED: Forbidden,
  NOT_FOUND: NotFound,
  METHOD_NOT_ALLOWED: MethodNotAllowed,
  ALREADY_EXISTS: Conflict,
  FAILED_PRECONDITION: Fenced,
  PAYLOAD_TOO_LARGE: PayloadTooLarge,
  RESOURCE_EXHAUSTED: ResourceExhausted,
  UNAVAILABLE: Unavailable,
  INTERNAL: InternalError,
};

const byStatus: Record<number, ErrorClass> = {
  400: InvalidArgument,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  405: MethodNotAllowed,
  409: Conflict,
  413: PayloadTooLarge,
  429: ResourceExhausted,
  503: Unavailable,
};

/** The error for an answer's status and `{error, message}` body. */
export function makeError(message: string, init: ErrorInit): OnceqError {
  const cls = byCode[init.code] ?? byStatus[init.status] ?? (init.status >= 500 ? InternalError : OnceqError);
  return new cls(message, init);
}
