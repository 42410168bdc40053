// The resource API of seed 1: contacts, messages, scenarios and the bulk routes (`/public/v1`,
// server or owner keys). Every create carries an Idempotency-Key, made once per call.
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, QueryOf, RequestBody, ResponseBody, Schema } from '../types.js';

export type Contact = Schema<'Contact'>;
export type NewContact = RequestBody<'/public/v1/contacts', 'post'>;
export type ContactListQuery = Omit<QueryOf<'/public/v1/contacts', 'get'>, 'cursor'>;
export type Message = Schema<'Message'>;
export type NewMessage = RequestBody<'/public/v1/messages', 'post'>;
export type BulkResult = Schema<'BulkResult'>;
export type ContactItems = RequestBody<'/public/v1/contacts/bulk', 'post'>['items'];
export type MessageItems = RequestBody<'/public/v1/messages/bulk', 'post'>['items'];
export type Scenario = ResponseBody<'/public/v1/scenarios', 'post'>;
export type ScenarioRun = ResponseBody<'/public/v1/scenarios/{id}/run', 'post'>;
export type RunScenario = RequestBody<'/public/v1/scenarios/{id}/run', 'post'>;

export class Contacts {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/contacts` (emits `contact.created`). */
  create(contact: NewContact, options?: CallOptions): Promise<Contact> {
    return this.#gh.request<Contact>('POST', '/public/v1/contacts', { ...options, body: contact });
  }

  /** `GET /public/v1/contacts/{id}`. */
  get(id: string, options?: CallOptions): Promise<Contact> {
    return this.#gh.request<Contact>('GET', pathOf('/public/v1/contacts/{id}', { id }), options);
  }

  /** Every contact, across pages (`limit`: per page, 1–200). */
  list(query: ContactListQuery = {}, options?: CallOptions) {
    return this.#gh.list<Contact>('/public/v1/contacts', query, options);
  }

  /** `POST /public/v1/contacts/bulk`: up to 100 at once, a result per item. */
  bulk(items: ContactItems, options?: CallOptions): Promise<BulkResult> {
    return this.#gh.request<BulkResult>('POST', '/public/v1/contacts/bulk', { ...options, body: { items } });
  }
}

export class Messages {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/messages` (emits `message.created`). */
  send(message: NewMessage, options?: CallOptions): Promise<Message> {
    return this.#gh.request<Message>('POST', '/public/v1/messages', { ...options, body: message });
  }

  /** The same as {@link send}. */
  create(message: NewMessage, options?: CallOptions): Promise<Message> {
    return this.send(message, options);
  }

  /** `POST /public/v1/messages/bulk`: up to 100 at once. */
  bulk(items: MessageItems, options?: CallOptions): Promise<BulkResult> {
    return this.#gh.request<BulkResult>('POST', '/public/v1/messages/bulk', { ...options, body: { items } });
  }
}

export class Scenarios {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /** `POST /public/v1/scenarios`. */
  create(name: string, options?: CallOptions): Promise<Scenario> {
    return this.#gh.request<Scenario>('POST', '/public/v1/scenarios', { ...options, body: { name } });
  }

  /** `POST /public/v1/scenarios/{id}/run` for one contact (202; emits `scenario.run.started`). */
  run(scenarioId: string, run: RunScenario, options?: CallOptions): Promise<ScenarioRun> {
    const path = pathOf('/public/v1/scenarios/{id}/run', { id: scenarioId });
    return this.#gh.request<ScenarioRun>('POST', path, { ...options, body: run });
  }
}

/** The bulk routes in one place: `gh.bulk.contacts(items)`, `gh.bulk.messages(items)`. */
export class Bulk {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  contacts(items: ContactItems, options?: CallOptions): Promise<BulkResult> {
    return this.#gh.contacts.bulk(items, options);
  }

  messages(items: MessageItems, options?: CallOptions): Promise<BulkResult> {
    return this.#gh.messages.bulk(items, options);
  }
}
