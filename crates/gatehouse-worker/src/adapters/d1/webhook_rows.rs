//! Webhook rows as D1 returns them, and the statements' shared parts.

use gatehouse_core::ports::PortError;
use gatehouse_core::webhook::{StoredSecret, Webhook};

/// What a recovery (SPEC §17) sets: pending and due at `at` (a parameter), its schedule starting
/// over.
pub(super) fn recovered(at: &str) -> String {
    format!(
        "status = 'pending', scheduled_at = {at}, schedule_from = attempts, retry_requested = 0,
         swept_at = NULL, updated_at = {at}"
    )
}

/// A subscription as SQLite returns it (`events` is JSON text).
#[derive(serde::Deserialize)]
pub(super) struct WebhookRecord {
    id: String,
    project_id: String,
    url: String,
    events: String,
    secret: String,
    status: String,
    disabled_reason: Option<String>,
    created_at: i64,
    previous_secret: Option<String>,
    previous_secret_until: Option<i64>,
    public_key: Option<String>,
    name: Option<String>,
}

impl WebhookRecord {
    pub(super) fn into_webhook(self) -> Result<Webhook, PortError> {
        Ok(Webhook {
            events: serde_json::from_str(&self.events).map_err(PortError::from_display)?,
            id: self.id,
            project_id: self.project_id,
            url: self.url,
            secret: StoredSecret::from_column(self.secret),
            public_key: self.public_key,
            name: self.name,
            previous_secret: self
                .previous_secret
                .map(StoredSecret::from_column)
                .zip(self.previous_secret_until),
            status: self.status,
            disabled_reason: self.disabled_reason,
            created_at: self.created_at,
        })
    }
}

/// One pending delivery of an event for every active subscription of its project that takes its
/// type, where `condition` also holds: ?1 project, ?2 event id, ?3 type, ?4 payload, ?5 request
/// id, ?6 now, ?8 the request's `traceparent` (?7 is the condition's). A delivery that exists
/// already is left as it is.
pub(super) fn fan_out(condition: &str) -> String {
    format!(
        "INSERT OR IGNORE INTO webhook_deliveries (id, project_id, webhook_id, event_id, event, payload,
           request_id, traceparent, status, attempts, scheduled_at, created_at, updated_at)
         SELECT 'dlv_' || lower(hex(randomblob(13))), ?1, w.id, ?2, ?3, ?4, ?5, ?8, 'pending', 0, ?6, ?6, ?6
         FROM webhooks w
         WHERE w.project_id = ?1 AND w.status = 'active'
           AND EXISTS (SELECT 1 FROM json_each(w.events)
                       WHERE value = ?3 OR (value = '*' AND substr(?3, 1, 6) <> 'usage.'))
           AND {condition}"
    )
}
