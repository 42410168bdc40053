//! What a request finishes after its response (`ctx.wait_until`): its audit row, its webhook
//! deliveries, the end of its idempotency claim, the confirmation of its event reservations.

use std::future::Future;

use futures_util::future::join_all;

use super::queues::{record_audit_row, AuditPath};
use super::{ingest, ApiResponse, Gateway};
use gatehouse_core::audit::AuditRow;
use gatehouse_core::idempotency::{Entry, KeptResponse};
use gatehouse_core::ports::{
    ClaimHolder, ClaimRequest, Completion, DeliveryQueue, KeyGuard, PortError, Ports, ResponseStore,
};

/// Everything a request leaves to do once its response is on its way.
pub struct AfterResponse {
    pub request_id: String,
    /// When the request was made (Unix ms).
    pub at_ms: i64,
    /// `None` when the request is not audited (`ApiResponse::audited`).
    pub audit: Option<AuditRow>,
    pub deliveries: Vec<String>,
    pub settlements: Vec<Settlement>,
}

impl ApiResponse {
    /// Takes what is left to do after the response (the audit row is cloned: the caller may still
    /// log it).
    pub fn after_response(&mut self) -> AfterResponse {
        AfterResponse {
            request_id: self.request_id.clone(),
            at_ms: self.audit.ts,
            audit: self.audited.then(|| self.audit.clone()),
            deliveries: std::mem::take(&mut self.webhook_deliveries),
            settlements: std::mem::take(&mut self.settlements),
        }
    }
}

/// What a request finishes after its response (`wait_until`): the end of its idempotency claim
/// (complete and store on 2xx, release otherwise), or the confirmation of the event ids it reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// `response` is sealed already (SPEC §13).
    Complete {
        /// The object that holds the claim (the key's guard or one of its claim objects).
        object: String,
        api_key_id: String,
        claim: ClaimRequest,
        response: KeptResponse,
    },
    Release {
        holder: ClaimHolder,
        claim: ClaimRequest,
    },
    ConfirmEvents(ingest::Reservations),
}

impl<P: Ports> Gateway<'_, P> {
    /// Does it all, side by side, and answers what the operator should read in the log: the audit
    /// row to its queue (or to D1 directly when the queue cannot take it), the deliveries to the
    /// webhook queue (a lost send is found by the minute sweep), then the settlement.
    pub async fn finish<F: Future<Output = ()>>(
        &self,
        after: AfterResponse,
        pause: impl Fn(u64) -> F,
    ) -> Vec<String> {
        let AfterResponse { request_id, at_ms, audit, deliveries, settlements } = after;
        let audit = async {
            let audit = audit?;
            match record_audit_row(&self.audit, &self.store, audit, &pause).await {
                Ok(AuditPath::Queued) => None,
                Ok(AuditPath::Direct) => Some(format!(
                    r#"{{"component":"audit","request_id":"{request_id}","written":"directly"}}"#
                )),
                Err(e) => Some(format!("request {request_id}: audit row lost: {e}")),
            }
        };
        let deliveries = async {
            if deliveries.is_empty() {
                return None;
            }
            let sent = self.deliveries.enqueue(&deliveries, 0).await;
            sent.err().map(|e| format!("webhook deliveries {deliveries:?} not queued (the sweep will): {e}"))
        };
        let settled = join_all(settlements.into_iter().map(|settlement| async {
            let settled = self.settle(settlement, &pause).await;
            settled.err().map(|e| format!("request {request_id}: settling after the response failed: {e}"))
        }));
        let leases =
            futures_util::future::join(self.give_back_leases(at_ms, &pause), self.renew_leases(at_ms));
        let (a, d, s, (l, r)) = futures_util::future::join4(audit, deliveries, settled, leases).await;
        [a, d, l, r].into_iter().chain(s).flatten().collect()
    }

    /// Asks for the new leases of hot keys whose lease runs low at this isolate (SPEC §20): after
    /// the response, while the old lease still serves the key's requests.
    async fn renew_leases(&self, now_ms: i64) -> Option<String> {
        let wanted = self.leases.borrow_mut().take_renewals(now_ms);
        let mut failed = Vec::new();
        for (key_hash, ask) in wanted {
            match self.guard.renew_lease(&key_hash, &ask).await {
                Ok((key, grant)) => self.leases.borrow_mut().renewed(&key_hash, &ask, key, grant.as_ref()),
                Err(e) => {
                    // The old lease runs out; the key's next request asks its guard.
                    self.leases.borrow_mut().renewal_failed(&key_hash, &ask);
                    failed.push(e.0);
                }
            }
        }
        (!failed.is_empty()).then(|| {
            format!("lease renewals failed (the keys ask with their next request): {}", failed.join("; "))
        })
    }

    /// Gives back what this isolate did not use of hot keys' leases once they end (SPEC §20), so
    /// a key's guard can admit those credits elsewhere: one request's after-response work at a
    /// time waits (at most a lease's second) for the first lease to end. A give-back that fails
    /// is owed again, with the key's next request.
    async fn give_back_leases<F: Future<Output = ()>>(
        &self,
        now_ms: i64,
        pause: &impl Fn(u64) -> F,
    ) -> Option<String> {
        let mut at = self.leases.borrow_mut().give_back_at()?;
        let mut now = now_ms;
        let mut failed = Vec::new();
        // The leases this isolate takes meanwhile end later: a few rounds, a few seconds at most.
        for _ in 0..GIVE_BACK_ROUNDS {
            if at > now {
                pause((at - now) as u64 + 5).await;
                now = at + 5;
            }
            let owed = self.leases.borrow_mut().ended(now);
            for (key_hash, give_back) in owed {
                match self.guard.give_back_leases(&key_hash, &give_back).await {
                    Ok(()) => self.leases.borrow_mut().settled(&key_hash, &give_back),
                    Err(e) => failed.push(e.0),
                }
            }
            match self.leases.borrow().first_end() {
                Some(next) => at = next,
                None => break,
            }
        }
        self.leases.borrow_mut().give_back_done();
        (!failed.is_empty()).then(|| {
            format!("lease credits not given back (owed with the next request): {}", failed.join("; "))
        })
    }

    /// Finishes a claim after the response. On success the guard learns first (it is the source of
    /// truth for "completed"), then the response store gets the copy replays read; each notice is
    /// retried with backoff (`pause` sleeps). A claim the guard never hears about runs out after its
    /// lease and the key may execute again: docs/operations/faults.md says when.
    pub async fn settle<F: Future<Output = ()>>(
        &self,
        settlement: Settlement,
        pause: impl Fn(u64) -> F,
    ) -> Result<(), PortError> {
        match settlement {
            Settlement::Complete { object, api_key_id, claim, response } => {
                let completed = retrying(&pause, || {
                    self.guard.complete_claim(Completion {
                        key_hash: &object,
                        api_key_id: &api_key_id,
                        claim: &claim,
                        response: &response,
                    })
                })
                .await?;
                if !completed.completed || completed.stored {
                    // Another request holds the claim (the lease ran out): its response counts. Or
                    // the claim's object wrote the store itself.
                    return Ok(());
                }
                retrying(&pause, || {
                    self.responses.put(
                        Entry { api_key_id: &api_key_id, idempotency_key: &claim.idempotency_key },
                        &response,
                    )
                })
                .await
            }
            Settlement::Release { holder, claim } => {
                retrying(&pause, || self.guard.release_claim(&holder, &claim)).await
            }
            Settlement::ConfirmEvents(reservations) => {
                retrying(&pause, || reservations.confirm(&self.ledger)).await
            }
        }
    }
}

/// How many times one request's after-response work waits for the next lease to end.
const GIVE_BACK_ROUNDS: usize = 4;

/// Up to [`NOTICE_TRIES`] calls of `op`, pausing 100 ms, 200 ms, … (at most 5 s) between them.
pub(super) async fn retrying<T, F: Future<Output = Result<T, PortError>>, P: Future<Output = ()>>(
    pause: &impl Fn(u64) -> P,
    mut op: impl FnMut() -> F,
) -> Result<T, PortError> {
    let mut delay_ms = 100;
    let mut tries = 1;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(e) if tries >= NOTICE_TRIES => return Err(e),
            Err(_) => {
                pause(delay_ms).await;
                delay_ms = (delay_ms * 2).min(5_000);
                tries += 1;
            }
        }
    }
}

/// How often a notice after the response (a claim's completion or release) is tried: about 11 s
/// in all, within the half minute `wait_until` grants.
pub(super) const NOTICE_TRIES: u32 = 8;
