//! Webhooks (SPEC §10, §15, §17): subscriptions, deliveries and attempts in D1, origin events,
//! the webhook queue and the outbound `POST`.

use super::PortError;
use crate::page::PageRequest;
use crate::webhook::{Attempt, Delivery, ReceiverOutcome, StoredSecret, Webhook};

/// A secret rotation (SPEC §17): `secret` becomes the subscription's current secret and
/// `replaces` (as stored) its previous one, which also signs until `previous_until_ms`.
#[derive(Debug, Clone, Copy)]
pub struct SecretRotation<'a> {
    pub project_id: &'a str,
    pub id: &'a str,
    pub secret: &'a StoredSecret,
    /// The new secret's public key (`v1a`), or `None` (`v1`).
    pub public_key: Option<&'a str>,
    pub previous_until_ms: i64,
    pub replaces: &'a StoredSecret,
}

/// A recovery (SPEC §17): every `failed` delivery of the subscription created at or after
/// `since_ms` becomes pending and due at `now_ms`, its schedule starting over.
#[derive(Debug, Clone, Copy)]
pub struct Recovery<'a> {
    pub project_id: &'a str,
    pub webhook_id: &'a str,
    pub since_ms: i64,
    pub now_ms: i64,
}

/// One attempt's lease on its delivery: taken at `now_ms`, held until `until_ms` (the attempt's
/// timeout and some slack), for a schedule of `max_attempts` attempts.
#[derive(Debug, Clone, Copy)]
pub struct AttemptLease<'a> {
    pub delivery_id: &'a str,
    pub now_ms: i64,
    pub until_ms: i64,
    pub max_attempts: u32,
    /// Taken by the listener of the delivery's `cli` subscription (SPEC §21). Any other take
    /// leaves a `cli` delivery alone while its listener is connected.
    pub listener: bool,
}

/// What [`WebhookStore::take_delivery`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per take, matched at once
pub enum Take {
    /// The delivery, held for this attempt (its number allocated), and its subscription.
    Attempt(Delivery, Webhook),
    /// Not due, not pending, or held by another attempt: nothing to do.
    Nothing,
    /// A `cli` subscription's delivery, left to its listener, connected until then (Unix ms).
    Listening(i64),
}

/// A `gatehouse listen` session's hold on its `cli` subscription (see [`WebhookStore::listen`]):
/// until `until_ms`, and from `resume_at` the recovery of what found no listener.
#[derive(Debug, Clone, Copy)]
pub struct Listen<'a> {
    pub project_id: &'a str,
    pub id: &'a str,
    pub until_ms: i64,
    pub resume_at: Option<i64>,
}

/// A sweep's ask (see [`WebhookStore::overdue_deliveries`]): up to `limit` pending deliveries due
/// before `due_before_ms` and not swept since `swept_before_ms`, marked swept at `now_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Sweep {
    pub due_before_ms: i64,
    pub now_ms: i64,
    pub swept_before_ms: i64,
    pub limit: usize,
}

/// Subscriptions, deliveries and attempts in D1.
pub trait WebhookStore {
    /// Create-or-find by id (like [`super::Resources`]): answers the subscription as stored, so a second
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
    /// Names a subscription (`None`: unnamed, SPEC §26); answers it as stored (`None`: no such
    /// subscription, or deleted).
    async fn rename_webhook(
        &self,
        project_id: &str,
        id: &str,
        name: Option<&str>,
    ) -> Result<Option<Webhook>, PortError>;
    /// Carries out a recovery; answers the ids of the deliveries it made pending.
    async fn recover_deliveries(&self, recovery: &Recovery<'_>) -> Result<Vec<String>, PortError>;
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
    /// `false` if there is none. It never clears the lease of an attempt in flight: that attempt
    /// finishes and records first, and sees the request (its record leaves the delivery due now).
    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError>;
    /// Takes a due, pending delivery that no live attempt holds under `lease`, in one atomic step
    /// that also allocates the attempt's number: the answered `Delivery::attempts` is the number
    /// of this attempt, never given to another one. `None` when it is not due, not pending, or
    /// leased. In the same step, an earlier attempt whose lease ran out without a record gets an
    /// "interrupted" row, and a delivery whose subscription is no longer active is failed
    /// (`subscription deleted` / `subscription disabled`) instead of taken. When that interrupted
    /// attempt was the schedule's last (`max_attempts` since `schedule_from`), the delivery fails
    /// instead of taking another (SPEC §19: none past the last attempt).
    /// A `cli` subscription's delivery is taken only by its listener while one is connected
    /// ([`Take::Listening`] for any other take).
    async fn take_delivery(&self, lease: &AttemptLease<'_>) -> Result<Take, PortError>;
    /// A listener of the `cli` subscription pulls (SPEC §21): it counts as connected until
    /// `until_ms`; with `resume_at`, every pending delivery of the subscription due later becomes
    /// due then, and every failed one whose last attempt found no listener
    /// ([`crate::webhook::NO_LISTENER`]) becomes pending and due then, its schedule starting over
    /// (as a recovery). Answers the subscription (`None`: none such, deleted, or not of kind `cli`).
    async fn listen(&self, listen: Listen<'_>) -> Result<Option<Webhook>, PortError>;
    /// Up to `limit` pending deliveries of the subscription due at `now_ms` and held by no
    /// attempt, oldest first.
    async fn due_for_listener(
        &self,
        webhook_id: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError>;
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
    /// A listener's report that came after its hold ran out and the attempt was written down as
    /// interrupted (SPEC §23): its real outcome replaces that row; a `delivered` one marks the
    /// delivery delivered whatever attempt it is at now (the target has it). Answers the
    /// delivery's status afterwards.
    async fn record_late_report(&self, attempt: &Attempt, delivered: bool) -> Result<String, PortError>;
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
    async fn overdue_deliveries(&self, sweep: Sweep) -> Result<Vec<String>, PortError>;
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
    /// The `traceparent` its deliveries carry (the request's; none for the gateway's own events).
    pub traceparent: Option<String>,
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
