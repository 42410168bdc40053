//! The audit log (`GET /public/v1/logs`).

use serde::{Deserialize, Serialize};

/// One audit row: a request as the gateway saw it (never a body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// When the request came in (RFC 3339, milliseconds).
    pub ts: String,
    pub request_id: String,
    pub key_id: Option<String>,
    pub key_prefix: Option<String>,
    pub method: String,
    /// The path with its query (secret-looking values `REDACTED`).
    pub path: String,
    /// The route template, e.g. `/public/v1/contacts/{id}`.
    pub route: Option<String>,
    pub status: u16,
    pub response_bytes: u64,
    pub response_time_ms: u64,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub idempotency_key: Option<String>,
    pub replayed: bool,
    pub original_request_id: Option<String>,
    pub rate_limit_remaining: Option<i64>,
    pub error_code: Option<String>,
    /// One of the owner dashboard's reads, counted under its own budget (`Gatehouse-Budget`).
    #[serde(default)]
    pub dashboard: bool,
    /// The W3C trace id of the request: the client's `traceparent`'s, or one the gateway started.
    #[serde(default)]
    pub trace_id: Option<String>,
}
