//! The I/O that `app/` needs, as small app-owned traits. The worker implements them in
//! `adapters/` over Durable Objects and D1; native tests implement them in memory.

#![allow(async_fn_in_trait)] // single-threaded (wasm) futures: no `Send` bound wanted

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crate::api_key::{KeyRecord, RefusalReason, Scope};
use crate::audit::{AuditRow, DayCount, EndpointCount, LogFilter};
use crate::events::{EventMessage, Reserved};
use crate::idempotency::{ClaimDecision, KeptResponse};
use crate::page::{Cursor, PageRequest};
use crate::queue::DeadLetter;
use crate::rate_limit::{Usage, Verdict};
use crate::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use crate::tiers::ObjectSummary;
use crate::upstream::OriginTarget;
use crate::webhook::{Attempt, Delivery, OutgoingEvent, ReceiverOutcome, StoredSecret, Webhook};

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
    /// No key has this hash (`None`), or it is refused (its record, so the refusal can be logged
    /// for its project, and why: revoked, expired, or rolled and past its grace): all are 401.
    Denied(Option<(Box<KeyRecord>, RefusalReason)>),
}

/// The guard that holds the operator's idempotency claims (admin routes have no API key, SPEC
/// §19): a name no key hash (64 hex digits) or client address (`ip:…`) takes. Its claims are
/// scoped to the operator, as a key's are to the key, and its responses are sealed under the
/// admin token.
pub const OPERATOR_GUARD: &str = "operator";

/// The per-key Durable Object (SPEC §1 `KEY_GUARD`): one round trip per authenticated request.
/// It is the source of truth for the key's limits and claims, and for "completed".
pub trait KeyGuard {
    /// Authenticates the key and makes the rate and quota decision for one request; takes the
    /// claim only when the request is within its limits and the key's type may call the route.
    async fn authorize(
        &self,
        key_hash: &str,
        scope: Scope,
        claim: Option<&ClaimRequest>,
    ) -> Result<Authorization, PortError>;
    /// Takes a claim for a principal without an API key (the operator, [`OPERATOR_GUARD`]): the
    /// claims of the guard named `principal`, decided as `authorize` decides a key's. Also the
    /// claim of a key `authorize` admitted without one a moment before: its body is read only
    /// after its key is authenticated (SPEC §19 "Memory"), and the fingerprint needs the body.
    async fn take_claim(&self, principal: &str, claim: &ClaimRequest) -> Result<ClaimDecision, PortError>;
    /// The claimed operation succeeded: the claim is completed, and the guard keeps the response
    /// (sealed: the guard never sees it in clear) until the key expires. Safe to repeat. `false`: the claim is no longer this request's (its
    /// lease ran out and another request took it), so its response must not be stored.
    async fn complete_claim(
        &self,
        key_hash: &str,
        claim: &ClaimRequest,
        response: &KeptResponse,
    ) -> Result<bool, PortError>;
    /// The claimed operation failed: forget the claim, so a retry executes again. Safe to repeat.
    async fn release_claim(&self, key_hash: &str, claim: &ClaimRequest) -> Result<(), PortError>;
    /// The response of a completed claim, as the guard keeps it (the response store missed).
    async fn held_response(
        &self,
        key_hash: &str,
        idempotency_key: &str,
    ) -> Result<Option<KeptResponse>, PortError>;
    /// The guard holds this record of its key from now on (a revocation or a change, told to the
    /// guard before D1 is written). A revocation or roll the guard holds stays (`KeyRecord::told`)
    /// unless it is the one `undo` names (by its `revoked_at` or `rolled_at`).
    async fn apply(&self, key: &KeyRecord, undo: Option<i64>) -> Result<(), PortError>;
    /// One round trip to a guard that does nothing: the deep health check.
    async fn ping(&self) -> Result<(), PortError>;
    /// Counts a failed authentication from a client address; `RateLimited` once it has too many.
    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked(KeyRecord),
    AlreadyRevoked(KeyRecord),
    /// The project would be left without an owner key that stays usable (SPEC §19).
    LastOwnerKey,
    NotFound,
}

/// What a key's owner may change (`PATCH /public/v1/keys/{id}`); `None` leaves a field as it is.
/// The plan is the project's, set by the operator (SPEC §13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChanges {
    pub name: Option<Option<String>>,
    pub rate_limit_per_minute: Option<Option<u32>>,
    /// A rolled key keeps its grace's end (the store leaves it).
    pub expires_at: Option<Option<i64>>,
}

impl KeyChanges {
    /// The record as it is after the change.
    pub fn applied_to(&self, mut key: KeyRecord) -> KeyRecord {
        if let Some(name) = &self.name {
            key.name = name.clone();
        }
        if let Some(rate) = self.rate_limit_per_minute {
            key.rate_limit_per_minute = rate;
        }
        if let Some(expires_at) = self.expires_at.filter(|_| key.rolled_at.is_none()) {
            key.expires_at = expires_at;
        }
        key
    }
}

/// A project put on another plan by the operator: its name and its keys as they are now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanChange {
    pub name: String,
    pub keys: Vec<KeyRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // made once per PATCH
pub enum KeyUpdate {
    Updated(KeyRecord),
    Revoked,
    /// An expiry would leave the project without an owner key that stays usable (SPEC §19).
    LastOwnerKey,
    NotFound,
}

/// Projects and keys in D1.
pub trait Directory {
    /// The project on the owner key's plan, and that key: both or neither. Create-or-find by id
    /// (an earlier execution of the same operation wrote them): answers the owner key as stored.
    async fn create_project(
        &self,
        project_id: &str,
        name: &str,
        owner_key: &KeyRecord,
    ) -> Result<KeyRecord, PortError>;
    /// Inserts a key of an existing project, on the project's plan whatever `key.plan` says;
    /// answers the stored record (`None`: no such project). Create-or-find by id: a key of the
    /// project with this id (an earlier execution of the same operation) is answered as stored.
    async fn insert_key(&self, key: &KeyRecord) -> Result<Option<KeyRecord>, PortError>;
    /// Puts the project and all its keys on `plan` in one transaction; answers the project's name
    /// and its keys as changed (`None`: no such project).
    async fn set_project_plan(&self, project_id: &str, plan: &str) -> Result<Option<PlanChange>, PortError>;
    /// The project's keys, newest first, after the page's cursor.
    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError>;
    /// Changes a key that is not revoked. An expiry on a lasting owner key is written only while
    /// another lasting owner key exists (checked in the same statement), else `LastOwnerKey`.
    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError>;
    /// Revokes a key; an owner key that is not refused yet only while another lasting owner key
    /// exists (checked in the same statement), else `LastOwnerKey`.
    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError>;
    /// In one transaction: marks the key rolled as `rolled` says (its replacement, its grace's
    /// end) and inserts `replacement` on the project's plan — only while the key is not revoked,
    /// not rolled before and not expired at `now_ms`. Answers both as stored, or `None` (nothing
    /// written).
    async fn roll_key(
        &self,
        rolled: &KeyRecord,
        replacement: &KeyRecord,
        now_ms: i64,
    ) -> Result<Option<(KeyRecord, KeyRecord)>, PortError>;
    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError>;
    /// How many owner keys of the project other than `except_key_id` are lasting
    /// ([`KeyRecord::is_lasting`]): the last-owner-key rule counts only these (SPEC §19).
    async fn lasting_owner_keys(&self, project_id: &str, except_key_id: &str) -> Result<u32, PortError>;
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError>;
}

/// The resource API's rows in D1 (SPEC §6, §8). Each create is one D1 batch (one transaction) that
/// also writes a delivery for every active subscription matching each emitted event, so a resource
/// and its deliveries never diverge. Creates answer the ids of the deliveries written.
///
/// Creates are **create-or-find by id**: a row whose id exists already is left as it is and
/// answered with its stored `created_at`, and its event writes no second delivery. An idempotent
/// request derives its ids from its operation (`app::Ids`), so executing it again after a failure
/// whose write landed finds its rows instead of writing them twice.
pub trait Resources {
    /// Inserts the contacts: all or, on failure, none. Answers each one's stored `created_at`.
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<i64>, Vec<String>), PortError>;
    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError>;
    async fn list_contacts(&self, project_id: &str, page: &PageRequest) -> Result<Vec<Contact>, PortError>;
    /// Inserts each message whose contact exists in its project; answers per message its stored
    /// `created_at`, or `None` when its contact does not exist.
    async fn create_messages(
        &self,
        messages: &[Message],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError>;
    /// Answers the stored `created_at`.
    async fn create_scenario(&self, scenario: &Scenario) -> Result<i64, PortError>;
    async fn start_run(
        &self,
        run: &ScenarioRun,
        events: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError>;
    /// Answers the stored `created_at`.
    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        events: &[OutgoingEvent],
    ) -> Result<(i64, Vec<String>), PortError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStart {
    Started,
    UnknownScenario,
    UnknownContact,
}

/// Completed idempotent responses (SPEC §5: Workers KV, `papi:idem:{apiKeyId}:{key}`), sealed
/// before they get here (SPEC §13).
pub trait ResponseStore {
    async fn put(
        &self,
        api_key_id: &str,
        idempotency_key: &str,
        response: &KeptResponse,
    ) -> Result<(), PortError>;
    async fn get(&self, api_key_id: &str, idempotency_key: &str) -> Result<Option<KeptResponse>, PortError>;
}

/// Strongly consistent memory of the event ids accepted per namespace (SPEC §7), within the
/// window, one object per shard (see `core::events::ledger_shard`).
pub trait EventLedger {
    /// In one atomic step per id: reserve it for `owner` unless it was accepted within the window
    /// or another request holds it. Answers one decision per id, in order.
    async fn reserve(&self, shard: &str, owner: &str, ids: &[String]) -> Result<Vec<Reserved>, PortError>;
    /// The owner's events are queued: its reservations become accepted ids. Safe to repeat.
    async fn confirm(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError>;
    /// The owner's send failed: its reservations are dropped (else they lapse after their lease).
    async fn release(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError>;
}

/// The events queue (`EVENTS_QUEUE`): accepted events and identity links on their way to D1.
pub trait EventSink {
    /// Sends every message, or fails; a failure may have sent some (the consumer stores each
    /// event once, so a full retry is safe).
    async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError>;
}

/// Ingested data in D1: events and links from the queue, the index of session-recording segment
/// (their data is in R2).
pub trait EventStore {
    /// Stores each event and link once (a redelivered message changes nothing).
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError>;
    /// Whether the project has this session-recording segment already.
    async fn has_session_segment(&self, chunk: &SessionSegment<'_>) -> Result<bool, PortError>;
    /// Indexes a chunk whose object is written, unless it is indexed already (a concurrent copy);
    /// answers whether it was new.
    async fn index_session_segment(
        &self,
        chunk: &SessionSegment<'_>,
        bytes: usize,
        now_ms: i64,
    ) -> Result<bool, PortError>;
}

/// One chunk of a recorded session: unique per (project, session, chunk number).
#[derive(Debug, Clone, Copy)]
pub struct SessionSegment<'a> {
    pub project_id: &'a str,
    pub session_id: &'a str,
    pub chunk: u32,
}

/// The audit queue (`AUDIT_QUEUE`): rows leave the hot path here.
pub trait AuditSink {
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError>;
}

/// The audit log's database (`AUDIT_DB`, SPEC §18): the hot tier's rows, the summaries of the
/// cold tier's objects, and the per-key daily aggregates.
pub trait AuditStore {
    /// Inserts each row once per `request_id` and adds it to the daily aggregates in the same
    /// transaction (a retried batch changes nothing).
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError>;
    /// One snapshot of the log for a page: the project's hot rows matching the filter, newest
    /// first, after the page's cursor (at most `page.fetch_len()`), and the summaries of the cold
    /// objects whose span overlaps the filter's time range before the cursor (at most
    /// [`crate::tiers::SUMMARIES_PER_PAGE`], greatest `last` first).
    async fn log_snapshot(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<(Vec<AuditRow>, Vec<ObjectSummary>), PortError>;
    /// The summary of the project's object whose span holds `at`, if one does.
    async fn object_covering(
        &self,
        project_id: Option<&str>,
        at: &Cursor,
    ) -> Result<Option<ObjectSummary>, PortError>;
    /// Per UTC day since `since_ms`, and the top endpoints, of one key: from the aggregates.
    async fn key_stats(
        &self,
        project_id: &str,
        key_id: &str,
        since_ms: i64,
    ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError>;
    /// The oldest row (by `(ts, request_id)`) older than `before_ms`: its project (`None`: no
    /// project) and position. The roll-up moves rows from here.
    async fn oldest_expired(&self, before_ms: i64) -> Result<Option<(Option<String>, Cursor)>, PortError>;
    /// The rows of `range`, in `(ts, request_id)` order.
    async fn rows_between(&self, range: &RowRange<'_>) -> Result<Vec<AuditRow>, PortError>;
    /// Clears a slice the roll-up archived, in one transaction, only if exactly `count` rows are
    /// still between `first` and `last` (both inclusive) — a row that arrived since keeps them
    /// all: inserts (or replaces) the summary of the object written, takes the rows that were
    /// copies of rows already rolled up out of the aggregates, and deletes the slice's rows.
    /// Answers how many rows went: `count` or 0.
    async fn clear_slice(&self, slice: &ArchivedSlice<'_>) -> Result<usize, PortError>;
}

/// The rows of one project (`None`: none) from `from` (inclusive) to `to` (exclusive), at most
/// `limit` of them: the next slice the roll-up reads.
#[derive(Debug, Clone, Copy)]
pub struct RowRange<'a> {
    pub project_id: Option<&'a str>,
    pub from: &'a Cursor,
    pub to: &'a Cursor,
    pub limit: usize,
}

/// A slice of the roll-up (rows of one project and hour, as far as one object goes), as [`AuditStore::clear_slice`] clears it.
pub struct ArchivedSlice<'a> {
    pub project_id: Option<&'a str>,
    pub first: &'a Cursor,
    pub last: &'a Cursor,
    /// Rows read from D1 between `first` and `last`.
    pub count: usize,
    /// The object written, when the slice held a row not rolled up before.
    pub summary: Option<&'a ObjectSummary>,
    /// Rows of the slice that an earlier object holds already (a redelivered audit message).
    pub copies: &'a [AuditRow],
}

/// An archived object, as the archive lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveObject {
    pub key: String,
    pub size: u64,
    pub uploaded_ms: i64,
}

/// The `ARCHIVE` bucket (R2): the audit archive — gzip NDJSON, one object per slice of a project's
/// day (see `core::archive`) — and session-recording segment (`core::events::recording_object_key`).
pub trait Archive {
    /// Writes the object whole, replacing any object of that key: the NDJSON lines as one gzip
    /// member. Never a read-modify-write.
    async fn put(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError>;
    /// Writes a session-recording segment's JSON as it is, replacing any object of that key.
    async fn put_recording_segment(&self, key: &str, json: &[u8]) -> Result<(), PortError>;
    /// Every object whose key starts with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<ArchiveObject>, PortError>;
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError>;
    /// An audit object's NDJSON, decompressed.
    async fn read_ndjson(&self, key: &str) -> Result<Option<Vec<u8>>, PortError>;
}

/// A secret rotation (SPEC §17): `secret` becomes the subscription's current secret and
/// `replaces` (as stored) its previous one, which also signs until `previous_until_ms`.
#[derive(Debug, Clone, Copy)]
pub struct SecretRotation<'a> {
    pub project_id: &'a str,
    pub id: &'a str,
    pub secret: &'a StoredSecret,
    pub previous_until_ms: i64,
    pub replaces: &'a StoredSecret,
}

/// Subscriptions, deliveries and attempts in D1.
pub trait WebhookStore {
    /// Create-or-find by id (like [`Resources`]): answers the subscription as stored, so a second
    /// execution of the same operation shows the secret of the first. Secrets arrive sealed.
    async fn create_webhook(&self, webhook: &Webhook) -> Result<Webhook, PortError>;
    /// The project's subscriptions that are not deleted, newest first.
    async fn webhooks(&self, project_id: &str) -> Result<Vec<Webhook>, PortError>;
    async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError>;
    /// Marks the subscription deleted and, in the same batch, fails its pending deliveries
    /// (`failed`, last error `subscription deleted`; no attempt row is written).
    async fn delete_webhook(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError>;
    /// Rotates a subscription's secret (SPEC §17) if its current secret is still the one the
    /// rotation replaces. Answers the subscription as stored (`None`: no such subscription,
    /// deleted, or its secret is no longer `replaces`: nothing written).
    async fn rotate_secret(&self, rotation: &SecretRotation<'_>) -> Result<Option<Webhook>, PortError>;
    /// Makes an active subscription of a disabled one (after a 410), or leaves an active one;
    /// answers it as stored (`None`: no such subscription, or deleted).
    async fn enable_webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError>;
    /// A recovery (SPEC §17): every `failed` delivery of the subscription created at or after
    /// `since_ms` becomes pending and due at `now_ms`, its schedule starting over; answers their ids.
    async fn recover_deliveries(
        &self,
        project_id: &str,
        webhook_id: &str,
        since_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<String>, PortError>;
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
    /// A manual retry: makes a delivery pending and due now (a failed or delivered one included);
    /// `false` if there is none. It never clears the hold of an attempt in flight: that attempt
    /// finishes and records first, and sees the request (its record leaves the delivery due now).
    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError>;
    /// Takes a due, pending delivery that no live attempt holds, for one attempt, until `until_ms`,
    /// in one atomic step that also allocates the attempt's number: the answered
    /// `Delivery::attempts` is the number of this attempt, never given to another one. `None` when
    /// it is not due, not pending, or held. In the same step, an earlier attempt whose hold ran out
    /// without a record gets an "interrupted" row, and a delivery whose subscription is no longer
    /// active is failed (`subscription deleted` / `subscription disabled`) instead of taken. When
    /// that interrupted attempt was the schedule's last (`max_attempts` since `schedule_from`), the
    /// delivery fails instead of taking another (SPEC §19: none past the last attempt).
    async fn take_delivery(
        &self,
        id: &str,
        now_ms: i64,
        until_ms: i64,
        max_attempts: u32,
    ) -> Result<Option<(Delivery, Webhook)>, PortError>;
    /// Records the attempt and its outcome in one batch (and on 410 disables the subscription and
    /// fails its pending deliveries). Safe to repeat. The delivery changes only while this attempt
    /// still holds it and it is pending: a subscription deleted meanwhile keeps it `failed`, a
    /// later attempt keeps its own state. A manual retry requested meanwhile makes it pending and
    /// due now unless this attempt delivered it. Answers when the next attempt is due if the
    /// delivery is pending and held by no attempt, so the caller can queue it.
    async fn record_attempt(
        &self,
        attempt: &Attempt,
        status: &str,
        disable_subscription: bool,
    ) -> Result<Option<i64>, PortError>;
    /// Writes one delivery of the origin's event per matching active subscription of its project,
    /// once per (subscription, event id): the same event again writes nothing new. An event with
    /// a `request` fingerprint (sent with an `Idempotency-Key`, its id derived from the key) keeps
    /// it: the same id with another fingerprint writes nothing and is [`OriginEventRecord::Reused`].
    async fn record_origin_event(&self, event: &OriginEvent) -> Result<OriginEventRecord, PortError>;
    /// Up to `limit` subscriptions (deleted ones too) whose secret column does not start with
    /// `current_prefix` (a plaintext `whsec_` of a row from before sealing, or a value sealed in
    /// an older format or under a previous key): their ids and stored secrets.
    async fn secrets_to_reseal(
        &self,
        current_prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, StoredSecret)>, PortError>;
    /// Puts `sealed` in place of the stored secret, if the row still holds `stored`.
    async fn reseal_secret(
        &self,
        id: &str,
        stored: &StoredSecret,
        sealed: &StoredSecret,
    ) -> Result<(), PortError>;
    /// Pending deliveries due before `due_before_ms` that no attempt holds and that were not swept
    /// since `swept_before_ms` (the ones the queue lost), marked swept at `now_ms`.
    async fn overdue_deliveries(
        &self,
        due_before_ms: i64,
        now_ms: i64,
        swept_before_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError>;
}

/// An event an origin sent for a project's subscribers (SPEC §15), as its deliveries are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginEvent {
    pub project_id: String,
    pub event_id: String,
    pub event_type: String,
    /// The delivery payload `{id, type, created_at, data}` as sent.
    pub payload: String,
    pub request_id: String,
    pub created_at: i64,
    /// The fingerprint of the request that named this event id through its `Idempotency-Key`.
    pub request: Option<String>,
}

/// What [`WebhookStore::record_origin_event`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginEventRecord {
    /// The ids of every delivery of the event.
    Recorded(Vec<String>),
    NoSuchProject,
    /// The event id was named by another request (same `Idempotency-Key`, another body).
    Reused,
}

/// The webhook queue (`WEBHOOK_QUEUE`): delivery ids, optionally delayed.
pub trait DeliveryQueue {
    async fn enqueue(&self, delivery_ids: &[String], delay_seconds: u32) -> Result<(), PortError>;
}

/// Outbound HTTP to subscribers: one `POST`, no redirects followed, within the timeout.
pub trait WebhookClient {
    async fn post(&self, attempt: &WebhookPost<'_>) -> ReceiverOutcome;
}

/// One attempt's `POST`: the signed headers and the payload, answered within `timeout_ms`.
#[derive(Debug, Clone, Copy)]
pub struct WebhookPost<'a> {
    pub url: &'a str,
    pub headers: &'a [(String, String)],
    pub body: &'a str,
    pub timeout_ms: u64,
}

/// One failure of a queue message in its consumer. Counted in D1, so the retry delay can grow and
/// the dead letter can say what went wrong (a dead-letter queue carries only the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageFailure {
    pub message_id: String,
    pub queue: String,
    /// `core::queue::body_digest` of the body: a message may reach the dead-letter queue under
    /// another id.
    pub body_digest: String,
    pub error: String,
    pub at_ms: i64,
}

/// Dead letters in D1 (SPEC §12.1), and the failures counted before a message becomes one.
pub trait DeadLetters {
    /// Counts one failure of each message; answers, per failure in order, how many times that
    /// message has failed (1 for the first).
    async fn note_failures(&self, failures: &[MessageFailure]) -> Result<Vec<u32>, PortError>;
    /// Keeps each letter once per id (a letter delivered again changes nothing). When failures
    /// were counted for its message (by id, else by queue and body), the letter takes its first
    /// failure, last error and count from them, and the count is dropped.
    async fn keep(&self, letters: &[DeadLetter]) -> Result<(), PortError>;
    /// Letters newest first (by `dead_at`), optionally of one queue, after the page's cursor.
    async fn dead_letters(
        &self,
        queue: Option<&str>,
        page: &PageRequest,
    ) -> Result<Vec<DeadLetter>, PortError>;
    /// Letters not re-driven yet, oldest first, at most `limit`: those named, or any.
    async fn undriven(&self, ids: Option<&[String]>, limit: usize) -> Result<Vec<DeadLetter>, PortError>;
    async fn mark_redriven(&self, id: &str, now_ms: i64) -> Result<(), PortError>;
}

/// The producers of our three queues, to send a dead letter's body back where it came from.
pub trait Redrive {
    async fn resend(&self, queue: &str, body: &str) -> Result<(), PortError>;
}

/// A request forwarded to a proxied route's origin (SPEC §15), headers as they are sent.
#[derive(Debug)]
pub struct OriginRequest<'a> {
    pub target: &'a OriginTarget,
    pub url: String,
    pub method: &'a str,
    pub headers: Vec<(String, String)>,
    pub body: OutgoingBody<'a>,
    pub timeout_ms: u64,
}

/// The body a forwarded request carries (SPEC §19 "Memory").
#[derive(Debug)]
pub enum OutgoingBody<'a> {
    /// Held whole (at most [`crate::upstream::SIGNED_BODY_LIMIT`] bytes): its hash is signed.
    Held(&'a [u8]),
    /// The bytes read so far, then the rest of the client's stream as it arrives (the body's
    /// [`RequestBody::into_rest`]), never held: at most `limit` bytes in all, else the origin
    /// call ends with [`OriginOutcome::BodyTooLarge`].
    Streamed { head: &'a [u8], rest: PassThrough, limit: usize },
}

/// How the origin answered.
#[derive(Debug)]
pub enum OriginOutcome {
    Answered(OriginAnswer),
    /// No answer (or not the first [`crate::upstream::STORED_ANSWER_LIMIT`] bytes of its
    /// body) within the route's `timeout_ms`.
    TimedOut,
    /// The connection failed; the cause is for the log.
    Unreachable(String),
    /// A streamed body went over its limit on the way: the origin call was ended.
    BodyTooLarge,
}

#[derive(Debug)]
pub struct OriginAnswer {
    pub status: u16,
    /// As the origin sent them (the app decides which the client sees).
    pub headers: Vec<(String, String)>,
    pub body: AnswerBody,
}

/// An origin's answer body: read whole while it fits the stored-answer limit, else streamed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerBody {
    /// The whole body, at most `STORED_ANSWER_LIMIT` bytes: it can be kept for replay.
    Whole(Vec<u8>),
    /// Larger: the bytes read so far, then the rest as it streams from the origin.
    Streaming { head: Vec<u8>, rest: PassThrough, declared_len: Option<u64> },
}

/// The unread rest of an origin's answer or of a client's body, handed to the runtime as it is:
/// opaque to the app (the worker's adapter puts its stream here and takes it back when it builds
/// the response or the origin's request).
#[derive(Clone)]
pub struct PassThrough(Rc<RefCell<Option<Box<dyn Any>>>>);

impl PassThrough {
    pub fn new<T: 'static>(rest: T) -> Self {
        PassThrough(Rc::new(RefCell::new(Some(Box::new(rest)))))
    }

    /// The rest, once, if it is a `T`.
    pub fn take<T: 'static>(&self) -> Option<T> {
        let rest = self.0.borrow_mut().take()?;
        rest.downcast::<T>().ok().map(|b| *b)
    }
}

impl PartialEq for PassThrough {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PassThrough {}

impl std::fmt::Debug for PassThrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PassThrough")
    }
}

/// Leases of the cron jobs (SPEC §19), in D1: no two runs of one job overlap.
pub trait JobLeases {
    /// Takes `lease`, unless another holder's lease of its job is still running at its `now_ms`;
    /// answers whether it was taken.
    async fn take_lease(&self, lease: &Lease<'_>) -> Result<bool, PortError>;
    /// Gives the lease back, if `holder` still holds it.
    async fn release_lease(&self, job: &str, holder: &str) -> Result<(), PortError>;
}

/// A cron job's lease as a run asks for it: `job` held by `holder` (one per invocation) until
/// `until_ms`, asked at `now_ms`.
pub struct Lease<'a> {
    pub job: &'a str,
    pub holder: &'a str,
    pub now_ms: i64,
    pub until_ms: i64,
}

/// Proxied routes' origins: an `http(s)` URL or a service binding, one request each, no
/// redirects followed, within the route's timeout.
pub trait Origin {
    async fn forward(&self, request: OriginRequest<'_>) -> OriginOutcome;
}

/// The set of port implementations a `gatehouse_app::Gateway` runs over.
pub trait Ports {
    type Guard: KeyGuard;
    type Store: Directory + Resources + EventStore + AuditStore + WebhookStore;
    type Responses: ResponseStore;
    type Ledger: EventLedger;
    type Events: EventSink;
    type Archive: Archive;
    type Deliveries: DeliveryQueue;
    type Audit: AuditSink;
    type DeadLetters: DeadLetters;
    type Redrive: Redrive;
    type Origin: Origin;
}

/// The request's body as the client streams it, read only once the route, the caller and the
/// declared size allow it, and only as far as the route's limit (`core::body::CappedBody`).
/// Dropping it cancels the rest of the stream.
pub trait RequestBody: Sized + 'static {
    /// `Content-Length`, when the client sent one.
    fn declared_len(&self) -> Option<u64>;
    /// The next chunk as it arrives; `None` at the end.
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, PortError>;
    /// The chunks not read yet, for the origin's adapter to stream on unheld (by default the body
    /// itself).
    fn into_rest(self) -> PassThrough {
        PassThrough::new(self)
    }
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
