//! Webhook subscriptions and their deliveries as the API shows them (`/public/v1/webhooks`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

names! {
    /// Whether a subscription receives events.
    WebhookStatus, "subscription status" {
        Active = "active",
        /// Receives nothing until re-enabled (`disabled_reason` says why).
        Disabled = "disabled",
    }
}

names! {
    /// The state of a delivery.
    DeliveryStatus, "delivery status" {
        /// Not delivered yet: an attempt is due or under way.
        Pending = "pending",
        Delivered = "delivered",
        /// Every attempt of the schedule failed (or the subscription was deleted or gone).
        Failed = "failed",
    }
}

/// A subscription as lists show it (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    /// `url` (Gatehouse posts to `url`) or `cli` (a `gatehouse listen` pulls its deliveries).
    #[serde(default = "url_kind")]
    pub kind: String,
    /// The receiver's URL; `None` for a `cli` subscription.
    pub url: Option<String>,
    pub events: Vec<String>,
    pub status: WebhookStatus,
    #[serde(default)]
    pub disabled_reason: Option<String>,
    pub created_at: String,
    /// While a secret rotation's grace runs: until when deliveries are signed with the previous
    /// secret too.
    #[serde(default)]
    pub previous_secret_expires_at: Option<String>,
    /// How attempts are signed (Standard Webhooks): `v1` (HMAC with the shared secret) or `v1a`
    /// (Ed25519: receivers verify with `public_key`).
    #[serde(default = "v1")]
    pub signature: String,
    /// A `v1a` subscription's public key (`whpk_…`); `None` for `v1`.
    #[serde(default)]
    pub public_key: Option<String>,
    /// What its owner calls the endpoint; `None`: unnamed.
    #[serde(default)]
    pub name: Option<String>,
}

fn v1() -> String {
    "v1".to_owned()
}

/// A subscription just made or its secret just rotated: the only answers with a `v1`
/// subscription's signing `secret` (`whsec_…`). A `v1a` subscription's private key never leaves
/// the gateway: its answers carry `public_key` instead, and no `secret`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedWebhook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(flatten)]
    pub info: Webhook,
}

/// `GET /public/v1/webhooks/{id}/public-key`: a `v1a` subscription's public key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookPublicKey {
    pub public_key: String,
}

/// A delivery of one event to one subscription, with every attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub id: String,
    pub webhook_id: String,
    #[serde(default)]
    pub event_id: String,
    pub event: String,
    #[serde(default)]
    pub request_id: String,
    pub status: DeliveryStatus,
    /// Attempts made.
    pub attempt: u32,
    /// When the next attempt is due, while `pending`.
    #[serde(default)]
    pub scheduled_at: Option<String>,
    pub last_response_code: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: String,
    /// What the subscriber receives: `{id, type, created_at, data}`.
    pub payload: Value,
    #[serde(default)]
    pub attempts: Vec<DeliveryAttempt>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    pub attempt: u32,
    pub started_at: String,
    pub duration_ms: i64,
    pub response_code: Option<u16>,
    /// The first 1 KiB of the receiver's answer.
    pub response_body: Option<String>,
    pub error: Option<String>,
    pub next_retry_at: Option<String>,
}

fn url_kind() -> String {
    "url".into()
}

/// What `GET /public/v1/webhooks/{id}/pull` answers a listener (`gatehouse listen`): the
/// deliveries due for its `cli` subscription, each held for it for `hold_seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PulledDeliveries {
    pub data: Vec<PulledDelivery>,
    /// The gateway's time when it answered (RFC 3339): a listener resumes from it.
    pub now: String,
    pub hold_seconds: u64,
}

/// One attempt of a delivery, for a listener to forward unchanged and report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PulledDelivery {
    pub delivery_id: String,
    pub attempt: u32,
    pub event: String,
    /// The signed headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`, …).
    pub headers: std::collections::BTreeMap<String, String>,
    /// The payload, byte for byte as signed.
    pub body: String,
}

/// A listener's report of one forwarded attempt: the receiver's status code and the start of its
/// answer, or why there was no answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_excerpt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// What a report made of the delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportedDelivery {
    pub delivery_id: String,
    pub attempt: u32,
    /// `pending` (another attempt follows at `next_attempt_at`), `delivered` or `failed`.
    pub status: String,
    pub next_attempt_at: Option<String>,
}

/// `POST /public/v1/webhooks/trigger`: a sample event sent to the project's subscriptions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggeredEvent {
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub deliveries: u32,
}
