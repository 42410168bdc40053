//! The [`KeyGuard`] port over the `KEY_GUARD` Durable Object namespace: one `stub.fetch` per call.

use std::rc::Rc;

use worker::ObjectNamespace;

use super::durable;
use crate::core::idempotency::StoredResponse;
use crate::core::rate_limit::{Usage, Verdict};
use crate::guard::protocol::{client_guard_name, GuardAnswer, GuardCommand, HEALTH_OBJECT, URL};
use crate::ports::{Admission, Authorization, ClaimRequest, KeyGuard, Meter, PortError};

pub struct GuardClient {
    namespace: ObjectNamespace,
    meter: Rc<Meter>,
}

impl GuardClient {
    pub fn new(namespace: ObjectNamespace, meter: Rc<Meter>) -> Self {
        Self { namespace, meter }
    }

    async fn send(&self, object_name: &str, command: &GuardCommand) -> Result<GuardAnswer, PortError> {
        durable::call(&self.namespace, &self.meter, URL, object_name, command).await
    }

    async fn expect_done(&self, object_name: &str, command: &GuardCommand) -> Result<(), PortError> {
        match self.send(object_name, command).await? {
            GuardAnswer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(answer: GuardAnswer) -> PortError {
    PortError(format!("key guard: unexpected answer {answer:?}"))
}

impl KeyGuard for GuardClient {
    async fn authorize(
        &self,
        key_hash: &str,
        claim: Option<&ClaimRequest>,
    ) -> Result<Authorization, PortError> {
        let command = GuardCommand::Authorize { key_hash: key_hash.to_owned(), claim: claim.cloned() };
        match self.send(key_hash, &command).await? {
            GuardAnswer::Decided { key, verdict, usage, claim } => {
                Ok(Authorization::Admitted(Box::new(Admission { key, verdict, usage, claim })))
            }
            GuardAnswer::Denied { key } => Ok(Authorization::Denied(key.map(Box::new))),
            other => Err(unexpected(other)),
        }
    }

    async fn invalidate(&self, key_hash: &str) -> Result<(), PortError> {
        self.expect_done(key_hash, &GuardCommand::Invalidate { key_hash: key_hash.to_owned() }).await
    }

    async fn complete_claim(
        &self,
        key_hash: &str,
        claim: &ClaimRequest,
        response: &StoredResponse,
        stored_elsewhere: bool,
    ) -> Result<(), PortError> {
        let command = GuardCommand::CompleteClaim {
            claim: claim.clone(),
            response: response.clone(),
            stored_elsewhere,
        };
        self.expect_done(key_hash, &command).await
    }

    async fn release_claim(&self, key_hash: &str, claim: &ClaimRequest) -> Result<(), PortError> {
        self.expect_done(key_hash, &GuardCommand::ReleaseClaim { claim: claim.clone() }).await
    }

    async fn ping(&self) -> Result<(), PortError> {
        self.expect_done(HEALTH_OBJECT, &GuardCommand::Ping).await
    }

    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError> {
        match self.send(&client_guard_name(client_ip), &GuardCommand::RecordAuthFailure).await? {
            GuardAnswer::AuthFailure { verdict, usage } => Ok((verdict, usage)),
            other => Err(unexpected(other)),
        }
    }
}
