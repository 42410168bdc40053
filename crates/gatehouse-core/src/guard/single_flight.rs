//! One load at a time: the first caller runs it, the callers that come while it runs wait for its
//! outcome instead of running their own. The key guard loads its record from D1 this way, so a
//! burst of requests to a guard that has just started makes one D1 query, not one each.
//!
//! A waiter is woken by the runner's task. That is fine inside a Durable Object, whose requests
//! share one I/O context; it would not be across a worker's requests. If the runner is dropped
//! before its load ends (its request was cancelled), a waiter runs the load itself.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

pub struct SingleFlight<T> {
    current: RefCell<Option<Rc<Flight<T>>>>,
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        Self { current: RefCell::new(None) }
    }
}

struct Flight<T> {
    landed: Cell<bool>,
    /// `None` once landed: the runner was dropped before its load ended.
    outcome: RefCell<Option<T>>,
    waiting: RefCell<Vec<Waker>>,
}

impl<T> SingleFlight<T> {
    /// Whether a load is in flight.
    pub fn is_running(&self) -> bool {
        self.current.borrow().is_some()
    }

    /// How many callers wait for the load in flight.
    pub fn waiting(&self) -> usize {
        self.current.borrow().as_ref().map_or(0, |flight| flight.waiting.borrow().len())
    }
}

impl<T: Clone> SingleFlight<T> {
    /// The outcome of `load`, run by this caller or by the one whose load was running when it came.
    pub async fn run<F: Future<Output = T>>(&self, load: impl FnOnce() -> F) -> T {
        let mut load = Some(load);
        loop {
            let running = self.current.borrow().clone();
            if let Some(flight) = running {
                match (Landing { flight: &flight, slot: None }).await {
                    Some(outcome) => return outcome,
                    None => continue,
                }
            }
            let flight = Rc::new(Flight {
                landed: Cell::new(false),
                outcome: RefCell::new(None),
                waiting: RefCell::new(Vec::new()),
            });
            self.current.replace(Some(flight.clone()));
            let runner = Runner { cell: self, flight };
            let outcome = load.take().expect("a caller runs its load at most once")().await;
            runner.flight.outcome.replace(Some(outcome.clone()));
            return outcome;
        }
    }
}

/// Lands its flight when dropped, with or without an outcome, and wakes whoever waits for it.
struct Runner<'a, T> {
    cell: &'a SingleFlight<T>,
    flight: Rc<Flight<T>>,
}

impl<T> Drop for Runner<'_, T> {
    fn drop(&mut self) {
        // A flight starts only when none is running: the running one is this one.
        self.flight.landed.set(true);
        self.cell.current.replace(None);
        for waker in self.flight.waiting.take() {
            waker.wake();
        }
    }
}

/// Resolves when its flight lands: to the outcome, or `None` when the runner was dropped.
struct Landing<'a, T> {
    flight: &'a Flight<T>,
    /// Where this caller's waker is in the flight's list, once it is there.
    slot: Option<usize>,
}

impl<T: Clone> Future for Landing<'_, T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if self.flight.landed.get() {
            return Poll::Ready(self.flight.outcome.borrow().clone());
        }
        let mut waiting = self.flight.waiting.borrow_mut();
        match self.slot {
            Some(i) => waiting[i].clone_from(cx.waker()),
            None => {
                waiting.push(cx.waker().clone());
                let slot = waiting.len() - 1;
                drop(waiting);
                self.slot = Some(slot);
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use futures_util::future::{join, poll_fn};

    use super::SingleFlight;

    /// A load that stays pending until `open` is set.
    async fn gated(open: &Cell<bool>, runs: &Cell<u32>, value: u32) -> u32 {
        runs.set(runs.get() + 1);
        poll_fn(|cx| {
            if open.get() {
                Poll::Ready(value)
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn callers_that_come_while_a_load_runs_share_its_outcome() {
        let flight = SingleFlight::default();
        let (open, runs) = (Cell::new(false), Cell::new(0));
        let mut both = pin!(join(
            flight.run(|| gated(&open, &runs, 1)),
            join(flight.run(|| gated(&open, &runs, 2)), flight.run(|| gated(&open, &runs, 3))),
        ));
        assert!(poll_once(both.as_mut()).is_pending());
        assert!(poll_once(both.as_mut()).is_pending());
        assert_eq!(flight.waiting(), 2);
        open.set(true);
        assert_eq!(pollster::block_on(both), (1, (1, 1)));
        assert_eq!(runs.get(), 1);
        // Once landed, the next caller runs a load of its own.
        assert_eq!(pollster::block_on(flight.run(|| gated(&open, &runs, 4))), 4);
        assert_eq!(runs.get(), 2);
    }

    #[test]
    fn a_waiter_runs_the_load_itself_when_the_runner_is_dropped() {
        let flight = SingleFlight::default();
        let (open, runs) = (Cell::new(false), Cell::new(0));
        let mut runner = Box::pin(flight.run(|| gated(&open, &runs, 1)));
        assert!(poll_once(runner.as_mut()).is_pending());
        let mut waiter = pin!(flight.run(|| gated(&open, &runs, 2)));
        assert!(poll_once(waiter.as_mut()).is_pending());
        assert_eq!(runs.get(), 1);
        drop(runner);
        open.set(true);
        assert_eq!(pollster::block_on(waiter), 2);
        assert_eq!(runs.get(), 2);
    }
}
