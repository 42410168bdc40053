//! Webhooks (SPEC §10): the owner's subscriptions API, and the jobs that deliver: the queue
//! consumer's `dispatch` (one signed attempt, then the schedule), the minute `sweep` that
//! re-enqueues due deliveries whose queue message was lost, and the manual `retry`. Under faults
//! (SPEC §12.1) the store's atomic take allocates each attempt's number and holds the delivery, so
//! no two attempts of one delivery run at once; docs/operations/faults.md says what holds.

use super::{random, unavailable, Call, Gateway, Reply};
use gatehouse_core::config::Config;
use gatehouse_core::error::ApiError;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{
    AttemptLease, DeliveryQueue, PortError, Ports, Sweep, Take, WebhookClient, WebhookPost, WebhookStore,
};
use gatehouse_core::sealing::Keyring;
use gatehouse_core::webhook::{
    self, judge, target_refusal, Attempt, Delivery, Judgement, ReceiverOutcome, SigningKey, StoredSecret,
};

/// How long one attempt holds its delivery beyond the timeout, so a crashed attempt is retried.
const LEASE_SLACK_MS: i64 = 30_000;
const SWEEP_BATCH: usize = 500;
/// A delivery the sweep re-queued is not re-queued again for this long: its message may still be
/// in the queue's retries (D1 refusing it), and every sweep would add a copy.
const SWEEP_REPEAT_MS: i64 = 600_000;
/// Queues delay a message by at most 12 hours; a later attempt is picked up by the sweep.
const QUEUE_MAX_DELAY_SECONDS: i64 = 43_200;

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn list_deliveries(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        if self.store.webhook(call.project_id(), id).await.map_err(unavailable)?.is_none() {
            return Err(ApiError::not_found("webhook").with_detail("id", id));
        }
        let status = call.query.iter().find(|(k, _)| k == "status").map(|(_, v)| v.as_str());
        if status.is_some_and(|s| !matches!(s, "pending" | "delivered" | "failed")) {
            return Err(ApiError::bad_request("status must be pending, delivered or failed")
                .with_detail("field", "status"));
        }
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let (deliveries, attempts) = self.store.deliveries(id, status, &page).await.map_err(unavailable)?;
        let position = |d: &Delivery| Cursor { ts: d.created_at, id: d.id.clone() };
        Ok(Reply::ok(page.respond(deliveries, position, |d| d.view(&attempts))))
    }

    /// Makes a delivery due now, failed ones included, and queues it (see [`retry`]).
    pub(super) async fn retry_delivery(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let log = match retry(&self.store, &self.deliveries, call.project_id(), id, call.now_ms)
            .await
            .map_err(unavailable)?
        {
            ManualRetry::NotFound => return Err(ApiError::not_found("delivery").with_detail("id", id)),
            ManualRetry::Queued => None,
            ManualRetry::NotQueued(e) => Some(format!("webhook queue (the sweep will queue it): {e}")),
        };
        let (delivery, attempts) = self
            .store
            .delivery(call.project_id(), id)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| ApiError::not_found("delivery"))?;
        let mut reply = Reply::accepted(delivery.view(&attempts));
        reply.log = log;
        Ok(reply)
    }
}

/// What a manual retry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManualRetry {
    NotFound,
    /// Due now and queued.
    Queued,
    /// Due now, but the queue send failed: the minute sweep queues it once it is overdue.
    NotQueued(PortError),
}

/// A manual retry (`POST /public/v1/webhooks/deliveries/{id}/retry`): the delivery becomes pending
/// and due now, and is queued. It never runs beside an attempt in flight: the store keeps that
/// attempt's lease, the queued message finds the delivery leased and does nothing, and the attempt's
/// own record leaves the delivery due now and queues it, so the next attempt follows at once.
pub async fn retry<S: WebhookStore, Q: DeliveryQueue>(
    store: &S,
    queue: &Q,
    project_id: &str,
    id: &str,
    now_ms: i64,
) -> Result<ManualRetry, PortError> {
    if !store.reschedule(project_id, id, now_ms).await? {
        return Ok(ManualRetry::NotFound);
    }
    Ok(match queue.enqueue(&[id.to_owned()], 0).await {
        Ok(()) => ManualRetry::Queued,
        Err(e) => ManualRetry::NotQueued(e),
    })
}

/// How often one attempt tries to record itself before it gives up; its lease then runs out and
/// the next attempt writes it down as interrupted.
const RECORD_TRIES: u32 = 3;

/// One attempt of one delivery: take it (which allocates the attempt's number), sign, send, record,
/// and queue the next attempt. A message for a delivery that is not due, not pending or held by
/// another attempt does nothing. The receiver cannot make this fail (every outcome of the `POST` is
/// an answer or an error to record); `Err` means the store or the queue failed, and the message
/// should be retried.
pub async fn dispatch<S: WebhookStore, Q: DeliveryQueue, C: WebhookClient>(
    store: &S,
    queue: &Q,
    client: &C,
    config: &Config,
    delivery_id: &str,
    now_ms: impl Fn() -> i64,
    jitter: f64,
) -> Result<(), PortError> {
    let started = now_ms();
    let lease = attempt_lease(config, delivery_id, started, false);
    let (delivery, hook) = match store.take_delivery(&lease).await? {
        Take::Attempt(delivery, hook) => (delivery, hook),
        Take::Nothing => return Ok(()),
        // Its listener takes it; if the listener is gone by then, this message attempts it.
        Take::Listening(until_ms) => {
            let delay = ((until_ms - started) / 1000 + 1).clamp(1, QUEUE_MAX_DELAY_SECONDS);
            return queue.enqueue(&[delivery_id.to_owned()], delay as u32).await;
        }
    };
    let attempt_no = delivery.attempts;
    // The target again, under today's configuration: the switch may be off now, or the row may
    // predate the rules. A refused target is a failed attempt, and no request is sent.
    // The current secret, and the previous one while a rotation's grace runs (SPEC §17).
    let keys = hook.signing_keys(&secrets_key(config), started);
    let target =
        target_refusal(&hook.url, config.allow_private_webhook_urls, &config.private_webhook_origins);
    let reply = match (target, keys) {
        // A cli subscription's listener was not connected (SPEC §21): a failed attempt.
        _ if hook.is_cli() => Ok(ReceiverOutcome::Unreachable(webhook::NO_LISTENER.into())),
        (Err(why), _) => Err(why),
        (Ok(_), Some(keys)) => {
            let headers = attempt_headers(config, &keys, &delivery, started);
            let attempt = WebhookPost {
                url: &hook.url,
                headers: &headers,
                body: &delivery.payload,
                timeout_ms: config.webhook_timeout_ms,
            };
            Ok(client.post(&attempt).await)
        }
        (Ok(_), None) => Ok(ReceiverOutcome::Unreachable("the subscription's secret cannot be read".into())),
    };
    let finished = now_ms();
    let verdict = match &reply {
        // The schedule's step counts from its last start (the first attempt, or a recovery).
        Ok(reply) => judge(
            attempt_no.saturating_sub(delivery.schedule_from),
            reply,
            &config.webhook_retry_schedule,
            jitter,
            finished,
        ),
        Err(why) => webhook::refused(why),
    };
    let attempt = attempt_of(&delivery.id, attempt_no, started, finished, &verdict, reply.as_ref().ok());
    let mut tries = 1;
    let next_due = loop {
        match store.record_attempt(&attempt, verdict.status, verdict.disable_subscription).await {
            Ok(next_due) => break next_due,
            Err(e) if tries >= RECORD_TRIES => return Err(e),
            Err(_) => tries += 1,
        }
    };
    if let Some(due) = next_due {
        // A lost message is found by the sweep once the delivery is overdue.
        queue.enqueue(&[delivery.id], queue_delay(due, now_ms())).await?;
    }
    Ok(())
}

/// The headers an attempt of `delivery` at `now_ms` carries, signed with `keys`: posted by
/// Gatehouse, or forwarded by a listener (SPEC §21); with the `traceparent` of the request that
/// caused it (SPEC §25).
pub(super) fn attempt_headers(
    config: &Config,
    keys: &[SigningKey],
    delivery: &Delivery,
    now_ms: i64,
) -> Vec<(String, String)> {
    let mut headers = webhook::headers(
        &config.webhook_header_prefix,
        keys,
        &delivery.id,
        now_ms / 1000,
        &delivery.event,
        &delivery.request_id,
        &delivery.payload,
    );
    headers.extend(delivery.traceparent.clone().map(|t| ("traceparent".to_owned(), t)));
    headers
}

/// An attempt as recorded: its outcome judged, and the start of the receiver's answer if any.
pub(super) fn attempt_of(
    delivery_id: &str,
    attempt: u32,
    started_at: i64,
    finished_at: i64,
    verdict: &Judgement,
    outcome: Option<&ReceiverOutcome>,
) -> Attempt {
    Attempt {
        delivery_id: delivery_id.to_owned(),
        attempt,
        started_at,
        duration_ms: finished_at - started_at,
        response_code: verdict.response_code,
        response_excerpt: match outcome {
            Some(ReceiverOutcome::Answered { excerpt, .. }) => Some(excerpt.clone()),
            _ => None,
        },
        error: verdict.error.clone(),
        next_retry_at: verdict.next_attempt_ms,
    }
}

/// The queue delay, in whole seconds, of a message due at `due_ms` sent at `now_ms` (Queues
/// delay a message 12 hours at most; a later one is the sweep's).
pub(super) fn queue_delay(due_ms: i64, now_ms: i64) -> u32 {
    (due_ms.saturating_sub(now_ms).saturating_add(999) / 1000).clamp(0, QUEUE_MAX_DELAY_SECONDS) as u32
}

/// A number in [-1, 1] for the retry schedule's jitter.
pub fn jitter() -> f64 {
    let [a, b] = random::<2>();
    f64::from(u16::from_be_bytes([a, b])) / f64::from(u16::MAX) * 2.0 - 1.0
}

/// The lease of one attempt that starts at `now_ms` (a listener's, when `listener`).
pub(super) fn attempt_lease<'a>(
    config: &Config,
    delivery_id: &'a str,
    now_ms: i64,
    listener: bool,
) -> AttemptLease<'a> {
    AttemptLease {
        delivery_id,
        now_ms,
        until_ms: now_ms + attempt_hold_ms(config),
        max_attempts: config.webhook_retry_schedule.len() as u32 + 1,
        listener,
    }
}

/// How long one attempt holds its delivery: its timeout and some slack (a listener's as long).
pub(super) fn attempt_hold_ms(config: &Config) -> i64 {
    config.webhook_timeout_ms as i64 + LEASE_SLACK_MS
}

/// The minute cron: queues pending deliveries that are overdue and held by no attempt.
pub async fn sweep<S: WebhookStore, Q: DeliveryQueue>(
    store: &S,
    queue: &Q,
    grace_ms: i64,
    now_ms: i64,
) -> Result<usize, PortError> {
    let ids = store
        .overdue_deliveries(Sweep {
            due_before_ms: now_ms - grace_ms,
            now_ms,
            swept_before_ms: now_ms - SWEEP_REPEAT_MS,
            limit: SWEEP_BATCH,
        })
        .await?;
    if !ids.is_empty() {
        queue.enqueue(&ids, 0).await?;
    }
    Ok(ids.len())
}

/// The keys webhook signing secrets are sealed under in D1 (SPEC §13, §19).
pub(super) fn secrets_key(config: &Config) -> Keyring {
    config.webhook_secrets_keys()
}

/// Subscriptions whose secret one cron run re-seals, at most.
pub const SEAL_BATCH: usize = 100;

/// The minute cron: seals, under the current `WEBHOOK_SECRETS_KEY`, the secrets that rows hold in
/// plaintext (written before sealing), in the `v1` format (under a pepper-derived key) or under
/// a previous key, a batch per run. A row changes only if it still holds what was read; until
/// then, its secret signs as before. A secret no configured key opens is left as it is (logged by
/// the caller through the count). Answers (re-sealed, left unopened).
pub async fn reseal_secrets<S: WebhookStore>(
    store: &S,
    config: &Config,
) -> Result<(usize, usize), PortError> {
    let key = secrets_key(config);
    let stale = store.secrets_to_reseal(&key.current_prefix(), SEAL_BATCH).await?;
    let mut unopened = 0;
    for (id, stored) in &stale {
        match stored.open(&key, id) {
            Some(secret) => {
                store.reseal_secret(id, stored, &StoredSecret::seal(&key, id, &secret, random())).await?
            }
            None => unopened += 1,
        }
    }
    Ok((stale.len() - unopened, unopened))
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::fakes::webhooks::{FakeDeliveryQueue, FakeReceiver, QueuedDelivery};
    use crate::fakes::FakeStore;
    use crate::sim::{check_seeds, complete, Faults};
    use gatehouse_core::ports::Listen;
    use gatehouse_core::ports::{Recovery, SecretRotation};
    use gatehouse_core::webhook::Webhook;
    use gatehouse_core::webhook::{INTERRUPTED_ATTEMPT, RESPONSE_EXCERPT_BYTES};

    /// The sweep's grace as deployed (`WEBHOOK_SWEEP_GRACE_SECONDS`).
    const GRACE_MS: i64 = gatehouse_core::config::DEFAULT_WEBHOOK_SWEEP_GRACE_SECONDS as i64 * 1000;

    /// Seeds that once broke an invariant, replayed on every run. 18171: the clean phase finished
    /// flows one after the other, so posts' durations added up past an in-flight attempt's lease
    /// and a second attempt started beside it (a flaw of the simulation, not of dispatch: flows
    /// now finish side by side, and the runtime's limit on an invocation applies there too).
    const REGRESSIONS: &[u64] = &[18171];
    const T0: i64 = 1_795_900_000_000;
    const PROJECT: &str = "prj_1";
    /// The signing key of every subscription here (the base64-decoded part of its secret).
    const SIGNING_KEY: [u8; 24] = [7; 24];

    fn config() -> Config {
        Config::from_lookup(|name| match name {
            "KEY_PEPPER" | "ADMIN_TOKEN" => Some("0123456789abcdef0123".into()),
            "WEBHOOK_SECRETS_KEY" => Some("webhook-secrets-key-0123".into()),
            _ => None,
        })
        .expect("the default configuration")
    }

    fn hook(id: &str) -> Webhook {
        Webhook {
            id: id.into(),
            project_id: PROJECT.into(),
            url: format!("https://hooks.example.com/{id}"),
            events: vec!["*".into()],
            secret: StoredSecret::seal(
                &secrets_key(&config()),
                id,
                &webhook::new_secret(&SIGNING_KEY),
                [0; 12],
            ),
            public_key: None,
            name: None,
            previous_secret: None,
            status: "active".into(),
            disabled_reason: None,
            created_at: T0,
        }
    }

    /// Everything one schedule runs over.
    struct World {
        faults: Rc<Faults>,
        clock: Rc<Cell<i64>>,
        store: FakeStore,
        queue: FakeDeliveryQueue,
        receiver: FakeReceiver,
        config: Config,
    }

    impl World {
        fn new(seed: u64, failure_rate: f64) -> Self {
            let faults = Rc::new(Faults::new(seed, failure_rate));
            let clock = Rc::new(Cell::new(T0));
            World {
                store: FakeStore::new(faults.clone()),
                queue: FakeDeliveryQueue::new(faults.clone(), clock.clone()),
                receiver: FakeReceiver::new(faults.clone(), clock.clone()),
                config: config(),
                faults,
                clock,
            }
        }

        fn now(&self) -> i64 {
            self.clock.get()
        }

        fn dispatch<'a>(&'a self, id: String) -> Flow<'a> {
            let clock = self.clock.clone();
            let jitter = self.faults.below(2001) as f64 / 1000.0 - 1.0;
            Box::pin(async move {
                let outcome = dispatch(
                    &self.store,
                    &self.queue,
                    &self.receiver,
                    &self.config,
                    &id,
                    move || clock.get(),
                    jitter,
                )
                .await;
                outcome.is_ok()
            })
        }
    }

    /// A flow in progress; its output says whether a queue message it served may be acked.
    type Flow<'a> = Pin<Box<dyn Future<Output = bool> + 'a>>;

    struct Running<'a> {
        flow: Flow<'a>,
        started: i64,
        message: Option<QueuedDelivery>,
    }

    fn poll(flow: &mut Flow<'_>) -> Poll<bool> {
        flow.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    /// The consumer's answer to a message whose dispatch failed or whose isolate died: retried
    /// with an exponential delay, dead-lettered after 10 tries (the sweep still finds the delivery).
    fn retry_message(queue: &FakeDeliveryQueue, message: Option<QueuedDelivery>) {
        if let Some(m) = message.filter(|m| m.tries < 10) {
            let delay = 1000 << m.tries.min(10);
            queue.redeliver(m, delay);
        }
    }

    /// Ends a finished or stopped flow: its message is acked, or retried.
    fn dispose(queue: &FakeDeliveryQueue, run: Running<'_>, acked: Option<bool>) {
        if acked != Some(true) {
            retry_message(queue, run.message);
        }
    }

    /// One schedule: subscriptions and deliveries; queue messages, sweeps, manual retries and a
    /// deletion interleaved call by call, with failing calls and stopping isolates; then a clean
    /// phase that runs the clock forward until nothing is pending; then the invariants.
    /// What the schedules exercised, summed over seeds: the simulation must reach these cases.
    #[derive(Debug, Default)]
    struct Coverage {
        attempts: usize,
        interrupted: usize,
        retries_beside_attempts: u32,
        deleted: usize,
        delivered: usize,
        failed_after_six: usize,
        faults: usize,
    }

    fn scenario(seed: u64, coverage: &RefCell<Coverage>) -> Result<(), String> {
        let world = World::new(seed, [0.05, 0.15, 0.3][seed as usize % 3]);
        let w = &world;
        let crash_rate = [0.01, 0.03, 0.08][seed as usize / 3 % 3];
        let timeout = w.config.webhook_timeout_ms as i64;
        let mut ids = Vec::new();
        {
            let mut t = w.store.webhooks.borrow_mut();
            for h in 0..1 + w.faults.below(3) {
                let hook = hook(&format!("wh_{h}"));
                for d in 0..1 + w.faults.below(4) {
                    let id = format!("dlv_{h}_{d}");
                    t.add_delivery(&id, &hook, T0);
                    ids.push(id);
                }
                t.webhooks.insert(hook.id.clone(), hook);
            }
        }
        // The enqueue after the response; a lost one is the sweep's.
        let sent: Vec<String> = ids.iter().filter(|_| !w.faults.chance(0.2)).cloned().collect();
        let _ = complete(w.queue.enqueue(&sent, 0));
        let hooks: Vec<String> = w.store.webhooks.borrow().webhooks.keys().cloned().collect();

        let mut running: Vec<Running<'_>> = Vec::new();
        // The runtime ends an invocation long before its lease runs out: the isolate is gone.
        let expire = |running: &mut Vec<Running<'_>>| {
            let now = w.now();
            while let Some(i) = running.iter().position(|r| now - r.started > timeout + 20_000) {
                let run = running.swap_remove(i);
                dispose(&w.queue, run, None);
            }
        };
        for _ in 0..300 {
            expire(&mut running);
            let now = w.now();
            let f = &w.faults;
            match f.below(100) {
                0..45 if !running.is_empty() => {
                    let i = f.below(running.len() as u64) as usize;
                    if f.chance(crash_rate) {
                        w.faults.trace.borrow_mut().push("isolate stopped".into());
                        let run = running.swap_remove(i);
                        dispose(&w.queue, run, None);
                    } else if let Poll::Ready(acked) = poll(&mut running[i].flow) {
                        let run = running.swap_remove(i);
                        dispose(&w.queue, run, Some(acked));
                    }
                }
                0..65 => {
                    if let Some(message) = w.queue.receive(f.next_u64()) {
                        let flow = w.dispatch(message.delivery_id.clone());
                        running.push(Running { flow, started: now, message: Some(message) });
                    }
                }
                65..70 => {
                    let flow =
                        Box::pin(async move { sweep(&w.store, &w.queue, GRACE_MS, now).await.is_ok() });
                    running.push(Running { flow, started: now, message: None });
                }
                70..77 => {
                    let id = ids[f.below(ids.len() as u64) as usize].clone();
                    let flow =
                        Box::pin(async move { retry(&w.store, &w.queue, PROJECT, &id, now).await.is_ok() });
                    running.push(Running { flow, started: now, message: None });
                }
                77..79 if f.chance(0.05) => {
                    let id = hooks[f.below(hooks.len() as u64) as usize].clone();
                    let flow =
                        Box::pin(async move { w.store.delete_webhook(PROJECT, &id, now).await.is_ok() });
                    running.push(Running { flow, started: now, message: None });
                }
                79..92 => w.clock.set(now + f.below(3_000) as i64),
                _ if running.is_empty() => {
                    let scale = [1_000, 60_000, 3_600_000, 86_400_000][f.below(4) as usize];
                    w.clock.set(now + f.below(scale) as i64);
                }
                _ => {}
            }
        }

        // Clean phase: nothing fails any more; run every flow out, then the clock forward.
        w.faults.set_failure_rate(0.0);
        // Flows in flight finish side by side (one after the other, a post's duration would add up).
        while !running.is_empty() {
            expire(&mut running);
            let mut i = 0;
            while i < running.len() {
                if let Poll::Ready(acked) = poll(&mut running[i].flow) {
                    let run = running.swap_remove(i);
                    dispose(&w.queue, run, Some(acked));
                } else {
                    i += 1;
                }
            }
        }
        let mut rounds = 0;
        loop {
            let pending: Vec<(i64, Option<i64>)> = w
                .store
                .webhooks
                .borrow()
                .deliveries
                .values()
                .filter(|r| r.delivery.status == "pending")
                .map(|r| (r.delivery.scheduled_at, r.locked_until))
                .collect();
            if pending.is_empty() {
                break;
            }
            rounds += 1;
            if rounds > 5_000 {
                return Err(format!("{} deliveries still pending after {rounds} rounds", pending.len()));
            }
            while let Some(message) = w.queue.receive(0) {
                let acked = complete(w.dispatch(message.delivery_id.clone()));
                if !acked {
                    retry_message(&w.queue, Some(message));
                }
            }
            complete(sweep(&w.store, &w.queue, GRACE_MS, w.now()))
                .map_err(|e| format!("clean sweep: {e}"))?;
            // On to the next moment something can happen: a message, or a sweep that finds one.
            let now = w.now();
            let next_message = w.queue.messages.borrow().iter().map(|m| m.visible_at).min();
            let next_sweep =
                pending.iter().map(|(due, locked)| (due + GRACE_MS).max(locked.map_or(0, |l| l + 1))).min();
            let next = next_message.into_iter().chain(next_sweep).min().unwrap_or(now);
            w.clock.set(next.max(now + 1_000));
        }
        check_invariants(w)?;
        let t = w.store.webhooks.borrow();
        let mut c = coverage.borrow_mut();
        c.attempts += t.attempts.len();
        c.interrupted +=
            t.attempts.values().filter(|a| a.error.as_deref() == Some(INTERRUPTED_ATTEMPT)).count();
        c.retries_beside_attempts += t.retries_beside_attempts;
        let ended = |status: &str, at_least: u32| {
            t.deliveries
                .values()
                .filter(|r| r.delivery.status == status && r.delivery.attempts >= at_least)
                .count()
        };
        c.delivered += ended("delivered", 1);
        c.failed_after_six += ended("failed", 6);
        c.deleted += t
            .deliveries
            .values()
            .filter(|r| r.delivery.last_error.as_deref() == Some("subscription deleted"))
            .count();
        c.faults += w.faults.trace.borrow().len();
        Ok(())
    }

    fn check_invariants(w: &World) -> Result<(), String> {
        let t = w.store.webhooks.borrow();
        if !t.violations.is_empty() {
            return Err(format!("store saw: {:?}", t.violations));
        }
        let overlaps = w.receiver.overlaps.borrow();
        if !overlaps.is_empty() {
            return Err(format!("two attempts in flight at once for {overlaps:?}"));
        }
        for row in t.deliveries.values() {
            let d = &row.delivery;
            let attempts = t.attempts_of(&d.id);
            let show = || {
                let brief: Vec<_> =
                    attempts.iter().map(|a| (a.attempt, a.response_code, a.error.as_deref())).collect();
                format!("{} {} ({:?}) after {} attempts {brief:?}", d.id, d.status, d.last_error, d.attempts)
            };
            if !matches!(d.status.as_str(), "delivered" | "failed") {
                return Err(format!("{} did not end delivered or failed", show()));
            }
            for a in &attempts {
                let complete = a.started_at >= T0
                    && a.duration_ms >= 0
                    && (a.response_code.is_some() || a.error.is_some())
                    && a.response_excerpt.as_ref().is_none_or(|e| e.len() <= RESPONSE_EXCERPT_BYTES);
                if !complete || a.attempt == 0 || a.attempt > d.attempts {
                    return Err(format!("incomplete or unnumbered attempt {a:?} in {}", show()));
                }
            }
            // Contiguous: each number taken has its row, but the last one of a delivery failed by
            // its subscription while that attempt's worker stopped (nothing later writes it down).
            let by_subscription = matches!(
                d.last_error.as_deref(),
                Some(
                    "subscription deleted"
                        | "subscription disabled"
                        | "the subscription was disabled (410 Gone)"
                )
            );
            for n in 1..=d.attempts {
                let explained = n == d.attempts && d.status == "failed" && by_subscription;
                if !attempts.iter().any(|a| a.attempt == n) && !explained {
                    return Err(format!("attempt {n} lost: {}", show()));
                }
            }
            let ok = |a: &&&Attempt| a.response_code.is_some_and(|c| (200..300).contains(&c));
            let delivered = attempts.iter().filter(ok).count();
            let resends = t.resends.get(&d.id).copied().unwrap_or(0) as usize;
            if d.status == "delivered" {
                let last_ok = attempts.last().is_some_and(|a| a.attempt == d.attempts && ok(&a));
                if !last_ok || delivered == 0 || delivered > 1 + resends {
                    return Err(format!(
                        "delivered with {delivered} 2xx attempts ({resends} resends): {}",
                        show()
                    ));
                }
            }
            let posts = w.receiver.posts.borrow().iter().filter(|p| p.delivery_id == d.id).count();
            if posts > d.attempts as usize {
                return Err(format!("{posts} posts but {} attempt numbers: {}", d.attempts, show()));
            }
            if attempts
                .iter()
                .any(|a| a.error.as_deref() == Some(INTERRUPTED_ATTEMPT) && a.response_code.is_some())
            {
                return Err(format!("an interrupted attempt with a response: {}", show()));
            }
        }
        Ok(())
    }

    #[test]
    fn webhook_deliveries_end_delivered_or_failed_with_every_attempt_under_faults() {
        let name = "webhook_deliveries_end_delivered_or_failed_with_every_attempt_under_faults";
        let coverage = RefCell::new(Coverage::default());
        let started = std::time::Instant::now();
        check_seeds(name, 1_000, REGRESSIONS, |seed| scenario(seed, &coverage));
        let c = coverage.into_inner();
        eprintln!("{name}: {c:?} in {:?}", started.elapsed());
        let reached =
            [c.interrupted, c.retries_beside_attempts as usize, c.deleted, c.delivered, c.failed_after_six];
        let one_seed = std::env::var("SIM_SEED").is_ok();
        assert!(one_seed || reached.iter().all(|&n| n > 0), "the schedules missed a case: {c:?}");
    }

    /// A receiver that answers what it is told, after one yield (where a test acts meanwhile), and
    /// keeps the headers and body of every post.
    struct Scripted {
        faults: Rc<Faults>,
        replies: RefCell<Vec<ReceiverOutcome>>,
        posts: Cell<u32>,
        received: RefCell<Vec<Received>>,
    }

    /// The headers and body of one post.
    type Received = (Vec<(String, String)>, String);

    impl WebhookClient for Scripted {
        async fn post(&self, attempt: &WebhookPost<'_>) -> ReceiverOutcome {
            let WebhookPost { headers, body, .. } = *attempt;
            self.posts.set(self.posts.get() + 1);
            self.received.borrow_mut().push((headers.to_vec(), body.to_owned()));
            self.faults.call("receiver").await;
            self.replies.borrow_mut().remove(0)
        }
    }

    fn scripted(w: &World, replies: Vec<ReceiverOutcome>) -> Scripted {
        Scripted {
            faults: w.faults.clone(),
            replies: replies.into(),
            posts: Cell::new(0),
            received: RefCell::default(),
        }
    }

    /// Whether the `n`-th post carries the Standard Webhooks signature a receiver holding the
    /// subscription's secret computes.
    fn verifies(client: &Scripted, n: usize, now_ms: i64) -> bool {
        let received = client.received.borrow();
        let (headers, body) = &received[n];
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let id = header("webhook-id").unwrap_or_default();
        header("webhook-signature")
            == Some(&webhook::standard_signature(&SIGNING_KEY, id, now_ms / 1000, body))
    }

    #[test]
    fn attempts_sign_with_the_sealed_secret_and_with_a_plaintext_one_until_the_cron_seals_it() {
        let w = quiet_world(3);
        let client = scripted(&w, vec![answered(200), answered(200), answered(200)]);
        let now = || T0;
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", now, 0.0))).unwrap();
        assert!(verifies(&client, 0, T0));

        // A subscription written before secrets were sealed.
        let plaintext = webhook::new_secret(&SIGNING_KEY);
        w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").unwrap().secret =
            StoredSecret::from_column(plaintext.clone());
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_1", now, 0.0))).unwrap();
        assert!(verifies(&client, 1, T0));

        assert_eq!(complete(reseal_secrets(&w.store, &w.config)), Ok((1, 0)));
        let stored = w.store.webhooks.borrow().webhooks["wh_0"].secret.clone();
        assert!(matches!(stored, StoredSecret::Sealed(_)) && !stored.as_column().contains("whsec_"));
        assert_eq!(stored.open(&secrets_key(&w.config), "wh_0"), Some(plaintext));
        assert_eq!(complete(reseal_secrets(&w.store, &w.config)), Ok((0, 0)));
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_2", now, 0.0))).unwrap();
        assert!(verifies(&client, 2, T0));
        assert_eq!(status_of(&w, "dlv_2").0, "delivered");
    }

    /// SPEC §19: secrets sealed under the pepper (`v1`) or a previous `WEBHOOK_SECRETS_KEY` keep
    /// signing, and the cron re-seals them under the current key; a pepper alone opens none after.
    #[test]
    fn the_cron_reseals_v1_and_previous_key_secrets_under_the_current_key_and_they_still_sign() {
        let w = quiet_world(2);
        let stored = |id: &str| w.store.webhooks.borrow().webhooks[id].secret.clone();
        let plaintext = stored("wh_0").open(&secrets_key(&w.config), "wh_0").unwrap();
        // wh_0 sealed under the WEBHOOK_SECRETS_KEY before a rotation.
        let older = Keyring::for_webhook_secrets(&["an-older-webhook-key-0123"], &[]);
        let previous = StoredSecret::seal(&older, "wh_0", &plaintext, random());
        w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").unwrap().secret = previous.clone();
        let mut config = w.config.clone();
        config.webhook_secrets_key_previous = Some("an-older-webhook-key-0123".into());
        assert_eq!(previous.open(&secrets_key(&config), "wh_0"), Some(plaintext.clone()));
        assert_eq!(previous.open(&secrets_key(&w.config), "wh_0"), None, "without the previous key");
        let client = scripted(&w, vec![answered(200), answered(200)]);
        let now = || T0;
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &config, "dlv_0", now, 0.0))).unwrap();
        assert!(verifies(&client, 0, T0), "a secret under the previous key signs");

        assert_eq!(complete(reseal_secrets(&w.store, &config)), Ok((1, 0)));
        let resealed = stored("wh_0");
        assert!(resealed.as_column().starts_with(&secrets_key(&config).current_prefix()));
        assert_eq!(
            resealed.open(&secrets_key(&w.config), "wh_0"),
            Some(plaintext),
            "the current key alone opens it"
        );
        assert_eq!(complete(reseal_secrets(&w.store, &config)), Ok((0, 0)));
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_1", now, 0.0))).unwrap();
        assert!(verifies(&client, 1, T0));
    }

    #[test]
    fn a_secret_that_does_not_open_is_a_failed_attempt_and_nothing_is_sent() {
        let w = quiet_world(1);
        // Sealed for another subscription: moved rows do not open.
        let moved = w.store.webhooks.borrow().webhooks["wh_0"].secret.clone();
        let other = hook("wh_1");
        w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").unwrap().secret = other.secret;
        assert_ne!(moved, w.store.webhooks.borrow().webhooks["wh_0"].secret);
        let client = scripted(&w, vec![]);
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", || T0, 0.0))).unwrap();
        assert_eq!(client.posts.get(), 0);
        let (status, attempts, error) = status_of(&w, "dlv_0");
        assert_eq!((status.as_str(), attempts), ("pending", 1));
        assert!(error.unwrap_or_default().contains("secret cannot be read"));
    }

    fn answered(status: u16) -> ReceiverOutcome {
        ReceiverOutcome::Answered { status, retry_after: None, excerpt: format!("answer {status}") }
    }

    /// A world with one subscription and `n` deliveries due now, and no faults.
    fn quiet_world(n: usize) -> World {
        let w = World::new(1, 0.0);
        let hook = hook("wh_0");
        let mut t = w.store.webhooks.borrow_mut();
        for d in 0..n {
            t.add_delivery(&format!("dlv_{d}"), &hook, T0);
        }
        t.webhooks.insert(hook.id.clone(), hook);
        drop(t);
        w
    }

    /// Polls `flow` until the receiver has the request in hand.
    fn until_posted(flow: &mut Pin<Box<impl Future<Output = Result<(), PortError>>>>, client: &Scripted) {
        let mut cx = Context::from_waker(Waker::noop());
        while client.posts.get() == 0 {
            assert!(flow.as_mut().poll(&mut cx).is_pending(), "the attempt ended before its post");
        }
    }

    fn finish(flow: Pin<Box<impl Future<Output = Result<(), PortError>>>>) -> Result<(), PortError> {
        complete(flow)
    }

    fn status_of(w: &World, id: &str) -> (String, u32, Option<String>) {
        let t = w.store.webhooks.borrow();
        let d = &t.deliveries[id].delivery;
        (d.status.clone(), d.attempts, d.last_error.clone())
    }

    #[test]
    fn a_manual_retry_during_an_attempt_waits_for_it_then_the_next_attempt_runs_at_once() {
        let w = quiet_world(1);
        let client = scripted(&w, vec![answered(500), answered(200)]);
        let now = || T0;
        let mut first = Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", now, 0.0));
        until_posted(&mut first, &client);

        assert_eq!(complete(retry(&w.store, &w.queue, PROJECT, "dlv_0", T0)), Ok(ManualRetry::Queued));
        let message = w.queue.receive(0).expect("the retry queued the delivery");
        let second = dispatch(&w.store, &w.queue, &client, &w.config, &message.delivery_id, now, 0.0);
        assert_eq!(complete(second), Ok(()));
        assert_eq!(client.posts.get(), 1, "the retry did not run beside the attempt in flight");

        assert_eq!(finish(first), Ok(()));
        let (status, attempts, _) = status_of(&w, "dlv_0");
        assert_eq!((status.as_str(), attempts), ("pending", 1));
        let message = w.queue.receive(0).expect("the attempt queued the requested retry, due now");
        assert_eq!(message.visible_at, T0);
        assert_eq!(complete(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", now, 0.0)), Ok(()));
        let t = w.store.webhooks.borrow();
        let codes: Vec<_> = t.attempts_of("dlv_0").iter().map(|a| (a.attempt, a.response_code)).collect();
        assert_eq!(codes, [(1, Some(500)), (2, Some(200))]);
        assert_eq!(t.deliveries["dlv_0"].delivery.status, "delivered");
    }

    #[test]
    fn deleting_a_subscription_fails_its_pending_deliveries_and_wins_over_an_attempt_in_flight() {
        let w = quiet_world(2);
        let client = scripted(&w, vec![answered(200)]);
        let now = || T0;
        let mut in_flight = Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", now, 0.0));
        until_posted(&mut in_flight, &client);

        assert_eq!(complete(w.store.delete_webhook(PROJECT, "wh_0", T0)), Ok(true));
        for id in ["dlv_0", "dlv_1"] {
            assert_eq!(status_of(&w, id).0, "failed");
            assert_eq!(status_of(&w, id).2.as_deref(), Some("subscription deleted"));
        }
        assert!(w.store.webhooks.borrow().attempts_of("dlv_1").is_empty(), "no fake attempt");

        // The attempt in flight is kept as it happened, but the deletion decides the state.
        assert_eq!(finish(in_flight), Ok(()));
        assert_eq!(status_of(&w, "dlv_0"), ("failed".into(), 1, Some("subscription deleted".into())));
        assert_eq!(w.store.webhooks.borrow().attempts_of("dlv_0")[0].response_code, Some(200));
        assert!(w.queue.messages.borrow().is_empty(), "nothing more to attempt");

        // A manual retry of a delivery of a deleted subscription fails it again, with no attempt.
        assert_eq!(complete(retry(&w.store, &w.queue, PROJECT, "dlv_1", T0)), Ok(ManualRetry::Queued));
        assert_eq!(complete(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_1", now, 0.0)), Ok(()));
        assert_eq!(status_of(&w, "dlv_1"), ("failed".into(), 0, Some("subscription deleted".into())));
        assert_eq!(client.posts.get(), 1);
    }

    #[test]
    fn an_attempt_whose_worker_stopped_is_written_down_by_the_next_one() {
        let w = quiet_world(1);
        let client = scripted(&w, vec![answered(500), answered(204)]);
        let mut stopped = Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", || T0, 0.0));
        until_posted(&mut stopped, &client);
        drop(stopped); // the isolate is gone, mid-attempt

        let lease_ends = T0 + w.config.webhook_timeout_ms as i64 + LEASE_SLACK_MS;
        assert_eq!(
            complete(sweep(&w.store, &w.queue, GRACE_MS, lease_ends)),
            Ok(0),
            "held until the lease runs out"
        );
        let later = lease_ends + 1;
        assert_eq!(complete(sweep(&w.store, &w.queue, GRACE_MS, later)), Ok(1));
        let message = w.queue.receive(0).expect("the sweep queued it");
        let next = dispatch(&w.store, &w.queue, &client, &w.config, &message.delivery_id, || later, 0.0);
        assert_eq!(complete(next), Ok(()));
        let t = w.store.webhooks.borrow();
        let attempts = t.attempts_of("dlv_0");
        assert_eq!(attempts.len(), 2);
        assert_eq!((attempts[0].attempt, attempts[0].error.as_deref()), (1, Some(INTERRUPTED_ATTEMPT)));
        assert_eq!((attempts[0].started_at, attempts[0].response_code), (T0, None));
        assert_eq!((attempts[1].attempt, attempts[1].response_code), (2, Some(500)));
        assert_eq!(t.deliveries["dlv_0"].delivery.status, "pending");
    }

    /// SPEC §19: when the schedule's last attempt was interrupted, the next take writes it down and
    /// fails the delivery; no attempt past the last one is sent (main sent a 7th POST).
    #[test]
    fn an_interrupted_last_attempt_fails_the_delivery_and_sends_nothing_more() {
        let w = quiet_world(1);
        let last = w.config.webhook_retry_schedule.len() as u32 + 1;
        w.store.webhooks.borrow_mut().deliveries.get_mut("dlv_0").unwrap().delivery.attempts = last - 1;
        let client = scripted(&w, vec![answered(500), answered(204)]);
        let mut stopped = Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", || T0, 0.0));
        until_posted(&mut stopped, &client);
        drop(stopped); // the isolate is gone during the last attempt
        let later = T0 + w.config.webhook_timeout_ms as i64 + LEASE_SLACK_MS + 1;
        assert_eq!(complete(sweep(&w.store, &w.queue, GRACE_MS, later)), Ok(1));
        let message = w.queue.receive(0).expect("the sweep queued it");
        let next = dispatch(&w.store, &w.queue, &client, &w.config, &message.delivery_id, || later, 0.0);
        assert_eq!(complete(next), Ok(()));
        assert_eq!(client.posts.get(), 1, "no POST after the last attempt");
        let t = w.store.webhooks.borrow();
        let attempts = t.attempts_of("dlv_0");
        assert_eq!(
            (attempts.len(), attempts[0].attempt, attempts[0].error.as_deref()),
            (1, last, Some(INTERRUPTED_ATTEMPT))
        );
        assert_eq!(t.deliveries["dlv_0"].delivery.status, "failed");
    }

    #[test]
    fn a_record_that_fails_is_tried_again_and_the_attempt_is_kept() {
        // Seeds where the first record fails and a later try lands: the attempt row exists once.
        let mut seen = 0;
        for seed in 0..200 {
            let w = World::new(seed, 0.0);
            let hook = hook("wh_0");
            w.store.webhooks.borrow_mut().add_delivery("dlv_0", &hook, T0);
            w.store.webhooks.borrow_mut().webhooks.insert(hook.id.clone(), hook);
            let client = scripted(&w, vec![answered(503)]);
            let mut flow = Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", || T0, 0.0));
            until_posted(&mut flow, &client);
            w.faults.set_failure_rate(0.5);
            let outcome = finish(flow);
            let t = w.store.webhooks.borrow();
            let traced = w.faults.trace.borrow();
            let record_failed = traced.first().is_some_and(|e| e.starts_with("webhooks.record"));
            if outcome.is_ok() && record_failed {
                seen += 1;
                assert_eq!(t.attempts_of("dlv_0").len(), 1);
                assert_eq!(t.deliveries["dlv_0"].delivery.attempts, 1);
                assert_eq!(t.deliveries["dlv_0"].locked_until, None, "recorded on a later try");
            }
        }
        assert!(seen > 0, "some seed retried a failed record");
    }

    /// The Standard Webhooks example schedule (SPEC §17): three steps are longer than a queue
    /// message's longest delay (12 h).
    const LONG_SCHEDULE: [u64; 9] = [5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400];

    /// SPEC §17: steps longer than 12 h are carried without loss. A failing receiver, a minute
    /// cron, a consumer that takes every visible message, and a queue that loses a share of the
    /// messages sent to it (a lost send, or a delay cut to 12 h that arrives early and finds the
    /// delivery not due): every attempt of the schedule still happens, none before its time, each
    /// within minutes of it, and the delivery ends `failed` with all ten attempts recorded.
    #[test]
    fn a_schedule_with_steps_longer_than_a_queue_delay_is_carried_to_the_end_without_loss() {
        for (seed, loss) in [(1, 0.0), (5, 0.2), (6, 0.3), (7, 0.3)] {
            let mut w = quiet_world(1);
            w.config.webhook_retry_schedule = LONG_SCHEDULE.to_vec();
            let rng = Faults::new(seed, 0.0);
            let client = scripted(&w, vec![answered(503); 10]);
            let (mut lost, mut early) = (0, 0);
            let minute = 60_000;
            // Four days and a bit, minute by minute.
            for _ in 0..(4 * 24 * 60 + 120) {
                w.clock.set(w.clock.get() + minute);
                complete(sweep(&w.store, &w.queue, GRACE_MS, w.now())).unwrap();
                while let Some(message) = w.queue.receive(0) {
                    if rng.chance(loss) {
                        lost += 1;
                        continue;
                    }
                    let due = w.store.webhooks.borrow().deliveries["dlv_0"].delivery.scheduled_at;
                    early += usize::from(due > w.now());
                    let clock = w.clock.clone();
                    let attempt = dispatch(
                        &w.store,
                        &w.queue,
                        &client,
                        &w.config,
                        &message.delivery_id,
                        move || clock.get(),
                        0.0,
                    );
                    complete(attempt).unwrap();
                }
            }
            let t = w.store.webhooks.borrow();
            let d = &t.deliveries["dlv_0"].delivery;
            assert_eq!((d.status.as_str(), d.attempts), ("failed", 10), "seed {seed}: {d:?}");
            let attempts = t.attempts_of("dlv_0");
            assert_eq!(attempts.len(), 10);
            for pair in attempts.windows(2) {
                let due = pair[0].next_retry_at.expect("a retry was scheduled");
                let waited = pair[1].started_at - due;
                // Never early. Without losses the sweep finds an early-arriving step within its
                // grace plus a minute; a lost message waits for the sweep's repeat (10 minutes).
                let bound = if loss == 0.0 { 90_000 } else { 60 * minute };
                assert!(
                    (0..=bound).contains(&waited),
                    "seed {seed}: attempt {} {waited} ms after due",
                    pair[1].attempt
                );
            }
            let longest = attempts.windows(2).map(|p| p[1].started_at - p[0].started_at).max().unwrap();
            assert!(longest >= 86_400_000, "the 24 h step ran: {longest}");
            assert!(early > 0, "a message delayed 12 h arrived before a longer step was due");
            assert!(loss == 0.0 || lost > 0);
        }
    }

    /// SPEC §17: during a rotation's grace every attempt carries both signatures, new first, each
    /// verifying under its own secret; after the grace only the new one.
    #[test]
    fn a_rotation_signs_with_both_secrets_during_the_grace_then_with_the_new_one_only() {
        let w = quiet_world(2);
        let key = secrets_key(&w.config);
        let new_key = [42u8; 24];
        let sealed = StoredSecret::seal(&key, "wh_0", &webhook::new_secret(&new_key), [3; 12]);
        let current = hook("wh_0").secret;
        let rotated = complete(w.store.rotate_secret(&SecretRotation {
            project_id: PROJECT,
            id: "wh_0",
            secret: &sealed,
            public_key: None,
            previous_until_ms: T0 + 1_000,
            replaces: &current,
        }))
        .unwrap()
        .unwrap();
        assert_eq!(rotated.previous_secret_until(T0), Some(T0 + 1_000));
        let client = scripted(&w, vec![answered(200), answered(200)]);
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", || T0 + 999, 0.0)))
            .unwrap();
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_1", || T0 + 1_000, 0.0)))
            .unwrap();
        let received = client.received.borrow();
        let signature = |n: usize| {
            let (headers, body) = &received[n];
            let h = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap();
            (
                h("webhook-signature"),
                h("webhook-id"),
                h("webhook-timestamp").parse::<i64>().unwrap(),
                body.clone(),
                h("X-Gatehouse-Signature"),
            )
        };
        let (both, id, ts, body, prefixed) = signature(0);
        let expected_new = webhook::standard_signature(&new_key, &id, ts, &body);
        let expected_old = webhook::standard_signature(&SIGNING_KEY, &id, ts, &body);
        assert_eq!(both, format!("{expected_new} {expected_old}"));
        assert_eq!(prefixed, webhook::body_signature(&new_key, &body));
        let (only_new, id, ts, body, _) = signature(1);
        assert_eq!(only_new, webhook::standard_signature(&new_key, &id, ts, &body));
    }

    /// SPEC §17: a receiver down for all six attempts fails the delivery; a recovery from a time
    /// gives every failed delivery created since one more attempt, whose failure follows the
    /// schedule again; once delivered, a second recovery finds nothing.
    #[test]
    fn a_recovery_requeues_failed_deliveries_once_and_the_schedule_starts_over() {
        let w = quiet_world(1);
        w.store.webhooks.borrow_mut().add_delivery("dlv_old", &hook("wh_0"), T0 - 60_000);
        w.store.webhooks.borrow_mut().deliveries.get_mut("dlv_old").unwrap().delivery.status =
            "failed".into();
        let client = scripted(&w, [vec![answered(500); 7], vec![answered(200)]].concat());
        for n in 0..6 {
            let at = T0 + n * 100_000_000;
            finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", move || at, 0.0)))
                .unwrap();
        }
        assert_eq!(status_of(&w, "dlv_0").0, "failed");
        let later = T0 + 700_000_000;
        let ids = complete(w.store.recover_deliveries(&Recovery {
            project_id: PROJECT,
            webhook_id: "wh_0",
            since_ms: T0,
            now_ms: later,
        }))
        .unwrap();
        assert_eq!(ids, ["dlv_0"], "only failed deliveries created since");
        assert_eq!(status_of(&w, "dlv_0").0, "pending");
        // The recovered attempt fails: the schedule's first step follows, not "failed".
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", move || later, 0.0)))
            .unwrap();
        let t = w.store.webhooks.borrow();
        let seventh = t.attempts_of("dlv_0")[6].clone();
        drop(t);
        assert_eq!(seventh.next_retry_at, Some(later + 30_000));
        let due = later + 30_000;
        finish(Box::pin(dispatch(&w.store, &w.queue, &client, &w.config, "dlv_0", move || due, 0.0)))
            .unwrap();
        assert_eq!(status_of(&w, "dlv_0"), ("delivered".into(), 8, None));
        assert_eq!(
            complete(w.store.recover_deliveries(&Recovery {
                project_id: PROJECT,
                webhook_id: "wh_0",
                since_ms: T0,
                now_ms: due
            }))
            .unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_attempt_checks_the_target_again_and_a_refused_one_sends_nothing() {
        // (subscription URL, ALLOW_PRIVATE_WEBHOOK_URLS at the attempt, the refusal's words)
        let cases = [
            ("https://198.18.0.1/hook", true, Some("benchmarking address (198.18.0.0/15)")),
            ("https://[64:ff9b::7f00:1]/", true, Some("NAT64 address (64:ff9b::/96)")),
            ("https://[::127.0.0.1]/", true, Some("IPv4-compatible address (::/96)")),
            ("https://metadata.google.internal/", true, Some("cloud metadata host")),
            ("https://2852039166/latest", false, Some("cloud metadata address (169.254.169.254)")),
            // Accepted while the switch was on; it is off now.
            ("https://127.0.0.1/hook", false, Some("loopback address (127.0.0.0/8)")),
            ("http://hooks.example.com/in", false, Some("must use https")),
            ("https://127.0.0.1/hook", true, None),
            ("https://hooks.example.com/in", false, None),
        ];
        for (url, allow_private, refusal) in cases {
            let mut w = quiet_world(1);
            w.config.allow_private_webhook_urls = allow_private;
            w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").expect("the subscription").url =
                url.into();
            let attempt = dispatch(&w.store, &w.queue, &w.receiver, &w.config, "dlv_0", || T0, 0.0);
            assert_eq!(complete(attempt), Ok(()), "{url}");
            let posts = w.receiver.posts.borrow().len();
            let t = w.store.webhooks.borrow();
            let attempts = t.attempts_of("dlv_0");
            assert_eq!(attempts.len(), 1, "{url}: the attempt is recorded");
            let Some(words) = refusal else {
                assert_eq!(posts, 1, "{url}: allowed, so posted");
                continue;
            };
            assert_eq!(posts, 0, "{url}: the receiver was not called");
            let error = attempts[0].error.clone().unwrap_or_default();
            assert!(
                error.starts_with("refused: url must not")
                    || error.starts_with("refused: url must use https"),
                "{url}: {error}"
            );
            assert!(error.contains(words), "{url}: {error}");
            assert_eq!((attempts[0].response_code, attempts[0].response_excerpt.as_ref()), (None, None));
            let d = &t.deliveries["dlv_0"].delivery;
            assert_eq!(
                (d.status.as_str(), d.last_error.as_deref()),
                ("failed", Some(error.as_str())),
                "{url}"
            );
            assert!(w.queue.messages.borrow().is_empty(), "{url}: no later attempt is queued");
            assert_eq!(t.webhooks["wh_0"].status, "active", "the subscription itself is left alone");
        }
    }

    #[test]
    fn a_manual_retry_of_a_refused_delivery_runs_under_the_configuration_of_then() {
        let mut w = quiet_world(1);
        w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").expect("the subscription").url =
            "https://127.0.0.1:9000/hook".into();
        assert_eq!(
            complete(dispatch(&w.store, &w.queue, &w.receiver, &w.config, "dlv_0", || T0, 0.0)),
            Ok(())
        );
        assert_eq!(status_of(&w, "dlv_0").0, "failed");
        assert!(w.receiver.posts.borrow().is_empty());

        w.config.allow_private_webhook_urls = true;
        assert_eq!(complete(retry(&w.store, &w.queue, PROJECT, "dlv_0", T0)), Ok(ManualRetry::Queued));
        let message = w.queue.receive(0).expect("queued");
        let next = dispatch(&w.store, &w.queue, &w.receiver, &w.config, &message.delivery_id, || T0, 0.0);
        assert_eq!(complete(next), Ok(()));
        assert_eq!(w.receiver.posts.borrow().len(), 1, "allowed now, so sent");
        assert_eq!(status_of(&w, "dlv_0").1, 2);
    }

    /// A cli subscription's delivery (SPEC §21): while its listener is connected, a queue message
    /// leaves it to the listener and comes back once the connection would have ended; the listener
    /// takes it; without a listener, the attempt fails on the normal schedule and sends nothing.
    #[test]
    fn a_cli_delivery_is_its_listeners_while_one_is_connected_and_fails_on_schedule_without() {
        let w = quiet_world(2);
        w.store.webhooks.borrow_mut().webhooks.get_mut("wh_0").expect("the subscription").url =
            webhook::CLI_URL.into();
        let until = T0 + 30_000;
        assert!(complete(w.store.listen(Listen {
            project_id: PROJECT,
            id: "wh_0",
            until_ms: until,
            resume_at: None
        }))
        .unwrap()
        .is_some());
        assert_eq!(
            complete(dispatch(&w.store, &w.queue, &w.receiver, &w.config, "dlv_0", || T0, 0.0)),
            Ok(())
        );
        assert_eq!(status_of(&w, "dlv_0"), ("pending".into(), 0, None), "left to the listener");
        assert!(w.queue.receive(0).is_none(), "not before the listener's connection would end");
        w.clock.set(until + 1_000);
        let message = w.queue.receive(0).expect("queued again for when the listener is gone");
        assert_eq!(message.delivery_id, "dlv_0");
        w.clock.set(T0);
        // The listener takes it as attempt 1 (due, oldest first).
        let due = complete(w.store.due_for_listener("wh_0", T0, 10)).unwrap();
        assert_eq!(due, ["dlv_0", "dlv_1"]);
        let lease = attempt_lease(&w.config, "dlv_0", T0, true);
        assert!(
            matches!(complete(w.store.take_delivery(&lease)), Ok(Take::Attempt(d, _)) if d.attempts == 1)
        );
        // The listener is gone: the other delivery is attempted, fails, and is scheduled again.
        let later = until + 1;
        assert_eq!(
            complete(dispatch(&w.store, &w.queue, &w.receiver, &w.config, "dlv_1", || later, 0.0)),
            Ok(())
        );
        assert_eq!(status_of(&w, "dlv_1"), ("pending".into(), 1, Some(webhook::NO_LISTENER.into())));
        assert!(w.receiver.posts.borrow().is_empty(), "a cli subscription is never posted to");
        // Another project's listener cannot claim the subscription.
        assert!(complete(w.store.listen(Listen {
            project_id: "prj_other",
            id: "wh_0",
            until_ms: until,
            resume_at: None
        }))
        .unwrap()
        .is_none());

        // SPEC §23: the listener that took dlv_0 as attempt 1 never reported (killed); its hold
        // runs out and the delivery is taken again, attempt 1 written down as interrupted.
        let after_hold = T0 + attempt_hold_ms(&w.config) + 1;
        let lease = attempt_lease(&w.config, "dlv_0", after_hold, true);
        assert!(
            matches!(complete(w.store.take_delivery(&lease)), Ok(Take::Attempt(d, _)) if d.attempts == 2)
        );
        // Its report arrives late: the real outcome replaces the interrupted row, and a 2xx
        // delivers it (the target has it), though attempt 2 is out.
        let (_, attempts) = complete(w.store.delivery(PROJECT, "dlv_0")).unwrap().unwrap();
        assert_eq!(attempts[0].error.as_deref(), Some(INTERRUPTED_ATTEMPT));
        let late = Attempt {
            delivery_id: "dlv_0".into(),
            attempt: 1,
            started_at: after_hold,
            duration_ms: 5,
            response_code: Some(200),
            response_excerpt: Some(String::new()),
            error: None,
            next_retry_at: None,
        };
        assert_eq!(complete(w.store.record_late_report(&late, true)).unwrap(), "delivered");
        let (shown, attempts) = complete(w.store.delivery(PROJECT, "dlv_0")).unwrap().unwrap();
        assert_eq!((shown.status.as_str(), attempts[0].response_code), ("delivered", Some(200)));
        // A resumed listener gets back every delivery that did not reach its target, however its
        // last attempt ended (before: only those failed for want of a listener).
        w.store.webhooks.borrow_mut().deliveries.get_mut("dlv_1").unwrap().delivery.status = "failed".into();
        w.store.webhooks.borrow_mut().deliveries.get_mut("dlv_1").unwrap().delivery.last_error =
            Some(INTERRUPTED_ATTEMPT.into());
        complete(w.store.listen(Listen {
            project_id: PROJECT,
            id: "wh_0",
            until_ms: later + 60_000,
            resume_at: Some(later),
        }))
        .unwrap();
        assert_eq!(status_of(&w, "dlv_1").0, "pending", "resumed");
        assert_eq!(status_of(&w, "dlv_0").0, "delivered", "a delivered one stays delivered");
    }
}
