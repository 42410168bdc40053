//! The signatures of an attempt (SPEC §10): Standard Webhooks' `webhook-signature` and our
//! body signature, and the headers that carry them.

use hmac::{Hmac, Mac};
use sha2::Sha256;

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

/// `{prefix}-Signature`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn body_signature(key: &[u8], body: &str) -> String {
    format!("sha256={}", hex(&hmac(key, &[body.as_bytes()])))
}

/// The headers of one attempt (SPEC §10), in order. `keys` are the subscription's signing keys,
/// the current one first and, during a rotation's grace, the previous one after it (SPEC §17):
/// `webhook-signature` carries one `v1,` entry per key, space-separated, in that order; the
/// prefixed body signature uses the current key only.
pub fn headers(
    prefix: &str,
    keys: &[Vec<u8>],
    delivery_id: &str,
    timestamp: i64,
    event: &str,
    request_id: &str,
    body: &str,
) -> Vec<(String, String)> {
    let current = keys.first().map_or(&[][..], Vec::as_slice);
    let signatures: Vec<String> =
        keys.iter().map(|key| standard_signature(key, delivery_id, timestamp, body)).collect();
    vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), delivery_id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), signatures.join(" ")),
        (format!("{prefix}-Event"), event.into()),
        (format!("{prefix}-Request-Id"), request_id.into()),
        (format!("{prefix}-Signature"), body_signature(current, body)),
    ]
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
        let h = headers("X-Gatehouse", std::slice::from_ref(&key), ID, TS, "contact.created", "req-1", BODY);
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
        let h = headers("X-Gatehouse", &[new.clone(), old.clone()], ID, TS, "contact.created", "r", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
        let expected =
            format!("{} {}", standard_signature(&new, ID, TS, BODY), standard_signature(&old, ID, TS, BODY));
        assert_eq!(get("webhook-signature"), expected);
        assert_eq!(get("X-Gatehouse-Signature"), body_signature(&new, BODY));
    }
}
