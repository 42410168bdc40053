//! Commands to the KeyGuard Durable Object and its answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Serialize};

use crate::core::api_key::KeyRecord;
use crate::core::idempotency::{ClaimDecision, StoredResponse};
use crate::core::rate_limit::{Usage, Verdict};
use crate::ports::ClaimRequest;

/// The binding name of SPEC §1.
pub const BINDING: &str = "KEY_GUARD";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://key-guard/";

/// The object the deep health check pings.
pub const HEALTH_OBJECT: &str = "health";

/// The object that counts failed authentications from one client address. Key guards are named
/// by a 64-hex-digit key hash, so the two kinds of names never meet.
pub fn client_guard_name(ip: &str) -> String {
    format!("ip:{ip}")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum GuardCommand {
    /// Is this key valid, may it make one more request now, and (when the request carries an
    /// `Idempotency-Key`) may it execute? One round trip for all three.
    Authorize { key_hash: String, claim: Option<ClaimRequest> },
    /// Forget the remembered record (revoked or changed); the next command reloads it. Counters stay.
    Invalidate { key_hash: String },
    /// One failed authentication from this object's client address.
    RecordAuthFailure,
    /// The claimed request succeeded: keep its outcome until the key's TTL ends.
    CompleteClaim { claim: ClaimRequest, response: StoredResponse, stored_elsewhere: bool },
    /// The claimed request failed: forget the claim.
    ReleaseClaim { claim: ClaimRequest },
    /// A round trip that reads and writes nothing (the deep health check).
    Ping,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // a wire message, made once per round trip
pub enum GuardAnswer {
    /// The key is valid; `verdict` says whether this request is within its limits, `claim` what
    /// its `Idempotency-Key` allows (only when within its limits).
    Decided {
        key: KeyRecord,
        verdict: Verdict,
        usage: Usage,
        claim: Option<ClaimDecision>,
    },
    /// No such key (`None`), or revoked (its record).
    Denied {
        key: Option<KeyRecord>,
    },
    Done,
    /// Failures from the client address so far in this minute, against the allowance.
    AuthFailure {
        verdict: Verdict,
        usage: Usage,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_have_a_stable_wire_form() {
        let c = GuardCommand::Authorize { key_hash: "ab".into(), claim: None };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"command":"authorize","key_hash":"ab","claim":null}"#
        );
        let c: GuardCommand = serde_json::from_str(r#"{"command":"record_auth_failure"}"#).unwrap();
        assert_eq!(c, GuardCommand::RecordAuthFailure);
        let a: GuardAnswer = serde_json::from_str(r#"{"answer":"denied","key":null}"#).unwrap();
        assert_eq!(a, GuardAnswer::Denied { key: None });
        let d: ClaimDecision = serde_json::from_str(r#"{"claim":"replay","response":null}"#).unwrap();
        assert_eq!(d, ClaimDecision::Replay { response: None });
    }

    #[test]
    fn client_guard_names_cannot_be_key_hashes() {
        assert_eq!(client_guard_name("203.0.113.7"), "ip:203.0.113.7");
        assert!(client_guard_name("::1").contains(':'));
    }
}
