//! The I/O that `gatehouse-app` needs, as small app-owned traits, one file per area. The worker
//! implements them in its `adapters/` over Durable Objects, D1, KV, R2 and Queues; `gatehouse-app`'s
//! fakes implement them in memory.

#![allow(async_fn_in_trait)] // single-threaded (wasm) futures: no `Send` bound wanted

mod audit;
mod ingest;
mod keys;
mod origin;
mod queues;
mod resources;
mod rotations;
mod wake;
mod webhooks;

use std::cell::Cell;

pub use audit::*;
pub use ingest::*;
pub use keys::*;
pub use origin::*;
pub use queues::*;
pub use resources::*;
pub use rotations::*;
pub use wake::*;
pub use webhooks::*;

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

/// The set of port implementations a `gatehouse_app::Gateway` runs over.
pub trait Ports {
    type Guard: KeyGuard + AuditHeads;
    type Store: Directory
        + Rotations
        + Resources
        + EventStore
        + AuditStore
        + WebhookStore
        + DigestStore
        + UsageStore;
    type Responses: ResponseStore;
    type Ledger: EventLedger;
    type Events: EventSink;
    type Archive: Archive;
    type Deliveries: DeliveryQueue;
    type Audit: AuditSink;
    type DeadLetters: DeadLetters;
    type Redrive: Redrive;
    type Origin: Origin;
    type Timer: Pause;
}

/// A timer of the request's own (the runtime's `setTimeout` in the worker; a yield in the fakes).
pub trait Pause {
    fn pause(&self, ms: u64) -> impl std::future::Future<Output = ()>;
}

/// Counts the I/O one request makes, for the per-request log line (the hot-path budget of
/// SPEC §12 is checked against it) and times its waits, for `Server-Timing` (SPEC §16). Adapters
/// made for a request share one meter.
#[derive(Debug, Default)]
pub struct Meter {
    pub durable_object_calls: Cell<u32>,
    pub d1_queries: Cell<u32>,
    pub kv_operations: Cell<u32>,
    /// Milliseconds waited on Durable Objects.
    pub durable_object_ms: Cell<i64>,
    /// Milliseconds waited on the origin (proxy mode), once it was called.
    pub origin_ms: Cell<Option<i64>>,
}

impl Meter {
    /// What the request spent in all (`total_ms`) and on its waits, for `Server-Timing`.
    pub fn spent(&self, total_ms: i64) -> crate::server_timing::Spent {
        let guard_ms = (self.durable_object_calls.get() > 0).then(|| self.durable_object_ms.get());
        crate::server_timing::Spent { total_ms, guard_ms, origin_ms: self.origin_ms.get() }
    }

    pub fn count(counter: &Cell<u32>) {
        counter.set(counter.get() + 1);
    }
}
