//! Secrets at rest (SPEC §13): AES-256-GCM under keys derived with HKDF-SHA256, one key per
//! purpose. A sealed value is text, `v1.` + base64url(nonce ‖ ciphertext ‖ tag), so it travels in
//! JSON, KV values and D1 columns as it is; the version prefix lets a later format sit beside it.
//! The caller brings a fresh random nonce for every seal, and associated data naming where the
//! value is stored, so a ciphertext moved to another entry does not open.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::encoding::{base64url, from_base64url};

/// The only format so far.
const FORMAT_V1: &str = "v1.";
/// AES-GCM's 96-bit nonce.
pub const NONCE_BYTES: usize = 12;
/// HKDF `info` of each purpose: keys of different purposes never coincide.
const RESPONSES_INFO: &[u8] = b"gatehouse/idempotent-response/v1";
const WEBHOOK_SECRETS_INFO: &[u8] = b"gatehouse/webhook-signing-secret/v1";

/// A 256-bit key for one purpose. `Debug` never shows it.
#[derive(Clone)]
pub struct SealingKey([u8; 32]);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey([redacted])")
    }
}

impl SealingKey {
    /// The key of a caller's stored idempotent responses: HKDF-SHA256 of the API key (the secret
    /// itself, which only its holder's requests carry) salted with `KEY_PEPPER`. Neither the
    /// stored key hash nor the pepper alone derives it.
    pub fn for_responses(pepper: &[u8], api_key: &str) -> Self {
        Self::derive(Some(pepper), api_key.as_bytes(), RESPONSES_INFO)
    }

    /// The key of webhook signing secrets in D1: HKDF-SHA256 of `KEY_PEPPER` alone, with an
    /// `info` of its own (every attempt needs the secret, with no caller present).
    pub fn for_webhook_secrets(pepper: &[u8]) -> Self {
        Self::derive(None, pepper, WEBHOOK_SECRETS_INFO)
    }

    fn derive(salt: Option<&[u8]>, input: &[u8], info: &[u8]) -> Self {
        let mut key = [0u8; 32];
        Hkdf::<Sha256>::new(salt, input).expand(info, &mut key).expect("32 bytes is a valid HKDF length");
        SealingKey(key)
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.0.into())
    }

    /// Encrypts and authenticates `plaintext` together with `aad` (which is not stored: the reader
    /// names it again). `nonce` must be fresh random bytes for every call.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8], nonce: [u8; NONCE_BYTES]) -> Sealed {
        let ciphertext = self
            .cipher()
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad })
            .expect("AES-GCM seals any message a worker can hold");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&ciphertext);
        Sealed(format!("{FORMAT_V1}{}", base64url(&bytes)))
    }

    /// The plaintext, or `None` when the value is not in a known format, was sealed under another
    /// key or other associated data, or was changed.
    pub fn open(&self, sealed: &Sealed, aad: &[u8]) -> Option<Vec<u8>> {
        let bytes = from_base64url(sealed.0.strip_prefix(FORMAT_V1)?)?;
        if bytes.len() < NONCE_BYTES {
            return None;
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
        self.cipher().decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad }).ok()
    }
}

/// A sealed value as it is stored. `Debug` shows its length only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sealed(String);

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealed([{} bytes])", self.0.len())
    }
}

impl Sealed {
    /// A stored text that claims to be sealed; [`SealingKey::open`] decides whether it is.
    pub fn from_stored(text: String) -> Self {
        Sealed(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEPPER: &[u8] = b"pepper-of-at-least-32-bytes-length!!";
    const API_KEY: &str = "gh_s_0123456789abcdefghijABCDEFGHIJ0123456789";

    fn key() -> SealingKey {
        SealingKey::for_responses(PEPPER, API_KEY)
    }

    #[test]
    fn round_trip_gives_back_the_plaintext_and_stores_none_of_it() {
        let sealed = key().seal(br#"{"key":"gh_s_secret"}"#, b"aad", [7; NONCE_BYTES]);
        assert!(sealed.as_str().starts_with("v1.") && !sealed.as_str().contains("gh_s_secret"));
        assert_eq!(key().open(&sealed, b"aad").unwrap(), br#"{"key":"gh_s_secret"}"#);
        // The empty message too.
        assert_eq!(key().open(&key().seal(b"", b"", [0; NONCE_BYTES]), b"").unwrap(), b"");
    }

    #[test]
    fn each_nonce_gives_another_ciphertext() {
        let a = key().seal(b"same", b"aad", [1; NONCE_BYTES]);
        let b = key().seal(b"same", b"aad", [2; NONCE_BYTES]);
        assert_ne!(a, b);
        assert_eq!(key().open(&a, b"aad"), key().open(&b, b"aad"));
    }

    #[test]
    fn another_api_key_or_pepper_cannot_open() {
        let sealed = key().seal(b"body", b"aad", [3; NONCE_BYTES]);
        let other_key = SealingKey::for_responses(PEPPER, "gh_s_another-key-of-the-same-project-000000");
        assert_eq!(other_key.open(&sealed, b"aad"), None);
        let other_pepper = SealingKey::for_responses(b"another-pepper-of-32-bytes-length!!!", API_KEY);
        assert_eq!(other_pepper.open(&sealed, b"aad"), None);
        // The webhook key comes from the pepper alone, with another `info`: it is neither.
        assert_eq!(SealingKey::for_webhook_secrets(PEPPER).open(&sealed, b"aad"), None);
    }

    #[test]
    fn tampered_ciphertext_or_other_associated_data_does_not_open() {
        let sealed = key().seal(b"body", b"papi:idem:key_1:k-1", [4; NONCE_BYTES]);
        assert_eq!(key().open(&sealed, b"papi:idem:key_1:k-2"), None);
        let bytes = from_base64url(&sealed.as_str()[FORMAT_V1.len()..]).unwrap();
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 1;
            let changed = Sealed::from_stored(format!("{FORMAT_V1}{}", base64url(&changed)));
            assert_eq!(key().open(&changed, b"papi:idem:key_1:k-1"), None, "byte {i}");
        }
        let cut = Sealed::from_stored(format!("{FORMAT_V1}{}", base64url(&bytes[..bytes.len() - 1])));
        assert_eq!(key().open(&cut, b"papi:idem:key_1:k-1"), None);
    }

    #[test]
    fn unknown_formats_and_garbage_do_not_open() {
        for text in ["", "v1.", "v1.!!!!", "v2.AAAA", "whsec_abc", "v1.AAAAAAAAAAAAAAAA"] {
            assert_eq!(key().open(&Sealed::from_stored(text.into()), b""), None, "{text:?}");
        }
    }

    /// Values sealed with the nonce 0 by an independent implementation (Node's `crypto.hkdfSync`
    /// and `aes-256-gcm`): the derivation and the format are the standard ones, and a change to
    /// either would make every stored value unreadable, so this test pins them.
    #[test]
    fn opens_values_sealed_by_another_implementation_of_the_same_format() {
        let response = Sealed::from_stored("v1.AAAAAAAAAAAAAAAAyPytqqoN0K9RHr81jlHV6EWksbI".into());
        assert_eq!(key().open(&response, b"papi:idem:key_1:k-1").unwrap(), b"kept");
        assert_eq!(key().seal(b"kept", b"papi:idem:key_1:k-1", [0; NONCE_BYTES]), response);
        let secret = Sealed::from_stored("v1.AAAAAAAAAAAAAAAAYDqGSVkqgIZNtHxCAtY8YShtOmjuHro".into());
        let webhooks = SealingKey::for_webhook_secrets(PEPPER);
        assert_eq!(webhooks.open(&secret, b"webhook:wh_1:secret").unwrap(), b"whsec_x");
    }

    #[test]
    fn debug_output_never_prints_the_key_or_the_value() {
        assert_eq!(format!("{:?}", key()), "SealingKey([redacted])");
        let sealed = key().seal(b"body", b"", [5; NONCE_BYTES]);
        assert!(!format!("{sealed:?}").contains(sealed.as_str()));
    }
}
