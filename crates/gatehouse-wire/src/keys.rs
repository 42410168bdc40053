//! API keys as the API shows them (`/public/v1/keys`, `/public/v1/me`).

use serde::{Deserialize, Serialize};

names! {
    /// The type of an API key: what it may call.
    KeyType, "key type" {
        /// Manages the project: keys, logs, webhooks, usage.
        Owner = "owner",
        /// A backend's key: the resources and ingestion.
        Server = "server",
        /// Publishable: ingestion from web pages only.
        Browser = "browser",
        /// Records deploys (release markers).
        Cicd = "cicd",
    }
}

names! {
    /// Whether a key works, as the API shows it.
    KeyStatus, "key status" {
        Active = "active",
        /// Works until its `expires_at` (a roll's grace included).
        Expiring = "expiring",
        Expired = "expired",
        Revoked = "revoked",
    }
}

/// An API key as lists show it (never the secret, never its hash).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Key {
    pub id: String,
    pub prefix: String,
    #[serde(rename = "type")]
    pub key_type: KeyType,
    pub name: Option<String>,
    pub plan: String,
    pub rate_limit_per_minute: Option<u64>,
    pub status: KeyStatus,
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
    /// A browser key's origins (empty: any); absent for other key types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_origins: Option<Vec<String>>,
}

/// A key just created: the only answer that carries the secret `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedKey {
    /// The secret, shown this once.
    pub key: String,
    #[serde(flatten)]
    pub info: Key,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_and_write_as_the_api_says_them_and_unknown_ones_read_as_unknown() {
        for &t in KeyType::ALL {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{t}\""));
            assert_eq!(serde_json::from_str::<KeyType>(&json).unwrap(), t);
            assert_eq!(t.as_str().parse::<KeyType>(), Ok(t));
        }
        assert_eq!(serde_json::from_str::<KeyStatus>("\"paused\"").unwrap(), KeyStatus::Unknown);
        assert_eq!(
            "paused".parse::<KeyStatus>().unwrap_err(),
            "\"paused\" is not a key status (active, expiring, expired, revoked)"
        );
        assert_eq!(KeyStatus::parse("unknown"), None, "unknown is never a name the API sends");
        assert!(KeyStatus::Revoked == "revoked" && KeyStatus::Revoked != "active");
    }
}
