// Webhook subscriptions (owner keys): create, change, delete, rotate the signing secret, recover
// after an outage, see and resend deliveries, trigger a test event. Verifying a delivery where it
// arrives is `verifyWebhook` (../webhooks.ts).
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, QueryOf, RequestBody, ResponseBody, Schema } from '../types.js';

export type Webhook = Schema<'Webhook'>;
export type WebhookCreated = Schema<'WebhookCreated'>;
export type Delivery = Schema<'Delivery'>;
export type NewWebhook = RequestBody<'/public/v1/webhooks', 'post'>;
export type WebhookChanges = RequestBody<'/public/v1/webhooks/{id}', 'patch'>;
export type WebhookRotated = ResponseBody<'/public/v1/webhooks/{id}/rotate-secret', 'post'>;
export type WebhookRecovery = ResponseBody<'/public/v1/webhooks/{id}/recover', 'post'>;
export type WebhookDeleted = ResponseBody<'/public/v1/webhooks/{id}', 'delete'>;
export type WebhookTriggered = ResponseBody<'/public/v1/webhooks/trigger', 'post'>;
export type DeliveryResent = ResponseBody<'/public/v1/webhooks/deliveries/{id}/retry', 'post'>;
export type DeliveryListQuery = Omit<QueryOf<'/public/v1/webhooks/{id}/deliveries', 'get'>, 'cursor'>;
export type WebhookListQuery = Omit<QueryOf<'/public/v1/webhooks', 'get'>, 'cursor'>;

export class Webhooks {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/webhooks`: the answer's `secret` (`whsec_…`, or `public_key` for v1a) verifies deliveries. */
  create(webhook: NewWebhook, options?: CallOptions): Promise<WebhookCreated> {
    return this.#gh.request<WebhookCreated>('POST', '/public/v1/webhooks', { ...options, body: webhook });
  }

  /** Every subscription, across pages. */
  list(query: WebhookListQuery = {}, options?: CallOptions) {
    return this.#gh.list<Webhook>('/public/v1/webhooks', query, options);
  }

  /** One subscription by id (the API has no single-subscription read: found by listing). */
  async get(id: string, options?: CallOptions): Promise<Webhook | undefined> {
    for await (const webhook of this.list({ limit: 200 }, options)) if (webhook.id === id) return webhook;
    return undefined;
  }

  /** `PATCH /public/v1/webhooks/{id}`: url, events, status (re-enable), signature scheme. */
  update(id: string, changes: WebhookChanges, options?: CallOptions): Promise<Webhook> {
    const path = pathOf('/public/v1/webhooks/{id}', { id });
    return this.#gh.request<Webhook>('PATCH', path, { ...options, body: changes });
  }

  /** `DELETE /public/v1/webhooks/{id}`. */
  delete(id: string, options?: CallOptions): Promise<WebhookDeleted> {
    return this.#gh.request<WebhookDeleted>('DELETE', pathOf('/public/v1/webhooks/{id}', { id }), options);
  }

  /** `POST /public/v1/webhooks/{id}/rotate-secret`: a new secret; both sign for `grace_seconds` (default 86400). */
  rotateSecret(
    id: string,
    body: RequestBody<'/public/v1/webhooks/{id}/rotate-secret', 'post'> = {},
    options?: CallOptions,
  ): Promise<WebhookRotated> {
    const path = pathOf('/public/v1/webhooks/{id}/rotate-secret', { id });
    return this.#gh.request<WebhookRotated>('POST', path, { ...options, body });
  }

  /** `POST /public/v1/webhooks/{id}/recover`: deliveries since `since` (RFC 3339) sent again. */
  recover(id: string, since: string | Date, options?: CallOptions): Promise<WebhookRecovery> {
    const path = pathOf('/public/v1/webhooks/{id}/recover', { id });
    const body = { since: typeof since === 'string' ? since : since.toISOString() };
    return this.#gh.request<WebhookRecovery>('POST', path, { ...options, body });
  }

  /** `GET /public/v1/webhooks/{id}/public-key` of a v1a subscription: `{public_key: "whpk_…"}`. */
  publicKey(id: string, options?: CallOptions): Promise<ResponseBody<'/public/v1/webhooks/{id}/public-key', 'get'>> {
    return this.#gh.request('GET', pathOf('/public/v1/webhooks/{id}/public-key', { id }), options);
  }

  /** A subscription's deliveries, newest first, across pages (`status` filters). */
  deliveries(id: string, query: DeliveryListQuery = {}, options?: CallOptions) {
    return this.#gh.list<Delivery>(pathOf('/public/v1/webhooks/{id}/deliveries', { id }), query, options);
  }

  /** `POST /public/v1/webhooks/deliveries/{id}/retry`: one delivery sent again now. */
  resend(deliveryId: string, options?: CallOptions): Promise<DeliveryResent> {
    const path = pathOf('/public/v1/webhooks/deliveries/{id}/retry', { id: deliveryId });
    return this.#gh.request<DeliveryResent>('POST', path, options);
  }

  /** `POST /public/v1/webhooks/trigger`: a test event of `type` to every subscription of it. */
  test(type: string, options?: CallOptions): Promise<WebhookTriggered> {
    return this.#gh.request<WebhookTriggered>('POST', '/public/v1/webhooks/trigger', { ...options, body: { type } });
  }

  /** The same as {@link test}. */
  trigger(type: string, options?: CallOptions): Promise<WebhookTriggered> {
    return this.test(type, options);
  }
}
