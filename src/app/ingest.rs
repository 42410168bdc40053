//! Event ingestion (SPEC §7): track with per-item `event_id` de-duplication, identify, alias,
//! and session-replay chunks.
//!
//! The order that makes a failed batch safe to retry: ask the ledger which ids it has seen,
//! send the fresh events to the queue, and only once the queue took them all, remember their ids.
//! A failed send answers 500 with nothing remembered, so the full retry is accepted, not reported
//! as duplicates; events a partial send did enqueue are stored once by the consumer anyway.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{random, unavailable, Call, Gateway, Reply};
use crate::core::encoding::uuid_v4;
use crate::core::error::ApiError;
use crate::core::events::{
    dedup_namespace, EventMessage, EventRecord, Source, TrackBatch, TrackItem, TrackOutcome,
};
use crate::core::json_body;
use crate::ports::{EventLedger, EventSink, EventStore, PortError, Ports};

/// Sorts validated events into fresh and duplicate, sends the fresh ones, then remembers them.
/// Events with a server-made id cannot be duplicates. An id twice in one batch counts once.
/// `Err` means the queue did not take the batch and the ledger is unchanged.
pub async fn accept_events<L: EventLedger, Q: EventSink>(
    ledger: &L,
    sink: &Q,
    namespace: &str,
    events: Vec<(usize, EventRecord)>,
    outcome: &mut TrackOutcome,
) -> Result<Option<PortError>, PortError> {
    let client_ids: Vec<String> =
        events.iter().filter(|(_, e)| !e.generated_id).map(|(_, e)| e.event_id.clone()).collect();
    let seen: HashSet<String> = if client_ids.is_empty() {
        HashSet::new()
    } else {
        let answers = ledger.seen(namespace, &client_ids).await?;
        client_ids.iter().zip(answers).filter(|(_, seen)| *seen).map(|(id, _)| id.clone()).collect()
    };
    let mut in_batch = HashSet::new();
    let mut fresh = Vec::new();
    for (index, event) in events {
        let duplicate = !event.generated_id
            && (seen.contains(&event.event_id) || !in_batch.insert(event.event_id.clone()));
        if duplicate {
            outcome.duplicates.push((index, event.event_id));
        } else {
            outcome.accepted.push((index, event.event_id.clone()));
            fresh.push(EventMessage::Event(event));
        }
    }
    if !fresh.is_empty() {
        sink.send(&fresh).await?;
    }
    // The events are safely queued now. If remembering fails, a later copy is accepted again
    // (and stored once by the consumer): worth a log line, not a failed request.
    let to_remember: Vec<String> = in_batch.into_iter().collect();
    if to_remember.is_empty() {
        return Ok(None);
    }
    Ok(ledger.remember(namespace, &to_remember).await.err())
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
struct ReplayChunk {
    session_id: String,
    chunk: u32,
    data: Value,
}

fn check_id(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() || value.chars().count() > 200 {
        return Err(ApiError::unprocessable(format!("{field} must be 1 to 200 characters"))
            .with_detail("field", field));
    }
    Ok(())
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
        let warning = accept_events(&self.ledger, &self.events, &namespace, valid, &mut outcome)
            .await
            .map_err(|e| ApiError::internal(format!("events queue: {e}")))?;
        let mut reply = Reply::accepted(outcome.view());
        reply.log = warning.map(|e| format!("event ledger: {e}"));
        Ok(reply)
    }

    /// Links the ids and records an `identify` event under a fresh server id, on every call.
    pub(super) async fn identify(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: Identify = json_body::parse(&call.body)?;
        check_id("anonymous_id", &input.anonymous_id)?;
        check_id("user_id", &input.user_id)?;
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
        let link = EventMessage::Link {
            project_id: source.project_id.to_owned(),
            anonymous_id: input.anonymous_id,
            user_id: input.user_id,
            linked_at: call.now_ms,
        };
        self.events.send(&[link, EventMessage::Event(event)]).await.map_err(unavailable)?;
        Ok(Reply::accepted(json!({ "event_id": event_id })))
    }

    /// Links the ids only (SPEC §7; browser keys are refused by the route's scope).
    pub(super) async fn alias(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: Alias = json_body::parse(&call.body)?;
        check_id("anonymous_id", &input.anonymous_id)?;
        check_id("user_id", &input.user_id)?;
        let link = EventMessage::Link {
            project_id: call.key().project_id.clone(),
            anonymous_id: input.anonymous_id.clone(),
            user_id: input.user_id.clone(),
            linked_at: call.now_ms,
        };
        self.events.send(&[link]).await.map_err(unavailable)?;
        let body = json!({ "anonymous_id": input.anonymous_id, "user_id": input.user_id });
        Ok(Reply::accepted(body))
    }

    /// Stores a session-replay chunk once per (project, session_id, chunk).
    pub(super) async fn replay_chunk(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: ReplayChunk = json_body::parse(&call.body)?;
        check_id("session_id", &input.session_id)?;
        let new = self
            .store
            .store_replay_chunk(
                &call.key().project_id,
                &input.session_id,
                input.chunk,
                &input.data.to_string(),
                call.now_ms,
            )
            .await
            .map_err(unavailable)?;
        Ok(Reply::accepted(json!({ "duplicate": !new })))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashSet;

    use super::*;
    use crate::core::api_key::KeyType;

    #[derive(Default)]
    struct Ledger {
        seen: RefCell<HashSet<String>>,
    }

    impl EventLedger for Ledger {
        async fn seen(&self, _ns: &str, ids: &[String]) -> Result<Vec<bool>, PortError> {
            Ok(ids.iter().map(|id| self.seen.borrow().contains(id)).collect())
        }
        async fn remember(&self, _ns: &str, ids: &[String]) -> Result<(), PortError> {
            self.seen.borrow_mut().extend(ids.iter().cloned());
            Ok(())
        }
    }

    struct Sink {
        fail: bool,
        sent: RefCell<Vec<EventMessage>>,
    }

    impl EventSink for Sink {
        async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError> {
            if self.fail {
                return Err(PortError("queue unavailable".into()));
            }
            self.sent.borrow_mut().extend(messages.iter().cloned());
            Ok(())
        }
    }

    fn event(id: &str, generated: bool) -> EventRecord {
        EventRecord {
            project_id: "prj".into(),
            key_type: KeyType::Server,
            event_id: id.into(),
            event: "e".into(),
            anonymous_id: Some("a".into()),
            user_id: None,
            timestamp: None,
            properties: Map::new(),
            received_at: 0,
            generated_id: generated,
        }
    }

    fn batch(ids: &[&str]) -> Vec<(usize, EventRecord)> {
        ids.iter().enumerate().map(|(i, id)| (i, event(id, false))).collect()
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        pollster::block_on(f)
    }

    #[test]
    fn a_failed_queue_send_leaves_nothing_marked_as_seen() {
        let ledger = Ledger::default();
        let failing = Sink { fail: true, sent: RefCell::default() };
        let mut outcome = TrackOutcome::default();
        let result = run(accept_events(&ledger, &failing, "ns", batch(&["a", "b"]), &mut outcome));
        assert!(result.is_err());
        assert!(ledger.seen.borrow().is_empty());

        // The full retry is accepted, not reported as duplicates.
        let working = Sink { fail: false, sent: RefCell::default() };
        let mut outcome = TrackOutcome::default();
        run(accept_events(&ledger, &working, "ns", batch(&["a", "b"]), &mut outcome)).unwrap();
        assert_eq!(outcome.accepted.len(), 2);
        assert!(outcome.duplicates.is_empty());
        assert_eq!(working.sent.borrow().len(), 2);
    }

    #[test]
    fn seen_ids_and_repeats_within_a_batch_are_duplicates_but_generated_ids_never() {
        let ledger = Ledger::default();
        let sink = Sink { fail: false, sent: RefCell::default() };
        run(accept_events(&ledger, &sink, "ns", batch(&["a"]), &mut TrackOutcome::default())).unwrap();

        let mut events = batch(&["a", "b", "b"]);
        events.push((3, event("gen-1", true)));
        let mut outcome = TrackOutcome::default();
        run(accept_events(&ledger, &sink, "ns", events, &mut outcome)).unwrap();
        let ids =
            |list: &[(usize, String)]| list.iter().map(|(i, id)| format!("{i}:{id}")).collect::<Vec<_>>();
        assert_eq!(ids(&outcome.accepted), ["1:b", "3:gen-1"]);
        assert_eq!(ids(&outcome.duplicates), ["0:a", "2:b"]);
        assert_eq!(sink.sent.borrow().len(), 3);
        assert!(!ledger.seen.borrow().contains("gen-1"));
    }
}
