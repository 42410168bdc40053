//! Webhooks (SPEC §10): subscriptions and their secrets, Standard Webhooks signatures, where a
//! subscription may point, deliveries and their attempts, and when to try again. One file per
//! concern; everything is used as `webhook::…`.

mod delivery;
mod destination;
mod retry;
mod secret;
mod signature;
mod subscription;

pub use delivery::*;
pub use destination::*;
pub use retry::*;
pub use secret::*;
pub use signature::*;
pub use subscription::*;

/// The published test vector and a secrets key, for the tests of every part.
#[cfg(test)]
mod test_vectors {
    use crate::sealing::Keyring;

    /// The vector published in docs/api/webhooks.md, computed with Python's `hmac` module.
    pub const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";

    /// The v1a vector of docs/api/webhooks.md, computed with Node's `crypto` (OpenSSL): the key
    /// pair of seed bytes 0..32, its public key, and its signature of the v1 vector's message.
    pub const V1A_SECRET: &str = "whsk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    pub const V1A_PUBLIC_KEY: &str = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=";
    pub const V1A_SIGNATURE: &str =
        "v1a,Yp7XSCXKnZdl0ye7BE8gi5cFmYoP5NFF/BUZ0RRxUga3LFjlHoVM7vcOV8+PP4jtzltS+Z9S+xmLQ77p1Xo/BA==";

    pub fn secrets_key() -> Keyring {
        Keyring::for_webhook_secrets(
            &["webhook-secrets-key-of-32-bytes-len!"],
            &["pepper-of-at-least-32-bytes-length!!"],
        )
    }
}
