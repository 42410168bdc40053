// Identities (owner keys): your customers, each with its own limits and metadata.
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, QueryOf, RequestBody, ResponseBody, Schema } from '../types.js';

export type Identity = Schema<'Identity'>;
export type NewIdentity = RequestBody<'/public/v1/identities', 'post'>;
export type IdentityChanges = RequestBody<'/public/v1/identities/{id}', 'patch'>;
export type IdentityDeleted = ResponseBody<'/public/v1/identities/{id}', 'delete'>;
export type IdentityListQuery = Omit<QueryOf<'/public/v1/identities', 'get'>, 'cursor'>;

export class Identities {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/identities`. */
  create(identity: NewIdentity, options?: CallOptions): Promise<Identity> {
    return this.#gh.request<Identity>('POST', '/public/v1/identities', { ...options, body: identity });
  }

  /** Every identity, across pages. */
  list(query: IdentityListQuery = {}, options?: CallOptions) {
    return this.#gh.list<Identity>('/public/v1/identities', query, options);
  }

  /** `GET /public/v1/identities/{id}`. */
  get(id: string, options?: CallOptions): Promise<Identity> {
    return this.#gh.request<Identity>('GET', pathOf('/public/v1/identities/{id}', { id }), options);
  }

  /** `PATCH /public/v1/identities/{id}`. */
  update(id: string, changes: IdentityChanges, options?: CallOptions): Promise<Identity> {
    const path = pathOf('/public/v1/identities/{id}', { id });
    return this.#gh.request<Identity>('PATCH', path, { ...options, body: changes });
  }

  /** `DELETE /public/v1/identities/{id}`. */
  delete(id: string, options?: CallOptions): Promise<IdentityDeleted> {
    return this.#gh.request<IdentityDeleted>('DELETE', pathOf('/public/v1/identities/{id}', { id }), options);
  }
}
