//! One round trip to a Durable Object: a JSON command in, a JSON answer out, counted on the meter.

use serde::{de::DeserializeOwned, Serialize};
use wasm_bindgen::JsValue;
use worker::{Method, ObjectNamespace, Request, RequestInit};

use crate::ports::{Meter, PortError};

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
    let stub = namespace.get_by_name(name).map_err(PortError::from_display)?;
    let body = serde_json::to_string(command).map_err(PortError::from_display)?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(JsValue::from_str(&body)));
    let request = Request::new_with_init(url, &init).map_err(PortError::from_display)?;
    let mut response = stub.fetch_with_request(request).await.map_err(PortError::from_display)?;
    if response.status_code() != 200 {
        let text = response.text().await.unwrap_or_default();
        return Err(PortError(format!("{url} answered {}: {text}", response.status_code())));
    }
    response.json().await.map_err(PortError::from_display)
}
