//! The I/O that `app/` needs, as small app-owned traits. The worker implements them in
//! `adapters/` over Durable Objects and D1; native tests implement them in memory.

#![allow(async_fn_in_trait)] // single-threaded (wasm) futures: no `Send` bound wanted

use std::cell::Cell;

use crate::core::api_key::KeyRecord;
use crate::core::page::PageRequest;
use crate::core::rate_limit::{Usage, Verdict};

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

/// A valid key and the rate decision its guard made for this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub key: KeyRecord,
    pub verdict: Verdict,
    pub usage: Usage,
}

/// What the guard of a key says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    Admitted(Box<Admission>),
    /// No key has this hash, or it is revoked: both are 401 to the client.
    Denied,
}

/// The per-key Durable Object (SPEC §1 `KEY_GUARD`): one round trip per authenticated request.
pub trait KeyGuard {
    /// Authenticates the key and makes the rate and quota decision for one request.
    async fn authorize(&self, key_hash: &str) -> Result<Authorization, PortError>;
    /// Drops what the guard remembers of the key, so a revocation or change applies at once.
    async fn invalidate(&self, key_hash: &str) -> Result<(), PortError>;
    /// Counts a failed authentication from a client address; `RateLimited` once it has too many.
    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked(KeyRecord),
    AlreadyRevoked(KeyRecord),
    /// The project would be left without an active owner key.
    LastOwnerKey,
    NotFound,
}

/// What a key's owner may change (`PATCH /public/v1/keys/{id}`); `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChanges {
    pub name: Option<Option<String>>,
    pub plan: Option<String>,
    pub rate_limit_per_minute: Option<Option<u32>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyUpdate {
    Updated(KeyRecord),
    Revoked,
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
    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError>;
    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError>;
    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError>;
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError>;
}

/// The request's body, read only once the route, the caller and the declared size allow it.
pub trait RequestBody {
    /// `Content-Length`, when the client sent one.
    fn declared_len(&self) -> Option<u64>;
    async fn read(self) -> Result<Vec<u8>, PortError>;
}

/// Counts the I/O one request makes, for the per-request log line: the hot-path budget of
/// SPEC §12 is checked against it. Adapters made for a request share one meter.
#[derive(Debug, Default)]
pub struct Meter {
    pub durable_object_calls: Cell<u32>,
    pub d1_queries: Cell<u32>,
    pub kv_operations: Cell<u32>,
}

impl Meter {
    pub fn count(counter: &Cell<u32>) {
        counter.set(counter.get() + 1);
    }
}
