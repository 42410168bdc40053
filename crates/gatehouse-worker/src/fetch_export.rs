//! The fetch handler as the runtime calls it. `#[event(fetch)]` hands every request to
//! wasm-bindgen's executor: a promise, a microtask to start the future, a closure call to poll it
//! and another to resolve the promise, for every request, also one that never waits. Here the
//! request's future is polled once in the call itself: a request answered without waiting on I/O
//! (`/health`, a key admitted from its lease, most refusals) returns its `Response` directly; one
//! that waits continues on the executor from where it stopped.
//!
//! The first poll has no executor task yet, so it runs with a [`Forward`] waker: whatever it woke
//! later reaches the task's own waker. A future that keeps the waker of its first poll (worker's
//! `Delay`, under every deadline) so still wakes the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::future::poll_fn;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{console_error, Env, Result};

/// A waker handed to a future before its task exists: it wakes the waker that polled last.
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

/// The export workerd calls for each request (the module's `fetch`).
#[wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: Env, ctx: worker::worker_sys::Context) -> JsValue {
    let mut answer: Pin<Box<dyn Future<Output = Result<web_sys::Response>>>> =
        Box::pin(crate::entry::fetch(req, env, worker::Context::new(ctx)));
    let forward = Arc::new(Forward::default());
    let first = Waker::from(forward.clone());
    if let Poll::Ready(result) = answer.as_mut().poll(&mut Context::from_waker(&first)) {
        return response(result);
    }
    wasm_bindgen_futures::future_to_promise(async move {
        let result = poll_fn(|cx| {
            forward.follow(cx.waker());
            answer.as_mut().poll(cx)
        })
        .await;
        Ok(response(result))
    })
    .into()
}

/// The answer, or the runtime's 500 for a failure outside the pipeline (as `#[event(fetch)]`).
fn response(result: Result<web_sys::Response>) -> JsValue {
    match result {
        Ok(response) => response.into(),
        Err(e) => {
            console_error!("{e}");
            worker::Response::error("INTERNAL SERVER ERROR", 500)
                .map(web_sys::Response::from)
                .map_or(JsValue::NULL, Into::into)
        }
    }
}
