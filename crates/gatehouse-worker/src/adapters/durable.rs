//! One round trip to a Durable Object: a JSON command in, a JSON answer out, counted on the meter
//! — over RPC to an object with an `ask` method ([`ask`]), else over `fetch` ([`call`]).

use serde::{de::DeserializeOwned, Serialize};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use worker::{Method, ObjectNamespace, Request, RequestInit};

use super::js_error;
use crate::adapters::clock::object_name;
use crate::adapters::deadline::within;
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{Meter, PortError};

/// Sends `command` to the object named `name` (at `url`, which Durable Objects require but never
/// resolve) and reads its answer.
pub async fn call<C: Serialize, A: DeserializeOwned>(
    namespace: &ObjectNamespace,
    meter: &Meter,
    url: &str,
    name: &str,
    command: &C,
) -> Result<A, PortError> {
    Meter::count(&meter.durable_object_calls);
    let stub = namespace.get_by_name(&object_name(name)).map_err(PortError::from_display)?;
    let body = serde_json::to_string(command).map_err(PortError::from_display)?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&body)));
    let request = Request::new_with_init(url, &init).map_err(PortError::from_display)?;
    let answer = async {
        let mut response = stub.fetch_with_request(request).await.map_err(PortError::from_display)?;
        if response.status_code() != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(PortError(format!("{url} answered {}: {text}", response.status_code())));
        }
        response.json().await.map_err(PortError::from_display)
    };
    within(deadline::DURABLE_OBJECT_MS, name, answer).await
}

#[wasm_bindgen]
extern "C" {
    /// The stub of an object whose class has an `ask` RPC method (the KeyGuard).
    type AskStub;
    #[wasm_bindgen(method, catch)]
    fn ask(this: &AskStub, command: &str) -> Result<js_sys::Promise, JsValue>;
}

/// Sends `command` to the object named `name` over RPC and reads its answer: one string each way,
/// no `Request` or `Response` built on either side (SPEC §16).
pub async fn ask<C: Serialize, A: DeserializeOwned>(
    namespace: &ObjectNamespace,
    meter: &Meter,
    name: &str,
    command: &C,
) -> Result<A, PortError> {
    Meter::count(&meter.durable_object_calls);
    let stub: AskStub =
        namespace.get_by_name(&object_name(name)).map_err(PortError::from_display)?.into_rpc();
    let body = serde_json::to_string(command).map_err(PortError::from_display)?;
    let asked = JsFuture::from(stub.ask(&body).map_err(js_error)?);
    let started = crate::adapters::clock::now_ms();
    let answer = within(deadline::DURABLE_OBJECT_MS, name, async { asked.await.map_err(js_error) }).await;
    let waited = crate::adapters::clock::now_ms() - started;
    meter.durable_object_ms.set(meter.durable_object_ms.get() + waited);
    let answer = answer?;
    let text = answer.as_string().ok_or_else(|| PortError(format!("{name} answered {answer:?}")))?;
    serde_json::from_str(&text).map_err(PortError::from_display)
}
