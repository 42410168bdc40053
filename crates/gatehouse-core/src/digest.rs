//! Signed, chained digests of a project's audit archive (SPEC §22): what a digest holds, where it
//! is kept, and how it is signed. The format is `gatehouse_wire::digests`; the SDK verifies it.
//!
//! What an attacker may hold, and what does not suffice: write access to the R2 bucket (change,
//! add, remove or reorder objects and rows, remove or rewrite digests) without the signing key.
//! Every object's bytes are pinned by a SHA-256 in a signed digest, every digest by the next
//! one's link, and every period has a digest (an empty one when nothing was archived), so any
//! such change is either a hash that no longer matches, a signature that does not verify, a link
//! that does not match, an object no digest lists, or a missing digest. Holding the signing key
//! (`AUDIT_SIGNING_KEY`) is outside this promise: whoever holds it can sign a new history.

use ed25519_dalek::{Signer, SigningKey};
use gatehouse_wire::digests::{AuditDigest, SignedHead};
use sha2::{Digest, Sha256};

use crate::encoding::{base64, hex};

/// The signature algorithm digests name.
pub const ALGORITHM: &str = "ed25519";
/// The digest format's version.
pub const VERSION: u32 = 1;

/// The key digests are signed with: derived from the secret `AUDIT_SIGNING_KEY` (32 random bytes,
/// `config` refuses anything else: the public key is published, so a guessable secret would let
/// anyone sign), so rotating it starts a new key.
pub struct AuditSigner(SigningKey);

impl AuditSigner {
    pub fn from_secret(secret: &str) -> Self {
        let seed: [u8; 32] =
            Sha256::digest(format!("gatehouse audit digest signing key v1\n{secret}")).into();
        AuditSigner(SigningKey::from_bytes(&seed))
    }

    /// The public key, base64 of its 32 bytes (what `GET /public/v1/audit/public-key` shows).
    pub fn public_key(&self) -> String {
        base64(self.0.verifying_key().as_bytes())
    }

    /// The digest signed, and the bytes of its file (its JSON and a newline). Ed25519 signatures
    /// are deterministic: the same digest makes the same file, so a digest written again (a run
    /// that stopped before it recorded its work) is the same object.
    pub fn sign(&self, mut digest: AuditDigest) -> (AuditDigest, Vec<u8>) {
        digest.algorithm = ALGORITHM.into();
        digest.public_key = self.public_key();
        digest.signature = None;
        let signature = self.0.sign(&digest.signed_bytes());
        digest.signature = Some(base64(&signature.to_bytes()));
        let mut file = serde_json::to_vec(&digest).expect("a digest serialises");
        file.push(b'\n');
        (digest, file)
    }
}

impl AuditSigner {
    /// A chain head signed as `GET /public/v1/audit/head` answers it (SPEC §23).
    pub fn sign_head(&self, mut head: SignedHead) -> SignedHead {
        head.algorithm = ALGORITHM.into();
        head.public_key = self.public_key();
        head.signature = None;
        let signature = self.0.sign(&head.signed_bytes());
        head.signature = Some(base64(&signature.to_bytes()));
        head
    }
}

/// `audit/{project}/digest/{period start, RFC 3339}.json`.
pub fn digest_key(project_id: &str, period_start_ms: i64) -> String {
    format!(
        "{}digest/{}.json",
        crate::archive::project_prefix(Some(project_id)),
        crate::time::rfc3339(period_start_ms)
    )
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The start of the digest period of `period_ms` that holds `ms`.
pub fn period_start(ms: i64, period_ms: i64) -> i64 {
    ms.div_euclid(period_ms) * period_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};
    use gatehouse_wire::digests::{DigestedObject, PreviousDigest};

    fn digest() -> AuditDigest {
        AuditDigest {
            version: VERSION,
            project_id: "prj_1".into(),
            period_start: "2026-12-02T10:00:00.000Z".into(),
            period_end: "2026-12-02T11:00:00.000Z".into(),
            made_at: None,
            objects: vec![DigestedObject {
                key: "audit/prj_1/2026-12-02/1795900000000-r1.ndjson.gz".into(),
                sha256: sha256_hex(b"object"),
                rows: 2,
                first_request_id: "r1".into(),
                last_request_id: "r2".into(),
            }],
            previous: Some(PreviousDigest { key: digest_key("prj_1", 0), sha256: sha256_hex(b"before") }),
            algorithm: String::new(),
            public_key: String::new(),
            signature: None,
        }
    }

    #[test]
    fn a_digest_verifies_under_its_public_key_and_under_no_other_and_not_once_changed() {
        let signer = AuditSigner::from_secret("audit-signing-key-0123");
        let (signed, file) = signer.sign(digest());
        assert_eq!(signer.sign(digest()).1, file, "deterministic");
        let parsed: AuditDigest = serde_json::from_slice(&file).unwrap();
        assert_eq!(parsed, signed);
        let key_bytes: [u8; 32] =
            crate::encoding::from_base64(&signer.public_key()).unwrap().try_into().unwrap();
        let key = VerifyingKey::from_bytes(&key_bytes).unwrap();
        let signature: [u8; 64] =
            crate::encoding::from_base64(parsed.signature.as_deref().unwrap()).unwrap().try_into().unwrap();
        let signature = Signature::from_bytes(&signature);
        assert!(key.verify(&parsed.signed_bytes(), &signature).is_ok());
        let mut changed = parsed.clone();
        changed.objects[0].rows = 3;
        assert!(key.verify(&changed.signed_bytes(), &signature).is_err());
        let other = AuditSigner::from_secret("another-signing-key-0123");
        assert_ne!(other.public_key(), signer.public_key());
        // A field added after signing is refused when read.
        let mut text = String::from_utf8(file).unwrap();
        text.insert_str(1, r#""note":"x","#);
        assert!(serde_json::from_str::<AuditDigest>(&text).is_err());
    }

    #[test]
    fn digest_keys_and_periods() {
        assert_eq!(
            digest_key("prj_1", 1_795_903_200_000),
            "audit/prj_1/digest/2026-11-28T22:00:00.000Z.json"
        );
        assert_eq!(period_start(1_795_903_259_999, 60_000), 1_795_903_200_000);
    }
}
