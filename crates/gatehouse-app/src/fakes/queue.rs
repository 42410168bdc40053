//! The queues' fakes: the `dead_letters` and `queue_failures` tables behind [`DeadLetters`], the
//! producers behind [`Redrive`], and [`QueueRuntime`], a model of what Cloudflare Queues does
//! around a consumer: batches, per-message ack and retry, `max_retries`, the move to the
//! dead-letter queue, and redelivery of every message of an invocation that died.
//! Every port call goes through the schedule's [`Faults`].

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use crate::queues::{Disposition, Incoming};
use crate::sim::Faults;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{DeadLetters, MessageFailure, PortError, Redrive};
use gatehouse_core::queue::{body_digest, DeadLetter, DEAD_LETTER_MARK};

/// A failure count, as `queue_failures` keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Noted {
    pub queue: String,
    pub body_digest: String,
    pub first_failed_at: i64,
    pub last_failed_at: i64,
    pub last_error: String,
    pub failures: u32,
}

/// `dead_letters` (by id, like its primary key) and `queue_failures` (by message id).
pub struct FakeDeadLetters {
    pub faults: Rc<Faults>,
    pub letters: RefCell<BTreeMap<String, DeadLetter>>,
    pub failures: RefCell<BTreeMap<String, Noted>>,
}

impl FakeDeadLetters {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeDeadLetters { faults, letters: RefCell::default(), failures: RefCell::default() }
    }
}

impl DeadLetters for FakeDeadLetters {
    async fn note_failures(&self, failures: &[MessageFailure]) -> Result<Vec<u32>, PortError> {
        self.faults
            .run("d1 note queue failures", || {
                let mut table = self.failures.borrow_mut();
                failures
                    .iter()
                    .map(|f| {
                        let noted = table.entry(f.message_id.clone()).or_insert_with(|| Noted {
                            queue: f.queue.clone(),
                            body_digest: f.body_digest.clone(),
                            first_failed_at: f.at_ms,
                            last_failed_at: f.at_ms,
                            last_error: f.error.clone(),
                            failures: 0,
                        });
                        noted.last_failed_at = f.at_ms;
                        noted.last_error = f.error.clone();
                        noted.failures += 1;
                        noted.failures
                    })
                    .collect()
            })
            .await
    }

    async fn keep(&self, letters: &[DeadLetter]) -> Result<(), PortError> {
        self.faults
            .run("d1 keep dead letters", || {
                let mut failures = self.failures.borrow_mut();
                let mut table = self.letters.borrow_mut();
                for letter in letters {
                    let digest = body_digest(&letter.body);
                    let same = |id: &String, n: &Noted| {
                        *id == letter.id || (n.queue == letter.queue && n.body_digest == digest)
                    };
                    let noted = failures
                        .iter()
                        .filter(|(id, n)| same(id, n))
                        .max_by_key(|(id, n)| (**id == letter.id, n.last_failed_at))
                        .map(|(_, n)| n.clone());
                    let mut kept = letter.clone();
                    if let Some(n) = noted {
                        kept.first_failed_at = n.first_failed_at;
                        kept.last_error = Some(n.last_error);
                        kept.attempts = n.failures;
                    }
                    table.entry(letter.id.clone()).or_insert(kept);
                    failures.retain(|id, n| !same(id, n));
                }
            })
            .await
    }

    async fn dead_letters(
        &self,
        queue: Option<&str>,
        page: &PageRequest,
    ) -> Result<Vec<DeadLetter>, PortError> {
        self.faults
            .run("d1 list dead letters", || {
                let mut all: Vec<DeadLetter> = self
                    .letters
                    .borrow()
                    .values()
                    .filter(|l| queue.is_none_or(|q| l.queue == q))
                    .filter(|l| {
                        page.after.as_ref().is_none_or(|c| (l.dead_at, l.id.as_str()) < (c.ts, c.id.as_str()))
                    })
                    .cloned()
                    .collect();
                all.sort_by(|a, b| (b.dead_at, &b.id).cmp(&(a.dead_at, &a.id)));
                all.truncate(page.fetch_len());
                all
            })
            .await
    }

    async fn undriven(&self, ids: Option<&[String]>, limit: usize) -> Result<Vec<DeadLetter>, PortError> {
        self.faults
            .run("d1 undriven dead letters", || {
                let mut found: Vec<DeadLetter> = self
                    .letters
                    .borrow()
                    .values()
                    .filter(|l| l.redriven_at.is_none() && ids.is_none_or(|ids| ids.contains(&l.id)))
                    .cloned()
                    .collect();
                found.sort_by(|a, b| (a.dead_at, &a.id).cmp(&(b.dead_at, &b.id)));
                found.truncate(limit);
                found
            })
            .await
    }

    async fn mark_redriven(&self, id: &str, now_ms: i64) -> Result<(), PortError> {
        self.faults
            .run("d1 mark dead letter re-driven", || {
                if let Some(letter) = self.letters.borrow_mut().get_mut(id) {
                    letter.redriven_at = Some(now_ms);
                }
            })
            .await
    }
}

/// The three producers, as the re-drive uses them: what they were asked to send, in order.
pub struct FakeRedrive {
    pub faults: Rc<Faults>,
    pub sent: RefCell<Vec<(String, String)>>,
}

impl FakeRedrive {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeRedrive { faults, sent: RefCell::default() }
    }
}

impl Redrive for FakeRedrive {
    async fn resend(&self, queue: &str, body: &str) -> Result<(), PortError> {
        self.faults
            .run("queue re-send", || self.sent.borrow_mut().push((queue.to_owned(), body.to_owned())))
            .await
    }
}

/// A message waiting in a queue, with the failures the runtime counted for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    pub id: String,
    pub body: String,
    pub sent_ms: i64,
    pub failures: u32,
}

impl QueuedMessage {
    pub fn incoming(&self) -> Incoming {
        Incoming { id: self.id.clone(), body: self.body.clone(), sent_ms: self.sent_ms }
    }
}

/// Cloudflare Queues around one consumer, per queue name: a message retried more than
/// `max_retries` times moves to `<name>-dlq` (under its own id or a new one, as
/// `dead_letters_keep_ids` says); a dead-letter queue's own exhausted messages are dropped.
pub struct QueueRuntime {
    pub max_retries: u32,
    pub dead_letters_keep_ids: bool,
    pub queues: RefCell<BTreeMap<String, VecDeque<QueuedMessage>>>,
    /// Messages a dead-letter queue dropped after its retries: lost.
    pub dropped: RefCell<Vec<QueuedMessage>>,
    /// Every message moved to a dead-letter queue: (its id there, its body).
    pub moved: RefCell<Vec<(String, String)>>,
    next_id: Cell<u64>,
}

impl QueueRuntime {
    pub fn new(max_retries: u32, dead_letters_keep_ids: bool) -> Self {
        QueueRuntime {
            max_retries,
            dead_letters_keep_ids,
            queues: RefCell::default(),
            dropped: RefCell::default(),
            moved: RefCell::default(),
            next_id: Cell::new(1),
        }
    }

    fn new_id(&self) -> String {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        format!("msg-{id:06}")
    }

    /// A producer's send: a new message with a new id.
    pub fn send(&self, queue: &str, body: &str, now_ms: i64) {
        let message =
            QueuedMessage { id: self.new_id(), body: body.to_owned(), sent_ms: now_ms, failures: 0 };
        self.queues.borrow_mut().entry(queue.to_owned()).or_default().push_back(message);
    }

    /// The queues that have messages waiting, by name.
    pub fn busy(&self) -> Vec<String> {
        self.queues.borrow().iter().filter(|(_, q)| !q.is_empty()).map(|(name, _)| name.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.busy().is_empty()
    }

    /// Up to `size` messages of `queue`, in order.
    pub fn take_batch(&self, queue: &str, size: usize) -> Vec<QueuedMessage> {
        let mut queues = self.queues.borrow_mut();
        let waiting = queues.entry(queue.to_owned()).or_default();
        let n = size.min(waiting.len());
        waiting.drain(..n).collect()
    }

    /// Applies the consumer's answer for a batch; `None` means the invocation died, so every
    /// message of the batch failed.
    pub fn dispose(&self, queue: &str, batch: Vec<QueuedMessage>, dispositions: Option<Vec<Disposition>>) {
        let retried: Vec<bool> = match dispositions {
            Some(dispositions) => {
                assert_eq!(dispositions.len(), batch.len(), "one disposition per message");
                dispositions.iter().map(|s| matches!(s, Disposition::Retry { .. })).collect()
            }
            None => vec![true; batch.len()],
        };
        for (mut message, retry) in batch.into_iter().zip(retried) {
            if !retry {
                continue;
            }
            message.failures += 1;
            if message.failures <= self.max_retries {
                self.queues.borrow_mut().entry(queue.to_owned()).or_default().push_back(message);
            } else if queue.contains(DEAD_LETTER_MARK) {
                self.dropped.borrow_mut().push(message);
            } else {
                let id = if self.dead_letters_keep_ids { message.id } else { self.new_id() };
                self.moved.borrow_mut().push((id.clone(), message.body.clone()));
                let moved = QueuedMessage { id, body: message.body, sent_ms: message.sent_ms, failures: 0 };
                self.queues
                    .borrow_mut()
                    .entry(format!("{queue}{DEAD_LETTER_MARK}"))
                    .or_default()
                    .push_back(moved);
            }
        }
    }
}
