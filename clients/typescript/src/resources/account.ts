// Who am I, and what was used: `GET /public/v1/me` and the metered usage (`/public/v1/usage`).
import type { Gatehouse } from '../client.js';
import type { CallOptions, QueryOf, ResponseBody } from '../types.js';

export type Me = ResponseBody<'/public/v1/me', 'get'>;
export type UsageQuery = Omit<QueryOf<'/public/v1/usage', 'get'>, 'cursor'>;
export type UsageReport = ResponseBody<'/public/v1/usage', 'get'>;
export type UsageRow = UsageReport extends { data: (infer T)[] } ? T : never;

export class Account {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `GET /public/v1/me`: the key, its project, plan and current window. */
  me(options?: CallOptions): Promise<Me> {
    return this.#gh.request<Me>('GET', '/public/v1/me', options);
  }
}

/** Metered usage for billing (owner keys): `GET /public/v1/usage`. */
export class Usage {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** One report page: totals and rows of the period (`cursor` continues a report with `next_cursor`). */
  get(query: UsageQuery & { cursor?: string } = {}, options?: CallOptions): Promise<UsageReport> {
    return this.#gh.request<UsageReport>('GET', '/public/v1/usage', { ...options, query });
  }

  /** The report's rows across pages. */
  list(query: UsageQuery = {}, options?: CallOptions) {
    return this.#gh.list<UsageRow>('/public/v1/usage', query, options);
  }
}
