//! A request answered in the call when it needs no wait (SPEC §16, the fixed floor). The worker's
//! fetch export polls the request's future once itself: `/health`, a key admitted from its lease
//! and most refusals are ready at once and return their answer directly, without the executor's
//! promise, microtask and closure calls. A future that waits goes on in the executor as
//! [`Later`], from where it stopped.
//!
//! The first poll has no executor task yet, so it runs with a `Forward` waker, and every later
//! poll tells it the task's waker: a future that keeps the waker of its first poll — worker's
//! `Delay`, under every deadline — so still wakes the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// The answer now, or the future to finish in an executor.
pub enum Now<T> {
    Ready(T),
    Later(Later<T>),
}

/// A future polled once already; polling it goes on from there.
pub struct Later<T> {
    future: Pin<Box<dyn Future<Output = T>>>,
    forward: Arc<Forward>,
}

/// Polls `future` once, with no executor.
pub fn answer_now<T>(future: impl Future<Output = T> + 'static) -> Now<T> {
    let mut future: Pin<Box<dyn Future<Output = T>>> = Box::pin(future);
    let forward = Arc::new(Forward::default());
    let first = Waker::from(forward.clone());
    match future.as_mut().poll(&mut Context::from_waker(&first)) {
        Poll::Ready(answer) => Now::Ready(answer),
        Poll::Pending => Now::Later(Later { future, forward }),
    }
}

impl<T> Future for Later<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.forward.follow(cx.waker());
        self.future.as_mut().poll(cx)
    }
}

/// A waker handed out before the task exists: it wakes the waker that polled last.
#[derive(Default)]
struct Forward(Mutex<Option<Waker>>);

impl Forward {
    fn follow(&self, waker: &Waker) {
        let mut current = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !current.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *current = Some(waker.clone());
        }
    }
}

impl Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // Before the task's first poll nothing needs waking: that poll looks anyway.
        let waker = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    /// Like worker's `Delay`: keeps the waker of its first poll only, and is done once `fired`.
    struct KeepsFirstWaker {
        fired: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for KeepsFirstWaker {
        type Output = &'static str;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            if self.fired.load(Ordering::SeqCst) {
                return Poll::Ready("fired");
            }
            self.waker.lock().unwrap().get_or_insert_with(|| cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn an_answer_that_needs_no_wait_is_ready_in_the_call() {
        assert!(matches!(answer_now(async { 7 }), Now::Ready(7)));
    }

    /// The executor's task: records a wake and unparks the thread that polls.
    struct Task {
        woken: AtomicBool,
        thread: std::thread::Thread,
    }

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.woken.store(true, Ordering::SeqCst);
            self.thread.unpark();
        }
    }

    /// Polls `later` to its end as an executor would, failing when the task is not woken within 5 s.
    fn finish<T>(mut later: Later<T>) -> T {
        let task = Arc::new(Task { woken: AtomicBool::new(false), thread: std::thread::current() });
        let waker = Waker::from(task.clone());
        loop {
            if let Poll::Ready(answer) = Pin::new(&mut later).poll(&mut Context::from_waker(&waker)) {
                return answer;
            }
            let waited = std::time::Instant::now();
            while !task.woken.swap(false, Ordering::SeqCst) {
                assert!(
                    waited.elapsed() < Duration::from_secs(5),
                    "the task was never woken: the request would hang"
                );
                std::thread::park_timeout(Duration::from_millis(100));
            }
        }
    }

    #[test]
    fn a_future_that_keeps_its_first_waker_still_wakes_the_task_that_finishes_it() {
        let (fired, waker) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(None::<Waker>)));
        let timer = KeepsFirstWaker { fired: fired.clone(), waker: waker.clone() };
        let Now::Later(later) = answer_now(timer) else { panic!("it waits") };
        // The timer fires on another thread, waking the waker of the first poll: only the forward
        // reaches the executor's task.
        let firing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            fired.store(true, Ordering::SeqCst);
            let first = waker.lock().unwrap().take().expect("the first poll left its waker");
            first.wake();
        });
        assert_eq!(finish(later), "fired");
        firing.join().unwrap();
    }
}
