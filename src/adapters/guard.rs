//! The [`KeyGuard`] port over the `KEY_GUARD` Durable Object namespace: one `stub.fetch` per call.

use std::rc::Rc;

use wasm_bindgen::JsValue;
use worker::{Method, ObjectNamespace, Request, RequestInit};

use crate::core::rate_limit::{Usage, Verdict};
use crate::guard::protocol::{client_guard_name, GuardAnswer, GuardCommand, URL};
use crate::ports::{Admission, Authorization, KeyGuard, Meter, PortError};

pub struct GuardClient {
    namespace: ObjectNamespace,
    meter: Rc<Meter>,
}

impl GuardClient {
    pub fn new(namespace: ObjectNamespace, meter: Rc<Meter>) -> Self {
        Self { namespace, meter }
    }

    async fn send(&self, object_name: &str, command: &GuardCommand) -> Result<GuardAnswer, PortError> {
        Meter::count(&self.meter.durable_object_calls);
        let stub = self
            .namespace
            .get_by_name(object_name)
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

fn unexpected(answer: GuardAnswer) -> PortError {
    PortError(format!("key guard: unexpected answer {answer:?}"))
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
            GuardAnswer::Decided { key, verdict, usage } => {
                Ok(Authorization::Admitted(Box::new(Admission {
                    key,
                    verdict,
                    usage,
                })))
            }
            GuardAnswer::Denied => Ok(Authorization::Denied),
            other => Err(unexpected(other)),
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
            other => Err(unexpected(other)),
        }
    }

    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError> {
        match self
            .send(&client_guard_name(client_ip), &GuardCommand::RecordAuthFailure)
            .await?
        {
            GuardAnswer::AuthFailure { verdict, usage } => Ok((verdict, usage)),
            other => Err(unexpected(other)),
        }
    }
}
