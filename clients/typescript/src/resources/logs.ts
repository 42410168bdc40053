// The audit log (owner keys): a page, every page by cursor, one request by id, and a tail that
// follows new rows as they arrive (as `gatehouse logs tail` does). And the stored analytics events
// (`GET /public/v1/events`, newest first).
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, Page, QueryOf, Schema } from '../types.js';

export type LogEntry = Schema<'AuditRow'>;
export type LogFilters = Omit<QueryOf<'/public/v1/logs', 'get'>, 'cursor'>;
export type StoredEvent = Schema<'StoredEvent'>;
export type EventFilters = Omit<QueryOf<'/public/v1/events', 'get'>, 'cursor'>;

/** How far back each poll of a tail looks again, for rows written late (ms). */
const LOOKBACK_MS = 120_000;

export interface TailOptions {
  /** Stops the tail (the iteration ends). */
  signal?: AbortSignal;
  /** The least time between polls, in ms (default 3000); a nearly spent window stretches it. */
  intervalMs?: number;
  /** Filters of `GET /public/v1/logs` (`from`, `limit` and `cursor` are the tail's). */
  filters?: Omit<LogFilters, 'from' | 'limit'>;
}

export class Logs {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** The rows matching `filters`, newest first, across pages: `for await (const row of gh.logs.list())`. */
  list(filters: LogFilters = {}, options?: CallOptions) {
    return this.#gh.list<LogEntry>('/public/v1/logs', filters, options);
  }

  /** The pages of {@link list}. */
  pages(filters: LogFilters = {}, options?: CallOptions): AsyncGenerator<Page<LogEntry>, void, undefined> {
    return this.list(filters, options).pages();
  }

  /** `GET /public/v1/logs/{request_id}`: one request's row. */
  get(requestId: string, options?: CallOptions): Promise<LogEntry> {
    const path = pathOf('/public/v1/logs/{request_id}', { request_id: requestId });
    return this.#gh.request<LogEntry>('GET', path, options);
  }

  /**
   * New rows as they are written, oldest first, until `signal` aborts. Polls at most every
   * `intervalMs`, and spends at most a third of what the key's window has left.
   */
  tail(options: TailOptions = {}): AsyncGenerator<LogEntry, void, undefined> {
    // Rows from the moment of this call on, whenever the iteration starts.
    return this.#follow(options, this.#gh.timing.now());
  }

  async *#follow(options: TailOptions, since: number): AsyncGenerator<LogEntry, void, undefined> {
    const { signal, intervalMs = 3000, filters = {} } = options;
    const { now, sleep } = this.#gh.timing;
    const seen = new Map<string, number>();
    let pause = intervalMs;
    for (let first = true; !signal?.aborted; first = false) {
      if (!first) {
        try {
          await sleep(pause, signal);
        } catch (e) {
          if (signal?.aborted) return;
          throw e;
        }
      }
      const newest = Math.max(since, ...seen.values());
      const query = { ...filters, from: String(Math.max(since, newest - LOOKBACK_MS)), limit: 200 };
      const fresh: LogEntry[] = [];
      let cursor: string | undefined;
      do {
        let reply;
        try {
          reply = await this.#gh.send<Page<LogEntry>>('GET', '/public/v1/logs', { ...(signal ? { signal } : {}), query: { ...query, cursor } });
        } catch (e) {
          if (signal?.aborted) return;
          throw e;
        }
        pause = pauseFor(intervalMs, reply.rateLimit, now());
        // The tail's own reads are rows too: never show them.
        if (reply.requestId !== undefined) seen.set(reply.requestId, now());
        for (const row of reply.data.data) if (!seen.has(row.request_id)) fresh.push(row);
        cursor = reply.data.next_cursor ?? undefined;
      } while (cursor !== undefined);
      fresh.sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : a.request_id < b.request_id ? -1 : 1));
      for (const row of fresh) seen.set(row.request_id, Date.parse(row.ts) || now());
      const forgetBefore = Math.max(since, ...seen.values()) - 2 * LOOKBACK_MS;
      for (const [id, at] of seen) if (at < forgetBefore) seen.delete(id);
      for (const row of fresh) {
        if (signal?.aborted) return;
        yield row;
      }
    }
  }
}

/** The pause before the next poll: the interval, or the window's time left over a third of its requests. */
function pauseFor(intervalMs: number, window: { remaining: number; reset: number } | undefined, nowMs: number): number {
  if (window === undefined) return intervalMs;
  const toReset = Math.max(0, window.reset * 1000 - nowMs);
  return Math.max(intervalMs, toReset / Math.max(1, Math.floor(window.remaining / 3)));
}

/** Stored analytics events (owner keys), newest first, within the window the events table keeps. */
export class Events {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `GET /public/v1/events?from&to&event&user_id&anonymous_id&limit`, across pages. */
  list(filters: EventFilters = {}, options?: CallOptions) {
    return this.#gh.list<StoredEvent>('/public/v1/events', filters, options);
  }
}
