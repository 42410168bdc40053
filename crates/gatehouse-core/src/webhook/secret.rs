//! A subscription's signing secret: made (`whsec_` + 24 random bytes), read as an HMAC key,
//! and kept in D1 sealed under `WEBHOOK_SECRETS_KEY` (SPEC §13, §19).

use crate::encoding::{base64, from_base64};
use crate::sealing::{Keyring, Sealed, NONCE_BYTES};

const SECRET_PREFIX: &str = "whsec_";

/// `whsec_` + base64 of 24 random bytes.
pub fn new_secret(random: &[u8; 24]) -> String {
    format!("{SECRET_PREFIX}{}", base64(random))
}

/// The HMAC key of a secret: the base64-decoded part after `whsec_`.
pub fn signing_key(secret: &str) -> Option<Vec<u8>> {
    from_base64(secret.strip_prefix(SECRET_PREFIX)?)
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
    fn a_plaintext_secret_from_before_sealing_still_signs() {
        let read = StoredSecret::from_column(SECRET.to_owned());
        assert_eq!(read, StoredSecret::Plaintext(SECRET.into()));
        assert_eq!(read.as_column(), SECRET);
        let secret = read.open(&secrets_key(), "wh_1").unwrap();
        assert_eq!(signing_key(&secret).unwrap(), (0u8..24).collect::<Vec<_>>());
    }
}
