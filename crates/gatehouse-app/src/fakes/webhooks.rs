//! Webhook delivery in memory: the [`WebhookStore`] tables of [`FakeStore`] (each method mirrors
//! one D1 batch of `adapters/d1.rs`, so it is atomic); the delivery queue and the receivers are in
//! `fakes/delivery.rs`, on a shared simulated clock.
//! Every call goes through the schedule's [`Faults`]. The fakes also keep what the simulation's
//! invariants need: every attempt number a take handed out, and any two posts of one delivery that
//! were in flight at once.

use std::collections::{BTreeMap, BTreeSet};

use super::FakeStore;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{
    AttemptLease, Listen, OriginEvent, OriginEventRecord, PortError, Recovery, SecretRotation, Sweep, Take,
    WebhookStore,
};
use gatehouse_core::webhook::{Attempt, Delivery, StoredSecret, Webhook, INTERRUPTED_ATTEMPT};

/// A delivery row with the columns the port does not show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub delivery: Delivery,
    pub locked_until: Option<i64>,
    pub attempt_started_at: Option<i64>,
    pub retry_requested: bool,
    pub swept_at: Option<i64>,
}

impl DeliveryRow {
    /// A recovery (SPEC §17): pending and due at `now_ms`, its schedule starting over.
    fn recover(&mut self, now_ms: i64) {
        let d = &mut self.delivery;
        d.status = "pending".into();
        d.scheduled_at = now_ms;
        d.schedule_from = d.attempts;
        d.updated_at = now_ms;
        self.retry_requested = false;
    }
}

/// The webhook tables of [`FakeStore`].
#[derive(Debug, Default)]
pub struct WebhookTables {
    pub webhooks: BTreeMap<String, Webhook>,
    pub deliveries: BTreeMap<String, DeliveryRow>,
    pub attempts: BTreeMap<(String, u32), Attempt>,
    /// Every (delivery, attempt number) a take handed out.
    pub taken: BTreeSet<(String, u32)>,
    /// Manual retries that re-opened a delivered delivery (each may deliver it once more).
    pub resends: BTreeMap<String, u32>,
    /// Manual retries that found an attempt in flight (they must wait for it).
    pub retries_beside_attempts: u32,
    /// The request fingerprint of each origin event named by an `Idempotency-Key`, by (project, event id).
    pub origin_events: BTreeMap<(String, String), String>,
    /// Until when the listener of each `cli` subscription counts as connected.
    pub listeners: BTreeMap<String, i64>,
    /// Broken promises seen as they happened (a number handed out twice, an unknown one recorded).
    pub violations: Vec<String>,
}

impl WebhookTables {
    /// A pending delivery, due at `now_ms`, as a create's D1 batch writes it.
    pub fn add_delivery(&mut self, id: &str, hook: &Webhook, now_ms: i64) {
        let delivery = Delivery {
            id: id.to_owned(),
            project_id: hook.project_id.clone(),
            webhook_id: hook.id.clone(),
            event_id: format!("evt_{id}"),
            event: "contact.created".into(),
            payload: format!(r#"{{"id":"evt_{id}","type":"contact.created","data":{{}}}}"#),
            request_id: format!("req_{id}"),
            traceparent: None,
            status: "pending".into(),
            attempts: 0,
            schedule_from: 0,
            scheduled_at: now_ms,
            last_response_code: None,
            last_error: None,
            created_at: now_ms,
            updated_at: now_ms,
        };
        let row = DeliveryRow {
            delivery,
            locked_until: None,
            attempt_started_at: None,
            retry_requested: false,
            swept_at: None,
        };
        self.deliveries.insert(id.to_owned(), row);
    }

    /// The attempts of one delivery, by number.
    pub fn attempts_of(&self, id: &str) -> Vec<&Attempt> {
        self.attempts.values().filter(|a| a.delivery_id == id).collect()
    }

    fn fail_pending_of(&mut self, webhook_id: &str, error: &str, now_ms: i64) {
        for row in self.deliveries.values_mut() {
            let d = &mut row.delivery;
            if d.webhook_id == webhook_id && d.status == "pending" {
                d.status = "failed".into();
                d.last_error = Some(error.into());
                d.updated_at = now_ms;
                row.retry_requested = false;
            }
        }
    }
}

/// `status = 'pending' AND scheduled_at <= now AND (locked_until IS NULL OR locked_until < now)`.
fn takeable(row: &DeliveryRow, now_ms: i64) -> bool {
    row.delivery.status == "pending"
        && row.delivery.scheduled_at <= now_ms
        && row.locked_until.is_none_or(|l| l < now_ms)
}

impl FakeStore {
    async fn tables<T>(
        &self,
        what: &str,
        effect: impl FnOnce(&mut WebhookTables) -> T,
    ) -> Result<T, PortError> {
        self.faults.run(what, || effect(&mut self.webhooks.borrow_mut())).await
    }
}

impl WebhookStore for FakeStore {
    async fn create_webhook(&self, webhook: &Webhook) -> Result<Webhook, PortError> {
        self.tables("webhooks.create", |t| {
            t.webhooks.entry(webhook.id.clone()).or_insert_with(|| webhook.clone()).clone()
        })
        .await
    }

    async fn webhooks(&self, project_id: &str) -> Result<Vec<Webhook>, PortError> {
        self.tables("webhooks.list", |t| {
            let mut hooks: Vec<Webhook> = t
                .webhooks
                .values()
                .filter(|w| w.project_id == project_id && w.status != "deleted")
                .cloned()
                .collect();
            hooks.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
            hooks
        })
        .await
    }

    async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError> {
        self.tables("webhooks.get", |t| {
            t.webhooks.get(id).filter(|w| w.project_id == project_id && w.status != "deleted").cloned()
        })
        .await
    }

    async fn delete_webhook(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        self.tables("webhooks.delete", |t| {
            let Some(hook) =
                t.webhooks.get_mut(id).filter(|w| w.project_id == project_id && w.status != "deleted")
            else {
                return false;
            };
            hook.status = "deleted".into();
            t.fail_pending_of(id, "subscription deleted", now_ms);
            true
        })
        .await
    }

    async fn rotate_secret(&self, rotation: &SecretRotation<'_>) -> Result<Option<Webhook>, PortError> {
        let SecretRotation { project_id, id, secret, public_key, previous_until_ms, replaces } = *rotation;
        self.tables("webhooks.rotate_secret", |t| {
            let hook = t.webhooks.get_mut(id).filter(|w| {
                w.project_id == project_id
                    && w.status != "deleted"
                    && w.secret.as_column() == replaces.as_column()
            })?;
            let previous = std::mem::replace(&mut hook.secret, secret.clone());
            hook.previous_secret = Some((previous, previous_until_ms));
            hook.public_key = public_key.map(str::to_owned);
            Some(hook.clone())
        })
        .await
    }

    async fn enable_webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError> {
        self.tables("webhooks.enable", |t| {
            let hook =
                t.webhooks.get_mut(id).filter(|w| w.project_id == project_id && w.status != "deleted")?;
            hook.status = "active".into();
            hook.disabled_reason = None;
            Some(hook.clone())
        })
        .await
    }

    async fn rename_webhook(
        &self,
        project_id: &str,
        id: &str,
        name: Option<&str>,
    ) -> Result<Option<Webhook>, PortError> {
        self.tables("webhooks.rename", |t| {
            let hook =
                t.webhooks.get_mut(id).filter(|w| w.project_id == project_id && w.status != "deleted")?;
            hook.name = name.map(str::to_owned);
            Some(hook.clone())
        })
        .await
    }

    async fn recover_deliveries(&self, recovery: &Recovery<'_>) -> Result<Vec<String>, PortError> {
        let Recovery { project_id, webhook_id, since_ms, now_ms } = *recovery;
        self.tables("webhooks.recover", |t| {
            let mut ids = Vec::new();
            for row in t.deliveries.values_mut() {
                let d = &mut row.delivery;
                if d.webhook_id == webhook_id
                    && d.project_id == project_id
                    && d.status == "failed"
                    && d.created_at >= since_ms
                {
                    ids.push(d.id.clone());
                    row.recover(now_ms);
                }
            }
            ids
        })
        .await
    }

    async fn deliveries(
        &self,
        webhook_id: &str,
        status: Option<&str>,
        page: &PageRequest,
    ) -> Result<(Vec<Delivery>, Vec<Attempt>), PortError> {
        self.tables("webhooks.deliveries", |t| {
            let mut found: Vec<Delivery> = t
                .deliveries
                .values()
                .map(|r| &r.delivery)
                .filter(|d| d.webhook_id == webhook_id && status.is_none_or(|s| d.status == s))
                .filter(|d| page.after.as_ref().is_none_or(|c| (d.created_at, &d.id) < (c.ts, &c.id)))
                .cloned()
                .collect();
            found.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
            found.truncate(page.fetch_len());
            let attempts = t
                .attempts
                .values()
                .filter(|a| found.iter().any(|d| d.id == a.delivery_id))
                .cloned()
                .collect();
            (found, attempts)
        })
        .await
    }

    async fn delivery(
        &self,
        project_id: &str,
        id: &str,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>, PortError> {
        self.tables("webhooks.delivery", |t| {
            let row = t.deliveries.get(id).filter(|r| r.delivery.project_id == project_id)?;
            Some((row.delivery.clone(), t.attempts_of(id).into_iter().cloned().collect()))
        })
        .await
    }

    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        self.tables("webhooks.reschedule", |t| {
            let Some(row) = t.deliveries.get_mut(id).filter(|r| r.delivery.project_id == project_id) else {
                return false;
            };
            if row.delivery.status == "delivered" {
                *t.resends.entry(id.to_owned()).or_default() += 1;
            }
            row.delivery.status = "pending".into();
            row.delivery.scheduled_at = now_ms;
            row.delivery.updated_at = now_ms;
            row.retry_requested = row.locked_until.is_some_and(|l| l >= now_ms);
            t.retries_beside_attempts += u32::from(row.retry_requested);
            true
        })
        .await
    }

    async fn take_delivery(&self, lease: &AttemptLease<'_>) -> Result<Take, PortError> {
        let AttemptLease { delivery_id: id, now_ms, until_ms, max_attempts, listener } = *lease;
        self.tables("webhooks.take", |t| {
            let Some(row) = t.deliveries.get(id).filter(|r| takeable(r, now_ms)).cloned() else {
                return Take::Nothing;
            };
            let d = &row.delivery;
            let Some(hook) = t.webhooks.get(&d.webhook_id).cloned() else { return Take::Nothing };
            match t.listeners.get(&hook.id) {
                Some(&until) if hook.is_cli() && !listener && until > now_ms => {
                    return Take::Listening(until)
                }
                _ => {}
            }
            if let (Some(locked), Some(started)) = (row.locked_until, row.attempt_started_at) {
                if d.attempts > 0 {
                    let key = (id.to_owned(), d.attempts);
                    t.attempts.entry(key).or_insert_with(|| Attempt {
                        delivery_id: id.to_owned(),
                        attempt: d.attempts,
                        started_at: started,
                        duration_ms: locked - started,
                        response_code: None,
                        response_excerpt: None,
                        error: Some(INTERRUPTED_ATTEMPT.into()),
                        next_retry_at: None,
                    });
                }
            }
            let interrupted_last = row.locked_until.is_some() && d.attempts - d.schedule_from >= max_attempts;
            let row = t.deliveries.get_mut(id).expect("read above");
            if interrupted_last {
                row.delivery.status = "failed".into();
                row.delivery.last_error = Some(INTERRUPTED_ATTEMPT.into());
                row.delivery.updated_at = now_ms;
                row.locked_until = None;
                row.retry_requested = false;
                // The attempt consumed what the sweep queued: the next one may be swept when due.
                row.swept_at = None;
                return Take::Nothing;
            }
            if hook.status != "active" {
                row.delivery.status = "failed".into();
                row.delivery.last_error = Some(format!("subscription {}", hook.status));
                row.delivery.updated_at = now_ms;
                row.locked_until = None;
                row.retry_requested = false;
                return Take::Nothing;
            }
            row.delivery.attempts += 1;
            row.locked_until = Some(until_ms);
            row.attempt_started_at = Some(now_ms);
            row.retry_requested = false;
            let delivery = row.delivery.clone();
            if !t.taken.insert((id.to_owned(), delivery.attempts)) {
                t.violations.push(format!("attempt {} of {id} handed out twice", delivery.attempts));
            }
            Take::Attempt(delivery, hook)
        })
        .await
    }

    async fn listen(&self, listen: Listen<'_>) -> Result<Option<Webhook>, PortError> {
        let Listen { project_id, id, until_ms, resume_at } = listen;
        self.tables("webhooks.listen", |t| {
            let hook = t.webhooks.get(id).filter(|h| h.project_id == project_id && h.is_cli())?;
            let hook = hook.clone();
            if hook.status == "deleted" {
                return None;
            }
            t.listeners.insert(id.to_owned(), until_ms);
            if let Some(now) = resume_at {
                for row in t.deliveries.values_mut() {
                    let d = &mut row.delivery;
                    if d.webhook_id != id {
                        continue;
                    }
                    if d.status == "pending" && d.scheduled_at > now {
                        d.scheduled_at = now;
                    }
                    if d.status == "failed" {
                        row.recover(now);
                    }
                }
            }
            Some(hook)
        })
        .await
    }

    async fn due_for_listener(
        &self,
        webhook_id: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError> {
        self.tables("webhooks.due_for_listener", |t| {
            let mut due: Vec<&DeliveryRow> = t
                .deliveries
                .values()
                .filter(|r| r.delivery.webhook_id == webhook_id && takeable(r, now_ms))
                .collect();
            due.sort_by_key(|r| (r.delivery.created_at, r.delivery.id.clone()));
            due.into_iter().take(limit).map(|r| r.delivery.id.clone()).collect()
        })
        .await
    }

    async fn record_attempt(
        &self,
        a: &Attempt,
        status: &str,
        disable_subscription: bool,
    ) -> Result<Option<i64>, PortError> {
        self.tables("webhooks.record", |t| {
            let id = &a.delivery_id;
            if !t.taken.contains(&(id.clone(), a.attempt)) {
                t.violations.push(format!("attempt {} of {id} recorded but never taken", a.attempt));
            }
            t.attempts.insert((id.clone(), a.attempt), a.clone());
            let now = a.started_at + a.duration_ms;
            let row = t.deliveries.get_mut(id)?;
            let d = &mut row.delivery;
            if d.attempts == a.attempt && d.status == "pending" && row.locked_until.is_some() {
                let retry = row.retry_requested;
                d.status = if retry && status == "failed" { "pending".into() } else { status.into() };
                d.scheduled_at = if retry && status != "delivered" {
                    now
                } else {
                    a.next_retry_at.unwrap_or(d.scheduled_at)
                };
                row.locked_until = None;
                row.retry_requested = false;
                d.last_response_code = a.response_code;
                d.last_error = a.error.clone();
                d.updated_at = now;
            }
            if disable_subscription {
                let hook_id = d.webhook_id.clone();
                if let Some(hook) = t.webhooks.get_mut(&hook_id).filter(|h| h.status == "active") {
                    hook.status = "disabled".into();
                    hook.disabled_reason = Some("the receiver answered 410 Gone".into());
                }
                t.fail_pending_of(&hook_id, "the subscription was disabled (410 Gone)", now);
            }
            let row = &t.deliveries[id];
            (row.delivery.status == "pending" && row.locked_until.is_none())
                .then_some(row.delivery.scheduled_at)
        })
        .await
    }

    async fn record_late_report(&self, a: &Attempt, delivered: bool) -> Result<String, PortError> {
        self.tables("webhooks.record_late_report", |t| {
            t.attempts.insert((a.delivery_id.clone(), a.attempt), a.clone());
            let row = t.deliveries.get_mut(&a.delivery_id).expect("a reported delivery exists");
            let d = &mut row.delivery;
            if delivered && (d.status == "pending" || d.status == "failed") {
                d.status = "delivered".into();
                row.retry_requested = false;
                d.last_response_code = a.response_code;
                d.last_error = None;
                d.updated_at = a.started_at + a.duration_ms;
            }
            d.status.clone()
        })
        .await
    }

    async fn record_origin_event(&self, event: &OriginEvent) -> Result<OriginEventRecord, PortError> {
        let known = self.directory.projects.borrow().iter().any(|p| p.id == event.project_id);
        self.tables("webhooks.record_origin_event", |t| {
            if !known {
                return OriginEventRecord::NoSuchProject;
            }
            if let Some(request) = &event.request {
                let named = t.origin_events.entry((event.project_id.clone(), event.event_id.clone()));
                if named.or_insert_with(|| request.clone()) != request {
                    return OriginEventRecord::Reused;
                }
            }
            let matching: Vec<Webhook> = t
                .webhooks
                .values()
                .filter(|w| w.project_id == event.project_id && w.status == "active")
                .filter(|w| gatehouse_core::webhook::subscribes(&w.events, &event.event_type))
                .cloned()
                .collect();
            for hook in matching {
                let written = t
                    .deliveries
                    .values()
                    .any(|r| r.delivery.webhook_id == hook.id && r.delivery.event_id == event.event_id);
                if !written {
                    let id = format!("dlv_{}_{}", event.event_id, hook.id);
                    t.add_delivery(&id, &hook, event.created_at);
                    let d = &mut t.deliveries.get_mut(&id).expect("just added").delivery;
                    d.event_id = event.event_id.clone();
                    d.event = event.event_type.clone();
                    d.payload = event.payload.clone();
                    d.request_id = event.request_id.clone();
                    d.traceparent = event.traceparent.clone();
                }
            }
            OriginEventRecord::Recorded(
                t.deliveries
                    .values()
                    .filter(|r| {
                        r.delivery.project_id == event.project_id && r.delivery.event_id == event.event_id
                    })
                    .map(|r| r.delivery.id.clone())
                    .collect(),
            )
        })
        .await
    }

    async fn secrets_to_reseal(
        &self,
        current_prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, StoredSecret)>, PortError> {
        self.tables("webhooks.secrets_to_reseal", |t| {
            let old = t.webhooks.values().filter(|w| !w.secret.as_column().starts_with(current_prefix));
            old.take(limit).map(|w| (w.id.clone(), w.secret.clone())).collect()
        })
        .await
    }

    async fn reseal_secret(
        &self,
        id: &str,
        stored: &StoredSecret,
        sealed: &StoredSecret,
    ) -> Result<(), PortError> {
        self.tables("webhooks.reseal_secret", |t| {
            if let Some(hook) = t.webhooks.get_mut(id).filter(|w| &w.secret == stored) {
                hook.secret = sealed.clone();
            }
        })
        .await
    }

    async fn overdue_deliveries(&self, sweep: Sweep) -> Result<Vec<String>, PortError> {
        let Sweep { due_before_ms, now_ms, swept_before_ms, limit } = sweep;
        self.tables("webhooks.overdue", |t| {
            let mut due: Vec<&mut DeliveryRow> = t
                .deliveries
                .values_mut()
                .filter(|r| r.delivery.status == "pending" && r.delivery.scheduled_at <= due_before_ms)
                .filter(|r| r.locked_until.is_none_or(|l| l < now_ms))
                .filter(|r| r.swept_at.is_none_or(|s| s < swept_before_ms))
                .collect();
            due.sort_by_key(|r| r.delivery.scheduled_at);
            due.into_iter()
                .take(limit)
                .map(|r| {
                    r.swept_at = Some(now_ms);
                    r.delivery.id.clone()
                })
                .collect()
        })
        .await
    }
}

pub use super::delivery::{FakeDeliveryQueue, FakeReceiver, Post, QueuedDelivery};
