//! Fakes of ingestion's ports: the sharded event ledger (the real reserve decision of `core`), the
//! events queue, and the events table of the D1 store (unique on project, key type, event id).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use super::gateway::Clock;
use super::FakeStore;
use crate::sim::Faults;
use gatehouse_core::events::{reserve, EventMessage, Link, Reservation, Reserved};
use gatehouse_core::ports::{EventLedger, EventSink, EventStore, PortError, SessionSegment};

/// Every shard of the ledger: shard name → event id → reservation.
pub struct FakeLedger {
    pub faults: Rc<Faults>,
    pub clock: Clock,
    pub window_ms: i64,
    pub shards: RefCell<HashMap<String, HashMap<String, Reservation>>>,
}

impl EventLedger for FakeLedger {
    async fn reserve(&self, shard: &str, owner: &str, ids: &[String]) -> Result<Vec<Reserved>, PortError> {
        self.faults
            .run("ledger.reserve", || {
                let now = self.clock.get();
                let mut shards = self.shards.borrow_mut();
                let held = shards.entry(shard.to_owned()).or_default();
                ids.iter()
                    .map(|id| {
                        let decision = reserve(held.get(id), owner, now, self.window_ms);
                        if decision == Reserved::Fresh {
                            let fresh = Reservation { owner: owner.to_owned(), confirmed: false, at_ms: now };
                            held.insert(id.clone(), fresh);
                        }
                        decision
                    })
                    .collect()
            })
            .await
    }

    async fn confirm(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.faults
            .run("ledger.confirm", || {
                let now = self.clock.get();
                if let Some(held) = self.shards.borrow_mut().get_mut(shard) {
                    for id in ids {
                        if let Some(r) = held.get_mut(id).filter(|r| r.owner == owner && !r.confirmed) {
                            r.confirmed = true;
                            r.at_ms = now;
                        }
                    }
                }
            })
            .await
    }

    async fn release(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.faults
            .run("ledger.release", || {
                if let Some(held) = self.shards.borrow_mut().get_mut(shard) {
                    held.retain(|id, r| !(ids.contains(id) && r.owner == owner && !r.confirmed));
                }
            })
            .await
    }
}

/// The events queue: every message it took, in order (a redelivery is the consumer's business).
pub struct FakeEventQueue {
    pub faults: Rc<Faults>,
    pub sent: RefCell<Vec<EventMessage>>,
}

impl EventSink for FakeEventQueue {
    async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError> {
        for message in messages {
            let bytes = serde_json::to_string(message).map_or(usize::MAX, |s| s.len());
            super::over_limit("queue message", bytes, gatehouse_core::platform::QUEUE_MAX_MESSAGE_BYTES)?;
        }
        // A send of many messages may stop part-way: each part is its own call.
        for part in messages.chunks(2) {
            self.faults
                .run("queue.send_events", || self.sent.borrow_mut().extend(part.iter().cloned()))
                .await?;
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct EventTables {
    /// (project, key type, event id) → the event, as the unique index keeps them.
    pub events: RefCell<BTreeMap<(String, String, String), EventMessage>>,
    pub links: RefCell<BTreeSet<(String, String, String)>>,
    /// The index of session-recording segment: (project, session, chunk) → bytes.
    pub session_segments: RefCell<BTreeMap<(String, String, u32), usize>>,
}

impl EventStore for FakeStore {
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError> {
        self.faults
            .run("d1.store_events", || {
                for m in messages {
                    match m {
                        EventMessage::Event(e) => {
                            let slot =
                                (e.project_id.clone(), e.key_type.as_str().to_owned(), e.event_id.clone());
                            self.events.events.borrow_mut().entry(slot).or_insert_with(|| m.clone());
                        }
                        EventMessage::Link(Link { project_id, anonymous_id, user_id, .. }) => {
                            let link = (project_id.clone(), anonymous_id.clone(), user_id.clone());
                            self.events.links.borrow_mut().insert(link);
                        }
                    }
                }
            })
            .await
    }

    async fn has_session_segment(&self, c: &SessionSegment<'_>) -> Result<bool, PortError> {
        self.faults
            .run("d1.has_session_segment", || self.events.session_segments.borrow().contains_key(&slot(c)))
            .await
    }

    async fn index_session_segment(
        &self,
        c: &SessionSegment<'_>,
        bytes: usize,
        _: i64,
    ) -> Result<bool, PortError> {
        self.faults
            .run("d1.index_session_segment", || {
                let mut chunks = self.events.session_segments.borrow_mut();
                let new = !chunks.contains_key(&slot(c));
                chunks.entry(slot(c)).or_insert(bytes);
                new
            })
            .await
    }
}

fn slot(c: &SessionSegment<'_>) -> (String, String, u32) {
    (c.project_id.to_owned(), c.session_id.to_owned(), c.chunk)
}
