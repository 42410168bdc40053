//! Commands to the KeyGuard Durable Object and its answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Serialize};

use crate::core::api_key::KeyRecord;

/// The binding name of SPEC §1.
pub const BINDING: &str = "KEY_GUARD";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://key-guard/";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum GuardCommand {
    /// Is this key valid, and what is it?
    Authorize { key_hash: String },
    /// Forget the remembered record (revoked or changed); the next command reloads it.
    Invalidate { key_hash: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum GuardAnswer {
    Granted { key: KeyRecord },
    Denied,
    Done,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_have_a_stable_wire_form() {
        let c = GuardCommand::Authorize {
            key_hash: "ab".into(),
        };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"command":"authorize","key_hash":"ab"}"#
        );
        let a: GuardAnswer = serde_json::from_str(r#"{"answer":"denied"}"#).unwrap();
        assert_eq!(a, GuardAnswer::Denied);
    }
}
