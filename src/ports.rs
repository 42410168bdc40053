//! The I/O that `app/` needs, as small app-owned traits. The worker implements them in
//! `adapters/` over Durable Objects and D1; native tests implement them in memory.

#![allow(async_fn_in_trait)] // single-threaded (wasm) futures: no `Send` bound wanted

use std::cell::Cell;

use crate::core::api_key::KeyRecord;
use crate::core::audit::{AuditRow, DayCount, EndpointCount, LogFilter};
use crate::core::events::EventMessage;
use crate::core::idempotency::{ClaimDecision, StoredResponse};
use crate::core::page::PageRequest;
use crate::core::rate_limit::{Usage, Verdict};
use crate::core::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use crate::core::webhook::{Attempt, Delivery, OutgoingEvent, Reply, Webhook};

/// A dependency failed; the cause is for the log, the client gets 503.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortError(pub String);

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PortError {
    /// For `map_err`: any dependency's error, as text for the log.
    pub fn from_display(e: impl std::fmt::Display) -> Self {
        PortError(e.to_string())
    }
}

/// A valid key and the rate decision its guard made for this request, with the decision on the
/// request's `Idempotency-Key` when it had one and was within its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub key: KeyRecord,
    pub verdict: Verdict,
    pub usage: Usage,
    pub claim: Option<ClaimDecision>,
}

/// An idempotency claim to take in the same round trip as the rate decision.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimRequest {
    pub idempotency_key: String,
    pub fingerprint: String,
    /// Identifies the claimer: only it may complete or release the claim.
    pub request_id: String,
}

/// What the guard of a key says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    Admitted(Box<Admission>),
    /// No key has this hash (`None`), or it is revoked (its record, so the refusal can be logged
    /// for its project): both are 401 to the client.
    Denied(Option<Box<KeyRecord>>),
}

/// The per-key Durable Object (SPEC §1 `KEY_GUARD`): one round trip per authenticated request.
pub trait KeyGuard {
    /// Authenticates the key and makes the rate and quota decision for one request.
    async fn authorize(
        &self,
        key_hash: &str,
        claim: Option<&ClaimRequest>,
    ) -> Result<Authorization, PortError>;
    /// The claimed operation succeeded: remember its response until the key expires.
    /// `stored_elsewhere` says whether the response store has it, so the guard may drop its copy soon.
    async fn complete_claim(
        &self,
        key_hash: &str,
        claim: &ClaimRequest,
        response: &StoredResponse,
        stored_elsewhere: bool,
    ) -> Result<(), PortError>;
    /// The claimed operation failed: forget the claim, so a retry executes again.
    async fn release_claim(&self, key_hash: &str, claim: &ClaimRequest) -> Result<(), PortError>;
    /// Drops what the guard remembers of the key, so a revocation or change applies at once.
    async fn invalidate(&self, key_hash: &str) -> Result<(), PortError>;
    /// One round trip to a guard that does nothing: the deep health check.
    async fn ping(&self) -> Result<(), PortError>;
    /// Counts a failed authentication from a client address; `RateLimited` once it has too many.
    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked(KeyRecord),
    AlreadyRevoked(KeyRecord),
    /// The project would be left without an active owner key.
    LastOwnerKey,
    NotFound,
}

/// What a key's owner may change (`PATCH /public/v1/keys/{id}`); `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChanges {
    pub name: Option<Option<String>>,
    pub plan: Option<String>,
    pub rate_limit_per_minute: Option<Option<u32>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyUpdate {
    Updated(KeyRecord),
    Revoked,
    NotFound,
}

/// Projects and keys in D1.
pub trait Directory {
    async fn create_project(
        &self,
        project_id: &str,
        name: &str,
        created_at: i64,
        owner_key: &KeyRecord,
    ) -> Result<(), PortError>;
    async fn insert_key(&self, key: &KeyRecord) -> Result<(), PortError>;
    /// The project's keys, newest first, after the page's cursor.
    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError>;
    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError>;
    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError>;
    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError>;
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError>;
}

/// The resource API's rows in D1 (SPEC §6, §8). Each create is one D1 batch (one transaction) that
/// also writes a delivery for every active subscription matching each emitted event, so a resource
/// and its deliveries never diverge. Creates answer the ids of the deliveries written.
pub trait Resources {
    /// Inserts the contacts: all or, on failure, none.
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        events: &[OutgoingEvent],
    ) -> Result<Vec<String>, PortError>;
    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError>;
    async fn list_contacts(&self, project_id: &str, page: &PageRequest) -> Result<Vec<Contact>, PortError>;
    /// Inserts each message whose contact exists in its project; answers per message whether it did.
    async fn create_messages(
        &self,
        messages: &[Message],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<bool>, Vec<String>), PortError>;
    async fn create_scenario(&self, scenario: &Scenario) -> Result<(), PortError>;
    async fn start_run(
        &self,
        run: &ScenarioRun,
        events: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError>;
    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        events: &[OutgoingEvent],
    ) -> Result<Vec<String>, PortError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStart {
    Started,
    UnknownScenario,
    UnknownContact,
}

/// Completed idempotent responses (SPEC §5: Workers KV, `papi:idem:{apiKeyId}:{key}`).
pub trait ResponseStore {
    async fn put(
        &self,
        api_key_id: &str,
        idempotency_key: &str,
        response: &StoredResponse,
    ) -> Result<(), PortError>;
    async fn get(&self, api_key_id: &str, idempotency_key: &str)
        -> Result<Option<StoredResponse>, PortError>;
}

/// Strongly consistent memory of the event ids seen per namespace (SPEC §7), within the window.
pub trait EventLedger {
    /// For each id, in order: was it seen within the window?
    async fn seen(&self, namespace: &str, ids: &[String]) -> Result<Vec<bool>, PortError>;
    /// Remembers the ids as seen now.
    async fn remember(&self, namespace: &str, ids: &[String]) -> Result<(), PortError>;
}

/// The events queue (`EVENTS_QUEUE`): accepted events and identity links on their way to D1.
pub trait EventSink {
    /// Sends every message, or fails; a failure may have sent some (the consumer stores each
    /// event once, so a full retry is safe).
    async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError>;
}

/// Ingested data in D1: events and links from the queue, session-replay chunks directly.
pub trait EventStore {
    /// Stores each event and link once (a redelivered message changes nothing).
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError>;
    /// Stores a replay chunk unless the project has it already; answers whether it was new.
    async fn store_replay_chunk(
        &self,
        project_id: &str,
        session_id: &str,
        chunk: u32,
        data: &str,
        now_ms: i64,
    ) -> Result<bool, PortError>;
}

/// The audit queue (`AUDIT_QUEUE`): rows leave the hot path here.
pub trait AuditSink {
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError>;
}

/// The audit log in D1.
pub trait AuditStore {
    /// Inserts each row once per `request_id` (a retried batch changes nothing).
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError>;
    /// The project's rows matching the filter, newest first, after the page's cursor.
    async fn audit_rows(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<Vec<AuditRow>, PortError>;
    /// Per UTC day since `since_ms`, and the top endpoints, of one key.
    async fn key_stats(
        &self,
        project_id: &str,
        key_id: &str,
        since_ms: i64,
    ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError>;
    /// Up to `limit` (project, UTC day) pairs that have rows older than `before_ms`.
    async fn expired_days(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<(Option<String>, String)>, PortError>;
    /// A project's rows of one UTC day older than `before_ms`, oldest first, at most `limit`.
    async fn expired_rows(
        &self,
        project_id: Option<&str>,
        day: &str,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, PortError>;
    async fn delete_audit_rows(&self, request_ids: &[String]) -> Result<(), PortError>;
}

/// An archived object, as the owner lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveObject {
    pub key: String,
    pub size: u64,
    pub uploaded_ms: i64,
}

/// The audit archive (`ARCHIVE`, R2): gzip NDJSON, one object per project and day.
pub trait Archive {
    /// Adds NDJSON lines to the object, gzip-compressed: a new gzip member is appended to what the
    /// object holds, which any gunzip reads as one stream.
    async fn append(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError>;
    async fn list(&self, prefix: &str) -> Result<Vec<ArchiveObject>, PortError>;
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError>;
}

/// Subscriptions, deliveries and attempts in D1.
pub trait WebhookStore {
    async fn create_webhook(&self, webhook: &Webhook) -> Result<(), PortError>;
    /// The project's subscriptions that are not deleted, newest first.
    async fn webhooks(&self, project_id: &str) -> Result<Vec<Webhook>, PortError>;
    async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError>;
    /// Marks the subscription deleted and fails its pending deliveries.
    async fn delete_webhook(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError>;
    /// A subscription's deliveries, newest first, optionally of one status, with their attempts.
    async fn deliveries(
        &self,
        webhook_id: &str,
        status: Option<&str>,
        page: &PageRequest,
    ) -> Result<(Vec<Delivery>, Vec<Attempt>), PortError>;
    async fn delivery(
        &self,
        project_id: &str,
        id: &str,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>, PortError>;
    /// Makes a delivery due now again (a failed one included); `false` if there is none.
    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError>;
    /// Takes a due, pending, unheld delivery for one attempt, until `until_ms`; `None` when it is
    /// not due, not pending, or held by another attempt.
    async fn take_delivery(
        &self,
        id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(Delivery, Webhook)>, PortError>;
    /// Records the attempt and its outcome in one batch (and on 410 disables the subscription and
    /// fails its pending deliveries).
    async fn record_attempt(
        &self,
        attempt: &Attempt,
        status: &str,
        disable_subscription: bool,
    ) -> Result<(), PortError>;
    /// Pending deliveries due before `due_before_ms` that no attempt holds: the ones the queue lost.
    async fn overdue_deliveries(
        &self,
        due_before_ms: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError>;
}

/// The webhook queue (`WEBHOOK_QUEUE`): delivery ids, optionally delayed.
pub trait DeliveryQueue {
    async fn enqueue(&self, delivery_ids: &[String], delay_seconds: u32) -> Result<(), PortError>;
}

/// Outbound HTTP to subscribers: one `POST`, no redirects followed, within the timeout.
pub trait WebhookClient {
    async fn post(&self, url: &str, headers: &[(String, String)], body: &str, timeout_ms: u64) -> Reply;
}

/// The set of port implementations a [`crate::app::Gateway`] runs over.
pub trait Ports {
    type Guard: KeyGuard;
    type Store: Directory + Resources + EventStore + AuditStore + WebhookStore;
    type Responses: ResponseStore;
    type Ledger: EventLedger;
    type Events: EventSink;
    type Archive: Archive;
    type Deliveries: DeliveryQueue;
}

/// The request's body, read only once the route, the caller and the declared size allow it.
pub trait RequestBody {
    /// `Content-Length`, when the client sent one.
    fn declared_len(&self) -> Option<u64>;
    async fn read(self) -> Result<Vec<u8>, PortError>;
}

/// Counts the I/O one request makes, for the per-request log line: the hot-path budget of
/// SPEC §12 is checked against it. Adapters made for a request share one meter.
#[derive(Debug, Default)]
pub struct Meter {
    pub durable_object_calls: Cell<u32>,
    pub d1_queries: Cell<u32>,
    pub kv_operations: Cell<u32>,
}

impl Meter {
    pub fn count(counter: &Cell<u32>) {
        counter.set(counter.get() + 1);
    }
}
