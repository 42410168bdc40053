//! `gatehouse listen`'s side of the gateway (SPEC §21, §23): a listener's long poll on its `cli`
//! subscription, which takes due deliveries as attempts held for it, and its reports of what the
//! local target answered. Nothing a listener pulled is lost: a late report still records the real
//! outcome, and a resumed listener gets back every delivery that did not reach its target.

use super::webhooks::{
    attempt_headers, attempt_hold_ms, attempt_lease, attempt_of, jitter, queue_delay, secrets_key,
};
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::json_body;
use gatehouse_core::ports::{DeliveryQueue, Listen, Pause, Ports, Take, WebhookStore};
use gatehouse_core::time;
use gatehouse_core::webhook::{self, judge, Attempt, Delivery, ReceiverOutcome, Webhook};
use gatehouse_wire::webhooks as wire;

/// The longest a listener's pull waits for a delivery (SPEC §21), in seconds.
const MAX_PULL_WAIT_SECONDS: u64 = 25;
/// A listener counts as connected this long after its pull's wait ends.
const LISTENER_SLACK_MS: i64 = 5_000;
/// Deliveries one pull hands a listener, at most.
const PULL_BATCH: usize = 20;
/// How often a waiting pull looks for due deliveries.
const PULL_POLL_MS: u64 = 1_000;

impl<P: Ports> Gateway<'_, P> {
    /// `GET /public/v1/webhooks/{id}/pull?wait=&resume=` (SPEC §21): a listener's long poll on its
    /// `cli` subscription. Answers as soon as deliveries are due (each taken for this listener as
    /// an attempt, signed as a `POST` would be), or after `wait` seconds with none. While it
    /// pulls, the listener counts as connected (until the wait ends and a few seconds more), and
    /// nothing else attempts the subscription's deliveries; `resume=true` (a listener back after
    /// a disconnect) makes every pending one due now, and every one that failed — for want of a
    /// listener, a hold that ran out or the target's answer: it never reached the target — pending
    /// again, its schedule starting over (SPEC §23).
    pub(super) async fn pull_deliveries(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let mut wait = MAX_PULL_WAIT_SECONDS;
        let mut resume = false;
        for (name, value) in call.query {
            let bad = |why: &str| ApiError::bad_request(why.to_owned()).with_detail("field", name.as_str());
            match name.as_str() {
                "wait" => {
                    wait = value.parse().ok().filter(|w| *w <= MAX_PULL_WAIT_SECONDS).ok_or_else(|| {
                        bad(&format!(
                            "wait must be a whole number of seconds from 0 to {MAX_PULL_WAIT_SECONDS}"
                        ))
                    })?
                }
                "resume" => resume = value.parse().map_err(|_| bad("resume must be true or false"))?,
                _ => {}
            }
        }
        let until = call.now_ms + wait as i64 * 1000 + LISTENER_SLACK_MS;
        let resume_at = resume.then_some(call.now_ms);
        if self
            .store
            .listen(Listen { project_id: call.project_id(), id, until_ms: until, resume_at })
            .await
            .map_err(unavailable)?
            .is_none()
        {
            // No cli subscription of the project by that id: none at all, or one posted to a url.
            return Err(match self.store.webhook(call.project_id(), id).await.map_err(unavailable)? {
                Some(_) => ApiError::unprocessable(
                    r#"Only a subscription of kind "cli" is pulled; this one is posted to its url."#,
                )
                .with_detail("kind", "url"),
                None => ApiError::not_found("webhook").with_detail("id", id),
            });
        }
        let mut waited = 0;
        loop {
            let now = call.now_ms + waited as i64;
            let due = self.store.due_for_listener(id, now, PULL_BATCH).await.map_err(unavailable)?;
            let mut pulled = Vec::new();
            for delivery_id in &due {
                let lease = attempt_lease(self.config, delivery_id, now, true);
                if let Take::Attempt(delivery, hook) =
                    self.store.take_delivery(&lease).await.map_err(unavailable)?
                {
                    pulled.push(self.pulled(&delivery, &hook, now)?);
                }
            }
            if !pulled.is_empty() || waited >= wait * 1000 {
                let hold_seconds = (attempt_hold_ms(self.config) / 1000) as u64;
                let answer = wire::PulledDeliveries { data: pulled, now: time::rfc3339(now), hold_seconds };
                return Ok(Reply::ok(gatehouse_wire::to_json(&answer)));
            }
            self.timer.pause(PULL_POLL_MS).await;
            waited += PULL_POLL_MS;
        }
    }

    /// One taken delivery as a listener forwards it: the headers a `POST` of this attempt would
    /// carry, and the payload.
    fn pulled(
        &self,
        delivery: &Delivery,
        hook: &Webhook,
        now_ms: i64,
    ) -> Result<wire::PulledDelivery, ApiError> {
        let keys = hook
            .signing_keys(&secrets_key(self.config), now_ms)
            .ok_or_else(|| ApiError::internal("the subscription's secret cannot be read"))?;
        let headers = attempt_headers(self.config, &keys, delivery, now_ms);
        Ok(wire::PulledDelivery {
            delivery_id: delivery.id.clone(),
            attempt: delivery.attempts,
            event: delivery.event.clone(),
            headers: headers.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect(),
            body: delivery.payload.clone(),
        })
    }

    /// `POST /public/v1/webhooks/{id}/deliveries/{delivery_id}/report` (SPEC §21): what the
    /// receiver a listener forwarded an attempt to answered, recorded as that attempt; the
    /// schedule goes on from it as after a `POST` of Gatehouse's own. A report of an attempt
    /// recorded already answers the delivery as it is (safe to repeat).
    pub(super) async fn report_delivery(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (id, delivery_id) = (call.params[0], call.params[1]);
        let report: wire::DeliveryReport = json_body::parse(&call.body)?;
        let not_found = || ApiError::not_found("delivery").with_detail("id", delivery_id);
        let (delivery, attempts) = self
            .store
            .delivery(call.project_id(), delivery_id)
            .await
            .map_err(unavailable)?
            .ok_or_else(not_found)?;
        if delivery.webhook_id != id {
            return Err(not_found());
        }
        let answer = |status: &str, next: Option<i64>| {
            Reply::ok(gatehouse_wire::to_json(&wire::ReportedDelivery {
                delivery_id: delivery_id.to_owned(),
                attempt: report.attempt,
                status: status.to_owned(),
                next_attempt_at: next.map(time::rfc3339),
            }))
        };
        let next = (delivery.status == "pending").then_some(delivery.scheduled_at);
        let late = match attempts.iter().find(|a| a.attempt == report.attempt) {
            // Written down as interrupted when its hold ran out and the delivery was taken again:
            // the real outcome is recorded now (below). Any other row: a repeat, which changes nothing.
            Some(a) if a.error.as_deref() == Some(webhook::INTERRUPTED_ATTEMPT) => true,
            Some(_) => return Ok(answer(&delivery.status, next)),
            None => false,
        };
        let duration_ms = report.duration_ms.min(self.config.webhook_timeout_ms) as i64;
        let started = call.now_ms - duration_ms;
        if late {
            let outcome = reported_outcome(&report)?;
            let (response_code, response_excerpt, error) = match outcome {
                ReceiverOutcome::Answered { status, excerpt, .. } => (Some(status), Some(excerpt), None),
                ReceiverOutcome::Unreachable(error) => (None, None, Some(error)),
            };
            let delivered = response_code.is_some_and(|code| (200..300).contains(&code));
            let attempt = Attempt {
                delivery_id: delivery.id.clone(),
                attempt: report.attempt,
                started_at: started,
                duration_ms,
                response_code,
                response_excerpt,
                error,
                next_retry_at: None,
            };
            let status = self.store.record_late_report(&attempt, delivered).await.map_err(unavailable)?;
            return Ok(answer(&status, next.filter(|_| status == "pending")));
        }
        if delivery.status != "pending" || delivery.attempts != report.attempt {
            return Err(ApiError::conflict(format!(
                "Attempt {} of this delivery is not one a listener holds (it is at attempt {}, {}).",
                report.attempt, delivery.attempts, delivery.status
            ))
            .with_detail("attempt", delivery.attempts));
        }
        let outcome = reported_outcome(&report)?;
        let config = self.config;
        let step = report.attempt.saturating_sub(delivery.schedule_from);
        let verdict = judge(step, &outcome, &config.webhook_retry_schedule, jitter(), call.now_ms);
        let attempt =
            attempt_of(&delivery.id, report.attempt, started, call.now_ms, &verdict, Some(&outcome));
        // A 410 from a listener's local target does not disable a cli subscription (SPEC §23):
        // the developer's server said it, not the subscription's owner; the delivery fails.
        let next_due =
            self.store.record_attempt(&attempt, verdict.status, false).await.map_err(unavailable)?;
        if let Some(due) = next_due {
            // Its listener pulls it when due; if none is connected then, this message attempts it
            // (a lost send: the sweep queues it once it is overdue).
            let delay = queue_delay(due, call.now_ms);
            let _ = self.deliveries.enqueue(std::slice::from_ref(&delivery.id), delay).await;
        }
        Ok(answer(verdict.status, verdict.next_attempt_ms))
    }
}

/// What a listener reports its local target answered: a status (100–599, else 422) with an excerpt,
/// or an error when it got no answer.
fn reported_outcome(report: &wire::DeliveryReport) -> Result<ReceiverOutcome, ApiError> {
    match (report.status_code, &report.error) {
        (Some(status), _) if !(100..=599).contains(&status) => {
            Err(ApiError::unprocessable("status_code must be an HTTP status, 100–599")
                .with_detail("field", "status_code"))
        }
        (Some(status), _) => Ok(ReceiverOutcome::Answered {
            status,
            retry_after: None,
            excerpt: webhook::response_excerpt(
                report.response_excerpt.as_deref().unwrap_or_default().as_bytes(),
            ),
        }),
        (None, error) => {
            Ok(ReceiverOutcome::Unreachable(error.clone().unwrap_or_else(|| "no answer".into())))
        }
    }
}
