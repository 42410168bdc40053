//! The [`ResponseStore`] port over Workers KV (`IDEMPOTENCY`): completed idempotent responses
//! under `papi:idem:{apiKeyId}:{key}`, expiring after `IDEMPOTENCY_TTL_SECONDS`.

use std::rc::Rc;

use worker::kv::KvStore;

use crate::adapters::deadline::within;
use gatehouse_core::idempotency::{Entry, KeptResponse};
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{Meter, PortError, ResponseStore};

pub const BINDING: &str = "IDEMPOTENCY";
/// Workers KV refuses an `expirationTtl` below 60 seconds.
const KV_MIN_TTL_SECONDS: u64 = 60;

pub struct KvResponses {
    kv: KvStore,
    ttl_seconds: u64,
    meter: Rc<Meter>,
}

impl KvResponses {
    pub fn new(kv: KvStore, ttl_seconds: u64, meter: Rc<Meter>) -> Self {
        Self { kv, ttl_seconds: ttl_seconds.max(KV_MIN_TTL_SECONDS), meter }
    }
}

impl ResponseStore for KvResponses {
    async fn put(&self, entry: Entry<'_>, response: &KeptResponse) -> Result<(), PortError> {
        Meter::count(&self.meter.kv_operations);
        let value = serde_json::to_string(response).map_err(PortError::from_display)?;
        let put = self
            .kv
            .put(&entry.storage_key(), value)
            .map_err(PortError::from_display)?
            .expiration_ttl(self.ttl_seconds)
            .execute();
        within(deadline::KV_MS, "KV put", async { put.await.map_err(PortError::from_display) }).await
    }

    async fn get(&self, entry: Entry<'_>) -> Result<Option<KeptResponse>, PortError> {
        Meter::count(&self.meter.kv_operations);
        let get = self.kv.get(&entry.storage_key()).json();
        within(deadline::KV_MS, "KV get", async { get.await.map_err(PortError::from_display) }).await
    }
}
