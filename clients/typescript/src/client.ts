// The client: configuration, and the send loop every call goes through — an `Idempotency-Key`
// made once per logical mutating call and reused by every retry, the proactive slow-down while a
// key's window is used up, per-attempt timeouts inside the call's deadline, and the retry rules of
// ./retry.ts. The same loop as the Rust SDK's `Client::execute` (crates/gatehouse-client), held to
// the same table (clients/contract/retry.json).
import { errorFromAnswer, GatehouseError, noAnswerError, rateLimitOf } from './errors.js';
import { List } from './pages.js';
import { DEFAULT_MAX_ATTEMPTS, nextWait, pacingWait, parseRetryAfter, type Failure } from './retry.js';
import { Account, Usage } from './resources/account.js';
import { Contacts, Messages, Scenarios, Bulk } from './resources/contacts.js';
import { Identities } from './resources/identities.js';
import { Keys } from './resources/keys.js';
import { Events, Logs } from './resources/logs.js';
import { Releases } from './resources/releases.js';
import { Webhooks } from './resources/webhooks.js';
import { uuid } from './uuid.js';
import { Tracker, type FlushResult, type Ids, type TrackerOptions } from './tracker/tracker.js';
import type { CallOptions, GatehouseOptions, Page, QueryValue, Reply, RequestOptions, RetryInfo } from './types.js';

/** The default time one attempt may take, in ms. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** What the server last said about one key's window. */
interface Window {
  remaining: number;
  /** Unix seconds of the window's end. */
  reset: number;
}

/** What every client made by {@link Gatehouse.withKey} shares with the one it came from. */
interface Shared {
  baseUrl: string;
  fetch: typeof fetch;
  maxAttempts: number;
  timeoutMs: number;
  pacing: boolean;
  now: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  random: () => number;
  onRetry: ((info: RetryInfo) => void) | undefined;
  /** Windows by API key. */
  windows: Map<string, Window>;
  options: ClientOptions;
}

/** Options of `new Gatehouse(…)`, the event tracker's included. */
export interface ClientOptions extends GatehouseOptions {
  /** How `gh.track()` and friends queue and send events (the client's key, URL, fetch and clock otherwise). */
  tracker?: Partial<TrackerOptions>;
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = (): void => {
      signal?.removeEventListener('abort', abort);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    const abort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}

/** The path with every `{name}` replaced by its URL-encoded value. */
export function pathOf(template: string, params: Record<string, string>): string {
  return template.replace(/\{([a-z_]+)\}/g, (_, name: string) => {
    const value = params[name];
    if (value === undefined || value === '') throw new TypeError(`${template}: ${name} is required`);
    return encodeURIComponent(value);
  });
}

/** One attempt's answer, read in full. */
interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * A Gatehouse API client.
 *
 * ```ts
 * const gh = new Gatehouse({ apiKey: process.env.GATEHOUSE_KEY!, baseUrl: 'https://api.example.com' });
 * const contact = await gh.contacts.create({ name: 'Ada', email: 'ada@example.com' });
 * for await (const c of gh.contacts.list()) console.log(c.id);
 * ```
 */
export class Gatehouse {
  readonly #apiKey: string;
  #shared: Shared;
  #tracker: Tracker | undefined;

  /** Contacts (`/public/v1/contacts`). */
  readonly contacts: Contacts;
  /** Messages (`/public/v1/messages`). */
  readonly messages: Messages;
  /** Scenarios (`/public/v1/scenarios`). */
  readonly scenarios: Scenarios;
  /** The bulk routes: up to 100 contacts or messages in one call. */
  readonly bulk: Bulk;
  /** API keys of the project (owner keys). */
  readonly keys: Keys;
  /** Identities: a project's users and what they may do (owner keys). */
  readonly identities: Identities;
  /** Webhook subscriptions, their deliveries, resends and tests (owner keys). */
  readonly webhooks: Webhooks;
  /** The audit log (owner keys). */
  readonly logs: Logs;
  /** Stored analytics events (owner keys). */
  readonly events: Events;
  /** Metered usage (owner keys). */
  readonly usage: Usage;
  /** Release markers (`cicd` keys). */
  readonly releases: Releases;
  readonly #account: Account;

  constructor(options: ClientOptions) {
    if (typeof options?.apiKey !== 'string' || options.apiKey === '') {
      throw new TypeError('Gatehouse: apiKey is required');
    }
    if (typeof options.baseUrl !== 'string' || !/^https?:\/\//i.test(options.baseUrl)) {
      throw new TypeError('Gatehouse: baseUrl must be an http(s) URL');
    }
    const custom = options.fetch;
    this.#apiKey = options.apiKey;
    this.#shared = {
      baseUrl: options.baseUrl.replace(/\/+$/, ''),
      // Called unbound (`window.fetch` refuses another `this`), the global one looked up per call.
      fetch: custom ? (input, init) => custom(input, init) : (input, init) => globalThis.fetch(input, init),
      maxAttempts: Math.max(1, Math.floor(options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS)),
      timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      pacing: options.pacing ?? true,
      now: options.now ?? Date.now,
      sleep: options.sleep ?? defaultSleep,
      random: options.random ?? Math.random,
      onRetry: options.onRetry,
      windows: new Map(),
      options,
    };
    this.#account = new Account(this);
    this.contacts = new Contacts(this);
    this.messages = new Messages(this);
    this.scenarios = new Scenarios(this);
    this.bulk = new Bulk(this);
    this.keys = new Keys(this);
    this.identities = new Identities(this);
    this.webhooks = new Webhooks(this);
    this.logs = new Logs(this);
    this.events = new Events(this);
    this.usage = new Usage(this);
    this.releases = new Releases(this);
  }

  /** The same client acting with another API key: same settings, same rate-window knowledge. */
  withKey(apiKey: string): Gatehouse {
    const other = new Gatehouse({ ...this.#shared.options, apiKey });
    other.#shared = this.#shared;
    return other;
  }

  /** The gateway's base URL, without a trailing slash. */
  get baseUrl(): string {
    return this.#shared.baseUrl;
  }

  /** The clock and the waits this client uses (its `now` and `sleep` options). */
  get timing(): { now: () => number; sleep: (ms: number, signal?: AbortSignal) => Promise<void> } {
    return { now: this.#shared.now, sleep: this.#shared.sleep };
  }

  /** `GET /public/v1/me`: the key, its project, plan and current window. */
  me(options?: CallOptions) {
    return this.#account.me(options);
  }

  /**
   * Any route, with the SDK's retry rules and automatic `Idempotency-Key`: the answer's JSON.
   * For routes without a typed call.
   *
   * ```ts
   * const stats = await gh.request('GET', '/public/v1/keys/key_123/stats', { query: { days: 7 } });
   * ```
   */
  async request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    return (await this.send<T>(method, path, options)).data;
  }

  /** A list route's items across pages (`query` without `cursor`; the list adds it). */
  list<T>(path: string, query: object = {}, options: CallOptions = {}): List<T> {
    return new List<T>((cursor) =>
      this.request<Page<T>>('GET', path, { ...options, query: { ...query, cursor } }),
    );
  }

  /**
   * Any route, answered with its envelope: status, headers, request id, rate window, attempts.
   * Rejects with a {@link GatehouseError} when the call fails for good.
   */
  async send<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<Reply<T>> {
    const shared = this.#shared;
    const verb = method.toUpperCase();
    if (!path.startsWith('/')) throw new TypeError(`a path starts with '/': ${path}`);
    const mutating = verb !== 'GET' && verb !== 'HEAD';
    // Made once for the logical call: every retry below sends the same key.
    const idempotencyKey = options.idempotencyKey ?? (mutating ? uuid() : undefined);
    const idempotent = !mutating || idempotencyKey !== undefined || options.repeatable === true;
    const maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? shared.maxAttempts));
    const deadline = options.deadlineMs === undefined ? undefined : shared.now() + options.deadlineMs;
    const timeLeft = (): number | undefined => (deadline === undefined ? undefined : deadline - shared.now());
    const { signal } = options;
    const url = this.#url(path, options.query);
    const headers = new Headers(options.headers);
    headers.set('authorization', `Bearer ${this.#apiKey}`);
    headers.set('accept', 'application/json');
    if (idempotencyKey !== undefined) headers.set('idempotency-key', idempotencyKey);
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers.set('content-type', 'application/json');
    }
    const tell = (info: Omit<RetryInfo, 'method' | 'path' | 'maxAttempts' | 'idempotencyKey'>): void => {
      shared.onRetry?.({ ...info, method: verb, path, maxAttempts, idempotencyKey });
    };

    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      if (options.pacing ?? shared.pacing) {
        const windowWait = this.#windowWait();
        // Waiting belongs to the call's budget: a call allowed one attempt, or whose deadline ends
        // first, is sent now and gets the server's answer instead of being held.
        const wait = windowWait === undefined ? undefined : pacingWait(windowWait, shared.random(), maxAttempts, timeLeft());
        if (wait !== undefined) {
          tell({ reason: 'pacing', attempt, waitMs: wait });
          await shared.sleep(wait, signal);
        }
      }
      let error: GatehouseError;
      let failure: Failure;
      let retryAfterMs: number | undefined;
      try {
        const answer = await this.#attempt(verb, url, headers, body, options.timeoutMs, timeLeft(), signal);
        this.#observe(answer.headers);
        if (answer.status >= 200 && answer.status < 300) return this.#reply<T>(answer, attempt);
        retryAfterMs = parseRetryAfter(answer.headers.get('retry-after'), shared.now());
        error = errorFromAnswer(answer.status, answer.headers, answer.text, retryAfterMs);
        failure = { status: error.status, code: error.code, retryable: error.retryable };
      } catch (thrown) {
        if (signal?.aborted) throw signal.reason;
        if (thrown instanceof GatehouseError) throw thrown; // an unreadable success answer
        const timeout = (thrown as { timedOut?: boolean }).timedOut === true;
        error = noAnswerError(timeout, (thrown as { cause?: unknown }).cause ?? thrown);
        failure = timeout ? 'timeout' : 'network';
      }
      const wait = nextWait(attempt, maxAttempts, failure, idempotent, retryAfterMs, shared.random(), timeLeft());
      if (wait === undefined) throw error;
      tell({ reason: 'retry', attempt, waitMs: wait, error });
      await shared.sleep(wait, signal);
    }
  }

  /** One attempt: sent, and its body read, within the attempt's time. */
  async #attempt(
    method: string,
    url: string,
    headers: Headers,
    body: string | undefined,
    timeoutMs: number | undefined,
    timeLeft: number | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Answer> {
    const limit = Math.max(0, Math.min(timeoutMs ?? this.#shared.timeoutMs, timeLeft ?? Number.POSITIVE_INFINITY));
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new DOMException(`the attempt took more than ${limit} ms`, 'TimeoutError'));
    }, limit);
    const cancel = (): void => controller.abort(signal?.reason);
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      const init: RequestInit = { method, headers, redirect: 'manual', signal: controller.signal };
      if (body !== undefined) init.body = body;
      const response = await this.#shared.fetch(url, init);
      const text = await response.text();
      return { status: response.status, headers: response.headers, text };
    } catch (cause) {
      const name = (cause as { name?: unknown } | null)?.name;
      // A fetch that gave up on its own time (AbortSignal.timeout, a runtime's limit) is a timeout too.
      const timeout = timedOut || name === 'TimeoutError' || (name === 'AbortError' && !signal?.aborted);
      throw Object.assign(new Error('no answer', { cause }), { timedOut: timeout });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', cancel);
    }
  }

  #reply<T>(answer: Answer, attempts: number): Reply<T> {
    let data: unknown;
    if (answer.text.trim() !== '') {
      try {
        data = JSON.parse(answer.text);
      } catch {
        throw new GatehouseError({
          status: answer.status,
          code: 'INVALID_RESPONSE',
          message: `the answer is not JSON: ${answer.text.slice(0, 100)}`,
          requestId: answer.headers.get('x-request-id') ?? undefined,
          retryable: false,
        });
      }
    }
    return {
      status: answer.status,
      headers: answer.headers,
      data: data as T,
      requestId: answer.headers.get('x-request-id') ?? undefined,
      rateLimit: rateLimitOf(answer.headers),
      attempts,
    };
  }

  /** Remembers an answer's `X-RateLimit-Remaining` / `-Reset` (both must be numeric). */
  #observe(headers: Headers): void {
    const remaining = headers.get('x-ratelimit-remaining')?.trim();
    const reset = headers.get('x-ratelimit-reset')?.trim();
    if (remaining === undefined || reset === undefined || !/^[0-9]+$/.test(remaining) || !/^[0-9]+$/.test(reset)) return;
    this.#shared.windows.set(this.#apiKey, { remaining: Number(remaining), reset: Number(reset) });
  }

  /** How long until this key's window resets, while the last answer said none remain. */
  #windowWait(): number | undefined {
    const window = this.#shared.windows.get(this.#apiKey);
    if (window === undefined || window.remaining > 0) return undefined;
    const wait = window.reset * 1000 - this.#shared.now();
    return wait > 0 ? wait : undefined;
  }

  #url(path: string, query: RequestOptions['query']): string {
    const [route, raw] = path.split('?', 2) as [string, string | undefined];
    const params = new URLSearchParams(raw ?? '');
    for (const [name, value] of Object.entries((query ?? {}) as Record<string, QueryValue>)) {
      if (value !== undefined && value !== null) params.append(name, String(value));
    }
    const search = params.toString();
    return `${this.#shared.baseUrl}${route}${search === '' ? '' : `?${search}`}`;
  }

  // The event tracker (./tracker): one per client, made on first use from this client's key, URL,
  // fetch and clock plus its `tracker` options.

  /** The client's event tracker (made on first use). */
  get tracker(): Tracker {
    if (this.#tracker === undefined) {
      const { options } = this.#shared;
      const made: TrackerOptions = { apiKey: this.#apiKey, baseUrl: this.#shared.baseUrl, maxAttempts: this.#shared.maxAttempts };
      if (options.fetch !== undefined) made.fetch = options.fetch;
      if (options.now !== undefined) made.now = options.now;
      if (options.sleep !== undefined) made.sleep = options.sleep;
      if (options.random !== undefined) made.random = options.random;
      this.#tracker = new Tracker({ ...made, ...options.tracker, apiKey: this.#apiKey, baseUrl: this.#shared.baseUrl });
    }
    return this.#tracker;
  }

  /** Queues an event (`POST /v1/track`); its `event_id` (UUIDv4, returned) is kept across retries. */
  track(event: string, properties?: Record<string, unknown>, ids?: Ids): string {
    return this.tracker.track(event, properties, ids);
  }

  /** Queues an identify (`POST /v1/identify`): this visitor is `userId`, with `traits`. */
  identify(userId: string, traits?: Record<string, unknown>): void {
    this.tracker.identify(userId, traits);
  }

  /** Queues an alias (`POST /v1/alias`): `previousId` and `userId` are the same person. */
  alias(previousId: string, userId: string): void {
    this.tracker.alias(previousId, userId);
  }

  /** Sends every queued event now. */
  flush(): Promise<FlushResult> {
    return this.tracker.flush();
  }

  /** Stops the tracker's timers and listeners (nothing to do when it was never used). */
  async close(): Promise<void> {
    await this.#tracker?.close();
  }
}
