//! Fakes of ingestion's ports: the sharded event ledger (the real reserve decision of `core`), the
//! events queue, and the events table of the D1 store (unique on project, key type, event id).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use super::gateway::Clock;
use super::FakeStore;
use crate::sim::Faults;
use futures_util::future::{FutureExt, LocalBoxFuture};
use gatehouse_core::event_log::{self, EventFilter};
use gatehouse_core::events::{EventMessage, EventRecord, Link};
use gatehouse_core::ledger::forward::ForwardTo;
use gatehouse_core::ledger::shards::{
    check_here, reserve_here, Checked, MemoryShard, ShardAnswer, ShardMemory, ShardRules,
};
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{EventLedger, EventSink, EventStore, PortError, ReserveCall, SessionSegment};

/// Every shard of the ledger by name, each deciding as the object does (`core::ledger::shards`),
/// splitting above `split_above` calls a second of the fake clock.
pub struct FakeLedger {
    pub faults: Rc<Faults>,
    pub clock: Clock,
    pub window_ms: i64,
    pub split_above: u32,
    pub shards: RefCell<HashMap<String, Rc<MemoryShard>>>,
    /// Reserve calls from the gateway (not those a split shard forwarded).
    pub reserve_calls: Cell<u64>,
}

impl FakeLedger {
    fn shard(&self, name: &str) -> Rc<MemoryShard> {
        self.shards.borrow_mut().entry(name.to_owned()).or_default().clone()
    }

    fn rules(&self, ancestors: &[String]) -> ShardRules {
        let level = ancestors.len().min(usize::from(u8::MAX)) as u8;
        ShardRules {
            level,
            now_ms: self.clock.get(),
            window_ms: self.window_ms,
            split_above: self.split_above,
        }
    }

    /// A shard asking its nearest ancestor (a call that may fail like any other). Directly, not
    /// through the object's batched checks (`core::ledger::shards::ParentChecks`): here an
    /// object's work runs inside the calling request's flow, which the simulation may abandon
    /// undropped, and the calls waiting for an abandoned batch would hang (in the worker the check
    /// runs in the object's own request, and its call to the parent has a deadline). The batching
    /// is unit-tested in core and driven at scale by the platform model (`big-project`).
    fn ask<'a>(
        &'a self,
        ancestors: &'a [String],
    ) -> Option<impl FnOnce(Vec<String>) -> LocalBoxFuture<'a, Result<Checked, PortError>> + 'a> {
        let (parent, rest) = ancestors.split_first()?;
        Some(move |ids: Vec<String>| {
            async move {
                let memory = self.shard(parent);
                let check = check_here(&*memory, self.rules(rest), &ids, self.ask(rest));
                let held = self.faults.run_async("ledger.check", check).await??;
                Ok((held, memory.split_at()))
            }
            .boxed_local()
        })
    }
}

impl FakeLedger {
    /// One shard's reserve, as its object runs it: forwarded to its children once it has split
    /// (each forward a call that may fail like any other).
    fn reserve_at<'a>(&'a self, call: ReserveCall<'a>) -> LocalBoxFuture<'a, Result<ShardAnswer, PortError>> {
        async move {
            let memory = self.shard(call.shard);
            let rules = self.rules(call.ancestors);
            let reserve = reserve_here(&*memory, rules, call.owner, call.ids, self.ask(call.ancestors));
            let answer = self.faults.run_async("ledger.reserve", reserve).await??;
            let Some(plan) = ForwardTo::plan(call.namespace, rules.level, call.ancestors, call.ids)
                .filter(|_| answer == ShardAnswer::Moved)
            else {
                return Ok(answer);
            };
            let calls = plan.children.iter().map(|c| {
                self.reserve_at(ReserveCall { shard: &c.name, ancestors: &c.ancestors, ids: &c.ids, ..call })
            });
            let answers = futures_util::future::try_join_all(calls).await?;
            plan.answer(answers).map_err(PortError)
        }
        .boxed_local()
    }
}

impl EventLedger for FakeLedger {
    async fn reserve(&self, call: ReserveCall<'_>) -> Result<ShardAnswer, PortError> {
        self.reserve_calls.set(self.reserve_calls.get() + 1);
        self.reserve_at(call).await
    }

    async fn confirm(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.faults.run("ledger.confirm", || self.shard(shard).confirm(owner, ids, self.clock.get())).await
    }

    async fn release(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.faults.run("ledger.release", || self.shard(shard).release(owner, ids)).await
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

    async fn list_events(
        &self,
        project_id: &str,
        filter: &EventFilter,
        page: &PageRequest,
    ) -> Result<Vec<EventRecord>, PortError> {
        self.faults
            .run("d1.list_events", || {
                let mut found: Vec<EventRecord> = self
                    .events
                    .events
                    .borrow()
                    .values()
                    .filter_map(|m| match m {
                        EventMessage::Event(e) => Some(e.clone()),
                        EventMessage::Link(_) => None,
                    })
                    .filter(|e| e.project_id == project_id && filter.matches(e))
                    .filter(|e| page.after.as_ref().is_none_or(|c| event_log::is_after(e, c)))
                    .collect();
                found.sort_by(|a, b| {
                    let key = |e: &EventRecord| (e.received_at, e.key_type.as_str(), e.event_id.clone());
                    key(b).cmp(&key(a))
                });
                found.truncate(page.fetch_len());
                found
            })
            .await
    }

    async fn purge_events(&self, before_ms: i64, limit: u32) -> Result<u32, PortError> {
        self.faults
            .run("d1.purge_events", || {
                let mut events = self.events.events.borrow_mut();
                let old: Vec<_> = events
                    .iter()
                    .filter(|(_, m)| matches!(m, EventMessage::Event(e) if e.received_at < before_ms))
                    .map(|(k, _)| k.clone())
                    .take(limit as usize)
                    .collect();
                for k in &old {
                    events.remove(k);
                }
                old.len() as u32
            })
            .await
    }
}

fn slot(c: &SessionSegment<'_>) -> (String, String, u32) {
    (c.project_id.to_owned(), c.session_id.to_owned(), c.chunk)
}
