//! What a rotation of `KEY_PEPPER` or `WEBHOOK_SECRETS_KEY` has not reached yet (SPEC §26), and
//! the re-hash that moves a key to the current pepper on its first use.

use super::PortError;
use crate::api_key::KeyRecord;
use crate::page::PageRequest;
use crate::webhook::StoredSecret;

/// A subscription and its stored secret (SPEC §26: one not sealed under the current key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub id: String,
    pub project_id: String,
    pub url: String,
    pub status: String,
    pub created_at: i64,
    pub secret: StoredSecret,
}

/// Keys and subscriptions by the secret they are under.
pub trait Rotations {
    /// Re-hashes key `id` from `from` to `to`, its hash under the current pepper (whose id is
    /// `pepper`), keeping the name of its guard: answers the record as re-hashed, or `None` when
    /// its hash is not `from` any more (re-hashed already by another request).
    async fn rehash_key(
        &self,
        id: &str,
        from: &str,
        to: &str,
        pepper: &str,
    ) -> Result<Option<KeyRecord>, PortError>;
    /// How many active keys (neither revoked nor expired at `now_ms`) are not known to be hashed
    /// under `pepper` (made before keys recorded theirs, or under another), and a page of them,
    /// newest first.
    async fn keys_off_pepper(
        &self,
        pepper: &str,
        now_ms: i64,
        page: &PageRequest,
    ) -> Result<(u64, Vec<KeyRecord>), PortError>;
    /// How many subscriptions hold a secret not sealed with `current_prefix` (the current
    /// `WEBHOOK_SECRETS_KEY`'s), and a page of them, newest first.
    async fn secrets_off_key(
        &self,
        current_prefix: &str,
        page: &PageRequest,
    ) -> Result<(u64, Vec<SealedSecret>), PortError>;
}
