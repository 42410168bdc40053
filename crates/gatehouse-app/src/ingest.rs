//! Event ingestion (SPEC §7): track with per-item `event_id` de-duplication, identify, alias,
//! and session-recording segment.
//!
//! The order that makes `/v1/track` exact: reserve the batch's ids in the ledger (one atomic
//! check-and-remember per id, the shards called side by side), send the reserved events to the
//! queue, answer, and confirm the reservations after the response. Concurrent batches carrying
//! one id: exactly one reserves it, the others see it in flight (a retryable rejection) or, once
//! confirmed, a duplicate. A failed send releases the reservations and answers 500, so the full
//! retry is accepted; events a partial send did enqueue are stored once by the consumer anyway.
//! A reservation that is never confirmed (the isolate died) lapses after its lease.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{random, unavailable, Call, Gateway, Reply, Settlement};
use gatehouse_core::encoding::uuid_v4;
use gatehouse_core::error::ApiError;
use gatehouse_core::events::{
    check_id, check_traits, dedup_namespace, in_flight, recording_object_key, EventMessage, EventRecord,
    Link, Reserved, Source, TrackBatch, TrackItem, TrackOutcome,
};
use gatehouse_core::json_body;
use gatehouse_core::ledger::forward::Forwarded;
use gatehouse_core::ledger::shards::{LedgerLayout, Shard, ShardAnswer, MAX_LEVEL};
use gatehouse_core::ports::{
    Archive, EventLedger, EventSink, EventStore, PortError, Ports, ReserveCall, SessionSegment,
};

/// Ids one request reserved, per ledger shard: confirmed after the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservations {
    pub owner: String,
    pub shards: Vec<(String, Vec<String>)>,
}

impl Reservations {
    /// Makes the reservations accepted ids, every shard side by side; `confirm` retries one shard.
    pub async fn confirm<L: EventLedger>(&self, ledger: &L) -> Result<(), PortError> {
        let confirmed =
            join_all(self.shards.iter().map(|(shard, ids)| ledger.confirm(shard, &self.owner, ids)));
        confirmed.await.into_iter().collect()
    }

    /// Drops the reservations (best effort: they lapse after their lease anyway).
    async fn release<L: EventLedger>(&self, ledger: &L) {
        join_all(self.shards.iter().map(|(shard, ids)| ledger.release(shard, &self.owner, ids))).await;
    }
}

/// Sorts validated events into fresh, duplicate and in flight, sends the fresh ones, and answers
/// the reservations to confirm. Events with a server-made id cannot be duplicates. An id twice in
/// one batch counts once. `Err` means nothing was accepted and nothing stays reserved (or it
/// lapses).
pub async fn accept_events<L: EventLedger, Q: EventSink>(
    ledger: &L,
    layout: &RefCell<LedgerLayout>,
    sink: &Q,
    namespace: &str,
    owner: &str,
    events: Vec<(usize, EventRecord)>,
    outcome: &mut TrackOutcome,
) -> Result<Reservations, PortError> {
    let mut pending = Vec::new();
    let mut in_batch = HashSet::new();
    for (_, e) in events.iter().filter(|(_, e)| !e.generated_id) {
        if in_batch.insert(e.event_id.as_str()) {
            pending.push(e.event_id.clone());
        }
    }
    let mut reservations = Reservations { owner: owner.to_owned(), shards: Vec::new() };
    let mut decided: HashMap<String, Reserved> = HashMap::new();
    // Every shard called, for the release when one fails (also one whose answer was lost).
    let mut attempted = Vec::new();
    let mut failure = None;
    // A split shard forwards the ids to its children and answers where each was decided, and
    // which shards have split (`core::ledger::forward`): one round, one call per shard this
    // isolate knows. Each further round sends the ids a shard of an older version answered
    // `moved` for to its children: one round per level (SPEC §20 "Big projects"), twice over if
    // the isolate forgot its splits meanwhile.
    for _ in 0..2 * (usize::from(MAX_LEVEL) + 1) {
        if pending.is_empty() {
            break;
        }
        let mut by_shard: BTreeMap<String, (Shard, Vec<String>)> = BTreeMap::new();
        for id in pending.drain(..) {
            let shard = layout.borrow().shard_for(namespace, &id);
            by_shard.entry(shard.name(namespace)).or_insert_with(|| (shard, Vec::new())).1.push(id);
        }
        let answers = join_all(by_shard.iter().map(|(name, (shard, ids))| async move {
            let ancestors = shard.ancestors(namespace);
            ledger.reserve(ReserveCall { namespace, shard: name, ancestors: &ancestors, owner, ids }).await
        }))
        .await;
        for ((name, (_, ids)), answer) in by_shard.into_iter().zip(answers) {
            // A shard's own decisions, or those of the children it forwarded them to.
            let placed = match answer {
                Ok(ShardAnswer::Moved) => {
                    layout.borrow_mut().learn_split(&name);
                    pending.extend(ids);
                    continue;
                }
                Ok(ShardAnswer::Decided(decisions)) => Forwarded::decided_at(&name, decisions),
                Ok(ShardAnswer::Forwarded(f)) => f,
                Err(e) => {
                    failure = Some(e);
                    attempted.push((name, ids));
                    continue;
                }
            };
            if placed.decisions.len() != ids.len() || placed.at.len() != ids.len() {
                let answered = placed.decisions.len();
                failure = Some(PortError(format!("event ledger answered {answered} of {} ids", ids.len())));
                attempted.push((name, ids));
                continue;
            }
            placed.split.iter().for_each(|s| layout.borrow_mut().learn_split(s));
            decided.extend(ids.iter().cloned().zip(placed.decisions.iter().copied()));
            // Each id where it was decided: confirmed or released there.
            for (at, asked, fresh) in placed.placed(&ids) {
                if !fresh.is_empty() {
                    reservations.shards.push((at.clone(), fresh));
                }
                attempted.push((at, asked));
            }
        }
        if failure.is_some() {
            break;
        }
    }
    if failure.is_none() && !pending.is_empty() {
        failure = Some(PortError("event ledger: a shard of the deepest level answered moved".into()));
    }
    if let Some(e) = failure {
        // A release only touches this request's unconfirmed reservations.
        Reservations { owner: owner.to_owned(), shards: attempted }.release(ledger).await;
        return Err(e);
    }
    let mut first_of_batch = HashSet::new();
    let mut fresh = Vec::new();
    for (index, event) in events {
        let decision = if event.generated_id {
            Reserved::Fresh
        } else if !first_of_batch.insert(event.event_id.clone()) {
            Reserved::Duplicate
        } else {
            decided[event.event_id.as_str()]
        };
        match decision {
            Reserved::Fresh => {
                outcome.accepted.push((index, event.event_id.clone()));
                fresh.push(EventMessage::Event(event));
            }
            Reserved::Duplicate => outcome.duplicates.push((index, event.event_id)),
            Reserved::InFlight => outcome.rejected.push((index, in_flight())),
        }
    }
    if !fresh.is_empty() {
        if let Err(e) = sink.send(&fresh).await {
            reservations.release(ledger).await;
            return Err(e);
        }
    }
    Ok(reservations)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Identify {
    anonymous_id: String,
    user_id: String,
    #[serde(default)]
    traits: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Alias {
    anonymous_id: String,
    user_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentInput {
    session_id: String,
    chunk: u32,
    data: Value,
}

impl<P: Ports> Gateway<'_, P> {
    fn source<'c>(&self, call: &'c Call<'_>) -> Source<'c> {
        Source { project_id: &call.key().project_id, key_type: call.key().key_type, now_ms: call.now_ms }
    }

    pub(super) async fn track(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: TrackBatch = json_body::parse(&call.body)?;
        input.check_size()?;
        let source = self.source(call);
        let mut outcome = TrackOutcome::default();
        let mut valid = Vec::new();
        for (index, value) in input.batch.into_iter().enumerate() {
            let item = match value {
                Value::Object(_) => serde_json::from_value::<TrackItem>(value).unwrap_or_default(),
                _ => TrackItem::default(),
            };
            match item.validate(&source, uuid_v4(random())) {
                Ok(event) => valid.push((index, event)),
                Err(rejection) => outcome.rejected.push((index, rejection)),
            }
        }
        let namespace = dedup_namespace(source.project_id, source.key_type);
        let reservations = accept_events(
            &self.ledger,
            &self.ledger_layout,
            &self.events,
            &namespace,
            call.request_id,
            valid,
            &mut outcome,
        )
        .await
        .map_err(|e| ApiError::internal(format!("event ingestion: {e}")))?;
        let mut reply = Reply::accepted(outcome.view());
        if !reservations.shards.is_empty() {
            reply.after = Some(Box::new(Settlement::ConfirmEvents(reservations)));
        }
        Ok(reply)
    }

    /// Links the ids and records an `identify` event under a fresh server id, on every call.
    pub(super) async fn identify(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: Identify = json_body::parse(&call.body)?;
        check_id("anonymous_id", &input.anonymous_id)?;
        check_id("user_id", &input.user_id)?;
        check_traits(&input.traits)?;
        let source = self.source(call);
        let event = EventRecord {
            project_id: source.project_id.to_owned(),
            key_type: source.key_type,
            event_id: uuid_v4(random()),
            event: "identify".into(),
            anonymous_id: Some(input.anonymous_id.clone()),
            user_id: Some(input.user_id.clone()),
            timestamp: None,
            properties: input.traits,
            received_at: call.now_ms,
            generated_id: true,
        };
        let event_id = event.event_id.clone();
        let link = EventMessage::Link(Link {
            project_id: source.project_id.to_owned(),
            anonymous_id: input.anonymous_id,
            user_id: input.user_id,
            linked_at: call.now_ms,
        });
        self.events.send(&[link, EventMessage::Event(event)]).await.map_err(unavailable)?;
        Ok(Reply::accepted(json!({ "event_id": event_id })))
    }

    /// Links the ids only (SPEC §7; browser keys are refused by the route's scope).
    pub(super) async fn alias(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: Alias = json_body::parse(&call.body)?;
        check_id("anonymous_id", &input.anonymous_id)?;
        check_id("user_id", &input.user_id)?;
        let link = EventMessage::Link(Link {
            project_id: call.key().project_id.clone(),
            anonymous_id: input.anonymous_id.clone(),
            user_id: input.user_id.clone(),
            linked_at: call.now_ms,
        });
        self.events.send(&[link]).await.map_err(unavailable)?;
        let body = json!({ "anonymous_id": input.anonymous_id, "user_id": input.user_id });
        Ok(Reply::accepted(body))
    }

    /// Stores a session-recording segment once per (project, session_id, chunk): its data in R2, an
    /// index row in D1 (SPEC §13). A chunk the index has is a duplicate and writes nothing. The
    /// object is written before its index row, so an indexed chunk always has its data; an object
    /// whose index write failed is written again by the client's retry.
    pub(super) async fn session_segment(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: SegmentInput = json_body::parse(&call.body)?;
        check_id("session_id", &input.session_id)?;
        let chunk = SessionSegment {
            project_id: &call.key().project_id,
            session_id: &input.session_id,
            chunk: input.chunk,
        };
        if self.store.has_session_segment(&chunk).await.map_err(unavailable)? {
            return Ok(Reply::accepted(json!({ "duplicate": true })));
        }
        let data = input.data.to_string();
        let key = recording_object_key(chunk.project_id, chunk.session_id, chunk.chunk);
        self.archive.put_recording_segment(&key, data.as_bytes()).await.map_err(unavailable)?;
        let new =
            self.store.index_session_segment(&chunk, data.len(), call.now_ms).await.map_err(unavailable)?;
        Ok(Reply::accepted(json!({ "duplicate": !new })))
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::fakes::ingest::{FakeEventQueue, FakeLedger};
    use crate::sim::{complete, Faults};
    use gatehouse_core::api_key::KeyType;

    /// Found in a split storm (SPEC §23): an isolate that learnt the tree a level per round made
    /// a round of calls per level, up to 234 object calls for one batch, and 503s. Split shards
    /// forward the ids instead, so a batch costs the worker one call per shard it knows, however
    /// deep the tree below (here every shard splits at its first call: eleven levels). On the
    /// version before, the first batch made 4 + 8 + … calls, one round per level.
    #[test]
    fn a_batch_costs_one_ledger_call_per_shard_the_isolate_knows_whatever_the_trees_depth() {
        let faults = Rc::new(Faults::new(0, 0.0));
        let ledger = FakeLedger {
            faults: faults.clone(),
            clock: Rc::default(),
            window_ms: 60_000,
            split_above: 0,
            shards: Default::default(),
            reserve_calls: Default::default(),
        };
        let sink = FakeEventQueue { faults, sent: Default::default() };
        let layout = RefCell::new(LedgerLayout::default());
        let namespace = dedup_namespace("prj_a", KeyType::Server);
        let batch = |from: usize| -> Vec<(usize, EventRecord)> {
            (from..from + 100)
                .map(|n| {
                    let event = EventRecord {
                        project_id: "prj_a".into(),
                        key_type: KeyType::Server,
                        event_id: format!("evt_{n}"),
                        event: "e".into(),
                        anonymous_id: None,
                        user_id: Some("u".into()),
                        timestamp: None,
                        properties: Map::new(),
                        received_at: 0,
                        generated_id: false,
                    };
                    (n - from, event)
                })
                .collect()
        };
        let track = |from: usize, owner: &str| {
            let mut outcome = TrackOutcome::default();
            let accept = accept_events(&ledger, &layout, &sink, &namespace, owner, batch(from), &mut outcome);
            let reservations = complete(accept).expect("accepted");
            complete(reservations.confirm(&ledger)).expect("confirmed");
            outcome
        };
        let first = track(0, "r1");
        assert_eq!(first.accepted.len(), 100);
        assert_eq!(ledger.reserve_calls.get(), 4, "the four roots, which forward");
        let deepest = ledger.shards.borrow().keys().filter(|k| k.contains(":L11:")).count();
        assert!(deepest > 50, "the tree split to its deepest level: {deepest} leaves");
        // The splits the answers named are learnt: the next batch goes as deep as they go.
        ledger.reserve_calls.set(0);
        assert_eq!(track(100, "r2").accepted.len(), 100);
        assert!(ledger.reserve_calls.get() <= 100, "{} calls for 100 ids", ledger.reserve_calls.get());
        // Confirmed where each was decided: the first batch again is all duplicates.
        let again = track(0, "r3");
        assert_eq!((again.accepted.len(), again.duplicates.len()), (0, 100));
    }
}
