// When to retry and how long to wait: the retry contract of every Gatehouse SDK (the Rust crate
// gatehouse-client has the same functions; clients/contract/retry.json holds both to it). Pure
// functions of the failure, the time and a random number.

/** The first exponential wait, in ms; each later one doubles it, up to {@link MAX_BACKOFF_MS}. */
export const FIRST_BACKOFF_MS = 1_000;
/** The ceiling of the exponential wait, in ms. */
export const MAX_BACKOFF_MS = 30_000;
/** How many attempts a call makes by default, the first included. */
export const DEFAULT_MAX_ATTEMPTS = 5;

/** Why an attempt did not succeed, as far as the retry decision cares. */
export type Failure =
  | { status: number; code: string; retryable: boolean }
  | 'timeout'
  | 'network';

/**
 * Whether a failed attempt may be tried again. `idempotent`: a GET or HEAD, or a request that
 * carries an `Idempotency-Key` (or, for `/v1/track`, an `event_id` on every item).
 *
 * | failure | retried |
 * |---|---|
 * | 429 that is not a quota (`RATE_LIMIT_EXCEEDED`) | always |
 * | 429 `*QUOTA*` | never: it lasts until the month ends |
 * | 409 with `retryable: true` | always |
 * | 500 | always (the server promises nothing was done) |
 * | 408, 502, 503, 504, timeouts, network errors | only when idempotent |
 * | anything else | never |
 */
export function shouldRetry(failure: Failure, idempotent: boolean): boolean {
  if (failure === 'timeout' || failure === 'network') return idempotent;
  switch (failure.status) {
    case 429:
      return !failure.code.includes('QUOTA');
    case 409:
      return failure.retryable;
    case 500:
      return true;
    case 408:
    case 502:
    case 503:
    case 504:
      return idempotent;
    default:
      return false;
  }
}

/**
 * The wait in ms after failed attempt number `attempt` (1 for the first failure): `retryAfterMs`
 * plus up to 10 % (`random` × 10 %) when the server said when to come back; otherwise 1 s doubling
 * per attempt up to 30 s, times a factor in [0.5, 1].
 */
export function retryDelay(attempt: number, retryAfterMs: number | undefined, random: number): number {
  const r = Math.min(Math.max(random, 0), 1);
  if (retryAfterMs !== undefined) return retryAfterMs * (1 + 0.1 * r);
  const doublings = Math.min(Math.max(attempt - 1, 0), 16);
  const base = Math.min(FIRST_BACKOFF_MS * 2 ** doublings, MAX_BACKOFF_MS);
  return base * (0.5 + 0.5 * r);
}

/**
 * A `Retry-After` value as ms from `nowMs`: delay-seconds (`"2"`) or an HTTP date (a date in the
 * past is no wait). Anything else is `undefined`.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs: number): number | undefined {
  const text = (value ?? '').trim();
  if (text === '') return undefined;
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  // IMF-fixdate only (`Mon, 30 Nov 2026 16:00:07 GMT`), as HTTP sends it.
  if (!/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(at - nowMs, 0);
}

/**
 * What the send loop does after failed attempt `attempt`: the wait before the next one, or
 * `undefined` to give up (attempts spent, a failure that is never retried, or a wait that would
 * end after the call's deadline — `timeLeftMs`, `undefined` without one).
 */
export function nextWait(
  attempt: number,
  maxAttempts: number,
  failure: Failure,
  idempotent: boolean,
  retryAfterMs: number | undefined,
  random: number,
  timeLeftMs: number | undefined,
): number | undefined {
  const wait = retryDelay(attempt, retryAfterMs, random);
  if (attempt >= maxAttempts || !shouldRetry(failure, idempotent)) return undefined;
  if (timeLeftMs !== undefined && wait >= timeLeftMs) return undefined;
  return wait;
}

/**
 * The proactive slow-down before an attempt: `windowWaitMs` (until the key's window resets, while
 * the last answer said none remain) plus up to 10 %, when the call may wait — more than one
 * attempt allowed and the wait ends before its deadline; otherwise the call is sent now.
 */
export function pacingWait(
  windowWaitMs: number | undefined,
  random: number,
  maxAttempts: number,
  timeLeftMs: number | undefined,
): number | undefined {
  if (windowWaitMs === undefined || windowWaitMs <= 0) return undefined;
  const wait = windowWaitMs * (1 + 0.1 * Math.min(Math.max(random, 0), 1));
  if (maxAttempts <= 1 || (timeLeftMs !== undefined && wait >= timeLeftMs)) return undefined;
  return wait;
}
