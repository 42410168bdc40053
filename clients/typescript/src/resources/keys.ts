// A project's API keys (owner keys): create, list, change, revoke, roll, and what they did.
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, QueryOf, RequestBody, ResponseBody, Schema } from '../types.js';

export type Key = Schema<'Key'>;
export type KeyCreated = Schema<'KeyCreated'>;
export type NewKey = RequestBody<'/public/v1/keys', 'post'>;
export type KeyChanges = RequestBody<'/public/v1/keys/{id}', 'patch'>;
export type KeyStats = Schema<'KeyStats'>;
export type KeyRolled = ResponseBody<'/public/v1/keys/{id}/roll', 'post'>;
export type KeyRevoked = ResponseBody<'/public/v1/keys/{id}', 'delete'>;
export type KeysLastUsed = ResponseBody<'/public/v1/keys/last-used', 'get'>;
export type KeyListQuery = Omit<QueryOf<'/public/v1/keys', 'get'>, 'cursor'>;

export class Keys {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/keys`: the answer's `key` is the secret, shown this once. */
  create(key: NewKey, options?: CallOptions): Promise<KeyCreated> {
    return this.#gh.request<KeyCreated>('POST', '/public/v1/keys', { ...options, body: key });
  }

  /** Every key of the project, across pages. */
  list(query: KeyListQuery = {}, options?: CallOptions) {
    return this.#gh.list<Key>('/public/v1/keys', query, options);
  }

  /** One key by id (the API has no single-key route: found by listing). */
  async get(id: string, options?: CallOptions): Promise<Key | undefined> {
    for await (const key of this.list({ limit: 200 }, options)) if (key.id === id) return key;
    return undefined;
  }

  /** `PATCH /public/v1/keys/{id}`: name, limits, allowed origins, … */
  update(id: string, changes: KeyChanges, options?: CallOptions): Promise<Key> {
    return this.#gh.request<Key>('PATCH', pathOf('/public/v1/keys/{id}', { id }), { ...options, body: changes });
  }

  /** `DELETE /public/v1/keys/{id}`: revoked at once. */
  revoke(id: string, options?: CallOptions): Promise<KeyRevoked> {
    return this.#gh.request<KeyRevoked>('DELETE', pathOf('/public/v1/keys/{id}', { id }), options);
  }

  /** `POST /public/v1/keys/{id}/roll`: a new secret; the old one works for `grace_seconds` (default 3600). */
  roll(id: string, body: RequestBody<'/public/v1/keys/{id}/roll', 'post'> = {}, options?: CallOptions): Promise<KeyRolled> {
    return this.#gh.request<KeyRolled>('POST', pathOf('/public/v1/keys/{id}/roll', { id }), { ...options, body });
  }

  /** `GET /public/v1/keys/{id}/stats`: requests by day and status. */
  stats(id: string, query: QueryOf<'/public/v1/keys/{id}/stats', 'get'> = {}, options?: CallOptions): Promise<KeyStats> {
    return this.#gh.request<KeyStats>('GET', pathOf('/public/v1/keys/{id}/stats', { id }), { ...options, query });
  }

  /** `GET /public/v1/keys/last-used`: when each key was last seen. */
  lastUsed(options?: CallOptions): Promise<KeysLastUsed> {
    return this.#gh.request<KeysLastUsed>('GET', '/public/v1/keys/last-used', options);
  }
}
