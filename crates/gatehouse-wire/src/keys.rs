//! API keys as the API shows them (`/public/v1/keys`, `/public/v1/me`).

use serde::{Deserialize, Serialize};

/// An API key as lists show it (never the secret, never its hash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Key {
    pub id: String,
    pub prefix: String,
    /// `owner`, `server`, `browser` or `cicd`.
    #[serde(rename = "type")]
    pub key_type: String,
    pub name: Option<String>,
    pub plan: String,
    pub rate_limit_per_minute: Option<u64>,
    /// `active`, `expiring` (an `expires_at` ahead, a roll's grace included), `expired` or
    /// `revoked`.
    pub status: String,
    pub created_at: String,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub revoked_at: Option<String>,
    /// The key this one replaced (a roll).
    #[serde(default)]
    pub rolled_from: Option<String>,
    /// The key that replaced this one.
    #[serde(default)]
    pub rolled_to: Option<String>,
    /// The identity the key belongs to (its keys share its limits), or null.
    #[serde(default)]
    pub identity_id: Option<String>,
    /// The key's own windows, each at most its plan's (never a quota), or null: the plan's.
    #[serde(default)]
    pub limits: Option<crate::identities::Limits>,
}

/// A key just created: the only answer that carries the secret `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedKey {
    /// The secret, shown this once.
    pub key: String,
    #[serde(flatten)]
    pub info: Key,
}
