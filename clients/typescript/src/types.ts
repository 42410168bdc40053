// The shapes the SDK's calls take and give: options of a call, and the request and answer types of
// each route as generated from the API description (public/openapi.json → generated/openapi.ts).
import type { components, paths } from './generated/openapi.js';
import type { RateLimit } from './errors.js';

export type { components, paths };

/** A schema of the API description by name: `Schema<'Contact'>`. */
export type Schema<Name extends keyof components['schemas']> = components['schemas'][Name];

type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';
type Operation<P extends keyof paths, M extends HttpMethod> = NonNullable<paths[P][M]>;
type JsonOf<R> = R extends { content: { 'application/json': infer J } } ? J : undefined;

/** The JSON body a route takes. */
export type RequestBody<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

/** The JSON of a route's success answer (2xx). */
export type ResponseBody<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { responses: infer R }
    ? { [S in keyof R]: S extends 200 | 201 | 202 | 204 ? JsonOf<R[S]> : never }[keyof R]
    : never;

/** The query parameters a route takes. */
export type QueryOf<P extends keyof paths, M extends HttpMethod> =
  Operation<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

/** A page of a list: its items and the cursor of the next page (`null` on the last). */
export interface Page<T> {
  data: T[];
  next_cursor: string | null;
}

/** The item type of a list route. */
export type ItemOf<P extends keyof paths> =
  ResponseBody<P, 'get'> extends { data: (infer T)[] } ? T : never;

/** Options every call takes (each overrides the client's setting for this call only). */
export interface CallOptions {
  /**
   * The `Idempotency-Key` of a mutating call (POST/PUT/PATCH/DELETE); by default a UUIDv4 made
   * once for the call and sent by every retry of it. Pass your own to make a retry of the same
   * business operation (e.g. after a restart) do the work once.
   */
  idempotencyKey?: string;
  /** Attempts for this call, the first included. */
  maxAttempts?: number;
  /** How long one attempt may take, in ms. */
  timeoutMs?: number;
  /** How long the whole call may take, waits and every attempt included, in ms. */
  deadlineMs?: number;
  /** Whether this call waits while its key's window is used up (the client's setting otherwise). */
  pacing?: boolean;
  /** Cancels the call: the attempt in flight and any wait (rejects with the signal's reason). */
  signal?: AbortSignal;
  /** More headers for this call. */
  headers?: Record<string, string>;
}

/** A query value; `undefined` and `null` are left out. */
export type QueryValue = string | number | boolean | null | undefined;

/** Options of {@link Gatehouse.request}. */
export interface RequestOptions extends CallOptions {
  /** Sent as JSON. */
  body?: unknown;
  query?: Record<string, QueryValue> | object;
  /**
   * The request may be repeated without an `Idempotency-Key` (every item carries its own id, as
   * `/v1/track`'s `event_id`): network errors and 5xx are retried like a GET's.
   */
  repeatable?: boolean;
}

/** A successful answer with its envelope. */
export interface Reply<T> {
  status: number;
  headers: Headers;
  /** The parsed JSON body (`undefined` when empty). */
  data: T;
  /** `X-Request-Id`. */
  requestId: string | undefined;
  /** The key's window from `X-RateLimit-*`, when all three headers came. */
  rateLimit: RateLimit | undefined;
  /** Attempts the call took. */
  attempts: number;
}

/** What `onRetry` is told before the client waits. */
export interface RetryInfo {
  /** `retry`: after a failed attempt; `pacing`: before an attempt, while the key's window is used up. */
  reason: 'retry' | 'pacing';
  method: string;
  path: string;
  /** The attempt that failed (`retry`) or is about to be sent (`pacing`). */
  attempt: number;
  maxAttempts: number;
  /** How long the client waits now, in ms. */
  waitMs: number;
  /** The failure of the attempt (`retry` only). */
  error?: Error;
  idempotencyKey: string | undefined;
}

/** Options of `new Gatehouse(…)`. */
export interface GatehouseOptions {
  /** The API key, sent as `Authorization: Bearer …`. */
  apiKey: string;
  /** The gateway, e.g. `https://api.example.com` (no trailing path needed). */
  baseUrl: string;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /** Attempts per call, the first included (default 5; at least 1). */
  maxAttempts?: number;
  /** How long one attempt may take, in ms (default 30 000). A timeout is retried like a network error. */
  timeoutMs?: number;
  /** Told before every wait (a retry's backoff or the slow-down before an attempt). */
  onRetry?: (info: RetryInfo) => void;
  /** Whether calls wait while the last answer said the key's window is used up (default true). */
  pacing?: boolean;
  /** The clock, in Unix ms (default `Date.now`): window resets and `Retry-After` dates. */
  now?: () => number;
  /** How the client waits (default `setTimeout`); tests pass one that moves a test clock. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The jitter's random numbers in [0, 1] (default `Math.random`). */
  random?: () => number;
}
