//! Identities as the API shows them (`/public/v1/identities`), and the limits an identity or a
//! key may set (SPEC §20).

use serde::{Deserialize, Serialize};

/// Limits an owner sets on an identity or a key: any of four windows and, on an identity only, a
/// monthly quota. A field left out is not limited at that level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_hour: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_quota: Option<u64>,
}

/// An identity: one of the integrator's customers (users, tenants) whose keys share its limits
/// and quota. `external_id` is the integrator's own id for it, unique in the project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub id: String,
    pub external_id: String,
    /// The owner's JSON object, or null.
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    /// Null: the identity limits nothing of its own.
    pub limits: Option<Limits>,
    pub created_at: String,
    pub updated_at: String,
}

/// What `DELETE /public/v1/identities/{id}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletedIdentity {
    pub id: String,
    /// Always `deleted`.
    pub status: String,
    /// How many keys belonged to it (they belong to no identity now).
    pub keys_detached: u64,
}
