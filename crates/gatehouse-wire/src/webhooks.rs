//! Webhook subscriptions and their deliveries as the API shows them (`/public/v1/webhooks`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A subscription as lists show it (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// `active` or `disabled`.
    pub status: String,
    #[serde(default)]
    pub disabled_reason: Option<String>,
    pub created_at: String,
    /// While a secret rotation's grace runs: until when deliveries are signed with the previous
    /// secret too.
    #[serde(default)]
    pub previous_secret_expires_at: Option<String>,
}

/// A subscription just made or its secret just rotated: the only answers with its signing
/// `secret` (`whsec_…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedWebhook {
    pub secret: String,
    #[serde(flatten)]
    pub info: Webhook,
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
    /// `pending`, `delivered` or `failed`.
    pub status: String,
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
