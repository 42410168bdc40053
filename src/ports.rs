//! The I/O that `app/` needs, as small app-owned traits. The worker implements them in
//! `adapters/` over Durable Objects and D1; native tests implement them in memory.

#![allow(async_fn_in_trait)] // single-threaded (wasm) futures: no `Send` bound wanted

use crate::core::api_key::KeyRecord;
use crate::core::page::PageRequest;

/// A dependency failed; the cause is for the log, the client gets 503.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortError(pub String);

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PortError {
    /// For `map_err`: any dependency's error, as text for the log.
    pub fn from_display(e: impl std::fmt::Display) -> Self {
        PortError(e.to_string())
    }
}

/// What the guard of a key says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    Granted(KeyRecord),
    /// No key has this hash, or it is revoked: both are 401 to the client.
    Denied,
}

/// The per-key Durable Object (SPEC §1 `KEY_GUARD`): one round trip per authenticated request.
pub trait KeyGuard {
    async fn authorize(&self, key_hash: &str) -> Result<Authorization, PortError>;
    /// Drops what the guard remembers of the key, so a revocation or change applies at once.
    async fn invalidate(&self, key_hash: &str) -> Result<(), PortError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked(KeyRecord),
    AlreadyRevoked(KeyRecord),
    /// The project would be left without an active owner key.
    LastOwnerKey,
    NotFound,
}

/// Projects and keys in D1.
pub trait Directory {
    async fn create_project(
        &self,
        project_id: &str,
        name: &str,
        created_at: i64,
        owner_key: &KeyRecord,
    ) -> Result<(), PortError>;
    async fn insert_key(&self, key: &KeyRecord) -> Result<(), PortError>;
    /// The project's keys, newest first, after the page's cursor.
    async fn list_keys(
        &self,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<KeyRecord>, PortError>;
    async fn revoke_key(
        &self,
        project_id: &str,
        key_id: &str,
        now_ms: i64,
    ) -> Result<Revocation, PortError>;
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError>;
}

/// The request's body, read only once the route, the caller and the declared size allow it.
pub trait RequestBody {
    /// `Content-Length`, when the client sent one.
    fn declared_len(&self) -> Option<u64>;
    async fn read(self) -> Result<Vec<u8>, PortError>;
}
