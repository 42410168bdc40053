//! The events an integrator sent, as `GET /public/v1/events` lists them (SPEC §24).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One stored event: what `/v1/track` accepted, as the events table keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub event_id: String,
    pub event: String,
    /// `server` or `browser`: the type of the key that sent it.
    pub key_type: String,
    pub user_id: Option<String>,
    pub anonymous_id: Option<String>,
    /// When the client says it happened, as it sent it (RFC 3339 text or a number); `None` when
    /// it sent none.
    pub timestamp: Option<Value>,
    pub properties: Value,
    /// When the gateway accepted it (RFC 3339, milliseconds).
    pub received_at: String,
    /// The gateway made its `event_id` (the client sent none: no de-duplication was possible).
    pub generated_id: bool,
}
