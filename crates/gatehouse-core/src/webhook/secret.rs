//! A subscription's signing secret: made (`whsec_` + 24 random bytes, an HMAC key; or, for a
//! `v1a` subscription, `whsk_` + a 32-byte Ed25519 seed, SPEC §25), and kept in D1 sealed under
//! `WEBHOOK_SECRETS_KEY` (SPEC §13, §19). A `v1a` subscription's public key (`whpk_` + the 32-byte
//! Ed25519 key) is not secret: it is shown, and receivers verify with it.

use crate::encoding::{base64, from_base64};
use crate::sealing::{Keyring, Sealed, NONCE_BYTES};

const SECRET_PREFIX: &str = "whsec_";
const KEY_PAIR_PREFIX: &str = "whsk_";
const PUBLIC_KEY_PREFIX: &str = "whpk_";

/// How a subscription signs its attempts (Standard Webhooks): `v1`, HMAC-SHA256 with a shared
/// secret (the default), or `v1a`, Ed25519 with a key pair whose public key receivers verify with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    V1,
    V1a,
}

impl Scheme {
    pub fn parse(name: &str) -> Option<Scheme> {
        match name {
            "v1" => Some(Scheme::V1),
            "v1a" => Some(Scheme::V1a),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::V1 => "v1",
            Scheme::V1a => "v1a",
        }
    }

    /// A new secret of this scheme from 32 random bytes (`v1` uses the first 24).
    pub fn new_secret(self, random: &[u8; 32]) -> String {
        match self {
            Scheme::V1 => new_secret(random[..24].try_into().expect("24 of 32 bytes")),
            Scheme::V1a => format!("{KEY_PAIR_PREFIX}{}", base64(random)),
        }
    }
}

/// The seed of a rotation's new secret (SPEC §19, §25): what the request's operation derived from
/// the caller's credential, keyed by the gateway's `WEBHOOK_SECRETS_KEY`. A re-execution of the
/// operation makes the same secret, and the caller's own inputs (its API key, `Idempotency-Key` and
/// request id) do not: a `v1a` private key never leaves the gateway, not even by derivation.
pub fn rotation_seed(secrets_key: &str, derived: &[u8; 32]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secrets_key.as_bytes()).expect("HMAC takes any key");
    mac.update(b"gatehouse/webhook-rotation-seed/v1\n");
    mac.update(derived);
    mac.finalize().into_bytes().into()
}

/// `whsec_` + base64 of 24 random bytes.
pub fn new_secret(random: &[u8; 24]) -> String {
    format!("{SECRET_PREFIX}{}", base64(random))
}

/// The HMAC key of a `v1` secret: the base64-decoded part after `whsec_`.
pub fn signing_key(secret: &str) -> Option<Vec<u8>> {
    from_base64(secret.strip_prefix(SECRET_PREFIX)?)
}

/// What signs an attempt: a `v1` secret's HMAC key, or a `v1a` key pair.
#[derive(Clone)]
pub enum SigningKey {
    Hmac(Vec<u8>),
    /// Boxed: the expanded key is 200-odd bytes, an HMAC key a pointer.
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl SigningKey {
    /// The key of a secret of either scheme (`whsec_…` or `whsk_…`); `None` for anything else.
    pub fn of(secret: &str) -> Option<SigningKey> {
        if let Some(seed) = secret.strip_prefix(KEY_PAIR_PREFIX) {
            let seed: [u8; 32] = from_base64(seed)?.try_into().ok()?;
            return Some(SigningKey::Ed25519(Box::new(ed25519_dalek::SigningKey::from_bytes(&seed))));
        }
        signing_key(secret).map(SigningKey::Hmac)
    }

    /// `whpk_` + base64 of the Ed25519 public key; `None` for an HMAC key (it has none).
    pub fn public_key(&self) -> Option<String> {
        match self {
            SigningKey::Hmac(_) => None,
            SigningKey::Ed25519(key) => {
                Some(format!("{PUBLIC_KEY_PREFIX}{}", base64(key.verifying_key().as_bytes())))
            }
        }
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (SigningKey::Hmac(a), SigningKey::Hmac(b)) => a == b,
            (SigningKey::Ed25519(a), SigningKey::Ed25519(b)) => a.to_bytes() == b.to_bytes(),
            _ => false,
        }
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SigningKey::Hmac(_) => f.write_str("SigningKey::Hmac([redacted])"),
            SigningKey::Ed25519(_) => write!(f, "SigningKey::Ed25519({:?})", self.public_key()),
        }
    }
}

/// The public key of a `v1a` secret (`whsk_…`), as a subscription shows it.
pub fn public_key_of(secret: &str) -> Option<String> {
    SigningKey::of(secret)?.public_key()
}

/// A subscription's signing secret as D1 keeps it (SPEC §13). `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoredSecret {
    /// Sealed under the webhook secrets' key ([`Keyring::for_webhook_secrets`]), bound to the
    /// subscription's id.
    Sealed(Sealed),
    /// A `whsec_` secret written before secrets were sealed: it signs as before until the minute
    /// cron seals it (`app::seal_plaintext_secrets`).
    Plaintext(String),
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoredSecret::Sealed(sealed) => write!(f, "StoredSecret::{sealed:?}"),
            StoredSecret::Plaintext(_) => f.write_str("StoredSecret::Plaintext([redacted])"),
        }
    }
}

impl StoredSecret {
    /// Seals `secret` for the subscription `webhook_id`; `nonce` is fresh random.
    pub fn seal(key: &Keyring, webhook_id: &str, secret: &str, nonce: [u8; NONCE_BYTES]) -> Self {
        StoredSecret::Sealed(key.seal(secret.as_bytes(), &secret_identity(webhook_id), nonce))
    }

    /// The column as stored: a `whsec_` secret is one from before sealing, anything else is sealed.
    pub fn from_column(text: String) -> Self {
        if text.starts_with(SECRET_PREFIX) {
            StoredSecret::Plaintext(text)
        } else {
            StoredSecret::Sealed(Sealed::from_stored(text))
        }
    }

    pub fn as_column(&self) -> &str {
        match self {
            StoredSecret::Sealed(sealed) => sealed.as_str(),
            StoredSecret::Plaintext(secret) => secret,
        }
    }

    /// The `whsec_` secret, or `None` when it was sealed for another subscription or under another
    /// pepper, or was changed.
    pub fn open(&self, key: &Keyring, webhook_id: &str) -> Option<String> {
        match self {
            StoredSecret::Sealed(sealed) => {
                String::from_utf8(key.open(sealed, &secret_identity(webhook_id))?).ok()
            }
            StoredSecret::Plaintext(secret) => Some(secret.clone()),
        }
    }
}

/// The associated data of a sealed secret: the subscription it belongs to.
fn secret_identity(webhook_id: &str) -> Vec<u8> {
    format!("webhook:{webhook_id}:secret").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::test_vectors::*;

    #[test]
    fn a_sealed_secret_round_trips_for_its_own_subscription_only() {
        let stored = StoredSecret::seal(&secrets_key(), "wh_1", SECRET, [2; 12]);
        let column = stored.as_column().to_owned();
        assert!(!column.contains("whsec_") && column.starts_with("v2."), "{column}");
        let read = StoredSecret::from_column(column);
        assert_eq!(read, stored);
        assert_eq!(read.open(&secrets_key(), "wh_1").as_deref(), Some(SECRET));
        assert_eq!(read.open(&secrets_key(), "wh_2"), None);
        let other = Keyring::for_webhook_secrets(
            &["another-secrets-key-of-32-bytes-len"],
            &["pepper-of-at-least-32-bytes-length!!"],
        );
        assert_eq!(read.open(&other, "wh_1"), None);
    }

    #[test]
    fn a_v1a_secret_is_a_key_pair_whose_public_key_is_shown() {
        let secret = Scheme::V1a.new_secret(&[7; 32]);
        assert!(secret.starts_with("whsk_"));
        let key = SigningKey::of(&secret).unwrap();
        let public = key.public_key().unwrap();
        assert!(public.starts_with("whpk_"));
        assert_eq!(public_key_of(&secret), Some(public.clone()));
        assert!(!format!("{key:?}").contains(&secret[5..]), "Debug shows the public key only");
        // The same seed, the same pair; v1 secrets have no public key.
        assert_eq!(public_key_of(&Scheme::V1a.new_secret(&[7; 32])), Some(public));
        let v1 = Scheme::V1.new_secret(&[7; 32]);
        assert!(v1.starts_with("whsec_") && public_key_of(&v1).is_none());
        assert!(matches!(SigningKey::of(&v1), Some(SigningKey::Hmac(k)) if k == vec![7; 24]));
        for bad in ["whsk_", "whsk_AAEC", "whpk_AAAA", "nope"] {
            assert!(SigningKey::of(bad).is_none(), "{bad}");
        }
        assert_eq!((Scheme::parse("v1a"), Scheme::parse("v2")), (Some(Scheme::V1a), None));
    }

    /// Review H1: what the caller of a rotation holds (the operation's derivation from its API key,
    /// `Idempotency-Key` and request id) does not make the new key pair; the gateway's key does.
    #[test]
    fn a_rotations_seed_needs_the_gateways_secrets_key() {
        let derived = [3; 32];
        let seed = rotation_seed("webhook-secrets-key-of-32-bytes-len!", &derived);
        assert_ne!(seed, derived);
        assert_eq!(
            seed,
            rotation_seed("webhook-secrets-key-of-32-bytes-len!", &derived),
            "the same operation, the same seed"
        );
        assert_ne!(seed, rotation_seed("another-secrets-key-of-32-bytes-len!", &derived));
        assert_ne!(
            public_key_of(&Scheme::V1a.new_secret(&seed)),
            public_key_of(&Scheme::V1a.new_secret(&derived))
        );
    }

    #[test]
    fn a_plaintext_secret_from_before_sealing_still_signs() {
        let read = StoredSecret::from_column(SECRET.to_owned());
        assert_eq!(read, StoredSecret::Plaintext(SECRET.into()));
        assert_eq!(read.as_column(), SECRET);
        let secret = read.open(&secrets_key(), "wh_1").unwrap();
        assert_eq!(signing_key(&secret).unwrap(), (0u8..24).collect::<Vec<_>>());
    }
}
