//! Secrets at rest (SPEC §13, §19): AES-256-GCM under keys derived with HKDF-SHA256, one key per
//! purpose. A sealed value is text, so it travels in JSON, KV values and D1 columns as it is:
//!
//! * `v2.<key id>.` + base64url(nonce ‖ ciphertext ‖ tag), what every seal writes. The key id
//!   names the operator's secret the key comes from ([`key_id`]), so a secret can be rotated: the
//!   previous one stays configured to open what it sealed until that is re-sealed or expires.
//! * `v1.` + base64url(…), read only. Its response key was HKDF-SHA256(salt = pepper, ikm = API
//!   key), whose extract step *is* HMAC(pepper, API key): the stored key hash. Nothing seals it any
//!   more; what is stored expires with the idempotency TTL (responses) or is re-sealed by the
//!   minute cron (webhook secrets).
//!
//! What an attacker who reads every stored value (KV, D1, every object's SQLite, logs) holds, and
//! why it does not open a `v2` value: the key hash HMAC(pepper, key), the key id (a truncated
//! HMAC of the secret under a label of its own), the sealed values and every other column. A
//! response key is HKDF(salt = HMAC(pepper, `RESPONSES_ROOT`), ikm = API key): it needs the API key,
//! which is never stored, *and* a pepper-derived value no column holds. A webhook secret's key
//! comes from `WEBHOOK_SECRETS_KEY`, which is not the pepper, so the pepper and a D1 dump do not
//! open it either. `tests/e2e/at_rest.test.mjs` derives candidate keys from every value of a real
//! run's state folder and shows that none opens anything.
//!
//! The caller brings a fresh random nonce for every seal, and associated data naming where the
//! value is stored, so a ciphertext moved to another entry does not open.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::encoding::{base64url, from_base64url, hex};

const FORMAT_V1: &str = "v1.";
const FORMAT_V2: &str = "v2.";
/// AES-GCM's 96-bit nonce.
pub const NONCE_BYTES: usize = 12;
/// HKDF `info` of each purpose and format: keys of different purposes never coincide.
const RESPONSES_INFO_V1: &[u8] = b"gatehouse/idempotent-response/v1";
const WEBHOOK_SECRETS_INFO_V1: &[u8] = b"gatehouse/webhook-signing-secret/v1";
const RESPONSES_INFO: &[u8] = b"gatehouse/idempotent-response/v2";
const WEBHOOK_SECRETS_INFO: &[u8] = b"gatehouse/webhook-signing-secret/v2";
/// The label of the pepper-derived salt of response keys: HMAC(pepper, label) is stored nowhere.
const RESPONSES_ROOT: &[u8] = b"gatehouse/idempotent-response/v2/root";
/// The label of key ids.
const KEY_ID_LABEL: &[u8] = b"gatehouse/key-id";
/// Hex characters of a key id: 32 bits, enough to tell a current secret from a previous one.
const KEY_ID_CHARS: usize = 8;

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The id of an operator's secret (`KEY_PEPPER`, `WEBHOOK_SECRETS_KEY`): 8 hex characters of
/// HMAC(secret, "gatehouse/key-id"). It tells which secret sealed a value; it derives no key.
pub fn key_id(secret: &[u8]) -> String {
    let mut id = hex(&hmac_sha256(secret, KEY_ID_LABEL));
    id.truncate(KEY_ID_CHARS);
    id
}

/// A 256-bit key for one purpose, with the id of the secret it comes from (`None`: a `v1` key,
/// which opens and never seals). `Debug` never shows the key.
#[derive(Clone)]
pub struct SealingKey {
    key: [u8; 32],
    id: Option<String>,
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealingKey({:?}, [redacted])", self.id)
    }
}

impl SealingKey {
    /// The key of a caller's stored idempotent responses under one pepper: HKDF-SHA256 with the
    /// API key as input and HMAC(pepper, `RESPONSES_ROOT`) as salt (see the module's notes).
    pub fn for_responses(pepper: &[u8], api_key: &str) -> Self {
        let salt = hmac_sha256(pepper, RESPONSES_ROOT);
        Self::derive(Some(&salt), api_key.as_bytes(), RESPONSES_INFO, Some(key_id(pepper)))
    }

    /// The key of webhook signing secrets in D1: HKDF-SHA256 of `WEBHOOK_SECRETS_KEY` (every
    /// attempt needs the secret, with no caller present, so no caller's secret can be in it).
    pub fn for_webhook_secrets(secrets_key: &[u8]) -> Self {
        Self::derive(None, secrets_key, WEBHOOK_SECRETS_INFO, Some(key_id(secrets_key)))
    }

    /// The `v1` response key (read only): HKDF(salt = pepper, ikm = API key).
    fn responses_v1(pepper: &[u8], api_key: &str) -> Self {
        Self::derive(Some(pepper), api_key.as_bytes(), RESPONSES_INFO_V1, None)
    }

    /// The `v1` webhook secrets' key (read only): HKDF of the pepper.
    fn webhook_secrets_v1(pepper: &[u8]) -> Self {
        Self::derive(None, pepper, WEBHOOK_SECRETS_INFO_V1, None)
    }

    fn derive(salt: Option<&[u8]>, input: &[u8], info: &[u8], id: Option<String>) -> Self {
        let mut key = [0u8; 32];
        Hkdf::<Sha256>::new(salt, input).expand(info, &mut key).expect("32 bytes is a valid HKDF length");
        SealingKey { key, id }
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.key.into())
    }

    /// Decrypts `bytes` (nonce ‖ ciphertext ‖ tag) bound to `aad`.
    fn decrypt(&self, bytes: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        if bytes.len() < NONCE_BYTES {
            return None;
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
        self.cipher().decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad }).ok()
    }
}

/// The keys of one purpose: the first seals, every one opens what it sealed. Built per use from
/// the configured secrets (current first, then the previous one during a rotation) and the
/// read-only `v1` keys.
#[derive(Clone, Debug)]
pub struct Keyring {
    sealing: SealingKey,
    openers: Vec<SealingKey>,
}

impl Keyring {
    /// A caller's responses: sealed under the current pepper; opened under it, under the previous
    /// pepper if one is set, and in the `v1` format under either.
    pub fn for_responses(peppers: &[&str], api_key: &str) -> Self {
        Self::from_secrets(
            peppers,
            |s| SealingKey::for_responses(s, api_key),
            |p| SealingKey::responses_v1(p, api_key),
        )
    }

    /// Webhook signing secrets: sealed under the current `WEBHOOK_SECRETS_KEY`; opened under it or
    /// the previous one, and in the `v1` format under the current or previous pepper.
    pub fn for_webhook_secrets(secrets_keys: &[&str], peppers: &[&str]) -> Self {
        let mut ring = Self::from_secrets(secrets_keys, SealingKey::for_webhook_secrets, |_| None);
        ring.openers.extend(peppers.iter().map(|p| SealingKey::webhook_secrets_v1(p.as_bytes())));
        ring
    }

    fn from_secrets<V: Into<Option<SealingKey>>>(
        secrets: &[&str],
        v2: impl Fn(&[u8]) -> SealingKey,
        v1: impl Fn(&[u8]) -> V,
    ) -> Self {
        let (current, previous) = secrets.split_first().expect("a keyring has a current secret");
        let sealing = v2(current.as_bytes());
        let mut openers: Vec<SealingKey> = previous.iter().map(|s| v2(s.as_bytes())).collect();
        openers.extend(secrets.iter().filter_map(|s| v1(s.as_bytes()).into()));
        Keyring { sealing, openers }
    }

    /// Encrypts and authenticates `plaintext` together with `aad` (which is not stored: the reader
    /// names it again), in the `v2` format. `nonce` must be fresh random bytes for every call.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8], nonce: [u8; NONCE_BYTES]) -> Sealed {
        let ciphertext = self
            .sealing
            .cipher()
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad })
            .expect("AES-GCM seals any message a worker can hold");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&ciphertext);
        let id = self.sealing.id.as_deref().expect("a sealing key has an id");
        Sealed(format!("{FORMAT_V2}{id}.{}", base64url(&bytes)))
    }

    /// The plaintext, or `None` when the value is not in a known format, was sealed under a key
    /// this ring does not hold or other associated data, or was changed.
    pub fn open(&self, sealed: &Sealed, aad: &[u8]) -> Option<Vec<u8>> {
        let text = sealed.as_str();
        if let Some(rest) = text.strip_prefix(FORMAT_V2) {
            let (id, body) = rest.split_once('.')?;
            let key =
                std::iter::once(&self.sealing).chain(&self.openers).find(|k| k.id.as_deref() == Some(id))?;
            key.decrypt(&from_base64url(body)?, aad)
        } else {
            let bytes = from_base64url(text.strip_prefix(FORMAT_V1)?)?;
            self.openers.iter().filter(|k| k.id.is_none()).find_map(|k| k.decrypt(&bytes, aad))
        }
    }

    /// Whether `sealed` is in the current format under the current secret (nothing to re-seal).
    pub fn is_current(&self, sealed: &Sealed) -> bool {
        let id = self.sealing.id.as_deref().unwrap_or_default();
        sealed
            .as_str()
            .strip_prefix(FORMAT_V2)
            .and_then(|rest| rest.strip_prefix(id))
            .is_some_and(|r| r.starts_with('.'))
    }

    /// The text a value sealed under the current secret starts with: `v2.<key id>.`.
    pub fn current_prefix(&self) -> String {
        format!("{FORMAT_V2}{}.", self.sealing.id.as_deref().unwrap_or_default())
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
    /// A stored text that claims to be sealed; [`Keyring::open`] decides whether it is.
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
    use crate::api_key;

    const PEPPER: &str = "pepper-of-at-least-32-bytes-length!!";
    const NEXT_PEPPER: &str = "the-next-pepper-of-32-bytes-length!!";
    const WEBHOOK_KEY: &str = "webhook-secrets-key-of-32-bytes-len!";
    const API_KEY: &str = "gh_s_0123456789abcdefghijABCDEFGHIJ0123456789";

    fn ring() -> Keyring {
        Keyring::for_responses(&[PEPPER], API_KEY)
    }

    /// A `v1` value as the previous version sealed it.
    fn seal_v1(key: &SealingKey, plaintext: &[u8], aad: &[u8], nonce: [u8; NONCE_BYTES]) -> Sealed {
        let mut bytes = nonce.to_vec();
        bytes.extend(
            key.cipher().encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad }).unwrap(),
        );
        Sealed(format!("{FORMAT_V1}{}", base64url(&bytes)))
    }

    #[test]
    fn round_trip_gives_back_the_plaintext_in_v2_with_the_peppers_key_id() {
        let sealed = ring().seal(br#"{"key":"gh_s_secret"}"#, b"aad", [7; NONCE_BYTES]);
        let prefix = format!("v2.{}.", key_id(PEPPER.as_bytes()));
        assert!(sealed.as_str().starts_with(&prefix) && !sealed.as_str().contains("gh_s_secret"));
        assert_eq!(ring().current_prefix(), prefix);
        assert_eq!(ring().open(&sealed, b"aad").unwrap(), br#"{"key":"gh_s_secret"}"#);
        assert!(ring().is_current(&sealed));
        assert_eq!(ring().open(&ring().seal(b"", b"", [0; NONCE_BYTES]), b"").unwrap(), b"");
    }

    #[test]
    fn key_ids_differ_by_secret_and_are_not_a_prefix_of_the_key_hash() {
        assert_eq!(key_id(PEPPER.as_bytes()).len(), 8);
        assert_ne!(key_id(PEPPER.as_bytes()), key_id(NEXT_PEPPER.as_bytes()));
        assert!(!api_key::hash(PEPPER.as_bytes(), API_KEY).starts_with(&key_id(PEPPER.as_bytes())));
    }

    #[test]
    fn each_nonce_gives_another_ciphertext() {
        let a = ring().seal(b"same", b"aad", [1; NONCE_BYTES]);
        let b = ring().seal(b"same", b"aad", [2; NONCE_BYTES]);
        assert_ne!(a, b);
        assert_eq!(ring().open(&a, b"aad"), ring().open(&b, b"aad"));
    }

    #[test]
    fn another_api_key_pepper_or_purpose_cannot_open() {
        let sealed = ring().seal(b"body", b"aad", [3; NONCE_BYTES]);
        let other_key = Keyring::for_responses(&[PEPPER], "gh_s_another-key-of-the-same-project-000000");
        assert_eq!(other_key.open(&sealed, b"aad"), None);
        assert_eq!(Keyring::for_responses(&[NEXT_PEPPER], API_KEY).open(&sealed, b"aad"), None);
        // The webhook secrets' ring, even one built on the same pepper, is neither.
        assert_eq!(Keyring::for_webhook_secrets(&[PEPPER], &[PEPPER]).open(&sealed, b"aad"), None);
    }

    #[test]
    fn a_rotated_pepper_keeps_old_values_readable_and_seals_new_ones_under_the_new_id() {
        let old = ring().seal(b"kept before the rotation", b"aad", [8; NONCE_BYTES]);
        let rotated = Keyring::for_responses(&[NEXT_PEPPER, PEPPER], API_KEY);
        assert_eq!(rotated.open(&old, b"aad").unwrap(), b"kept before the rotation");
        assert!(!rotated.is_current(&old));
        let new = rotated.seal(b"after", b"aad", [9; NONCE_BYTES]);
        assert!(new.as_str().starts_with(&format!("v2.{}.", key_id(NEXT_PEPPER.as_bytes()))));
        assert!(rotated.is_current(&new));
        // Once the previous pepper is removed, what it sealed no longer opens.
        assert_eq!(Keyring::for_responses(&[NEXT_PEPPER], API_KEY).open(&old, b"aad"), None);
    }

    #[test]
    fn tampered_ciphertext_key_id_or_other_associated_data_does_not_open() {
        let sealed = ring().seal(b"body", b"papi:idem:key_1:k-1", [4; NONCE_BYTES]);
        assert_eq!(ring().open(&sealed, b"papi:idem:key_1:k-2"), None);
        let prefix = ring().current_prefix();
        let bytes = from_base64url(&sealed.as_str()[prefix.len()..]).unwrap();
        for i in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[i] ^= 1;
            let changed = Sealed::from_stored(format!("{prefix}{}", base64url(&changed)));
            assert_eq!(ring().open(&changed, b"papi:idem:key_1:k-1"), None, "byte {i}");
        }
        let cut = Sealed::from_stored(format!("{prefix}{}", base64url(&bytes[..bytes.len() - 1])));
        assert_eq!(ring().open(&cut, b"papi:idem:key_1:k-1"), None);
        let other_id = Sealed::from_stored(format!("v2.00000000.{}", base64url(&bytes)));
        assert_eq!(ring().open(&other_id, b"papi:idem:key_1:k-1"), None);
        // A v2 body relabelled v1 is not opened by the v1 keys.
        let relabelled = Sealed::from_stored(format!("v1.{}", base64url(&bytes)));
        assert_eq!(ring().open(&relabelled, b"papi:idem:key_1:k-1"), None);
    }

    #[test]
    fn unknown_formats_and_garbage_do_not_open() {
        for text in
            ["", "v1.", "v1.!!!!", "v2.AAAA", "v2..AAAA", "v3.AAAA", "whsec_abc", "v1.AAAAAAAAAAAAAAAA"]
        {
            assert_eq!(ring().open(&Sealed::from_stored(text.into()), b""), None, "{text:?}");
        }
    }

    /// Values sealed with the nonce 0 by an independent implementation (Node's `crypto.hkdfSync`
    /// and `aes-256-gcm`) in the `v1` format: they stay readable until they expire or are
    /// re-sealed, so this test pins the old derivation and format.
    #[test]
    fn opens_v1_values_sealed_by_another_implementation() {
        let response = Sealed::from_stored("v1.AAAAAAAAAAAAAAAAyPytqqoN0K9RHr81jlHV6EWksbI".into());
        assert_eq!(ring().open(&response, b"papi:idem:key_1:k-1").unwrap(), b"kept");
        let rotated = Keyring::for_responses(&[NEXT_PEPPER, PEPPER], API_KEY);
        assert_eq!(rotated.open(&response, b"papi:idem:key_1:k-1").unwrap(), b"kept");
        assert!(!ring().is_current(&response));
        let secret = Sealed::from_stored("v1.AAAAAAAAAAAAAAAAYDqGSVkqgIZNtHxCAtY8YShtOmjuHro".into());
        let webhooks = Keyring::for_webhook_secrets(&[WEBHOOK_KEY], &[PEPPER]);
        assert_eq!(webhooks.open(&secret, b"webhook:wh_1:secret").unwrap(), b"whsec_x");
        assert!(!webhooks.is_current(&secret));
    }

    /// What a storage reader holds (SPEC §19): every stored value. Each is tried as a key, as an
    /// HKDF pseudo-random key and as HKDF input, under every `info` of the code, in text, hex and
    /// base64url form. The `v1` response key falls to the key hash (the defect this format
    /// fixes); nothing opens a `v2` value.
    #[test]
    fn no_stored_value_derives_a_key_that_opens_a_v2_value() {
        let aad = b"papi:idem:key_1:k-1";
        let v1 =
            seal_v1(&SealingKey::responses_v1(PEPPER.as_bytes(), API_KEY), b"kept", aad, [5; NONCE_BYTES]);
        let v2 = ring().seal(b"kept", aad, [5; NONCE_BYTES]);
        let webhook_aad = b"webhook:wh_1:secret";
        let webhooks = Keyring::for_webhook_secrets(&[WEBHOOK_KEY], &[PEPPER]);
        let secret_v2 = webhooks.seal(b"whsec_x", webhook_aad, [6; NONCE_BYTES]);
        let stored = [
            api_key::hash(PEPPER.as_bytes(), API_KEY),
            key_id(PEPPER.as_bytes()),
            key_id(WEBHOOK_KEY.as_bytes()),
            "key_1".into(),
            "k-1".into(),
            String::from_utf8(aad.to_vec()).unwrap(),
            v2.as_str().into(),
            secret_v2.as_str().into(),
            API_KEY[..12].into(),
        ];
        let infos = [RESPONSES_INFO_V1, RESPONSES_INFO, WEBHOOK_SECRETS_INFO_V1, WEBHOOK_SECRETS_INFO, b""];
        let mut candidates: Vec<SealingKey> = Vec::new();
        for value in &stored {
            let forms = [
                Some(value.as_bytes().to_vec()),
                from_hex(value),
                from_base64url(value.rsplit('.').next().unwrap_or_default()),
            ];
            for bytes in forms.into_iter().flatten() {
                if let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) {
                    candidates.push(SealingKey { key, id: None });
                }
                for info in infos {
                    let mut key = [0u8; 32];
                    if let Ok(prk) = Hkdf::<Sha256>::from_prk(&bytes) {
                        prk.expand(info, &mut key).unwrap();
                        candidates.push(SealingKey { key, id: None });
                    }
                    candidates.push(SealingKey::derive(None, &bytes, info, None));
                    candidates.push(SealingKey::derive(Some(&bytes), &API_KEY.as_bytes()[..12], info, None));
                }
            }
        }
        let opens = |sealed: &Sealed, aad: &[u8]| {
            let text = sealed.as_str();
            let body = text.rsplit('.').next().unwrap();
            let bytes = from_base64url(body).unwrap();
            candidates.iter().any(|k| k.decrypt(&bytes, aad).is_some())
        };
        assert!(opens(&v1, aad), "the v1 key is the stored key hash: the check must find it");
        assert!(!opens(&v2, aad), "a stored value opens a v2 response");
        assert!(!opens(&secret_v2, webhook_aad), "a stored value opens a v2 webhook secret");
        // Nor does the pepper itself, for responses (they need the API key).
        let pepper_keys = infos.map(|info| SealingKey::derive(None, PEPPER.as_bytes(), info, None));
        let body = from_base64url(v2.as_str().rsplit('.').next().unwrap()).unwrap();
        assert!(pepper_keys.iter().all(|k| k.decrypt(&body, aad).is_none()));
    }

    fn from_hex(text: &str) -> Option<Vec<u8>> {
        let digits = text.as_bytes();
        (digits.len().is_multiple_of(2) && text.bytes().all(|b| b.is_ascii_hexdigit())).then(|| {
            digits
                .chunks(2)
                .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
                .collect()
        })
    }

    #[test]
    fn debug_output_never_prints_the_key_or_the_value() {
        let shown = format!("{:?}", ring());
        assert!(shown.contains("[redacted]") && !shown.contains("key: ["), "{shown}");
        let sealed = ring().seal(b"body", b"", [5; NONCE_BYTES]);
        assert!(!format!("{sealed:?}").contains(sealed.as_str()));
    }
}
