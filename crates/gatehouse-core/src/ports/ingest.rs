//! Ingestion (SPEC §7): the event ledger, the events queue, and events, links and
//! session-recording segments in D1 and R2.

use super::PortError;
use crate::event_log::EventFilter;
use crate::events::EventMessage;
use crate::events::EventRecord;
use crate::ledger::shards::ShardAnswer;
use crate::page::PageRequest;

/// One reserve (see [`EventLedger::reserve`]): `owner`'s `ids` on `shard` of `namespace`, whose
/// `ancestors` are the shards it split from, nearest first.
#[derive(Debug, Clone, Copy)]
pub struct ReserveCall<'a> {
    pub namespace: &'a str,
    pub shard: &'a str,
    pub ancestors: &'a [String],
    pub owner: &'a str,
    pub ids: &'a [String],
}

/// Strongly consistent memory of the event ids accepted per namespace (SPEC §7), within the
/// window, one object per shard (see `core::ledger::shards`).
pub trait EventLedger {
    /// In one atomic step per id: reserve it for `owner` unless it was accepted within the window
    /// or another request holds it. Answers one decision per id, in order, or that the shard has
    /// split (`core::ledger::shards`) — and, when it has, forwarded them to its children in
    /// the namespace (`core::ledger::forward`).
    async fn reserve(&self, call: ReserveCall<'_>) -> Result<ShardAnswer, PortError>;
    /// The owner's events are queued: its reservations become accepted ids. Safe to repeat.
    async fn confirm(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError>;
    /// The owner's send failed: its reservations are dropped (else they lapse after their lease).
    async fn release(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError>;
}

/// The events queue (`EVENTS_QUEUE`): accepted events and identity links on their way to D1.
pub trait EventSink {
    /// Sends every message, or fails; a failure may have sent some (the consumer stores each
    /// event once, so a full retry is safe).
    async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError>;
}

/// Ingested data in D1: events and links from the queue, the index of session-recording segment
/// (their data is in R2).
pub trait EventStore {
    /// Stores each event and link once (a redelivered message changes nothing).
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError>;
    /// Whether the project has this session-recording segment already.
    async fn has_session_segment(&self, chunk: &SessionSegment<'_>) -> Result<bool, PortError>;
    /// Indexes a chunk whose object is written, unless it is indexed already (a concurrent copy);
    /// answers whether it was new.
    async fn index_session_segment(
        &self,
        chunk: &SessionSegment<'_>,
        bytes: usize,
        now_ms: i64,
    ) -> Result<bool, PortError>;
    /// The project's stored events that `filter` admits, newest first, up to `page.fetch_len()`
    /// after its cursor (SPEC §24, [`crate::event_log`]).
    async fn list_events(
        &self,
        project_id: &str,
        filter: &EventFilter,
        page: &PageRequest,
    ) -> Result<Vec<EventRecord>, PortError>;
    /// Deletes up to `limit` events received before `before_ms` (any project); answers how many.
    async fn purge_events(&self, before_ms: i64, limit: u32) -> Result<u32, PortError>;
}

/// One chunk of a recorded session: unique per (project, session, chunk number).
#[derive(Debug, Clone, Copy)]
pub struct SessionSegment<'a> {
    pub project_id: &'a str,
    pub session_id: &'a str,
    pub chunk: u32,
}
