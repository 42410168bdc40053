//! Subscriptions, deliveries and attempts: the [`WebhookStore`] port.

use wasm_bindgen::JsValue;
use worker::D1PreparedStatement;

use super::webhook_rows::{fan_out, recovered, WebhookRecord};
use super::{after, int, opt_int, opt_text, result_ids, text, D1Store};
use crate::adapters::deadline::within;
use gatehouse_core::page::PageRequest;
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{
    AttemptLease, Listen, Meter, OriginEvent, OriginEventRecord, PortError, Recovery, SecretRotation, Sweep,
    Take, WebhookStore,
};
use gatehouse_core::webhook::{Attempt, Delivery, StoredSecret, Webhook, CLI_URL, INTERRUPTED_ATTEMPT};

const WEBHOOK_COLUMNS: &str = "id, project_id, url, events, secret, status, disabled_reason, created_at,
  previous_secret, previous_secret_until, public_key, name";
const DELIVERY_COLUMNS: &str =
    "id, project_id, webhook_id, event_id, event, payload, request_id, traceparent, status, attempts,
  schedule_from, scheduled_at, last_response_code, last_error, created_at, updated_at";

impl D1Store {
    async fn webhook_rows(&self, sql: &str, args: &[JsValue]) -> Result<Vec<Webhook>, PortError> {
        let rows: Vec<WebhookRecord> = self.rows(sql, args).await?;
        rows.into_iter().map(WebhookRecord::into_webhook).collect()
    }

    async fn attempts_of(&self, delivery_ids: &[String]) -> Result<Vec<Attempt>, PortError> {
        if delivery_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(delivery_ids).map_err(PortError::from_display)?;
        self.rows(
            "SELECT * FROM webhook_attempts WHERE delivery_id IN (SELECT value FROM json_each(?1))
             ORDER BY delivery_id, attempt",
            &[text(&ids)],
        )
        .await
    }

    /// The statement that writes an attempt's row (replacing an "interrupted" one of that number).
    fn attempt_row(&self, a: &Attempt) -> Result<D1PreparedStatement, PortError> {
        self.statement(
            "INSERT OR REPLACE INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms,
               response_code, response_excerpt, error, next_retry_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            &[
                text(&a.delivery_id),
                int(a.attempt.into()),
                int(a.started_at),
                int(a.duration_ms),
                opt_int(a.response_code.map(i64::from)),
                opt_text(a.response_excerpt.as_deref()),
                opt_text(a.error.as_deref()),
                opt_int(a.next_retry_at),
            ],
        )
    }
}

impl WebhookStore for D1Store {
    async fn create_webhook(&self, w: &Webhook) -> Result<Webhook, PortError> {
        let events = serde_json::to_string(&w.events).map_err(PortError::from_display)?;
        // Create-or-find by id (see `Resources`): answers the row as stored.
        let rows = self
            .webhook_rows(
                &format!(
                    "INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, NULL, ?9, ?10)
                 ON CONFLICT (id) DO UPDATE SET id = excluded.id RETURNING {WEBHOOK_COLUMNS}"
                ),
                &[
                    text(&w.id),
                    text(&w.project_id),
                    text(&w.url),
                    text(&events),
                    text(w.secret.as_column()),
                    text(&w.status),
                    opt_text(w.disabled_reason.as_deref()),
                    int(w.created_at),
                    opt_text(w.public_key.as_deref()),
                    opt_text(w.name.as_deref()),
                ],
            )
            .await?;
        rows.into_iter().next().ok_or_else(|| PortError("the subscription insert answered no row".into()))
    }

    async fn webhooks(&self, project_id: &str) -> Result<Vec<Webhook>, PortError> {
        self.webhook_rows(
            &format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = ?1 AND status <> 'deleted'
                 ORDER BY created_at DESC, id DESC"
            ),
            &[text(project_id)],
        )
        .await
    }

    async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError> {
        let rows = self
            .webhook_rows(
                &format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted'"
                ),
                &[text(id), text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn delete_webhook(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        let args = [text(id), text(project_id), int(now_ms)];
        let delete = self.statement(
            "UPDATE webhooks SET status = 'deleted' WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted'",
            &args[..2],
        )?;
        let fail_pending = self.statement(
            "UPDATE webhook_deliveries SET status = 'failed', last_error = 'subscription deleted',
               retry_requested = 0, updated_at = ?3
             WHERE webhook_id = ?1 AND project_id = ?2 AND status = 'pending'",
            &args,
        )?;
        Ok(self.batch(vec![delete, fail_pending]).await?.first() == Some(&1))
    }

    async fn rotate_secret(&self, rotation: &SecretRotation<'_>) -> Result<Option<Webhook>, PortError> {
        let SecretRotation { project_id, id, secret, public_key, previous_until_ms, replaces } = *rotation;
        // One statement: the replaced secret moves to `previous_secret` as it is stored (sealed),
        // only while it is the one the rotation read; the public key is the new secret's.
        let rows = self
            .webhook_rows(
                &format!(
                    "UPDATE webhooks SET previous_secret = secret, previous_secret_until = ?4, secret = ?3,
                       public_key = ?6
                     WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted' AND secret = ?5
                     RETURNING {WEBHOOK_COLUMNS}"
                ),
                &[
                    text(id),
                    text(project_id),
                    text(secret.as_column()),
                    int(previous_until_ms),
                    text(replaces.as_column()),
                    opt_text(public_key),
                ],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn enable_webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError> {
        let rows = self
            .webhook_rows(
                &format!(
                    "UPDATE webhooks SET status = 'active', disabled_reason = NULL
                     WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted'
                     RETURNING {WEBHOOK_COLUMNS}"
                ),
                &[text(id), text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn rename_webhook(
        &self,
        project_id: &str,
        id: &str,
        name: Option<&str>,
    ) -> Result<Option<Webhook>, PortError> {
        let sql = format!(
            "UPDATE webhooks SET name = ?3 WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted' RETURNING {WEBHOOK_COLUMNS}"
        );
        Ok(self.webhook_rows(&sql, &[text(id), text(project_id), opt_text(name)]).await?.into_iter().next())
    }

    async fn recover_deliveries(&self, recovery: &Recovery<'_>) -> Result<Vec<String>, PortError> {
        let Recovery { project_id, webhook_id, since_ms, now_ms } = *recovery;
        self.ids(
            &format!(
                "UPDATE webhook_deliveries SET {}
                 WHERE webhook_id = ?1 AND project_id = ?2 AND status = 'failed' AND created_at >= ?3
                 RETURNING id",
                recovered("?4")
            ),
            &[text(webhook_id), text(project_id), int(since_ms), int(now_ms)],
        )
        .await
    }

    async fn deliveries(
        &self,
        webhook_id: &str,
        status: Option<&str>,
        page: &PageRequest,
    ) -> Result<(Vec<Delivery>, Vec<Attempt>), PortError> {
        let (ts, id) = after(page.after.as_ref());
        let deliveries: Vec<Delivery> = self
            .rows(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                     WHERE webhook_id = ?1 AND (?2 IS NULL OR status = ?2)
                       AND (?3 IS NULL OR (created_at, id) < (?3, ?4))
                     ORDER BY created_at DESC, id DESC LIMIT ?5"
                ),
                &[text(webhook_id), opt_text(status), ts, id, int(page.fetch_len() as i64)],
            )
            .await?;
        let ids: Vec<String> = deliveries.iter().map(|d| d.id.clone()).collect();
        Ok((deliveries, self.attempts_of(&ids).await?))
    }

    async fn delivery(
        &self,
        project_id: &str,
        id: &str,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>, PortError> {
        let rows: Vec<Delivery> = self
            .rows(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = ?1 AND project_id = ?2"
                ),
                &[text(id), text(project_id)],
            )
            .await?;
        match rows.into_iter().next() {
            Some(d) => {
                let attempts = self.attempts_of(std::slice::from_ref(&d.id)).await?;
                Ok(Some((d, attempts)))
            }
            None => Ok(None),
        }
    }

    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        // The attempt's lease (`locked_until`) is left alone: an attempt in flight sees `retry_requested`.
        let update = self.statement(
            "UPDATE webhook_deliveries SET status = 'pending', scheduled_at = ?3, updated_at = ?3,
               retry_requested = CASE WHEN locked_until >= ?3 THEN 1 ELSE 0 END
             WHERE id = ?1 AND project_id = ?2",
            &[text(id), text(project_id), int(now_ms)],
        )?;
        Ok(self.batch(vec![update]).await? == [1])
    }

    async fn take_delivery(&self, lease: &AttemptLease<'_>) -> Result<Take, PortError> {
        let AttemptLease { delivery_id: id, now_ms, until_ms, max_attempts, listener } = *lease;
        const DUE: &str = "id = ?1 AND status = 'pending' AND scheduled_at <= ?2
            AND (locked_until IS NULL OR locked_until < ?2)";
        // A cli subscription's delivery is its listener's while one is connected (SPEC §21).
        let listening = format!(
            "(SELECT w.listener_until FROM webhooks w WHERE w.id = webhook_id AND w.url = '{CLI_URL}')"
        );
        #[allow(non_snake_case)]
        let TAKEABLE = match listener {
            true => DUE.to_owned(),
            false => format!("{DUE} AND COALESCE({listening}, 0) <= ?2"),
        };
        let args = [text(id), int(now_ms), int(until_ms)];
        let statements = vec![
            // Left to a connected listener: until when.
            self.statement(
                &format!(
                    "SELECT {listening} AS listener_until FROM webhook_deliveries
                     WHERE {DUE} AND ?3 = 0 AND COALESCE({listening}, 0) > ?2"
                ),
                &[text(id), int(now_ms), int(listener.into())],
            )?,
            // An earlier attempt whose lease ran out unrecorded: its number gets a row saying so.
            self.statement(
                &format!(
                    "INSERT OR IGNORE INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, error)
                     SELECT id, attempts, attempt_started_at, locked_until - attempt_started_at, ?3
                     FROM webhook_deliveries
                     WHERE {TAKEABLE} AND locked_until IS NOT NULL AND attempts > 0
                       AND attempt_started_at IS NOT NULL"
                ),
                &[text(id), int(now_ms), text(INTERRUPTED_ATTEMPT)],
            )?,
            // That attempt was the schedule's last: the delivery fails, with no further attempt.
            self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET status = 'failed', locked_until = NULL, retry_requested = 0,
                       last_error = ?3, updated_at = ?2
                     WHERE {TAKEABLE} AND locked_until IS NOT NULL AND attempts - schedule_from >= ?4"
                ),
                &[text(id), int(now_ms), text(INTERRUPTED_ATTEMPT), int(max_attempts.into())],
            )?,
            // A subscription deleted or disabled since: the delivery fails, with no attempt.
            self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET status = 'failed', locked_until = NULL, retry_requested = 0,
                       last_error = 'subscription ' || (SELECT w.status FROM webhooks w WHERE w.id = webhook_id),
                       updated_at = ?2
                     WHERE {TAKEABLE}
                       AND (SELECT w.status FROM webhooks w WHERE w.id = webhook_id) <> 'active'"
                ),
                &args[..2],
            )?,
            // The take: a lease, and the next attempt number, in one statement.
            self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET attempts = attempts + 1, locked_until = ?3,
                       attempt_started_at = ?2, retry_requested = 0
                     WHERE {TAKEABLE}
                     RETURNING {DELIVERY_COLUMNS}"
                ),
                &args,
            )?,
            self.statement(
                &format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                     WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1)"
                ),
                &args[..1],
            )?,
        ];
        Meter::count(&self.meter.d1_queries);
        let batch = async { self.db.batch(statements).await.map_err(PortError::from_display) };
        let results = within(deadline::D1_MS, "D1 batch", batch).await?;
        #[derive(serde::Deserialize)]
        struct Listening {
            listener_until: i64,
        }
        let listening: Vec<Listening> = results[0].results().map_err(PortError::from_display)?;
        if let Some(l) = listening.into_iter().next() {
            return Ok(Take::Listening(l.listener_until));
        }
        let taken: Vec<Delivery> = results[4].results().map_err(PortError::from_display)?;
        let Some(delivery) = taken.into_iter().next() else { return Ok(Take::Nothing) };
        let hooks: Vec<WebhookRecord> = results[5].results().map_err(PortError::from_display)?;
        match hooks.into_iter().next() {
            Some(hook) => Ok(Take::Attempt(delivery, hook.into_webhook()?)),
            None => Err(PortError(format!("delivery {id} has no subscription"))),
        }
    }

    async fn listen(&self, listen: Listen<'_>) -> Result<Option<Webhook>, PortError> {
        let Listen { project_id, id, until_ms, resume_at } = listen;
        let mut statements = vec![self.statement(
            &format!(
                "UPDATE webhooks SET listener_until = ?3
                 WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted' AND url = '{CLI_URL}'
                 RETURNING {WEBHOOK_COLUMNS}"
            ),
            &[text(id), text(project_id), int(until_ms)],
        )?];
        if let Some(now) = resume_at {
            // Only the subscription's (the update above answers none of another project's).
            statements.push(self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET scheduled_at = ?2
                     WHERE webhook_id = ?1 AND status = 'pending' AND scheduled_at > ?2
                       AND EXISTS (SELECT 1 FROM webhooks w WHERE w.id = ?1 AND w.project_id = ?3
                                   AND w.url = '{CLI_URL}')"
                ),
                &[text(id), int(now), text(project_id)],
            )?);
            // Every one that did not reach the forward target, however its last attempt ended (no
            // listener, a hold that ran out, the target's error): pending again, as a recovery
            // makes them (SPEC §23).
            statements.push(self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET {}
                     WHERE webhook_id = ?1 AND project_id = ?3 AND status = 'failed'
                       AND EXISTS (SELECT 1 FROM webhooks w WHERE w.id = ?1 AND w.project_id = ?3
                                   AND w.url = '{CLI_URL}')",
                    recovered("?2")
                ),
                &[text(id), int(now), text(project_id)],
            )?);
        }
        let results = self.results(statements).await?;
        let hooks: Vec<WebhookRecord> = results[0].results().map_err(PortError::from_display)?;
        hooks.into_iter().next().map(WebhookRecord::into_webhook).transpose()
    }

    async fn due_for_listener(
        &self,
        webhook_id: &str,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError> {
        let due = self.statement(
            "SELECT id FROM webhook_deliveries
             WHERE webhook_id = ?1 AND status = 'pending' AND scheduled_at <= ?2
               AND (locked_until IS NULL OR locked_until < ?2)
             ORDER BY created_at, id LIMIT ?3",
            &[text(webhook_id), int(now_ms), int(limit as i64)],
        )?;
        result_ids(&self.results(vec![due]).await?[0])
    }

    async fn record_late_report(&self, a: &Attempt, delivered: bool) -> Result<String, PortError> {
        #[derive(serde::Deserialize)]
        struct Status {
            status: String,
        }
        let now = a.started_at + a.duration_ms;
        let statements = vec![
            self.attempt_row(a)?,
            // The target has it: delivered, whatever attempt the delivery is at (one in flight
            // records nothing over it: it needs the delivery pending).
            self.statement(
                "UPDATE webhook_deliveries SET status = 'delivered', retry_requested = 0,
                   last_response_code = ?2, last_error = NULL, updated_at = ?3
                 WHERE id = ?1 AND ?4 = 1 AND status IN ('pending', 'failed')",
                &[
                    text(&a.delivery_id),
                    opt_int(a.response_code.map(i64::from)),
                    int(now),
                    int(i64::from(delivered)),
                ],
            )?,
            self.statement("SELECT status FROM webhook_deliveries WHERE id = ?1", &[text(&a.delivery_id)])?,
        ];
        Meter::count(&self.meter.d1_queries);
        let results = self.results(statements).await?;
        let rows: Vec<Status> = results[2].results().map_err(PortError::from_display)?;
        rows.into_iter()
            .next()
            .map(|r| r.status)
            .ok_or_else(|| PortError("the reported delivery is gone".into()))
    }

    async fn record_attempt(
        &self,
        a: &Attempt,
        status: &str,
        disable_subscription: bool,
    ) -> Result<Option<i64>, PortError> {
        let now = a.started_at + a.duration_ms;
        let mut statements = vec![
            // A real outcome replaces an "interrupted" row written after this attempt's lease ran out.
            self.attempt_row(a)?,
            // Only while this attempt holds the delivery and it is pending (a subscription deleted
            // meanwhile wins); a manual retry requested meanwhile makes it due now. The attempt
            // consumed what a sweep queued, so the sweep may queue the next one once it is overdue
            // (it waited 10 minutes after its last send: a retry due sooner lay in the queue).
            self.statement(
                "UPDATE webhook_deliveries SET
                   status = CASE WHEN retry_requested = 1 AND ?2 = 'failed' THEN 'pending' ELSE ?2 END,
                   scheduled_at = CASE WHEN retry_requested = 1 AND ?2 <> 'delivered' THEN ?7
                                       ELSE coalesce(?4, scheduled_at) END,
                   locked_until = NULL, retry_requested = 0, swept_at = NULL, last_response_code = ?5,
                   last_error = ?6, updated_at = ?7
                 WHERE id = ?1 AND attempts = ?3 AND status = 'pending' AND locked_until IS NOT NULL",
                &[
                    text(&a.delivery_id),
                    text(status),
                    int(a.attempt.into()),
                    opt_int(a.next_retry_at),
                    opt_int(a.response_code.map(i64::from)),
                    opt_text(a.error.as_deref()),
                    int(now),
                ],
            )?,
        ];
        if disable_subscription {
            let args = [text(&a.delivery_id), int(now)];
            statements.push(self.statement(
                "UPDATE webhooks SET status = 'disabled', disabled_reason = 'the receiver answered 410 Gone'
                 WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1) AND status = 'active'",
                &args[..1],
            )?);
            statements.push(self.statement(
                "UPDATE webhook_deliveries SET status = 'failed', retry_requested = 0,
                   last_error = 'the subscription was disabled (410 Gone)', updated_at = ?2
                 WHERE webhook_id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1) AND status = 'pending'",
                &args,
            )?);
        }
        statements.push(self.statement(
            "SELECT scheduled_at FROM webhook_deliveries
             WHERE id = ?1 AND status = 'pending' AND locked_until IS NULL",
            &[text(&a.delivery_id)],
        )?);
        Meter::count(&self.meter.d1_queries);
        let batch = async { self.db.batch(statements).await.map_err(PortError::from_display) };
        let results = within(deadline::D1_MS, "D1 batch", batch).await?;
        #[derive(serde::Deserialize)]
        struct Due {
            scheduled_at: i64,
        }
        let due: Vec<Due> =
            results.last().map_or(Ok(Vec::new()), |r| r.results()).map_err(PortError::from_display)?;
        Ok(due.first().map(|d| d.scheduled_at))
    }

    async fn record_origin_event(&self, e: &OriginEvent) -> Result<OriginEventRecord, PortError> {
        // One batch: the request that names the event id (kept once, ?7 NULL without a key), the
        // deliveries (once per subscription and event id, and only for that request), then the
        // project, every delivery of the event (an earlier call's included) and the request kept.
        let named_by_this_request = "(?7 IS NULL OR EXISTS (SELECT 1 FROM origin_events
             WHERE project_id = ?1 AND event_id = ?2 AND request = ?7))";
        let statements = vec![
            self.statement(
                "INSERT OR IGNORE INTO origin_events (project_id, event_id, request, created_at)
                 SELECT ?1, ?2, ?3, ?4 WHERE ?3 IS NOT NULL AND EXISTS (SELECT 1 FROM projects WHERE id = ?1)",
                &[text(&e.project_id), text(&e.event_id), opt_text(e.request.as_deref()), int(e.created_at)],
            )?,
            self.statement(
                &fan_out(named_by_this_request),
                &[
                    text(&e.project_id),
                    text(&e.event_id),
                    text(&e.event_type),
                    text(&e.payload),
                    text(&e.request_id),
                    int(e.created_at),
                    opt_text(e.request.as_deref()),
                    opt_text(e.traceparent.as_deref()),
                ],
            )?,
            self.statement("SELECT id FROM projects WHERE id = ?1", &[text(&e.project_id)])?,
            self.statement(
                "SELECT id FROM webhook_deliveries WHERE project_id = ?1 AND event_id = ?2",
                &[text(&e.project_id), text(&e.event_id)],
            )?,
            self.statement(
                "SELECT request AS id FROM origin_events WHERE project_id = ?1 AND event_id = ?2",
                &[text(&e.project_id), text(&e.event_id)],
            )?,
        ];
        let results = self.results(statements).await?;
        if result_ids(&results[2])?.is_empty() {
            return Ok(OriginEventRecord::NoSuchProject);
        }
        let kept = result_ids(&results[4])?;
        if e.request.as_ref().is_some_and(|request| kept.first().is_some_and(|k| k != request)) {
            return Ok(OriginEventRecord::Reused);
        }
        result_ids(&results[3]).map(OriginEventRecord::Recorded)
    }

    async fn secrets_to_reseal(
        &self,
        current_prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, StoredSecret)>, PortError> {
        #[derive(serde::Deserialize)]
        struct Stored {
            id: String,
            secret: String,
        }
        let rows: Vec<Stored> = self
            .rows(
                "SELECT id, secret FROM webhooks WHERE substr(secret, 1, length(?1)) <> ?1 LIMIT ?2",
                &[text(current_prefix), int(limit as i64)],
            )
            .await?;
        Ok(rows.into_iter().map(|r| (r.id, StoredSecret::from_column(r.secret))).collect())
    }

    async fn reseal_secret(
        &self,
        id: &str,
        stored: &StoredSecret,
        sealed: &StoredSecret,
    ) -> Result<(), PortError> {
        let statement = self.statement(
            "UPDATE webhooks SET secret = ?3 WHERE id = ?1 AND secret = ?2",
            &[text(id), text(stored.as_column()), text(sealed.as_column())],
        )?;
        self.batch(vec![statement]).await.map(drop)
    }

    async fn overdue_deliveries(&self, sweep: Sweep) -> Result<Vec<String>, PortError> {
        let Sweep { due_before_ms, now_ms, swept_before_ms, limit } = sweep;
        self.ids(
            "UPDATE webhook_deliveries SET swept_at = ?2
             WHERE id IN (
               SELECT id FROM webhook_deliveries
               WHERE status = 'pending' AND scheduled_at <= ?1 AND (locked_until IS NULL OR locked_until < ?2)
                 AND (swept_at IS NULL OR swept_at < ?3)
               ORDER BY scheduled_at LIMIT ?4)
             RETURNING id",
            &[int(due_before_ms), int(now_ms), int(swept_before_ms), int(limit as i64)],
        )
        .await
    }
}
