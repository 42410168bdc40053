//! The [`KeyGuard`] port over the `KEY_GUARD` Durable Object namespace: one `stub.fetch` per call.

use wasm_bindgen::JsValue;
use worker::{Method, ObjectNamespace, Request, RequestInit};

use crate::guard::protocol::{GuardAnswer, GuardCommand, URL};
use crate::ports::{Authorization, KeyGuard, PortError};

pub struct GuardClient {
    namespace: ObjectNamespace,
}

impl GuardClient {
    pub fn new(namespace: ObjectNamespace) -> Self {
        Self { namespace }
    }

    async fn send(&self, key_hash: &str, command: &GuardCommand) -> Result<GuardAnswer, PortError> {
        let stub = self
            .namespace
            .get_by_name(key_hash)
            .map_err(PortError::from_display)?;
        let body = serde_json::to_string(command).map_err(PortError::from_display)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_body(Some(JsValue::from_str(&body)));
        let request = Request::new_with_init(URL, &init).map_err(PortError::from_display)?;
        let mut response = stub
            .fetch_with_request(request)
            .await
            .map_err(PortError::from_display)?;
        if response.status_code() != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(PortError(format!(
                "key guard answered {}: {text}",
                response.status_code()
            )));
        }
        response.json().await.map_err(PortError::from_display)
    }
}

impl KeyGuard for GuardClient {
    async fn authorize(&self, key_hash: &str) -> Result<Authorization, PortError> {
        match self
            .send(
                key_hash,
                &GuardCommand::Authorize {
                    key_hash: key_hash.to_owned(),
                },
            )
            .await?
        {
            GuardAnswer::Granted { key } => Ok(Authorization::Granted(key)),
            GuardAnswer::Denied => Ok(Authorization::Denied),
            other => Err(PortError(format!("key guard: unexpected answer {other:?}"))),
        }
    }

    async fn invalidate(&self, key_hash: &str) -> Result<(), PortError> {
        match self
            .send(
                key_hash,
                &GuardCommand::Invalidate {
                    key_hash: key_hash.to_owned(),
                },
            )
            .await?
        {
            GuardAnswer::Done => Ok(()),
            other => Err(PortError(format!("key guard: unexpected answer {other:?}"))),
        }
    }
}
