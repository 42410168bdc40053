//! Audit rows of one isolate's concurrent requests leave in one send (SPEC §16).
//!
//! At most one send is in flight per isolate. A row that arrives while one is in flight, or while
//! other rows wait, waits too; the first waiting request to look again sends every waiting row (up
//! to [`MAX_BATCH`]). Under load a send so leaves about every [`POLL_MS`] with the rows that
//! gathered, not one per round trip of the previous send; a lone request sends at once, exactly as
//! without the outbox. Each request still awaits its own row's send (its `wait_until` covers it)
//! and gets that send's result, so a failed send falls back to the direct write for every row in
//! it, and the consumer's insert (once per `request_id`) keeps a row sent twice one row.
//!
//! A send that never finishes holds nothing (SPEC §19). The sender gives up after
//! [`SEND_DEADLINE_MS`] (its rows fall back to the direct write). And since workerd may abandon a
//! request's future without dropping it (when `waitUntil`'s time ends), a sender may never look
//! again at all: a waiting request that has seen one send in flight for [`TAKEOVER_MS`] takes its
//! rows back into the outbox, so the next send carries them — the abandoned sender's own row too.
//! A sender that comes back after that finds its send taken over and leaves the rows alone.
//!
//! A waiting request looks again every [`POLL_MS`] on a timer of its own. It is never woken by the
//! other request's send: workerd cancels a request whose promise waits only on another request's
//! I/O ("the Worker's code had hung"), which `tests/e2e/audit.test.mjs` showed.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures_util::future::{select, Either};

use gatehouse_core::audit::AuditRow;
use gatehouse_core::ports::{AuditSink, PortError};

/// Rows per send: they travel packed (`adapters::audit`), and a consumer batch of such messages
/// stays one D1 statement of a bounded size.
pub const MAX_BATCH: usize = 100;
/// How often a request whose row waits looks again. The wait is after the response, so no client
/// sees it; a longer one lets more rows gather for a send (each send costs CPU: under wrangler dev
/// about half a millisecond, against ~0.1 ms for a request's timer).
pub const POLL_MS: u64 = 25;
/// How long a sender waits for the queue before its rows fall back to the direct write.
pub const SEND_DEADLINE_MS: u64 = 5_000;
/// How long a waiting request sees one send in flight before it takes that send's rows back: a
/// sender alive gives up at [`SEND_DEADLINE_MS`], so one still in flight then was abandoned.
pub const TAKEOVER_MS: u64 = 2 * SEND_DEADLINE_MS;

type Slot = Rc<Cell<Option<Result<(), PortError>>>>;
type Entry = (Vec<AuditRow>, Slot);

/// The isolate's rows waiting for a send, and the send in flight, shared by every request it serves.
#[derive(Default)]
pub struct Outbox {
    pending: RefCell<Vec<Entry>>,
    /// The send in flight: its number and its rows with their owners.
    in_flight: RefCell<Option<(u64, Vec<Entry>)>>,
    sends: Cell<u64>,
}

impl Outbox {
    /// Whether a send is in flight.
    pub fn is_sending(&self) -> bool {
        self.in_flight.borrow().is_some()
    }

    /// The number of the send in flight, if any.
    fn in_flight(&self) -> Option<u64> {
        self.in_flight.borrow().as_ref().map(|(n, _)| *n)
    }

    /// Ends send `number` with `result` for its rows' owners, unless it was taken over.
    fn finish_send(&self, number: u64, result: Result<(), PortError>) {
        let mut in_flight = self.in_flight.borrow_mut();
        if in_flight.as_ref().is_some_and(|(n, _)| *n == number) {
            for (_, slot) in in_flight.take().expect("checked").1 {
                slot.set(Some(result.clone()));
            }
        }
    }

    /// Puts the rows of send `number` back at the front of the waiting rows.
    fn take_over(&self, number: u64) {
        let mut in_flight = self.in_flight.borrow_mut();
        if in_flight.as_ref().is_some_and(|(n, _)| *n == number) {
            let entries = in_flight.take().expect("checked").1;
            self.pending.borrow_mut().splice(0..0, entries);
        }
    }
}

pub use gatehouse_core::ports::Pause;

/// An [`AuditSink`] whose concurrent calls share sends through the isolate's [`Outbox`].
pub struct Coalesced<A, T> {
    pub outbox: Rc<Outbox>,
    pub inner: A,
    pub timer: T,
}

impl<A: AuditSink, T: Pause> AuditSink for Coalesced<A, T> {
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let outbox = &self.outbox;
        let mine: Slot = Rc::default();
        let mut joined = {
            let mut pending = outbox.pending.borrow_mut();
            pending.push((rows.to_vec(), mine.clone()));
            pending.len() > 1
        };
        // The send in flight this request has been waiting on, and for how long.
        let mut watched: Option<(u64, u64)> = None;
        loop {
            if let Some(result) = mine.take() {
                return result;
            }
            if let Some(number) = outbox.in_flight() {
                let waited = match watched {
                    Some((n, waited)) if n == number => waited,
                    _ => 0,
                };
                if waited >= TAKEOVER_MS {
                    outbox.take_over(number);
                    watched = None;
                    continue;
                }
                watched = Some((number, waited + POLL_MS));
                self.timer.pause(POLL_MS).await;
                continue;
            }
            if joined {
                joined = false;
                self.timer.pause(POLL_MS).await;
                continue;
            }
            // This request sends: its own rows first, then whoever else is waiting.
            let number = outbox.sends.get() + 1;
            outbox.sends.set(number);
            let mut batch = Vec::new();
            let mut entries = Vec::new();
            {
                let mut pending = outbox.pending.borrow_mut();
                let own = pending.iter().position(|(_, slot)| Rc::ptr_eq(slot, &mine));
                if let Some(i) = own {
                    let entry = pending.remove(i);
                    pending.insert(0, entry);
                }
                while let Some((rows, _)) = pending.first() {
                    if !batch.is_empty() && batch.len() + rows.len() > MAX_BATCH {
                        break;
                    }
                    let entry = pending.remove(0);
                    batch.extend(entry.0.iter().cloned());
                    entries.push(entry);
                }
            }
            *outbox.in_flight.borrow_mut() = Some((number, entries));
            let sending = Sending { outbox, number };
            let send = std::pin::pin!(self.inner.record(&batch));
            let deadline = std::pin::pin!(self.timer.pause(SEND_DEADLINE_MS));
            let result = match select(send, deadline).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => Err(PortError(format!("audit send took over {SEND_DEADLINE_MS} ms"))),
            };
            sending.finish(result);
        }
    }
}

/// The send in flight. Dropped unfinished (the isolate stopped it), it tells its rows' owners it
/// failed, so they write directly; the insert once per `request_id` makes a row sent anyway one row.
struct Sending<'a> {
    outbox: &'a Outbox,
    number: u64,
}

impl Sending<'_> {
    fn finish(self, result: Result<(), PortError>) {
        self.outbox.finish_send(self.number, result);
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.outbox.finish_send(self.number, Err(PortError("audit send abandoned".into())));
    }
}

#[cfg(test)]
mod tests {
    use futures_util::future::join_all;

    use std::future::Future;
    use std::task::{Context, Waker};

    use super::*;
    use crate::sim::later;
    use crate::testing::Yield;

    /// A queue that takes a while (one yield) and remembers each send's rows.
    #[derive(Default)]
    struct SlowQueue {
        sends: RefCell<Vec<Vec<String>>>,
        fail: Cell<bool>,
    }

    impl AuditSink for SlowQueue {
        async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
            later(1).await;
            self.sends.borrow_mut().push(rows.iter().map(|r| r.request_id.clone()).collect());
            if self.fail.get() {
                return Err(PortError("queue down".into()));
            }
            Ok(())
        }
    }

    fn row(id: &str) -> AuditRow {
        AuditRow::new(id.into(), 0, "GET".into(), "/".into())
    }

    fn record_all(sink: &Coalesced<SlowQueue, Yield>, ids: &[&str]) -> Vec<Result<(), PortError>> {
        pollster::block_on(join_all(ids.iter().map(|id| async move { sink.record(&[row(id)]).await })))
    }

    #[test]
    fn a_lone_row_leaves_at_once_and_rows_arriving_during_a_send_leave_together() {
        let sink = Coalesced { outbox: Rc::default(), inner: SlowQueue::default(), timer: Yield };
        assert_eq!(record_all(&sink, &["a"]), vec![Ok(())]);
        assert_eq!(record_all(&sink, &["b", "c", "d", "e"]), vec![Ok(()); 4]);
        assert_eq!(*sink.inner.sends.borrow(), [vec!["a"], vec!["b"], vec!["c", "d", "e"]]);
    }

    #[test]
    fn a_row_arriving_while_others_wait_joins_them_instead_of_sending_alone() {
        let sink = Coalesced { outbox: Rc::default(), inner: SlowQueue::default(), timer: Yield };
        let poll = |f: &mut std::pin::Pin<Box<dyn Future<Output = Result<(), PortError>> + '_>>| {
            f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        };
        let (a, b, c) = ([row("a")], [row("b")], [row("c")]);
        let mut a: std::pin::Pin<Box<dyn Future<Output = _>>> = Box::pin(sink.record(&a));
        let mut b: std::pin::Pin<Box<dyn Future<Output = _>>> = Box::pin(sink.record(&b));
        assert!(poll(&mut a).is_pending(), "a is being sent");
        assert!(poll(&mut b).is_pending(), "b waits for a's send");
        assert!(poll(&mut a).is_ready());
        // No send in flight now, but b waits: c joins it.
        let mut c: std::pin::Pin<Box<dyn Future<Output = _>>> = Box::pin(sink.record(&c));
        assert!(poll(&mut c).is_pending());
        assert_eq!(*sink.inner.sends.borrow(), [vec!["a"]]);
        assert_eq!(pollster::block_on(futures_util::future::join(b, c)), (Ok(()), Ok(())));
        assert_eq!(*sink.inner.sends.borrow(), [vec!["a"], vec!["b", "c"]]);
    }

    #[test]
    fn a_failed_send_fails_every_row_in_it_and_only_those() {
        let sink = Coalesced { outbox: Rc::default(), inner: SlowQueue::default(), timer: Yield };
        sink.inner.fail.set(true);
        let results = record_all(&sink, &["a", "b", "c"]);
        assert!(results.iter().all(|r| r.as_ref().unwrap_err().0 == "queue down"), "{results:?}");
        assert_eq!(sink.inner.sends.borrow().concat(), ["a", "b", "c"]);
    }

    #[test]
    fn a_send_takes_at_most_a_queue_batch() {
        let sink = Coalesced { outbox: Rc::default(), inner: SlowQueue::default(), timer: Yield };
        let ids: Vec<String> = (0..250).map(|i| format!("r{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert!(record_all(&sink, &ids).iter().all(Result::is_ok));
        let sizes: Vec<usize> = sink.inner.sends.borrow().iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, MAX_BATCH, MAX_BATCH, 49]);
        assert_eq!(sink.inner.sends.borrow().concat(), ids, "every row once, in order");
    }

    #[test]
    fn a_send_stopped_midway_fails_its_rows_and_frees_the_outbox() {
        let sink = Coalesced { outbox: Rc::default(), inner: SlowQueue::default(), timer: Yield };
        // Polled once: "a" is handed to the queue, then its request stops.
        let rows = [row("a")];
        let mut first = Box::pin(sink.record(&rows));
        assert!(first.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        assert!(sink.outbox.is_sending());
        drop(first);
        assert!(!sink.outbox.is_sending());
        assert_eq!(record_all(&sink, &["b"]), vec![Ok(())]);
    }

    /// A queue whose first send never finishes (SPEC §19's hang), then answers.
    #[derive(Default)]
    struct HangingQueue {
        calls: Cell<usize>,
        sent: RefCell<Vec<String>>,
    }

    impl AuditSink for HangingQueue {
        async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
            self.calls.set(self.calls.get() + 1);
            if self.calls.get() == 1 {
                std::future::pending::<()>().await;
            }
            self.sent.borrow_mut().extend(rows.iter().map(|r| r.request_id.clone()));
            Ok(())
        }
    }

    #[test]
    fn a_send_that_hangs_times_out_and_its_rows_fall_back() {
        let sink = Coalesced { outbox: Rc::default(), inner: HangingQueue::default(), timer: Yield };
        let rows = [row("a")];
        let result = pollster::block_on(sink.record(&rows));
        assert!(result.unwrap_err().0.contains("took over"), "the hung send gives up");
        assert!(!sink.outbox.is_sending());
        assert_eq!(pollster::block_on(sink.record(&[row("b")])), Ok(()));
        assert_eq!(*sink.inner.sent.borrow(), ["b"]);
    }

    /// workerd abandons a request's future without dropping it: the sender is never polled again,
    /// its deadline never fires. The next requests take its rows over and send them, once.
    #[test]
    fn rows_of_a_sender_abandoned_without_drop_are_taken_over_and_sent() {
        let sink = Coalesced { outbox: Rc::default(), inner: HangingQueue::default(), timer: Yield };
        let rows = [row("a")];
        let mut abandoned = Box::pin(sink.record(&rows));
        assert!(abandoned.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        assert!(sink.outbox.is_sending());
        // Never polled again, never dropped (until the end of the test).
        let sink = &sink;
        let results =
            pollster::block_on(join_all(["b", "c"].map(|id| async move { sink.record(&[row(id)]).await })));
        assert_eq!(results, vec![Ok(()), Ok(())]);
        let mut sent = sink.inner.sent.borrow().clone();
        sent.sort();
        assert_eq!(sent, ["a", "b", "c"], "the abandoned row is sent by the others, once");
        assert!(!sink.outbox.is_sending());
        assert_eq!(pollster::block_on(sink.record(&[row("d")])), Ok(()));
        // Dropped at last: it was taken over, so it finishes nothing and frees nothing twice.
        drop(abandoned);
        assert_eq!(sink.inner.sent.borrow().len(), 4);
    }
}
