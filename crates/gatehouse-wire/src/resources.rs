//! The resources of SPEC §2 as the API answers them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A contact (`POST /public/v1/contacts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contact {
    pub id: String,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub external_id: Option<String>,
    pub created_at: String,
}

/// A message (`status` is `queued` when created).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: String,
    pub contact_id: String,
    pub text: String,
    pub status: String,
    pub created_at: String,
}

/// A scenario (`POST /public/v1/scenarios`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub id: String,
    pub name: String,
    pub created_at: String,
}

/// A release marker (`POST /api/v1/projects/{project_id}/release-markers/deploy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseMarker {
    pub id: String,
    pub project_id: String,
    pub version: String,
    /// Unix seconds or RFC 3339, as the build sent it.
    pub ts: Value,
    pub environment: Option<String>,
    pub commit: Option<String>,
    pub created_at: String,
}
