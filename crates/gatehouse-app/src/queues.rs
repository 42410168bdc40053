//! Our queues from both ends (SPEC §12.1).
//!
//! **The consumer** disposes of every message of a batch on its own: the ones stored are acked; a
//! failed one is retried alone after an exponential delay, and after the queue's `max_retries`
//! the runtime moves it to the queue's dead-letter queue, whose consumer (this same function)
//! keeps it in D1. Events and audit rows are stored in one call for the whole batch; when that
//! fails, each message is stored alone, so the bad one is known. A message no version can read
//! is kept as a dead letter at once. Storing is idempotent (keyed inserts), so a message stored
//! but not acked (the isolate died, a write timed out after landing) is stored again harmlessly.
//!
//! **The audit producer** sends a request's row to the queue and, when the send still fails,
//! writes it to D1 directly: the audit table keeps one row per `request_id` either way.

use std::future::Future;

use futures_util::future::join_all;

use gatehouse_core::audit::AuditRow;
use gatehouse_core::events::EventBatch;
use gatehouse_core::ports::{AuditSink, AuditStore, DeadLetters, EventStore, MessageFailure, PortError};
use gatehouse_core::queue::{body_digest, served_queue, DeadLetter, QueueMessage, RetryPolicy};
use gatehouse_core::webhook::DeliveryMessage;

/// One message of a batch, as the consumer reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub id: String,
    pub body: String,
    /// When it was first sent (the runtime's timestamp), for the delay when failures cannot be
    /// counted.
    pub sent_ms: i64,
}

impl Incoming {
    /// This message kept as a dead letter of `queue` now (its failures are filled in from the
    /// counts D1 kept, when there are any).
    fn dead_letter(&self, queue: &str, last_error: String, attempts: u32, now_ms: i64) -> DeadLetter {
        DeadLetter {
            id: self.id.clone(),
            queue: queue.to_owned(),
            body: self.body.clone(),
            first_failed_at: now_ms,
            dead_at: now_ms,
            last_error: Some(last_error),
            attempts,
            redriven_at: None,
        }
    }
}

/// What becomes of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    Ack,
    /// Try it again after the delay; `error` says why it failed, for the log.
    Retry {
        delay_seconds: u32,
        error: String,
    },
}

/// The last error of a dead letter whose failures could not be counted.
pub const EXHAUSTED: &str = "the consumer exhausted its retries (the failures were not counted)";

/// Handles one batch of `queue` and answers, per message in order, whether to ack or retry it.
/// `dispatch` makes one webhook delivery attempt (`app::dispatch`); its error means the attempt
/// could not be recorded, and the message is retried.
pub async fn consume<S, L, D, F>(
    store: &S,
    letters: &L,
    queue: &str,
    messages: &[Incoming],
    dispatch: D,
    policy: RetryPolicy,
    now_ms: i64,
) -> Vec<Disposition>
where
    S: EventStore + AuditStore,
    L: DeadLetters,
    D: Fn(String) -> F,
    F: Future<Output = Result<(), PortError>>,
{
    let mut outcomes: Vec<Result<(), PortError>> = messages.iter().map(|_| Ok(())).collect();
    let mut record = |results: Vec<(usize, Result<(), PortError>)>| {
        for (i, result) in results {
            outcomes[i] = result;
        }
    };
    if let Some(source) = served_queue(queue) {
        // A dead-letter queue: keep every message for the operator, whatever it holds.
        let kept = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i, vec![m.dead_letter(&source, EXHAUSTED.into(), 0, now_ms)]))
            .collect();
        record(store_each(kept, |l| async move { letters.keep(&l).await }).await);
    } else {
        let (mut unreadable, mut events, mut rows, mut deliveries) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, m) in messages.iter().enumerate() {
            match QueueMessage::parse(&m.body) {
                Ok(QueueMessage::Events(EventBatch::Events { items })) => events.push((i, items)),
                Ok(QueueMessage::Audit(audit)) => rows.push((i, audit.into_rows())),
                Ok(QueueMessage::Delivery(DeliveryMessage::Delivery { delivery_id })) => {
                    deliveries.push((i, delivery_id))
                }
                // Retrying it would fail the same way: it is a dead letter now.
                Err(why) => unreadable.push((i, vec![m.dead_letter(queue, why, 1, now_ms)])),
            }
        }
        record(store_each(unreadable, |l| async move { letters.keep(&l).await }).await);
        record(store_each(events, |e| async move { store.store_events(&e).await }).await);
        record(store_each(rows, |r| async move { store.insert_audit_rows(&r).await }).await);
        // Attempts run side by side: one slow receiver does not hold up the others.
        let attempts = deliveries.into_iter().map(|(i, id)| {
            let attempt = dispatch(id);
            async move { (i, attempt.await) }
        });
        record(join_all(attempts).await);
    }
    dispose(letters, queue, messages, outcomes, policy, now_ms).await
}

/// Stores every group's items in one call; if that fails, each group alone, so only the groups
/// that fail on their own are failures. Answers each group's outcome by its index.
async fn store_each<T: Clone, F, Fut>(
    groups: Vec<(usize, Vec<T>)>,
    store: F,
) -> Vec<(usize, Result<(), PortError>)>
where
    F: Fn(Vec<T>) -> Fut,
    Fut: Future<Output = Result<(), PortError>>,
{
    if groups.is_empty() {
        return Vec::new();
    }
    let all: Vec<T> = groups.iter().flat_map(|(_, items)| items.iter().cloned()).collect();
    let whole = store(all).await;
    if whole.is_ok() || groups.len() == 1 {
        return groups.into_iter().map(|(i, _)| (i, whole.clone())).collect();
    }
    let mut results = Vec::with_capacity(groups.len());
    for (i, items) in groups {
        results.push((i, store(items).await));
    }
    results
}

/// Acks what went through; counts each failure in D1 and retries the message after
/// `policy.delay_seconds(failures)` (judged by the message's age when D1 cannot count).
async fn dispose<L: DeadLetters>(
    letters: &L,
    queue: &str,
    messages: &[Incoming],
    outcomes: Vec<Result<(), PortError>>,
    policy: RetryPolicy,
    now_ms: i64,
) -> Vec<Disposition> {
    let failures: Vec<MessageFailure> = messages
        .iter()
        .zip(&outcomes)
        .filter_map(|(m, outcome)| {
            let error = outcome.as_ref().err()?;
            Some(MessageFailure {
                message_id: m.id.clone(),
                queue: queue.to_owned(),
                body_digest: body_digest(&m.body),
                error: error.0.clone(),
                at_ms: now_ms,
            })
        })
        .collect();
    let counts = if failures.is_empty() {
        Vec::new()
    } else {
        letters.note_failures(&failures).await.ok().filter(|c| c.len() == failures.len()).unwrap_or_default()
    };
    let mut counted = counts.into_iter();
    messages
        .iter()
        .zip(outcomes)
        .map(|(m, outcome)| match outcome {
            Ok(()) => Disposition::Ack,
            Err(e) => {
                let age_seconds = (now_ms - m.sent_ms).max(0) as u64 / 1000;
                let failures = counted.next().unwrap_or_else(|| policy.failures_by_age(age_seconds));
                Disposition::Retry { delay_seconds: policy.delay_seconds(failures), error: e.0 }
            }
        })
        .collect()
}

/// Where a request's audit row went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditPath {
    Queued,
    /// The queue send failed (after the sink's own retries): the row went to D1 directly.
    Direct,
}

/// Sends the row to the audit queue; when that fails, inserts it in D1 directly (SPEC §12.1). A
/// send that failed but landed anyway is harmless: the row is kept once per `request_id`. An
/// error means both failed and the row is lost (the log line says which request).
pub async fn record_audit_row<Q: AuditSink, S: AuditStore, F: Future<Output = ()>>(
    queue: &Q,
    store: &S,
    row: AuditRow,
    pause: &impl Fn(u64) -> F,
) -> Result<AuditPath, PortError> {
    let sent = queue.record(std::slice::from_ref(&row)).await;
    let Err(send_error) = sent else {
        return Ok(AuditPath::Queued);
    };
    // The direct write is retried like a notice: a row is lost only when every try failed.
    let rows = std::slice::from_ref(&row);
    match super::after_response::retrying(pause, || store.insert_audit_rows(rows)).await {
        Ok(()) => Ok(AuditPath::Direct),
        Err(e) => Err(PortError(format!("audit queue: {send_error}; D1: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::rc::Rc;

    use super::*;
    use crate::dead_letters::redrive;
    use crate::fakes::queue::{FakeDeadLetters, FakeRedrive, QueueRuntime};
    use crate::fakes::FakeStore;
    use crate::sim::{check_seeds, complete, drive, schedules, Faults};
    use gatehouse_core::api_key::KeyType;
    use gatehouse_core::audit::AuditMessage;
    use gatehouse_core::events::{EventMessage, EventRecord};
    use gatehouse_core::queue::{pack, MESSAGE_MAX_BYTES};

    const POLICY: RetryPolicy = RetryPolicy { base_seconds: 5, max_seconds: 3600 };
    const AUDIT: &str = "gatehouse-audit";
    const EVENTS: &str = "gatehouse-events";
    const WEBHOOKS: &str = "gatehouse-webhooks";
    /// Seeds that once failed the exactly-once simulation; each runs before the random ones.
    const REGRESSIONS: &[u64] = &[];

    fn event(id: &str) -> EventMessage {
        EventMessage::Event(EventRecord {
            project_id: "prj_sim".into(),
            key_type: KeyType::Server,
            event_id: id.into(),
            event: "Page Viewed".into(),
            anonymous_id: Some("anon".into()),
            user_id: None,
            timestamp: None,
            properties: Default::default(),
            received_at: 1,
            generated_id: false,
        })
    }

    fn events_body(ids: &[String]) -> String {
        serde_json::to_string(&EventBatch::Events { items: ids.iter().map(|id| event(id)).collect() })
            .unwrap()
    }

    fn audit_body(request_id: &str) -> String {
        serde_json::to_string(&AuditMessage::Audit(Box::new(AuditRow::new(
            request_id.into(),
            1,
            "GET".into(),
            "/".into(),
        ))))
        .unwrap()
    }

    fn audit_rows_body(request_ids: &[String]) -> String {
        let rows: Vec<AuditRow> =
            request_ids.iter().map(|id| AuditRow::new(id.clone(), 1, "GET".into(), "/".into())).collect();
        let mut packed = pack(&rows, "audit_rows", "rows", MESSAGE_MAX_BYTES);
        assert_eq!(packed.len(), 1);
        packed.remove(0)
    }

    fn delivery_body(id: &str) -> String {
        serde_json::to_string(&DeliveryMessage::Delivery { delivery_id: id.into() }).unwrap()
    }

    /// What a schedule sent, to check against what was stored.
    #[derive(Default)]
    struct Sent {
        rows: BTreeSet<String>,
        events: BTreeSet<String>,
        deliveries: BTreeSet<String>,
        unreadable: BTreeSet<String>,
    }

    /// The world of one schedule: the stores (D1 tables with faults; the dead letters in their own
    /// tables with their own faults, so an outage can hit the one and not the other), the queues,
    /// and the deliveries the dispatcher attempted.
    struct World {
        store: FakeStore,
        store_faults: Rc<Faults>,
        letters: FakeDeadLetters,
        letter_faults: Rc<Faults>,
        crash: Faults,
        runtime: QueueRuntime,
        attempted: RefCell<BTreeSet<String>>,
        batch_size: usize,
        now_ms: i64,
        runs: u64,
        crashes: u64,
    }

    impl World {
        /// One consumer invocation on a batch of `queue`; the isolate may die at any step.
        fn round(&mut self, queue: &str, crash_rate: f64) {
            self.now_ms += 1000;
            let batch = self.runtime.take_batch(queue, self.batch_size);
            let incoming: Vec<Incoming> = batch.iter().map(|m| m.incoming()).collect();
            let (faults, attempted) = (&self.store_faults, &self.attempted);
            let dispatch = |id: String| async move {
                faults.run("dispatch a delivery", || attempted.borrow_mut().insert(id)).await.map(|_| ())
            };
            let flow = consume(&self.store, &self.letters, queue, &incoming, dispatch, POLICY, self.now_ms);
            let dispositions = drive(flow, &self.crash, crash_rate);
            self.runs += 1;
            self.crashes += u64::from(dispositions.is_none());
            if let Some(dispositions) = &dispositions {
                for s in dispositions {
                    if let Disposition::Retry { delay_seconds, .. } = s {
                        assert!((POLICY.base_seconds..=POLICY.max_seconds).contains(delay_seconds));
                    }
                }
            }
            self.runtime.dispose(queue, batch, dispositions);
        }

        /// Runs consumers until every queue is empty, with no faults.
        fn drain(&mut self) {
            self.store_faults.set_failure_rate(0.0);
            self.letter_faults.set_failure_rate(0.0);
            for _ in 0..100_000 {
                let Some(queue) = self.runtime.busy().into_iter().next() else { return };
                self.round(&queue, 0.0);
            }
            panic!("the queues never drained");
        }

        fn stored_rows(&self) -> BTreeSet<String> {
            self.store.audit.rows.borrow().keys().cloned().collect()
        }

        fn stored_events(&self) -> BTreeSet<String> {
            self.store.events.events.borrow().keys().map(|(_, _, id)| id.clone()).collect()
        }

        /// The bodies of the letters not re-driven yet.
        fn waiting_bodies(&self) -> Vec<String> {
            self.letters
                .letters
                .borrow()
                .values()
                .filter(|l| l.redriven_at.is_none())
                .map(|l| l.body.clone())
                .collect()
        }
    }

    /// Each audit row and event sent is stored, or its message waits in the dead letters; every
    /// delivery was attempted or waits there; every unreadable message is a dead letter; no dead
    /// letter was dropped.
    fn nothing_lost(world: &World, sent: &Sent, stage: &str) -> Result<(), String> {
        let waiting = world.waiting_bodies();
        let waiting_has = |needle: &str| waiting.iter().any(|b| b.contains(needle));
        let rows = world.stored_rows();
        let events = world.stored_events();
        let attempted = world.attempted.borrow();
        if let Some(r) = sent.rows.iter().find(|r| !rows.contains(*r) && !waiting_has(&format!("\"{r}\""))) {
            return Err(format!("{stage}: audit row {r} is neither stored nor a dead letter"));
        }
        if let Some(e) =
            sent.events.iter().find(|e| !events.contains(*e) && !waiting_has(&format!("\"{e}\"")))
        {
            return Err(format!("{stage}: event {e} is neither stored nor a dead letter"));
        }
        if let Some(d) =
            sent.deliveries.iter().find(|d| !attempted.contains(*d) && !waiting_has(&format!("\"{d}\"")))
        {
            return Err(format!("{stage}: delivery {d} was never attempted nor kept as a dead letter"));
        }
        if let Some(u) = sent.unreadable.iter().find(|u| !waiting.contains(u)) {
            return Err(format!("{stage}: unreadable message {u:?} is not a dead letter"));
        }
        if !world.runtime.dropped.borrow().is_empty() {
            return Err(format!("{stage}: a dead-letter queue dropped {:?}", world.runtime.dropped.borrow()));
        }
        // Stored once: the tables hold exactly what was sent, nothing else, and each once.
        if !rows.is_subset(&sent.rows) || !events.is_subset(&sent.events) {
            return Err(format!("{stage}: a row or event that was never sent is stored"));
        }
        Ok(())
    }

    /// SPEC §9, §12.1: over seeded schedules where any store call fails (before or after its
    /// effect), D1 may be out for a while, and the isolate may die between any two steps, with
    /// redelivery up to `max_retries` and then the dead-letter queue: every audit row and event
    /// ends stored exactly once or waits in `dead_letters` (none lost, none twice); after the
    /// operator re-drives, all of them are stored once and the letters are marked re-driven.
    #[test]
    fn every_row_and_event_is_stored_once_or_kept_as_a_dead_letter() {
        let started = std::time::Instant::now();
        let seen = RefCell::new(Seen::default());
        check_seeds(
            "every_row_and_event_is_stored_once_or_kept_as_a_dead_letter",
            1_000,
            REGRESSIONS,
            |seed| scenario(seed, &mut seen.borrow_mut()),
        );
        let seen = seen.into_inner();
        eprintln!(
            "queue consumer simulation: {} schedules in {:?}; {} consumer runs ({} stopped part-way), {} messages \
             moved to a dead-letter queue, {} dead letters kept, {} re-driven",
            schedules(1_000),
            started.elapsed(),
            seen.runs,
            seen.crashes,
            seen.moved,
            seen.kept,
            seen.redriven
        );
        assert!(seen.moved > 0 && seen.crashes > 0 && seen.redriven > 0, "the schedules reach every path");
    }

    /// What the schedules went through, to show they reach the paths that matter.
    #[derive(Default)]
    struct Seen {
        runs: u64,
        crashes: u64,
        moved: u64,
        kept: u64,
        redriven: u64,
    }

    fn scenario(seed: u64, seen: &mut Seen) -> Result<(), String> {
        let plan = Faults::new(seed, 0.0);
        let base_rate = 0.1 + plan.below(3) as f64 * 0.1;
        let store_faults = Rc::new(Faults::new(seed.wrapping_mul(3) ^ 0x51, base_rate));
        let letter_faults = Rc::new(Faults::new(seed.wrapping_mul(5) ^ 0xD1, 0.1));
        let mut world = World {
            store: FakeStore::new(store_faults.clone()),
            store_faults: store_faults.clone(),
            letters: FakeDeadLetters::new(letter_faults.clone()),
            letter_faults: letter_faults.clone(),
            crash: Faults::new(seed ^ 0xC0FFEE, 0.0),
            runtime: QueueRuntime::new(10, plan.chance(0.5)),
            attempted: RefCell::default(),
            batch_size: 1 + plan.below(8) as usize,
            now_ms: 1_796_000_000_000,
            runs: 0,
            crashes: 0,
        };
        let mut sent = Sent::default();
        let now = world.now_ms;
        let mut next = 0;
        for _ in 0..(3 + plan.below(8)) {
            // A send's rows travel packed (an older version sent one row per message).
            let ids: Vec<String> = (0..1 + plan.below(3)).map(|j| format!("req-{}", next + j)).collect();
            next += ids.len() as u64;
            let body =
                if ids.len() == 1 && plan.chance(0.5) { audit_body(&ids[0]) } else { audit_rows_body(&ids) };
            world.runtime.send(AUDIT, &body, now);
            sent.rows.extend(ids);
        }
        for i in 0..(2 + plan.below(6)) {
            // Batches overlap: an event may travel in two messages (a retried send), stored once.
            let ids: Vec<String> = (0..1 + plan.below(3)).map(|j| format!("evt-{}", i * 2 + j)).collect();
            world.runtime.send(EVENTS, &events_body(&ids), now);
            sent.events.extend(ids);
        }
        for i in 0..plan.below(4) {
            let id = format!("dlv-{i}");
            world.runtime.send(WEBHOOKS, &delivery_body(&id), now);
            sent.deliveries.insert(id);
        }
        for (i, queue) in [AUDIT, EVENTS, WEBHOOKS].iter().enumerate() {
            if plan.chance(0.3) {
                let body = format!("{{\"kind\":\"v{}\",\"from\":\"a newer worker\"}}", 9 + i);
                world.runtime.send(queue, &body, now);
                sent.unreadable.insert(body);
            }
        }
        // Faulty rounds; in half the schedules D1's tables are out for a stretch long enough to
        // exhaust the retries (the dead-letter table stays up, as when one table is broken).
        let rounds = 200;
        let outage = plan.chance(0.5).then(|| {
            let start = plan.below(50);
            start..start + 40 + plan.below(120)
        });
        for round in 0..rounds {
            if world.runtime.is_empty() {
                break;
            }
            let out = outage.as_ref().is_some_and(|o| o.contains(&round));
            store_faults.set_failure_rate(if out { 1.0 } else { base_rate });
            let busy = world.runtime.busy();
            let queue = busy[plan.below(busy.len() as u64) as usize].clone();
            world.round(&queue, 0.05);
        }
        world.drain();
        nothing_lost(&world, &sent, "after the faults")
            .map_err(|e| format!("{e}; trace {:?}", trace(&world)))?;

        // The operator re-drives (with faults), until no readable letter waits.
        let queues = FakeRedrive::new(letter_faults.clone());
        for pass in 0..50 {
            let readable = world.waiting_bodies().iter().filter(|b| !sent.unreadable.contains(*b)).count();
            if readable == 0 {
                break;
            }
            if pass == 49 {
                return Err(format!("{readable} letters still wait after 49 re-drives"));
            }
            letter_faults.set_failure_rate(0.2);
            let _ = drive(redrive(&world.letters, &queues, None, world.now_ms), &world.crash, 0.05);
            for (queue, body) in queues.sent.borrow_mut().drain(..) {
                world.runtime.send(&queue, &body, world.now_ms);
            }
            world.drain();
        }
        nothing_lost(&world, &sent, "after the re-drive")?;
        seen.runs += world.runs;
        seen.crashes += world.crashes;
        seen.moved += world.runtime.moved.borrow().len() as u64;
        seen.kept += world.letters.letters.borrow().len() as u64;
        seen.redriven +=
            world.letters.letters.borrow().values().filter(|l| l.redriven_at.is_some()).count() as u64;
        let (rows, events) = (world.stored_rows(), world.stored_events());
        if rows != sent.rows || events != sent.events {
            return Err(format!(
                "after the re-drive: rows {rows:?} / events {events:?} are not all that was sent"
            ));
        }
        if !sent.deliveries.is_subset(&world.attempted.borrow()) {
            return Err("after the re-drive: a delivery was never attempted".into());
        }
        Ok(())
    }

    fn trace(world: &World) -> Vec<String> {
        let mut t = world.store_faults.trace.borrow().clone();
        t.extend(world.letter_faults.trace.borrow().iter().cloned());
        t.truncate(40);
        t
    }

    #[test]
    fn one_bad_message_does_not_take_its_neighbours_with_it() {
        let faults = Rc::new(Faults::new(1, 0.0));
        let store = FakeStore::new(faults.clone());
        let letters = FakeDeadLetters::new(faults.clone());
        let messages: Vec<Incoming> = [audit_body("r1"), "garbage".to_owned(), audit_body("r2")]
            .into_iter()
            .enumerate()
            .map(|(i, body)| Incoming { id: format!("m{i}"), body, sent_ms: 0 })
            .collect();
        let no_dispatch = |_: String| async { Ok(()) };
        let dispositions = complete(consume(&store, &letters, AUDIT, &messages, no_dispatch, POLICY, 1_000));
        assert_eq!(dispositions, [Disposition::Ack, Disposition::Ack, Disposition::Ack]);
        assert_eq!(store.audit.rows.borrow().len(), 2);
        let kept = letters.letters.borrow();
        assert_eq!(kept["m1"].queue, AUDIT);
        assert!(kept["m1"].last_error.as_deref().unwrap().starts_with("unreadable message"));
    }

    #[test]
    fn a_failed_message_is_retried_alone_with_a_doubling_delay_and_its_error_is_kept() {
        let faults = Rc::new(Faults::new(2, 0.0));
        let store = FakeStore::new(faults.clone());
        let letters = FakeDeadLetters::new(faults.clone());
        let messages = vec![
            Incoming { id: "good".into(), body: delivery_body("dlv-ok"), sent_ms: 0 },
            Incoming { id: "bad".into(), body: delivery_body("dlv-bad"), sent_ms: 0 },
        ];
        let dispatch = |id: String| async move {
            if id == "dlv-bad" {
                Err(PortError("D1: no such table: webhook_deliveries".into()))
            } else {
                Ok(())
            }
        };
        let mut delays = Vec::new();
        for _ in 0..3 {
            let dispositions =
                complete(consume(&store, &letters, WEBHOOKS, &messages, dispatch, POLICY, 1_000));
            assert_eq!(dispositions[0], Disposition::Ack);
            match &dispositions[1] {
                Disposition::Retry { delay_seconds, error } => {
                    assert!(error.contains("no such table"));
                    delays.push(*delay_seconds);
                }
                other => panic!("expected a retry, got {other:?}"),
            }
        }
        assert_eq!(delays, [5, 10, 20]);
        // The dead-letter queue's consumer keeps it with the counted failures and the last error.
        let dead = vec![Incoming { id: "bad".into(), body: delivery_body("dlv-bad"), sent_ms: 0 }];
        let dispositions =
            complete(consume(&store, &letters, "gatehouse-webhooks-dlq", &dead, dispatch, POLICY, 9_000));
        assert_eq!(dispositions, [Disposition::Ack]);
        let kept = letters.letters.borrow()["bad"].clone();
        assert_eq!(
            (kept.queue.as_str(), kept.attempts, kept.first_failed_at, kept.dead_at),
            (WEBHOOKS, 3, 1_000, 9_000)
        );
        assert!(kept.last_error.unwrap().contains("no such table"));
        assert!(letters.failures.borrow().is_empty(), "the failure count went with the letter");
    }

    #[test]
    fn a_batch_failure_falls_back_to_storing_message_by_message() {
        // The first call (the whole batch) fails; each message alone succeeds.
        let faults = Rc::new(Faults::new(3, 0.0));
        let store = FakeStore::new(faults.clone());
        let letters = FakeDeadLetters::new(faults.clone());
        let messages: Vec<Incoming> = (0..3)
            .map(|i| Incoming { id: format!("m{i}"), body: events_body(&[format!("e{i}")]), sent_ms: 0 })
            .collect();
        let calls = RefCell::new(0);
        let results = complete(store_each(
            messages.iter().enumerate().map(|(i, _)| (i, vec![i])).collect(),
            |items: Vec<usize>| {
                *calls.borrow_mut() += 1;
                let whole = items.len() > 1;
                async move {
                    if whole {
                        Err(PortError("batch too large".into()))
                    } else {
                        Ok(())
                    }
                }
            },
        ));
        assert_eq!(*calls.borrow(), 4);
        assert!(results.iter().all(|(_, r)| r.is_ok()));
        let no_dispatch = |_: String| async { Ok(()) };
        let dispositions = complete(consume(&store, &letters, EVENTS, &messages, no_dispatch, POLICY, 1_000));
        assert!(dispositions.iter().all(|s| *s == Disposition::Ack));
        assert_eq!(store.events.events.borrow().len(), 3);
    }

    /// The audit producer: a failed queue send writes the row to D1; a send that landed although
    /// it reported failure leaves one row all the same once the consumer stores it too.
    #[test]
    fn a_failed_audit_send_writes_the_row_directly_and_once() {
        struct Queue(bool, RefCell<Vec<AuditRow>>);
        impl AuditSink for Queue {
            async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
                self.1.borrow_mut().extend_from_slice(rows);
                if self.0 {
                    Err(PortError("queue send timed out".into()))
                } else {
                    Ok(())
                }
            }
        }
        let store = FakeStore::new(Rc::new(Faults::new(4, 0.0)));
        let row = AuditRow::new("r1".into(), 1, "GET".into(), "/".into());
        let ok = Queue(false, RefCell::default());
        assert_eq!(
            complete(record_audit_row(&ok, &store, row.clone(), &|_| async {})),
            Ok(AuditPath::Queued)
        );
        assert!(store.audit.rows.borrow().is_empty());
        let landed_anyway = Queue(true, RefCell::default());
        assert_eq!(
            complete(record_audit_row(&landed_anyway, &store, row.clone(), &|_| async {})),
            Ok(AuditPath::Direct)
        );
        complete(store.insert_audit_rows(&landed_anyway.1.borrow())).unwrap();
        assert_eq!(store.audit.rows.borrow().len(), 1);
        let down = FakeStore::new(Rc::new(Faults::new(5, 1.0)));
        assert!(complete(record_audit_row(&landed_anyway, &down, row, &|_| async {}))
            .unwrap_err()
            .0
            .contains("audit queue"));
    }
}
