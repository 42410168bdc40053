// @gatehouse/client: the Gatehouse API from TypeScript — idempotency keys, retries, rate-limit
// pacing, typed errors, lists across pages, webhook verification. Browsers, Node ≥ 20, Workers,
// Deno, Bun; no dependencies.
export { Gatehouse, DEFAULT_TIMEOUT_MS, type ClientOptions } from './client.js';
export * from './tracker/index.js';
export { GatehouseError, type GatehouseErrorInit, type RateLimit } from './errors.js';
export { List, type PageFetcher } from './pages.js';
export * from './retry.js';
export {
  verifyWebhook,
  WebhookVerificationError,
  WEBHOOK_TOLERANCE_SECONDS,
  type VerifyWebhookOptions,
  type WebhookHeaders,
  type WebhookVerificationReason,
} from './webhooks.js';
export type {
  CallOptions,
  GatehouseOptions,
  ItemOf,
  Page,
  QueryOf,
  QueryValue,
  Reply,
  RequestBody,
  RequestOptions,
  ResponseBody,
  RetryInfo,
  Schema,
  components,
  paths,
} from './types.js';
export type { Me, UsageQuery, UsageReport, UsageRow } from './resources/account.js';
export type {
  BulkResult,
  Contact,
  ContactItems,
  ContactListQuery,
  Message,
  MessageItems,
  NewContact,
  NewMessage,
  RunScenario,
  Scenario,
  ScenarioRun,
} from './resources/contacts.js';
export type { Identity, IdentityChanges, IdentityListQuery, NewIdentity } from './resources/identities.js';
export type { Key, KeyChanges, KeyCreated, KeyListQuery, KeyRolled, KeyStats, KeysLastUsed, NewKey } from './resources/keys.js';
export type { EventFilters, LogEntry, LogFilters, StoredEvent, TailOptions } from './resources/logs.js';
export type { NewReleaseMarker, ReleaseMarker } from './resources/releases.js';
export type {
  Delivery,
  DeliveryListQuery,
  NewWebhook,
  Webhook,
  WebhookChanges,
  WebhookCreated,
  WebhookRotated,
} from './resources/webhooks.js';
