//! Fakes of the webhook delivery's ports: the delivery queue (messages with their delays, as
//! Queues keeps them) and the receivers an attempt posts to.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;

use crate::sim::{Fault, Faults};
use gatehouse_core::ports::{DeliveryQueue, PortError, WebhookClient, WebhookPost};
use gatehouse_core::webhook::{ReceiverOutcome, RESPONSE_EXCERPT_BYTES};

/// A message on the fake webhook queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedDelivery {
    pub delivery_id: String,
    pub visible_at: i64,
    /// Deliveries of this message so far (the consumer's retries).
    pub tries: u32,
}

/// `WEBHOOK_QUEUE` in memory, with `delay_seconds` on the simulated clock.
pub struct FakeDeliveryQueue {
    faults: Rc<Faults>,
    clock: Rc<Cell<i64>>,
    pub messages: RefCell<Vec<QueuedDelivery>>,
}

impl FakeDeliveryQueue {
    pub fn new(faults: Rc<Faults>, clock: Rc<Cell<i64>>) -> Self {
        FakeDeliveryQueue { faults, clock, messages: RefCell::default() }
    }

    /// Takes a message that is visible now, the `pick`-th of them (modulo their number).
    pub fn receive(&self, pick: u64) -> Option<QueuedDelivery> {
        let now = self.clock.get();
        let mut messages = self.messages.borrow_mut();
        let visible: Vec<usize> = (0..messages.len()).filter(|&i| messages[i].visible_at <= now).collect();
        if visible.is_empty() {
            return None;
        }
        Some(messages.remove(visible[(pick % visible.len() as u64) as usize]))
    }

    /// Puts a message back (the consumer retries it), visible after `delay_ms`.
    pub fn redeliver(&self, mut message: QueuedDelivery, delay_ms: i64) {
        message.tries += 1;
        message.visible_at = self.clock.get() + delay_ms;
        self.messages.borrow_mut().push(message);
    }
}

impl DeliveryQueue for FakeDeliveryQueue {
    async fn enqueue(&self, delivery_ids: &[String], delay_seconds: u32) -> Result<(), PortError> {
        let visible_at = self.clock.get() + i64::from(delay_seconds) * 1000;
        self.faults
            .run("queue.send", || {
                self.messages.borrow_mut().extend(delivery_ids.iter().map(|id| QueuedDelivery {
                    delivery_id: id.clone(),
                    visible_at,
                    tries: 0,
                }))
            })
            .await
    }
}

/// One `POST` the receiver saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub delivery_id: String,
    pub reply: ReceiverOutcome,
}

/// A receiver that answers anything: 2xx, 4xx/5xx, 429/503 with any `Retry-After` (huge ones
/// included), 410, a refused connection, or no answer within the timeout. A failed call of the
/// schedule is a network error: before the receiver saw the request, or after (it got it, we did
/// not get its answer). The simulated clock moves by the answer's duration.
pub struct FakeReceiver {
    faults: Rc<Faults>,
    clock: Rc<Cell<i64>>,
    in_flight: RefCell<BTreeSet<String>>,
    pub posts: RefCell<Vec<Post>>,
    /// Deliveries posted while another post of the same delivery was in flight.
    pub overlaps: RefCell<Vec<String>>,
}

impl FakeReceiver {
    pub fn new(faults: Rc<Faults>, clock: Rc<Cell<i64>>) -> Self {
        FakeReceiver {
            faults,
            clock,
            in_flight: RefCell::default(),
            posts: RefCell::default(),
            overlaps: RefCell::default(),
        }
    }

    fn answer(&self, timeout_ms: u64) -> (ReceiverOutcome, i64) {
        let f = &self.faults;
        let answered = |status, retry_after: Option<String>, len: usize| ReceiverOutcome::Answered {
            status,
            retry_after,
            excerpt: gatehouse_core::webhook::response_excerpt(&vec![b'x'; len]),
        };
        let quick = 5 + f.below(500) as i64;
        match f.below(100) {
            0..30 => (answered([200, 201, 204][f.below(3) as usize], None, f.below(3000) as usize), quick),
            30..50 => (answered([400, 404, 500, 502][f.below(4) as usize], None, 20), quick),
            50..62 => {
                let retry_after = match f.below(5) {
                    0 => "99999999999".to_owned(),
                    1 => "Fri, 31 Dec 9999 23:59:59 GMT".to_owned(),
                    2 => "not a date".to_owned(),
                    _ => f.below(120_000).to_string(),
                };
                (answered([429, 503][f.below(2) as usize], Some(retry_after), 10), quick)
            }
            62..64 => (answered(410, None, 0), quick),
            64..80 => (ReceiverOutcome::Unreachable("connection refused".into()), 1),
            80..90 => {
                (ReceiverOutcome::Unreachable(format!("no answer within {timeout_ms} ms")), timeout_ms as i64)
            }
            _ => (answered(301, None, 0), quick), // a redirect, not followed
        }
    }
}

/// Takes a delivery out of the in-flight set when its post ends, however it ends.
struct InFlight<'a>(&'a RefCell<BTreeSet<String>>, String);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().remove(&self.1);
    }
}

impl WebhookClient for FakeReceiver {
    async fn post(&self, attempt: &WebhookPost<'_>) -> ReceiverOutcome {
        let WebhookPost { headers, timeout_ms, .. } = *attempt;
        let id = headers.iter().find(|(k, _)| k == "webhook-id").map(|(_, v)| v.clone()).unwrap_or_default();
        if !self.in_flight.borrow_mut().insert(id.clone()) {
            self.overlaps.borrow_mut().push(id.clone());
        }
        let _in_flight = InFlight(&self.in_flight, id.clone());
        let sent_at = self.clock.get();
        let (reply, took_ms) = match self.faults.call("receiver").await {
            Fault::Ok => self.answer(timeout_ms),
            Fault::FailBefore => (ReceiverOutcome::Unreachable("connection refused".into()), 1),
            Fault::FailAfter => (ReceiverOutcome::Unreachable("connection reset".into()), 10),
            Fault::Hang => {
                (ReceiverOutcome::Unreachable(format!("no answer within {timeout_ms} ms")), timeout_ms as i64)
            }
        };
        // Posts run side by side: each ends at its own start plus its duration.
        self.clock.set(self.clock.get().max(sent_at + took_ms));
        if let ReceiverOutcome::Answered { excerpt, .. } = &reply {
            debug_assert!(excerpt.len() <= RESPONSE_EXCERPT_BYTES);
        }
        self.posts.borrow_mut().push(Post { delivery_id: id, reply: reply.clone() });
        reply
    }
}
