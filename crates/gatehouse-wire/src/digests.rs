//! Signed, chained digests of a project's audit archive (SPEC §22), as stored in R2 at
//! `audit/{project}/digest/{period start}.json` and read back by `gatehouse logs verify`.
//!
//! A digest lists every archive object of the project that no earlier digest listed (an object
//! written late, for an earlier period, is listed by the first digest made after it), with the
//! SHA-256 of its stored bytes, its row count and its first and last `request_id`; it names the
//! previous digest and that digest's SHA-256, so a removed or replaced digest breaks the chain;
//! periods without objects are covered too (one digest spans a run of them: a project that is
//! idle costs nothing per period), so a gap cannot hide. The signature is Ed25519 over the
//! digest's JSON as written with `signature` left out: the fields below, in this order.

use serde::{Deserialize, Serialize};

/// A digest file. Unknown fields are refused: a field added after signing is a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditDigest {
    /// `1`.
    pub version: u32,
    pub project_id: String,
    /// The period it closes (RFC 3339, UTC): `[period_start, period_end)`.
    pub period_start: String,
    pub period_end: String,
    /// When it was made (RFC 3339; digests made before SPEC §23 have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_at: Option<String>,
    /// The objects it covers, by key.
    pub objects: Vec<DigestedObject>,
    /// The digest of the period before (`None` only for a project's first).
    pub previous: Option<PreviousDigest>,
    /// `ed25519`.
    pub algorithm: String,
    /// The signing key's public half (base64 of its 32 bytes).
    pub public_key: String,
    /// Base64 of the 64-byte Ed25519 signature; left out of what is signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// One archive object as a digest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestedObject {
    pub key: String,
    /// Hex SHA-256 of the object's bytes as stored (gzip).
    pub sha256: String,
    pub rows: u64,
    pub first_request_id: String,
    pub last_request_id: String,
}

/// The link to the digest before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviousDigest {
    pub key: String,
    /// Hex SHA-256 of that digest file's bytes.
    pub sha256: String,
}

/// `GET /public/v1/audit/public-key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPublicKey {
    /// `ed25519`.
    pub algorithm: String,
    /// Base64 of the 32-byte public key.
    pub public_key: String,
}

impl AuditDigest {
    /// The bytes the signature covers: this digest's JSON without `signature`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let unsigned = AuditDigest { signature: None, ..self.clone() };
        serde_json::to_vec(&unsigned).expect("a digest serialises")
    }
}

/// `GET /public/v1/audit/digests?from&to`: the project's digests, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestList {
    pub data: Vec<ListedDigest>,
    /// More digests in the range than one answer holds (ask again from the last one's end).
    pub more: bool,
}

/// A digest as the listing shows it: the period it closes and where its file is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedDigest {
    pub period_start: String,
    pub period_end: String,
    pub key: String,
    pub sha256: String,
    pub objects: u32,
}

/// `GET /public/v1/audit/objects?from&to`: the project's archive objects whose first row is in
/// the range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedObjects {
    pub data: Vec<ArchivedObject>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedObject {
    pub key: String,
    pub size: u64,
}

/// `GET /public/v1/audit/head`: the project's chain head as the gateway holds it where no D1 or R2
/// writer can reach (SPEC §23), signed at `as_of` with the digests' key: the newest digest (none
/// yet: `digest_key` and `digest_sha256` empty) and the objects archived since that no digest
/// lists yet. A verifier that finds another newest digest in storage than this one has found a
/// history cut off; one whose `oldest_pending` is older than the documented lag has found digests
/// that stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedHead {
    pub project_id: String,
    /// When the gateway read the head (RFC 3339).
    pub as_of: String,
    /// Whether the chain has started in its head: `false` for a project whose digests (if any)
    /// were all made before SPEC §23 — then the listing alone is the chain, as it was.
    pub started: bool,
    /// Digests in the chain.
    pub sequence: u64,
    /// The end of the newest digest's span: everything archived before is digested.
    pub covered_to: String,
    pub digest_key: String,
    pub digest_sha256: String,
    /// Objects archived and not yet digested, and the first row time of the oldest (RFC 3339).
    pub pending_objects: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending: Option<String>,
    pub algorithm: String,
    pub public_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl SignedHead {
    /// What the signature covers: the head's JSON as written with `signature` left out.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let unsigned = SignedHead { signature: None, ..self.clone() };
        serde_json::to_vec(&unsigned).expect("a head serialises")
    }
}
