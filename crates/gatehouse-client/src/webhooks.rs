//! Webhooks (SPEC §10): the owner's subscription calls, and the receiver's side — verifying a
//! delivery's Standard Webhooks signature.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use gatehouse_wire::webhooks::{
    CreatedWebhook, Delivery, DeliveryAttempt, DeliveryReport, DeliveryStatus, PulledDeliveries,
    PulledDelivery, ReportedDelivery, TriggeredEvent, Webhook, WebhookStatus,
};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};

use sha2::Sha256;
use subtle::ConstantTimeEq;

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
    /// println!("keep the secret: {}", hook.secret);
    /// # Ok(()) }
    /// ```
    pub fn create_webhook(&self, url: &str, events: &[&str]) -> Call<CreatedWebhook> {
        self.call(Request::post("/public/v1/webhooks", &serde_json::json!({ "url": url, "events": events })))
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
    /// answer. For `grace_seconds` (default 86400) every delivery carries both signatures, new
    /// first, so receivers can switch at their pace; then only the new one.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let rotated = owner.rotate_webhook_secret("wh_01jdx…", None).await?;
    /// println!("new secret: {}", rotated.secret);
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

/// How far a delivery's `webhook-timestamp` may be from the receiver's clock.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Why a delivery is not accepted as ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The secret is not `whsec_` + base64.
    InvalidSecret,
    /// `webhook-timestamp` is not Unix seconds.
    InvalidTimestamp,
    /// The timestamp is more than 5 minutes from now (`skew` seconds, negative = in the past):
    /// a replayed old delivery, or a clock that is off.
    TimestampOutOfTolerance { skew: i64 },
    /// `webhook-signature` holds no `v1,<base64>` entry.
    NoSignature,
    /// No `v1` signature matches the body.
    SignatureMismatch,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::InvalidSecret => write!(f, "the secret is not whsec_ followed by base64"),
            VerifyError::InvalidTimestamp => write!(f, "webhook-timestamp is not Unix seconds"),
            VerifyError::TimestampOutOfTolerance { skew } => {
                write!(
                    f,
                    "webhook-timestamp is {}s {} (tolerance ±300s)",
                    skew.abs(),
                    if *skew < 0 { "old" } else { "in the future" }
                )
            }
            VerifyError::NoSignature => write!(f, "webhook-signature holds no v1 signature"),
            VerifyError::SignatureMismatch => write!(f, "no signature matches the body"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Verifies deliveries for one subscription's secret (Standard Webhooks: HMAC-SHA256 over
/// `{webhook-id}.{webhook-timestamp}.{body}` with the base64-decoded secret).
///
/// ```
/// use gatehouse_client::WebhookVerifier;
/// let verifier = WebhookVerifier::new("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX")?;
/// let body = br#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;
/// let sent_at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1674087231);
/// verifier.verify_at(
///     "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
///     "1674087231",
///     "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=",
///     body,
///     sent_at,
/// )?;
/// # Ok::<(), gatehouse_client::VerifyError>(())
/// ```
#[derive(Clone)]
pub struct WebhookVerifier {
    key: Vec<u8>,
}

impl fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookVerifier { key: <redacted> }")
    }
}

impl WebhookVerifier {
    /// `secret` as the subscription showed it: `whsec_` + base64.
    pub fn new(secret: &str) -> Result<WebhookVerifier, VerifyError> {
        let encoded = secret.trim().strip_prefix("whsec_").ok_or(VerifyError::InvalidSecret)?;
        let key = BASE64.decode(encoded).map_err(|_| VerifyError::InvalidSecret)?;
        if key.is_empty() {
            return Err(VerifyError::InvalidSecret);
        }
        Ok(WebhookVerifier { key })
    }

    /// Verifies a delivery against the system clock: the values of the `webhook-id`,
    /// `webhook-timestamp` and `webhook-signature` headers and the raw body, as received.
    pub fn verify(&self, id: &str, timestamp: &str, signature: &str, body: &[u8]) -> Result<(), VerifyError> {
        self.verify_at(id, timestamp, signature, body, SystemTime::now())
    }

    /// [`verify`](Self::verify) at the time `now`. The timestamp must be within ±5 minutes;
    /// `signature` may hold several space-separated entries (during a secret rotation: the new
    /// and the old) and is valid when any `v1` entry matches, compared in constant time.
    pub fn verify_at(
        &self,
        id: &str,
        timestamp: &str,
        signature: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let sent: i64 = timestamp.trim().parse().map_err(|_| VerifyError::InvalidTimestamp)?;
        let now = match now.duration_since(UNIX_EPOCH) {
            Ok(since) => since.as_secs() as i64,
            Err(before) => -(before.duration().as_secs() as i64),
        };
        let skew = sent.saturating_sub(now);
        if skew.unsigned_abs() > TIMESTAMP_TOLERANCE.as_secs() {
            return Err(VerifyError::TimestampOutOfTolerance { skew });
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.trim().as_bytes());
        mac.update(b".");
        mac.update(body);
        let expected = mac.finalize().into_bytes();
        let candidates: Vec<Vec<u8>> = signature
            .split_whitespace()
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| BASE64.decode(encoded).ok())
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::NoSignature);
        }
        // Every candidate is compared, matched or not, so the time taken says nothing about which.
        let matched = candidates.iter().fold(subtle::Choice::from(0), |any, candidate| {
            any | candidate.as_slice().ct_eq(expected.as_slice())
        });
        if bool::from(matched) {
            Ok(())
        } else {
            Err(VerifyError::SignatureMismatch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";
    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    const TS: &str = "1674087231";
    const BODY: &[u8] =
        br#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;
    /// The test vector of docs/api/webhooks.md, which the gateway's signer is tested against too.
    const SIGNATURE: &str = "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=";

    fn at(offset: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs((1_674_087_231 + offset) as u64)
    }

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
        assert_eq!((cli.info.kind.as_str(), cli.info.url, cli.secret.as_str()), ("cli", None, SECRET));
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

    #[test]
    fn accepts_the_documented_vector() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(0)), Ok(()));
    }

    #[test]
    fn accepts_any_matching_entry_during_a_rotation() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let other = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        assert_eq!(verifier.verify_at(ID, TS, &format!("{other} {SIGNATURE}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, &format!("{SIGNATURE} {other}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, &format!("v2,xyz {SIGNATURE}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, other, BODY, at(0)), Err(VerifyError::SignatureMismatch));
    }

    #[test]
    fn refuses_timestamps_outside_five_minutes() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(300)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(-300)), Ok(()));
        assert_eq!(
            verifier.verify_at(ID, TS, SIGNATURE, BODY, at(301)),
            Err(VerifyError::TimestampOutOfTolerance { skew: -301 })
        );
        assert_eq!(
            verifier.verify_at(ID, TS, SIGNATURE, BODY, at(-301)),
            Err(VerifyError::TimestampOutOfTolerance { skew: 301 })
        );
    }

    #[test]
    fn refuses_any_change_to_what_was_signed() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let mut body = BODY.to_vec();
        body[10] ^= 1;
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, &body, at(0)), Err(VerifyError::SignatureMismatch));
        assert_eq!(
            verifier.verify_at("msg_other", TS, SIGNATURE, BODY, at(0)),
            Err(VerifyError::SignatureMismatch)
        );
        assert_eq!(
            verifier.verify_at(ID, "1674087232", SIGNATURE, BODY, at(0)),
            Err(VerifyError::SignatureMismatch)
        );
        let other_key = WebhookVerifier::new("whsec_AQECAwQFBgcICQoLDA0ODxAREhMUFRYX").unwrap();
        assert_eq!(other_key.verify_at(ID, TS, SIGNATURE, BODY, at(0)), Err(VerifyError::SignatureMismatch));
    }

    #[test]
    fn reports_malformed_inputs() {
        assert_eq!(WebhookVerifier::new("AAECAwQF").unwrap_err(), VerifyError::InvalidSecret);
        assert_eq!(WebhookVerifier::new("whsec_not base64!").unwrap_err(), VerifyError::InvalidSecret);
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(
            verifier.verify_at(ID, "yesterday", SIGNATURE, BODY, at(0)),
            Err(VerifyError::InvalidTimestamp)
        );
        assert_eq!(verifier.verify_at(ID, TS, "", BODY, at(0)), Err(VerifyError::NoSignature));
        assert_eq!(verifier.verify_at(ID, TS, "v1,%%%", BODY, at(0)), Err(VerifyError::NoSignature));
    }
}
