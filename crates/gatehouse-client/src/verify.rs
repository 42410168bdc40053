//! Verifying our webhooks where they arrive (SPEC §10, §25): Standard Webhooks' `v1` (HMAC-SHA256
//! with the subscription's `whsec_` secret) and `v1a` (Ed25519 with its `whpk_` public key, so the
//! receiver holds no shared secret), several signatures at once during a rotation.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ed25519_dalek::{Signature, VerifyingKey};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How far a delivery's `webhook-timestamp` may be from the receiver's clock.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// Why a delivery is not accepted as ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The key is neither `whsec_` + base64 nor `whpk_` + a base64 Ed25519 public key.
    InvalidSecret,
    /// `webhook-timestamp` is not Unix seconds.
    InvalidTimestamp,
    /// The timestamp is more than 5 minutes from now (`skew` seconds, negative = in the past):
    /// a replayed old delivery, or a clock that is off.
    TimestampOutOfTolerance { skew: i64 },
    /// `webhook-signature` holds no entry of the key's scheme (`v1,<base64>` for a `whsec_`
    /// secret, `v1a,<base64>` for a `whpk_` public key).
    NoSignature,
    /// No signature of the key's scheme matches.
    SignatureMismatch,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::InvalidSecret => {
                write!(
                    f,
                    "the key is not whsec_ followed by base64, nor whpk_ followed by an Ed25519 public key"
                )
            }
            VerifyError::InvalidTimestamp => write!(f, "webhook-timestamp is not Unix seconds"),
            VerifyError::TimestampOutOfTolerance { skew } => {
                write!(
                    f,
                    "webhook-timestamp is {}s {} (tolerance ±300s)",
                    skew.abs(),
                    if *skew < 0 { "old" } else { "in the future" }
                )
            }
            VerifyError::NoSignature => write!(f, "webhook-signature holds no signature of the key's scheme"),
            VerifyError::SignatureMismatch => write!(f, "no signature matches the body"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Verifies deliveries for one subscription: with its `v1` secret (`whsec_…`: HMAC-SHA256 over
/// `{webhook-id}.{webhook-timestamp}.{body}` with the base64-decoded secret) or, for a `v1a`
/// subscription, with its public key (`whpk_…`: an Ed25519 signature over the same text).
///
/// ```
/// use gatehouse_client::WebhookVerifier;
/// let body = br#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;
/// let sent_at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1674087231);
/// let v1 = WebhookVerifier::new("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX")?;
/// v1.verify_at("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "1674087231",
///     "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=", body, sent_at)?;
/// let v1a = WebhookVerifier::new("whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=")?;
/// v1a.verify_at("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "1674087231",
///     "v1a,Yp7XSCXKnZdl0ye7BE8gi5cFmYoP5NFF/BUZ0RRxUga3LFjlHoVM7vcOV8+PP4jtzltS+Z9S+xmLQ77p1Xo/BA==",
///     body, sent_at)?;
/// # Ok::<(), gatehouse_client::VerifyError>(())
/// ```
#[derive(Clone)]
pub struct WebhookVerifier {
    key: Key,
}

#[derive(Clone)]
enum Key {
    Hmac(Vec<u8>),
    Ed25519(VerifyingKey),
}

impl fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Key::Hmac(_) => f.write_str("WebhookVerifier { key: <redacted> }"),
            Key::Ed25519(key) => {
                write!(f, "WebhookVerifier {{ public_key: {:?} }}", BASE64.encode(key.as_bytes()))
            }
        }
    }
}

impl WebhookVerifier {
    /// `key` as the subscription showed it: its `secret` (`whsec_` + base64) or, for a `v1a`
    /// subscription, its `public_key` (`whpk_` + base64 of 32 bytes).
    pub fn new(key: &str) -> Result<WebhookVerifier, VerifyError> {
        let key = key.trim();
        if let Some(encoded) = key.strip_prefix("whpk_") {
            let bytes: [u8; 32] = BASE64
                .decode(encoded)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or(VerifyError::InvalidSecret)?;
            let public = VerifyingKey::from_bytes(&bytes).map_err(|_| VerifyError::InvalidSecret)?;
            return Ok(WebhookVerifier { key: Key::Ed25519(public) });
        }
        let encoded = key.strip_prefix("whsec_").ok_or(VerifyError::InvalidSecret)?;
        let secret = BASE64.decode(encoded).map_err(|_| VerifyError::InvalidSecret)?;
        if secret.is_empty() {
            return Err(VerifyError::InvalidSecret);
        }
        Ok(WebhookVerifier { key: Key::Hmac(secret) })
    }

    /// Verifies a delivery against the system clock: the values of the `webhook-id`,
    /// `webhook-timestamp` and `webhook-signature` headers and the raw body, as received.
    pub fn verify(&self, id: &str, timestamp: &str, signature: &str, body: &[u8]) -> Result<(), VerifyError> {
        self.verify_at(id, timestamp, signature, body, SystemTime::now())
    }

    /// [`verify`](Self::verify) at the time `now`. The timestamp must be within ±5 minutes;
    /// `signature` may hold several space-separated entries (during a rotation: the new and the
    /// old, of one scheme or, while a subscription switches, of both) and is valid when any entry
    /// of the key's scheme matches (HMACs compared in constant time).
    pub fn verify_at(
        &self,
        id: &str,
        timestamp: &str,
        signature: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        let sent: i64 = timestamp.trim().parse().map_err(|_| VerifyError::InvalidTimestamp)?;
        let now = match now.duration_since(UNIX_EPOCH) {
            Ok(since) => since.as_secs() as i64,
            Err(before) => -(before.duration().as_secs() as i64),
        };
        let skew = sent.saturating_sub(now);
        if skew.unsigned_abs() > TIMESTAMP_TOLERANCE.as_secs() {
            return Err(VerifyError::TimestampOutOfTolerance { skew });
        }
        let version = match self.key {
            Key::Hmac(_) => "v1,",
            Key::Ed25519(_) => "v1a,",
        };
        let candidates: Vec<Vec<u8>> = signature
            .split_whitespace()
            .filter_map(|entry| entry.strip_prefix(version))
            .filter_map(|encoded| BASE64.decode(encoded).ok())
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::NoSignature);
        }
        let signed = [id.as_bytes(), b".", timestamp.trim().as_bytes(), b".", body].concat();
        let matched = match &self.key {
            Key::Hmac(secret) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
                mac.update(&signed);
                let expected = mac.finalize().into_bytes();
                // Every candidate is compared, matched or not, so the time taken says nothing about which.
                let any = candidates.iter().fold(subtle::Choice::from(0), |any, candidate| {
                    any | candidate.as_slice().ct_eq(expected.as_slice())
                });
                bool::from(any)
            }
            // A signature proves nothing about a secret: no timing to hide.
            Key::Ed25519(public) => candidates.iter().any(|candidate| {
                Signature::from_slice(candidate).is_ok_and(|sig| public.verify_strict(&signed, &sig).is_ok())
            }),
        };
        match matched {
            true => Ok(()),
            false => Err(VerifyError::SignatureMismatch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";
    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    const TS: &str = "1674087231";
    const BODY: &[u8] =
        br#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;
    /// The test vector of docs/api/webhooks.md, which the gateway's signer is tested against too.
    const SIGNATURE: &str = "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=";

    fn at(offset: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs((1_674_087_231 + offset) as u64)
    }

    #[test]
    fn accepts_the_documented_vector() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(0)), Ok(()));
    }

    #[test]
    fn accepts_any_matching_entry_during_a_rotation() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let other = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        assert_eq!(verifier.verify_at(ID, TS, &format!("{other} {SIGNATURE}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, &format!("{SIGNATURE} {other}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, &format!("v2,xyz {SIGNATURE}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, other, BODY, at(0)), Err(VerifyError::SignatureMismatch));
    }

    #[test]
    fn refuses_timestamps_outside_five_minutes() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(300)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(-300)), Ok(()));
        assert_eq!(
            verifier.verify_at(ID, TS, SIGNATURE, BODY, at(301)),
            Err(VerifyError::TimestampOutOfTolerance { skew: -301 })
        );
        assert_eq!(
            verifier.verify_at(ID, TS, SIGNATURE, BODY, at(-301)),
            Err(VerifyError::TimestampOutOfTolerance { skew: 301 })
        );
    }

    #[test]
    fn refuses_any_change_to_what_was_signed() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let mut body = BODY.to_vec();
        body[10] ^= 1;
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, &body, at(0)), Err(VerifyError::SignatureMismatch));
        assert_eq!(
            verifier.verify_at("msg_other", TS, SIGNATURE, BODY, at(0)),
            Err(VerifyError::SignatureMismatch)
        );
        assert_eq!(
            verifier.verify_at(ID, "1674087232", SIGNATURE, BODY, at(0)),
            Err(VerifyError::SignatureMismatch)
        );
        let other_key = WebhookVerifier::new("whsec_AQECAwQFBgcICQoLDA0ODxAREhMUFRYX").unwrap();
        assert_eq!(other_key.verify_at(ID, TS, SIGNATURE, BODY, at(0)), Err(VerifyError::SignatureMismatch));
    }

    #[test]
    fn reports_malformed_inputs() {
        assert_eq!(WebhookVerifier::new("AAECAwQF").unwrap_err(), VerifyError::InvalidSecret);
        assert_eq!(WebhookVerifier::new("whsec_not base64!").unwrap_err(), VerifyError::InvalidSecret);
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(
            verifier.verify_at(ID, "yesterday", SIGNATURE, BODY, at(0)),
            Err(VerifyError::InvalidTimestamp)
        );
        assert_eq!(verifier.verify_at(ID, TS, "", BODY, at(0)), Err(VerifyError::NoSignature));
        assert_eq!(verifier.verify_at(ID, TS, "v1,%%%", BODY, at(0)), Err(VerifyError::NoSignature));
    }

    /// SPEC §25: a `v1a` delivery verifies with the public key alone (the vector of
    /// docs/api/webhooks.md, made with Node's `crypto`), a `v1` entry beside it is passed over, and
    /// any change — or another key's signature — is refused.
    #[test]
    fn a_v1a_delivery_verifies_with_the_public_key() {
        const PUBLIC: &str = "whpk_A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=";
        const V1A: &str =
            "v1a,Yp7XSCXKnZdl0ye7BE8gi5cFmYoP5NFF/BUZ0RRxUga3LFjlHoVM7vcOV8+PP4jtzltS+Z9S+xmLQ77p1Xo/BA==";
        let verifier = WebhookVerifier::new(PUBLIC).unwrap();
        assert_eq!(verifier.verify_at(ID, TS, V1A, BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, &format!("{V1A} {SIGNATURE}"), BODY, at(0)), Ok(()));
        assert_eq!(verifier.verify_at(ID, TS, SIGNATURE, BODY, at(0)), Err(VerifyError::NoSignature));
        let mut body = BODY.to_vec();
        body[10] ^= 1;
        assert_eq!(verifier.verify_at(ID, TS, V1A, &body, at(0)), Err(VerifyError::SignatureMismatch));
        assert_eq!(
            verifier.verify_at(ID, "1674087232", V1A, BODY, at(0)),
            Err(VerifyError::SignatureMismatch)
        );
        assert_eq!(verifier.verify_at(ID, TS, "v1a,AAAA", BODY, at(0)), Err(VerifyError::SignatureMismatch));
        // The v1 secret does not verify a v1a signature, and a public key is not a v1 secret.
        let v1 = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(v1.verify_at(ID, TS, V1A, BODY, at(0)), Err(VerifyError::NoSignature));
        for bad in
            ["whpk_", "whpk_AAEC", "whpk_not base64", "whsk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]
        {
            assert_eq!(WebhookVerifier::new(bad).unwrap_err(), VerifyError::InvalidSecret, "{bad}");
        }
        assert!(!format!("{v1:?}").contains("AAEC"), "a secret is never printed");
    }
}
