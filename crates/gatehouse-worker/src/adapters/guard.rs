//! The [`KeyGuard`] port over the `KEY_GUARD` Durable Object namespace: one RPC call (`ask`) each.

use std::rc::Rc;

use worker::ObjectNamespace;

use super::durable;
use gatehouse_core::api_key::{KeyRecord, RefusalReason};
use gatehouse_core::audit_chain::{
    head_object_name, AdoptHead, AdvanceHead, Advanced, BindObjects, BoundObject, ConfirmObjects, HeadState,
    ReadHead,
};
use gatehouse_core::guard::protocol::{
    client_guard_name, Apply, Ask, Authorize, Authorized, CompleteClaim, Completed, Decided, Denied,
    GiveBackLeases, HeldResponse, Moved, Ping, RecordAuthFailure, ReleaseClaim, RenewLease, SetLimits,
    TakeClaim, HEALTH_OBJECT,
};
use gatehouse_core::idempotency::{ClaimDecision, KeptResponse};
use gatehouse_core::lease::{GiveBack, Grant, LeaseAsk};
use gatehouse_core::ports::{
    Admission, AuditHeads, Authorization, AuthorizeCall, ClaimHolder, ClaimRequest, Completion, KeyGuard,
    Meter, PortError,
};
use gatehouse_core::rate_limit::{LimitSpec, Usage, Verdict};

pub struct GuardClient {
    namespace: ObjectNamespace,
    meter: Rc<Meter>,
}

impl GuardClient {
    pub fn new(namespace: ObjectNamespace, meter: Rc<Meter>) -> Self {
        Self { namespace, meter }
    }

    async fn ask<C: Ask>(&self, object_name: &str, command: C) -> Result<C::Answer, PortError> {
        durable::ask(&self.namespace, &self.meter, object_name, &command.into()).await
    }
}

impl KeyGuard for GuardClient {
    async fn authorize(&self, ask: AuthorizeCall<'_>) -> Result<Authorization, PortError> {
        let AuthorizeCall { key_hash, scope, claim, lease, visitor, current } = ask;
        let command = Authorize {
            key_hash: key_hash.to_owned(),
            scope,
            claim: claim.cloned(),
            lease: lease.cloned(),
            visitor: visitor.cloned(),
            current: current.cloned(),
        };
        // The guard's own D1 loads count against this request's budget too (SPEC §12).
        let (authorization, d1_queries) = match self.ask(key_hash, command).await? {
            Authorized::Decided(Decided { key, verdict, usage, claim, d1_queries, lease, by_visitor }) => {
                let admission = Admission { key, verdict, usage, claim, lease, by_visitor };
                (Authorization::Admitted(Box::new(admission)), d1_queries)
            }
            Authorized::Denied(Denied { key, reason, d1_queries }) => {
                // A record without a reason comes from a guard of the previous version: revoked.
                let reason = reason.unwrap_or(RefusalReason::Revoked);
                (Authorization::Denied(key.map(|key| (Box::new(key), reason))), d1_queries)
            }
            Authorized::Moved(Moved { guard, d1_queries }) => (Authorization::Moved(guard), d1_queries),
        };
        self.meter.d1_queries.set(self.meter.d1_queries.get() + d1_queries);
        Ok(authorization)
    }

    async fn give_back_leases(&self, key_hash: &str, give_back: &[GiveBack]) -> Result<(), PortError> {
        self.ask(key_hash, GiveBackLeases { give_back: give_back.to_vec() }).await.map(drop)
    }

    async fn renew_lease(
        &self,
        key_hash: &str,
        lease: &LeaseAsk,
    ) -> Result<(Option<KeyRecord>, Option<Grant>), PortError> {
        let renewed =
            self.ask(key_hash, RenewLease { key_hash: key_hash.to_owned(), lease: lease.clone() }).await?;
        Ok((renewed.key, renewed.lease))
    }

    async fn take_claim(&self, principal: &str, claim: &ClaimRequest) -> Result<ClaimDecision, PortError> {
        self.ask(principal, TakeClaim { claim: claim.clone() }).await
    }

    async fn complete_claim(&self, completion: Completion<'_>) -> Result<Completed, PortError> {
        let Completion { key_hash, api_key_id, claim, response } = completion;
        let command = CompleteClaim {
            claim: claim.clone(),
            response: response.clone(),
            api_key_id: Some(api_key_id.to_owned()),
        };
        self.ask(key_hash, command).await
    }

    async fn release_claim(&self, holder: &ClaimHolder, claim: &ClaimRequest) -> Result<(), PortError> {
        let (object, of_key) = match holder {
            ClaimHolder::Object(object) => (object, None),
            ClaimHolder::GuardOf(key_hash) => (key_hash, Some(key_hash.clone())),
        };
        self.ask(object, ReleaseClaim { claim: claim.clone(), of_key }).await.map(drop)
    }

    async fn held_response(
        &self,
        key_hash: &str,
        idempotency_key: &str,
    ) -> Result<Option<KeptResponse>, PortError> {
        self.ask(key_hash, HeldResponse { idempotency_key: idempotency_key.to_owned() }).await
    }

    async fn apply(&self, key: &KeyRecord, undo: Option<i64>) -> Result<(), PortError> {
        self.ask(key.guard(), Apply { key: key.clone(), undo }).await.map(drop)
    }

    async fn set_level_limits(&self, level: &str, limits: &LimitSpec, version: i64) -> Result<(), PortError> {
        self.ask(level, SetLimits { limits: *limits, version }).await.map(drop)
    }

    async fn ping(&self) -> Result<(), PortError> {
        self.ask(HEALTH_OBJECT, Ping {}).await.map(drop)
    }

    async fn wake(&self, object: &str) -> Result<(), PortError> {
        self.ask(object, Ping {}).await.map(drop)
    }

    async fn record_auth_failure(&self, group: &str, per_minute: u32) -> Result<(Verdict, Usage), PortError> {
        let answer =
            self.ask(&client_guard_name(group), RecordAuthFailure { per_minute: Some(per_minute) }).await?;
        Ok((answer.verdict, answer.usage))
    }
}

/// A project's chain head (SPEC §23) lives in the same namespace, under its own name.
impl AuditHeads for GuardClient {
    async fn bind_objects(&self, project_id: &str, bind: &BindObjects) -> Result<Vec<String>, PortError> {
        self.ask(&head_object_name(project_id), bind.clone()).await.map(|b| b.refused)
    }

    async fn confirm_objects(&self, project_id: &str, objects: &[BoundObject]) -> Result<(), PortError> {
        self.ask(&head_object_name(project_id), ConfirmObjects { objects: objects.to_vec() }).await.map(drop)
    }

    async fn read_head(&self, project_id: &str, objects: usize) -> Result<HeadState, PortError> {
        self.ask(&head_object_name(project_id), ReadHead { objects }).await
    }

    async fn adopt_head(&self, project_id: &str, adopt: &AdoptHead) -> Result<HeadState, PortError> {
        self.ask(&head_object_name(project_id), adopt.clone()).await
    }

    async fn advance_head(&self, project_id: &str, advance: &AdvanceHead) -> Result<Advanced, PortError> {
        self.ask(&head_object_name(project_id), advance.clone()).await
    }
}
