// What a call fails with: an error answer of the API (SPEC §3: `{"error":{code, message,
// request_id, retryable, details}}`), or no usable answer at all (status 0, `NETWORK_ERROR` or
// `TIMEOUT`). The same fields as the Rust SDK's error (`gatehouse-client`'s `Error`).

/** A key's rate window as an answer's `X-RateLimit-*` headers gave it. */
export interface RateLimit {
  /** `X-RateLimit-Limit`: requests the window allows. */
  limit: number;
  /** `X-RateLimit-Remaining`. */
  remaining: number;
  /** `X-RateLimit-Reset`: the window's end, in Unix seconds. */
  reset: number;
}

/** The fields a {@link GatehouseError} is made of. */
export interface GatehouseErrorInit {
  status: number;
  code: string;
  message: string;
  requestId?: string | undefined;
  retryable: boolean;
  retryAfter?: number | undefined;
  details?: Record<string, unknown> | undefined;
  rateLimit?: RateLimit | undefined;
  cause?: unknown;
}

/**
 * A call that did not succeed, after every retry it was allowed.
 *
 * ```ts
 * try { await gh.contacts.create({ name: 'Ada' }); }
 * catch (e) { if (e instanceof GatehouseError && e.code === 'QUOTA_EXCEEDED') … }
 * ```
 */
export class GatehouseError extends Error {
  /** The HTTP status; 0 when no answer came (network error, timeout). */
  readonly status: number;
  /**
   * The API's error code (`RATE_LIMIT_EXCEEDED`, `VALIDATION_ERROR`, …); `HTTP_<status>` for an
   * answer without the API's error body; `NETWORK_ERROR` or `TIMEOUT` when no answer came.
   */
  readonly code: string;
  /** `X-Request-Id` of the answer (or the body's `request_id`): quote it when asking about a request. */
  readonly requestId: string | undefined;
  /** Whether trying the same call again later may succeed (the API's flag; true without an answer). */
  readonly retryable: boolean;
  /** `Retry-After` of the answer, in seconds (from delay-seconds or an HTTP date). */
  readonly retryAfter: number | undefined;
  /** Extra facts, e.g. `{"field":"email"}` on a 422 or `{"window","limit","remaining","reset"}` on a 429. */
  readonly details: Record<string, unknown>;
  /** The key's window from `X-RateLimit-*`, when the answer had all three headers. */
  readonly rateLimit: RateLimit | undefined;

  constructor(init: GatehouseErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'GatehouseError';
    this.status = init.status;
    this.code = init.code;
    this.requestId = init.requestId;
    this.retryable = init.retryable;
    this.retryAfter = init.retryAfter;
    this.details = init.details ?? {};
    this.rateLimit = init.rateLimit;
  }

  /** The error in the API's JSON shape (what the CLI prints), for logs. */
  toJSON(): Record<string, unknown> {
    return {
      error: {
        status: this.status,
        code: this.code,
        message: this.message,
        request_id: this.requestId ?? null,
        retryable: this.retryable,
        details: this.details,
        ...(this.retryAfter === undefined ? {} : { retry_after: this.retryAfter }),
      },
    };
  }
}

/** The window from an answer's headers; undefined unless all three are there and numeric. */
export function rateLimitOf(headers: Headers): RateLimit | undefined {
  const number = (name: string): number | undefined => {
    const text = headers.get(name)?.trim();
    return text !== undefined && /^[0-9]+$/.test(text) ? Number(text) : undefined;
  };
  const limit = number('x-ratelimit-limit');
  const remaining = number('x-ratelimit-remaining');
  const reset = number('x-ratelimit-reset');
  if (limit === undefined || remaining === undefined || reset === undefined) return undefined;
  return { limit, remaining, reset };
}

/**
 * An error answer read into its fields; a body that is not the API's error shape still makes an
 * error (`HTTP_<status>`, the body's start as the message), as from a proxy in front of the gateway.
 */
export function errorFromAnswer(
  status: number,
  headers: Headers,
  text: string,
  retryAfterMs: number | undefined,
): GatehouseError {
  const headerId = headers.get('x-request-id') ?? undefined;
  const common = {
    status,
    retryAfter: retryAfterMs === undefined ? undefined : retryAfterMs / 1000,
    rateLimit: rateLimitOf(headers),
  };
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const error = isObject(body) ? body['error'] : undefined;
  if (isObject(error) && typeof error['code'] === 'string') {
    const requestId = typeof error['request_id'] === 'string' ? error['request_id'] : headerId;
    return new GatehouseError({
      ...common,
      code: error['code'],
      message: typeof error['message'] === 'string' ? error['message'] : '',
      requestId,
      retryable: error['retryable'] === true,
      details: isObject(error['details']) ? error['details'] : {},
    });
  }
  return new GatehouseError({
    ...common,
    code: `HTTP_${status}`,
    message: text.slice(0, 200).trim() || `HTTP ${status}`,
    requestId: headerId,
    retryable: false,
  });
}

/** No answer: the connection failed, or the attempt's time ran out. */
export function noAnswerError(timeout: boolean, cause: unknown): GatehouseError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return new GatehouseError({
    status: 0,
    code: timeout ? 'TIMEOUT' : 'NETWORK_ERROR',
    message: timeout ? `no answer in time: ${why}` : `no answer: ${why}`,
    retryable: true,
    cause,
  });
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
