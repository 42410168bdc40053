//! Webhooks (SPEC §10): the owner's subscription calls. The receiver's side — verifying a
//! delivery's signature — is `verify`.

pub use gatehouse_wire::webhooks::{
    CreatedWebhook, Delivery, DeliveryAttempt, DeliveryReport, DeliveryStatus, PulledDeliveries,
    PulledDelivery, ReportedDelivery, TriggeredEvent, Webhook, WebhookPublicKey, WebhookStatus,
};

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::call::{Call, Pages};
use crate::client::{Client, Request};
use crate::resources::segment;

/// The answer of a recovery: how many failed deliveries were queued again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovered {
    pub requeued: u64,
}

/// The longest a pull waits for a delivery ([`Client::pull_deliveries`]), in seconds.
pub const MAX_PULL_WAIT: u64 = 25;

/// How much longer than its wait a pull may take before it counts as lost.
const PULL_TIMEOUT_MARGIN: Duration = Duration::from_secs(15);

/// The answer of deleting a subscription.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeletedWebhook {
    pub id: String,
    pub status: String,
}

/// The event types the gateway itself sends (an origin in proxy mode may send others), for
/// `create_webhook` and `trigger_event`.
pub mod event_types {
    pub const CONTACT_CREATED: &str = "contact.created";
    pub const MESSAGE_CREATED: &str = "message.created";
    pub const SCENARIO_RUN_STARTED: &str = "scenario.run.started";
    pub const RELEASE_MARKER_CREATED: &str = "release_marker.created";
    /// A usage period exported (delivered only to subscriptions that name it).
    pub const USAGE_HOURLY: &str = "usage.hourly";
    /// A usage period's adjustment (delivered only to subscriptions that name it).
    pub const USAGE_ADJUSTMENT: &str = "usage.adjustment";
    /// Every type but the usage events.
    pub const ALL: &str = "*";
}

impl Client {
    /// `POST /public/v1/webhooks` (owner key): subscribe `url` to event types (or `["*"]`).
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let hook = owner.create_webhook("https://example.com/hooks/gatehouse", &["contact.created"]).await?;
    /// println!("keep the secret: {}", hook.secret.unwrap_or_default());
    /// # Ok(()) }
    /// ```
    pub fn create_webhook(&self, url: &str, events: &[&str]) -> Call<CreatedWebhook> {
        self.call(Request::post("/public/v1/webhooks", &serde_json::json!({ "url": url, "events": events })))
    }

    /// `POST /public/v1/webhooks` `{"signature":"v1a"}` (SPEC §25): a subscription signed with
    /// Ed25519. Its receivers verify with `public_key` ([`crate::WebhookVerifier::new`] takes it);
    /// no secret is shown, and none leaves the gateway.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let hook = owner.create_v1a_webhook("https://example.com/hooks/gatehouse", &["*"]).await?;
    /// println!("verify with {}", hook.info.public_key.unwrap_or_default());
    /// # Ok(()) }
    /// ```
    pub fn create_v1a_webhook(&self, url: &str, events: &[&str]) -> Call<CreatedWebhook> {
        let body = serde_json::json!({ "url": url, "events": events, "signature": "v1a" });
        self.call(Request::post("/public/v1/webhooks", &body))
    }

    /// `PATCH /public/v1/webhooks/{id}` `{"signature": "v1"|"v1a"}` (SPEC §25): switches the signing
    /// scheme as a rotation with the default grace (24 h of both signatures). Switching to `v1`
    /// answers the new `secret` (once); to `v1a`, the new `public_key`.
    pub fn set_webhook_signature(&self, id: &str, signature: &str) -> Call<CreatedWebhook> {
        let path = format!("/public/v1/webhooks/{}", segment(id));
        self.call(Request::patch(path, &serde_json::json!({ "signature": signature })))
    }

    /// `GET /public/v1/webhooks/{id}/public-key` (SPEC §25): a `v1a` subscription's public key.
    pub fn webhook_public_key(&self, id: &str) -> Call<WebhookPublicKey> {
        self.call(Request::get(format!("/public/v1/webhooks/{}/public-key", segment(id))))
    }

    /// `POST /public/v1/webhooks` `{"kind":"cli"}` (owner key): a subscription without a URL.
    /// Gatehouse does not post its deliveries anywhere; a listener pulls them
    /// ([`Client::pull_deliveries`]), forwards them itself and reports each
    /// ([`Client::report_delivery`]), as `gatehouse listen` does. The signing secret is shown only
    /// in this answer.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let hook = owner.create_cli_webhook(&["*"]).await?;
    /// assert_eq!((hook.info.kind.as_str(), hook.info.url.as_deref()), ("cli", None));
    /// # Ok(()) }
    /// ```
    pub fn create_cli_webhook(&self, events: &[&str]) -> Call<CreatedWebhook> {
        self.call(Request::post(
            "/public/v1/webhooks",
            &serde_json::json!({ "kind": "cli", "events": events }),
        ))
    }

    /// `GET /public/v1/webhooks/{id}/pull` (a `cli` subscription): answers as soon as at least one
    /// delivery is due, or after `wait_seconds` (0–[`MAX_PULL_WAIT`]) with none. Each delivery
    /// answered is held for this listener for `hold_seconds`: forward its `body` unchanged with its
    /// `headers`, then report the outcome. `resume` makes every pending delivery of the
    /// subscription due now: use it on the first pull of a run and after a lost connection.
    /// Each attempt may take `wait_seconds` + 15 s.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let pulled = owner.pull_deliveries("wh_01jdx…", 25, true).await?;
    /// for delivery in &pulled.data {
    ///     println!("{} {} attempt {}", delivery.event, delivery.delivery_id, delivery.attempt);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn pull_deliveries(
        &self,
        webhook_id: &str,
        wait_seconds: u64,
        resume: bool,
    ) -> Call<PulledDeliveries> {
        let path = format!("/public/v1/webhooks/{}/pull", segment(webhook_id));
        let timeout = Duration::from_secs(wait_seconds).saturating_add(PULL_TIMEOUT_MARGIN);
        self.call(Request::get(path).query("wait", wait_seconds).query("resume", resume).timeout(timeout))
    }

    /// `POST /public/v1/webhooks/{id}/deliveries/{delivery_id}/report`: what became of one pulled
    /// attempt — the receiver's status code and the start of its answer, or why there was no
    /// answer. The gateway answers what it made of it: `delivered`, `pending` (another attempt
    /// at `next_attempt_at`) or `failed`. Reporting the same attempt again changes nothing.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::DeliveryReport;
    /// let report = DeliveryReport {
    ///     attempt: 1,
    ///     status_code: Some(200),
    ///     response_excerpt: Some("ok".into()),
    ///     duration_ms: 12,
    ///     ..Default::default()
    /// };
    /// let reported = owner.report_delivery("wh_01jdx…", "dlv_01jdx…", &report).await?;
    /// println!("{}", reported.status);
    /// # Ok(()) }
    /// ```
    pub fn report_delivery(
        &self,
        webhook_id: &str,
        delivery_id: &str,
        report: &DeliveryReport,
    ) -> Call<ReportedDelivery> {
        let path =
            format!("/public/v1/webhooks/{}/deliveries/{}/report", segment(webhook_id), segment(delivery_id));
        self.call(Request::post(path, report))
    }

    /// `POST /public/v1/webhooks/trigger`: a sample event of `event_type` (a built-in type such as
    /// `contact.created`, or any type your origins send), delivered to the project's subscriptions
    /// that take it.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let triggered = owner.trigger_event("contact.created").await?;
    /// println!("{} sent to {} subscription(s)", triggered.event_id, triggered.deliveries);
    /// # Ok(()) }
    /// ```
    pub fn trigger_event(&self, event_type: &str) -> Call<TriggeredEvent> {
        self.call(Request::post("/public/v1/webhooks/trigger", &serde_json::json!({ "type": event_type })))
    }

    /// `GET /public/v1/webhooks`, every page.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// for hook in owner.list_webhooks().collect_all().await? {
    ///     println!("{} {:?} {:?}", hook.id, hook.url, hook.events);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list_webhooks(&self) -> Pages<Webhook> {
        Pages::new(self, Request::get("/public/v1/webhooks"))
    }

    /// `DELETE /public/v1/webhooks/{id}`: unsubscribes; its pending deliveries fail.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// owner.delete_webhook("wh_01jdx…").await?;
    /// # Ok(()) }
    /// ```
    pub fn delete_webhook(&self, id: &str) -> Call<DeletedWebhook> {
        self.call(Request::delete(format!("/public/v1/webhooks/{}", segment(id))))
    }

    /// `GET /public/v1/webhooks/{id}/deliveries`, optionally only those in one state.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::DeliveryStatus;
    /// for delivery in owner.list_deliveries("wh_01jdx…", Some(DeliveryStatus::Failed)).collect_all().await? {
    ///     println!("{} {} {:?}", delivery.id, delivery.attempt, delivery.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list_deliveries(&self, webhook_id: &str, status: Option<DeliveryStatus>) -> Pages<Delivery> {
        let mut request = Request::get(format!("/public/v1/webhooks/{}/deliveries", segment(webhook_id)));
        if let Some(status) = status {
            request = request.query("status", status.as_str());
        }
        Pages::new(self, request)
    }

    /// `POST /public/v1/webhooks/{id}/rotate-secret`: a new signing secret, shown only in this
    /// answer (a `v1a` subscription's new key pair: its `public_key`, no secret). For
    /// `grace_seconds` (default 86400) every delivery carries both signatures, new first, so
    /// receivers can switch at their pace; then only the new one.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let rotated = owner.rotate_webhook_secret("wh_01jdx…", None).await?;
    /// println!("new secret: {}", rotated.secret.unwrap_or_default());
    /// # Ok(()) }
    /// ```
    pub fn rotate_webhook_secret(&self, id: &str, grace_seconds: Option<u64>) -> Call<CreatedWebhook> {
        let body = match grace_seconds {
            Some(grace) => serde_json::json!({ "grace_seconds": grace }),
            None => serde_json::json!({}),
        };
        self.call(Request::post(format!("/public/v1/webhooks/{}/rotate-secret", segment(id)), &body))
    }

    /// `POST /public/v1/webhooks/{id}/recover`: every failed delivery created at or after `since`
    /// (RFC 3339) gets one more attempt, then follows the retry schedule again.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let recovered = owner.recover_deliveries("wh_01jdx…", "2026-11-30T08:00:00Z").await?;
    /// println!("{} deliveries queued again", recovered.requeued);
    /// # Ok(()) }
    /// ```
    pub fn recover_deliveries(&self, id: &str, since: &str) -> Call<Recovered> {
        let path = format!("/public/v1/webhooks/{}/recover", segment(id));
        self.call(Request::post(path, &serde_json::json!({ "since": since })))
    }

    /// `PATCH /public/v1/webhooks/{id}` `{status:"active"}`: re-enables a subscription disabled by
    /// a 410 Gone (its failed deliveries stay failed; see [`Client::recover_deliveries`]).
    pub fn enable_webhook(&self, id: &str) -> Call<Webhook> {
        let path = format!("/public/v1/webhooks/{}", segment(id));
        self.call(Request::patch(path, &serde_json::json!({ "status": "active" })))
    }

    /// `POST /public/v1/webhooks/deliveries/{id}/retry`: one more attempt now (failed ones too).
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let delivery = owner.retry_delivery("dlv_01jdx…").await?;
    /// # Ok(()) }
    /// ```
    pub fn retry_delivery(&self, delivery_id: &str) -> Call<Delivery> {
        let path = format!("/public/v1/webhooks/deliveries/{}/retry", segment(delivery_id));
        self.call(Request::post(path, &serde_json::json!({})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";

    #[test]
    fn subscriptions_read_with_and_without_a_kind() {
        // An answer from before cli subscriptions: no kind, a URL.
        let old: Webhook = serde_json::from_value(serde_json::json!({
            "id": "wh_1", "url": "https://example.com/h", "events": ["*"], "status": "active",
            "disabled_reason": null, "created_at": "2026-11-30T08:00:00.000Z"
        }))
        .unwrap();
        assert_eq!((old.kind.as_str(), old.url.as_deref()), ("url", Some("https://example.com/h")));
        let cli: CreatedWebhook = serde_json::from_value(serde_json::json!({
            "id": "wh_2", "kind": "cli", "url": null, "events": ["contact.created"], "status": "active",
            "disabled_reason": null, "created_at": "2026-12-02T11:40:00.000Z", "secret": SECRET
        }))
        .unwrap();
        assert_eq!(
            (cli.info.kind.as_str(), cli.info.url, cli.secret.as_deref()),
            ("cli", None, Some(SECRET))
        );
    }

    #[test]
    fn a_pull_keeps_each_body_as_sent_and_reports_leave_out_what_is_missing() {
        let answer = r#"{"data":[{"delivery_id":"dlv_1","attempt":2,"event":"contact.created",
            "headers":{"webhook-id":"msg_1","webhook-timestamp":"1674087231","webhook-signature":"v1,abc=",
            "x-gatehouse-event":"contact.created"},"body":"{\"id\":\"evt_1\",  \"data\":{}}"}],
            "now":"2026-12-02T11:40:01.250Z","hold_seconds":60}"#;
        let pulled: PulledDeliveries = serde_json::from_str(answer).unwrap();
        assert_eq!((pulled.now.as_str(), pulled.hold_seconds), ("2026-12-02T11:40:01.250Z", 60));
        let delivery = &pulled.data[0];
        assert_eq!((delivery.delivery_id.as_str(), delivery.attempt), ("dlv_1", 2));
        assert_eq!(delivery.body, r#"{"id":"evt_1",  "data":{}}"#);
        assert_eq!(delivery.headers.len(), 4);
        assert_eq!(delivery.headers["webhook-signature"], "v1,abc=");

        let answered = DeliveryReport {
            attempt: 1,
            status_code: Some(200),
            response_excerpt: Some("ok".into()),
            duration_ms: 12,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&answered).unwrap(),
            serde_json::json!({"attempt": 1, "status_code": 200, "duration_ms": 12, "response_excerpt": "ok"})
        );
        let refused = DeliveryReport {
            attempt: 1,
            error: Some("connection refused".into()),
            duration_ms: 3,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&refused).unwrap(),
            serde_json::json!({"attempt": 1, "error": "connection refused", "duration_ms": 3})
        );
        let reported: ReportedDelivery = serde_json::from_str(
            r#"{"delivery_id":"dlv_1","attempt":1,"status":"pending","next_attempt_at":"2026-12-02T11:41:01.000Z"}"#,
        )
        .unwrap();
        assert_eq!(reported.next_attempt_at.as_deref(), Some("2026-12-02T11:41:01.000Z"));
        let triggered: TriggeredEvent =
            serde_json::from_str(r#"{"event_id":"evt_1","type":"contact.created","deliveries":2}"#).unwrap();
        assert_eq!((triggered.event_type.as_str(), triggered.deliveries), ("contact.created", 2));
    }

    #[test]
    fn a_pull_waits_longer_than_its_wait_and_a_report_carries_a_key() {
        let client = Client::builder("http://127.0.0.1:1").api_key("gh_o_test").build().unwrap();
        let pull = client.pull_deliveries("wh_1", 25, true);
        let query: Vec<(&str, &str)> =
            pull.request.query_pairs().iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(query, [("wait", "25"), ("resume", "true")]);
        assert_eq!(pull.request.timeout, Some(Duration::from_secs(40)));
        assert_eq!(pull.current_idempotency_key(), None);
        let report =
            DeliveryReport { attempt: 1, status_code: Some(204), duration_ms: 1, ..Default::default() };
        assert!(client.report_delivery("wh_1", "dlv_1", &report).current_idempotency_key().is_some());
        assert!(client.trigger_event("contact.created").current_idempotency_key().is_some());
    }
}
