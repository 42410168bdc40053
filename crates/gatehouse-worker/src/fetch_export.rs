//! The fetch handler as the runtime calls it, instead of `#[event(fetch)]` (which hands every
//! request to wasm-bindgen's executor): a request that needs no wait is answered in the call, one
//! that waits is finished by the executor (`gatehouse_app::answer_now`).

use gatehouse_app::answer_now::{answer_now, Now};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{console_error, Env, Result};

/// The export workerd calls for each request (the module's `fetch`).
#[wasm_bindgen(js_name = fetch)]
pub fn fetch(req: web_sys::Request, env: Env, ctx: worker::worker_sys::Context) -> JsValue {
    match answer_now(crate::entry::fetch(req, env, worker::Context::new(ctx))) {
        Now::Ready(result) => response(result),
        Now::Later(later) => {
            wasm_bindgen_futures::future_to_promise(async move { Ok(response(later.await)) }).into()
        }
    }
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
