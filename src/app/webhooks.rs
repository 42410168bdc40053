//! Webhooks (SPEC §10): the owner's subscriptions API, and the two jobs that deliver: the queue
//! consumer's `dispatch` (one signed attempt, then the schedule) and the minute `sweep` that
//! re-enqueues due deliveries whose queue message was lost.

use serde::Deserialize;
use serde_json::json;

use super::{random, unavailable, Call, Gateway, Reply};
use crate::config::Config;
use crate::core::encoding::object_id;
use crate::core::error::ApiError;
use crate::core::json_body;
use crate::core::page::{Cursor, PageRequest};
use crate::core::webhook::{
    self, check_events, check_url, judge, signing_key, Attempt, Delivery, Reply as Answer, Webhook,
};
use crate::ports::{DeliveryQueue, PortError, Ports, WebhookClient, WebhookStore};

/// How long one attempt holds its delivery beyond the timeout, so a crashed attempt is retried.
const HOLD_SLACK_MS: i64 = 30_000;
/// The sweep re-enqueues deliveries this overdue: a queued message normally arrives first.
const SWEEP_GRACE_MS: i64 = 30_000;
const SWEEP_BATCH: usize = 500;
/// Queues delay a message by at most 12 hours; a later attempt is picked up by the sweep.
const QUEUE_MAX_DELAY_SECONDS: i64 = 43_200;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateWebhook {
    url: String,
    events: Vec<String>,
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_webhook(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateWebhook = json_body::parse(&call.body)?;
        check_url(&input.url, self.config.allow_private_webhook_urls)?;
        check_events(&input.events)?;
        let hook = Webhook {
            id: object_id("wh", &random()),
            project_id: call.project_id().to_owned(),
            url: input.url,
            events: input.events,
            secret: webhook::new_secret(&random()),
            status: "active".into(),
            disabled_reason: None,
            created_at: call.now_ms,
        };
        self.store.create_webhook(&hook).await.map_err(unavailable)?;
        Ok(Reply::created(hook.view(true)))
    }

    pub(super) async fn list_webhooks(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let hooks = self.store.webhooks(call.project_id()).await.map_err(unavailable)?;
        let data: Vec<_> = hooks.iter().map(|h| h.view(false)).collect();
        Ok(Reply::ok(json!({ "data": data, "next_cursor": null })))
    }

    pub(super) async fn delete_webhook(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        if !self.store.delete_webhook(call.project_id(), id, call.now_ms).await.map_err(unavailable)? {
            return Err(ApiError::not_found("webhook").with_detail("id", id));
        }
        Ok(Reply::ok(json!({ "id": id, "status": "deleted" })))
    }

    pub(super) async fn list_deliveries(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        if self.store.webhook(call.project_id(), id).await.map_err(unavailable)?.is_none() {
            return Err(ApiError::not_found("webhook").with_detail("id", id));
        }
        let status = call.query.iter().find(|(k, _)| k == "status").map(|(_, v)| v.as_str());
        if status.is_some_and(|s| !matches!(s, "pending" | "delivered" | "failed")) {
            return Err(ApiError::bad_request("status must be pending, delivered or failed")
                .with_detail("field", "status"));
        }
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let (deliveries, attempts) = self.store.deliveries(id, status, &page).await.map_err(unavailable)?;
        let position = |d: &Delivery| Cursor { ts: d.created_at, id: d.id.clone() };
        Ok(Reply::ok(page.respond(deliveries, position, |d| d.view(&attempts))))
    }

    /// Makes a delivery due now, failed ones included, and queues it.
    pub(super) async fn retry_delivery(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        if !self.store.reschedule(call.project_id(), id, call.now_ms).await.map_err(unavailable)? {
            return Err(ApiError::not_found("delivery").with_detail("id", id));
        }
        // If this send fails, the minute sweep finds the due delivery.
        let log =
            self.deliveries.enqueue(&[id.to_owned()], 0).await.err().map(|e| format!("webhook queue: {e}"));
        let (delivery, attempts) = self
            .store
            .delivery(call.project_id(), id)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ApiError::not_found("delivery"))?;
        let mut reply = Reply::accepted(delivery.view(&attempts));
        reply.log = log;
        Ok(reply)
    }
}

/// One attempt of one delivery: sign, send, record, and schedule the next attempt on the queue.
/// A message for a delivery that is not due, not pending or held by another attempt does nothing.
pub async fn dispatch<S: WebhookStore, Q: DeliveryQueue, C: WebhookClient>(
    store: &S,
    queue: &Q,
    client: &C,
    config: &Config,
    delivery_id: &str,
    now_ms: impl Fn() -> i64,
    jitter: f64,
) -> Result<(), PortError> {
    let started = now_ms();
    let hold = started + config.webhook_timeout_ms as i64 + HOLD_SLACK_MS;
    let Some((delivery, hook)) = store.take_delivery(delivery_id, started, hold).await? else {
        return Ok(());
    };
    let attempt_no = delivery.attempts + 1;
    let reply = match (hook.status.as_str(), signing_key(&hook.secret)) {
        ("active", Some(key)) => {
            let headers = webhook::headers(
                &config.webhook_header_prefix,
                &key,
                &delivery.id,
                started / 1000,
                &delivery.event,
                &delivery.request_id,
                &delivery.payload,
            );
            client.post(&hook.url, &headers, &delivery.payload, config.webhook_timeout_ms).await
        }
        (status, _) => Answer::Unreachable(format!("the subscription is {status}")),
    };
    let finished = now_ms();
    let mut verdict = judge(attempt_no, &reply, &config.webhook_retry_schedule, jitter, finished);
    if hook.status != "active" {
        verdict.status = "failed";
        verdict.next_attempt_ms = None;
    }
    let attempt = Attempt {
        delivery_id: delivery.id.clone(),
        attempt: attempt_no,
        started_at: started,
        duration_ms: finished - started,
        response_code: verdict.response_code,
        response_excerpt: match &reply {
            Answer::Answered { excerpt, .. } => Some(excerpt.clone()),
            Answer::Unreachable(_) => None,
        },
        error: verdict.error.clone(),
        next_retry_at: verdict.next_attempt_ms,
    };
    store.record_attempt(&attempt, verdict.status, verdict.disable_subscription).await?;
    if let Some(next) = verdict.next_attempt_ms {
        let delay = ((next - finished + 999) / 1000).clamp(0, QUEUE_MAX_DELAY_SECONDS) as u32;
        // A lost message is found by the sweep once the delivery is overdue.
        queue.enqueue(&[delivery.id], delay).await?;
    }
    Ok(())
}

/// The minute cron: queues pending deliveries that are overdue and held by no attempt.
pub async fn sweep<S: WebhookStore, Q: DeliveryQueue>(
    store: &S,
    queue: &Q,
    now_ms: i64,
) -> Result<usize, PortError> {
    let ids = store.overdue_deliveries(now_ms - SWEEP_GRACE_MS, now_ms, SWEEP_BATCH).await?;
    if !ids.is_empty() {
        queue.enqueue(&ids, 0).await?;
    }
    Ok(ids.len())
}
