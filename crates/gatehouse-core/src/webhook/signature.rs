//! The signatures of an attempt (SPEC §10): Standard Webhooks' `webhook-signature` and our
//! body signature, and the headers that carry them.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::SigningKey;
use crate::encoding::{base64, hex};

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    parts.iter().for_each(|p| mac.update(p));
    mac.finalize().into_bytes().to_vec()
}

/// `webhook-signature` of Standard Webhooks: `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let ts = timestamp.to_string();
    format!("v1,{}", base64(&hmac(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()])))
}

/// `webhook-signature` of Standard Webhooks' asymmetric scheme: `v1a,` + base64 Ed25519 signature
/// over `id.timestamp.body` (SPEC §25).
pub fn asymmetric_signature(key: &ed25519_dalek::SigningKey, id: &str, timestamp: i64, body: &str) -> String {
    use ed25519_dalek::Signer;
    let signed = format!("{id}.{timestamp}.{body}");
    format!("v1a,{}", base64(&key.sign(signed.as_bytes()).to_bytes()))
}

/// `{prefix}-Signature`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn body_signature(key: &[u8], body: &str) -> String {
    format!("sha256={}", hex(&hmac(key, &[body.as_bytes()])))
}

/// One attempt's entry of `webhook-signature` under `key`.
fn signature(key: &SigningKey, id: &str, timestamp: i64, body: &str) -> String {
    match key {
        SigningKey::Hmac(key) => standard_signature(key, id, timestamp, body),
        SigningKey::Ed25519(key) => asymmetric_signature(key, id, timestamp, body),
    }
}

/// The headers of one attempt (SPEC §10), in order. `keys` are the subscription's signing keys,
/// the current one first and, during a rotation's grace, the previous one after it (SPEC §17):
/// `webhook-signature` carries one entry per key (`v1,` or `v1a,`), space-separated, in that
/// order; the prefixed body signature is an HMAC of the first HMAC key: the current one, or during
/// a switch to `v1a` the old secret until its grace ends (review M3). A `v1a` subscription's
/// receivers hold no shared secret: it has none after that.
pub fn headers(
    prefix: &str,
    keys: &[SigningKey],
    delivery_id: &str,
    timestamp: i64,
    event: &str,
    request_id: &str,
    body: &str,
) -> Vec<(String, String)> {
    let signatures: Vec<String> =
        keys.iter().map(|key| signature(key, delivery_id, timestamp, body)).collect();
    let mut headers = vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), delivery_id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), signatures.join(" ")),
        (format!("{prefix}-Event"), event.into()),
        (format!("{prefix}-Request-Id"), request_id.into()),
    ];
    let hmac = keys.iter().find_map(|key| match key {
        SigningKey::Hmac(secret) => Some(secret),
        SigningKey::Ed25519(_) => None,
    });
    if let Some(secret) = hmac {
        headers.push((format!("{prefix}-Signature"), body_signature(secret, body)));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::test_vectors::*;
    use crate::webhook::*;

    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";

    const TS: i64 = 1_674_087_231;

    const BODY: &str = r#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;

    #[test]
    fn signs_the_published_test_vector() {
        let key = signing_key(SECRET).unwrap();
        assert_eq!(key, (0u8..24).collect::<Vec<_>>());
        assert_eq!(standard_signature(&key, ID, TS, BODY), "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=");
        assert_eq!(
            body_signature(&key, BODY),
            "sha256=ecc8ca8aaeedd26fe81e1b60575d0af93f999d134ec87c72fbcf94d367a673a0"
        );
        assert_eq!(new_secret(&std::array::from_fn(|i| i as u8)), SECRET);
        assert_eq!(signing_key("sk_nope"), None);
    }

    #[test]
    fn attempt_headers_carry_both_signatures_and_the_prefix() {
        let key = signing_key(SECRET).unwrap();
        let h = headers(
            "X-Gatehouse",
            &[SigningKey::Hmac(key.clone())],
            ID,
            TS,
            "contact.created",
            "req-1",
            BODY,
        );
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("webhook-id"), Some(ID));
        assert_eq!(get("webhook-timestamp"), Some("1674087231"));
        assert_eq!(get("X-Gatehouse-Event"), Some("contact.created"));
        assert_eq!(get("X-Gatehouse-Request-Id"), Some("req-1"));
        assert!(get("X-Gatehouse-Signature").unwrap().starts_with("sha256="));
        assert_eq!(get("webhook-signature"), Some(standard_signature(&key, ID, TS, BODY).as_str()));
    }

    #[test]
    fn during_a_rotation_both_signatures_are_sent_new_first_and_the_body_signature_is_the_new_ones() {
        let old = signing_key(SECRET).unwrap();
        let new = vec![9u8; 24];
        let keys = [SigningKey::Hmac(new.clone()), SigningKey::Hmac(old.clone())];
        let h = headers("X-Gatehouse", &keys, ID, TS, "contact.created", "r", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
        let expected =
            format!("{} {}", standard_signature(&new, ID, TS, BODY), standard_signature(&old, ID, TS, BODY));
        assert_eq!(get("webhook-signature"), expected);
        assert_eq!(get("X-Gatehouse-Signature"), body_signature(&new, BODY));
    }

    /// SPEC §25: a `v1a` attempt is signed with Ed25519 over `id.timestamp.body`, verifiable with
    /// the public key alone (here ed25519-dalek's verifier; the e2e suite uses Node's); during a
    /// switch from `v1` both are sent, and only an HMAC current key makes the body signature.
    #[test]
    fn a_v1a_attempt_verifies_with_the_public_key_alone() {
        use ed25519_dalek::{Signature, Verifier, VerifyingKey};
        let secret = Scheme::V1a.new_secret(&std::array::from_fn(|i| i as u8));
        assert_eq!(secret, V1A_SECRET);
        let key = SigningKey::of(&secret).unwrap();
        let public = key.public_key().unwrap();
        let h = headers("X-Gatehouse", std::slice::from_ref(&key), ID, TS, "contact.created", "r", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("X-Gatehouse-Signature"), None);
        let sig = get("webhook-signature").unwrap();
        let sig = crate::encoding::from_base64(sig.strip_prefix("v1a,").unwrap()).unwrap();
        let pk: [u8; 32] =
            crate::encoding::from_base64(public.strip_prefix("whpk_").unwrap()).unwrap().try_into().unwrap();
        let verifier = VerifyingKey::from_bytes(&pk).unwrap();
        let signature = Signature::from_slice(&sig).unwrap();
        let signed = format!("{ID}.{TS}.{BODY}");
        assert!(verifier.verify(signed.as_bytes(), &signature).is_ok());
        assert!(verifier.verify(signed.replace("con_1", "con_2").as_bytes(), &signature).is_err());
        // The published v1a test vector (docs/api/webhooks.md).
        assert_eq!(public, V1A_PUBLIC_KEY);
        assert_eq!(
            asymmetric_signature(
                match &key {
                    SigningKey::Ed25519(k) => k,
                    _ => unreachable!(),
                },
                ID,
                TS,
                BODY
            ),
            V1A_SIGNATURE
        );
        // Switching from v1: the new v1a entry first, then the old HMAC one, and the body signature
        // of the old secret while it still signs (review M3).
        let old = SigningKey::of(SECRET).unwrap();
        let h = headers("X-Gatehouse", &[key, old], ID, TS, "contact.created", "r", BODY);
        let both = h.iter().find(|(k, _)| k == "webhook-signature").unwrap().1.clone();
        let entries: Vec<&str> = both.split(' ').collect();
        assert!(
            entries.len() == 2 && entries[0].starts_with("v1a,") && entries[1].starts_with("v1,"),
            "{both}"
        );
        let body = h.iter().find(|(k, _)| k == "X-Gatehouse-Signature").map(|(_, v)| v.clone());
        assert_eq!(body, Some(body_signature(&signing_key(SECRET).unwrap(), BODY)));
    }
}
