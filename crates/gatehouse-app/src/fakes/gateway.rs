//! Fakes of the request pipeline's ports: the key guard (with the real claim and rate decisions of
//! `core`), the response store (which may miss, as Workers KV does while a write propagates), and
//! the directory and resource tables of the D1 store.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::FakeStore;
use crate::sim::{Fault, Faults};
use gatehouse_core::api_key::{IdentityLimits, KeyRecord, KeyType, Scope};
use gatehouse_core::audit::AuditRow;
use gatehouse_core::config::Config;
use gatehouse_core::guard::protocol::{client_guard_name, project_authority};
use gatehouse_core::idempotency::{decide_claim, Claim, ClaimDecision, Entry, KeptResponse, LEASE_MS};
use gatehouse_core::identity::{Identity, IdentityChanges};
use gatehouse_core::lease::{
    accept_give_back, admit, grant, lease_to_isolate, quota_to_ask, refusal_lease, refused_by_level,
    take_back, with_project_quota, Decision, Drawn, GiveBack, Grant, Held, LeaseAsk, RequestRate, Returned,
};
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{
    Admission, AuditSink, Authorization, ClaimHolder, ClaimRequest, Directory, IdentityChange,
    IdentityInsert, KeyChanges, KeyGuard, KeyUpdate, PlanChange, PortError, Resources, ResponseStore,
    Revocation, RunStart,
};
use gatehouse_core::rate_limit::{decide_request, Counters, LimitSpec, Usage, Verdict, AUTH_FAILURE_LIMITS};
use gatehouse_core::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use gatehouse_core::webhook::OutgoingEvent;

/// The simulated wall clock (Unix ms), shared by the fakes and the driver.
pub type Clock = Rc<Cell<i64>>;

/// A claim as the guard keeps it.
#[derive(Debug, Clone)]
pub struct HeldClaim {
    pub claim: Claim,
    pub owner: String,
    /// Replays carry the response inline until then.
    pub inline_until: i64,
}

/// Every key's guard in one fake: what the Durable Objects keep, keyed by key hash.
pub struct FakeGuard {
    pub faults: Rc<Faults>,
    pub clock: Clock,
    pub config: &'static Config,
    /// What `Apply` told each guard, and until when it is used (else the directory's record is
    /// read), as the real guard re-reads a record after 10 minutes.
    pub applied: RefCell<HashMap<String, (KeyRecord, i64)>>,
    /// The directory's key table (shared with the fake D1 store).
    pub keys: Rc<RefCell<Vec<KeyRecord>>>,
    /// Every guard's counters by object name: keys' (by hash), client addresses', and the
    /// authorities' of identities and projects (SPEC §20).
    pub counters: RefCell<HashMap<String, Counters>>,
    /// The grant each key's guard holds of each level above it, by (key hash, level).
    pub held: RefCell<HashMap<(String, String), Held>>,
    /// Every grant an authority made, and whether its unused credits came back.
    pub grants: RefCell<HashMap<String, (Grant, Returned)>>,
    /// Requests from isolates each key's guard saw in the current second (a hot key leases).
    pub rates: RefCell<HashMap<String, RequestRate>>,
    /// Every lease a key's guard made to an isolate, what it drew from, and whether it came back.
    pub isolate_leases: RefCell<HashMap<String, (Grant, Drawn, Returned)>>,
    pub claims: RefCell<HashMap<(String, String), HeldClaim>>,
    /// Leases that ran out before their claim was completed or released.
    pub lapsed: Cell<u32>,
    /// Claims that were taken (`Execute` answers).
    pub executions: Cell<u32>,
    /// Guards (by key hash) that cannot be told anything: `apply` fails before its effect.
    pub unreachable: RefCell<std::collections::HashSet<String>>,
    /// Claims another request (another fingerprint) took over after a release or a lapse: the
    /// first request's operation is forgotten (the forfeit of docs/operations/faults.md).
    pub taken_over: Cell<u32>,
    /// The guard of every call, in order: a key hash (an `authorize` creates that key's object
    /// and, for a key it does not hold, costs a D1 lookup) or `ip:<address>`.
    pub asked: RefCell<Vec<String>>,
}

impl FakeGuard {
    pub fn new(
        faults: Rc<Faults>,
        clock: Clock,
        config: &'static Config,
        keys: Rc<RefCell<Vec<KeyRecord>>>,
    ) -> Self {
        FakeGuard {
            faults,
            clock,
            config,
            applied: RefCell::default(),
            keys,
            counters: RefCell::default(),
            held: RefCell::default(),
            grants: RefCell::default(),
            isolate_leases: RefCell::default(),
            rates: RefCell::default(),
            claims: RefCell::default(),
            lapsed: Cell::new(0),
            executions: Cell::new(0),
            unreachable: RefCell::default(),
            taken_over: Cell::new(0),
            asked: RefCell::default(),
        }
    }

    fn record(&self, key_hash: &str) -> Option<KeyRecord> {
        if let Some((key, until)) = self.applied.borrow().get(key_hash) {
            if *until > self.clock.get() {
                return Some(key.clone());
            }
        }
        // As the real guard: a record read from D1 is used for 10 minutes before it is read again.
        let loaded = self.keys.borrow().iter().find(|k| k.key_hash == key_hash).cloned()?;
        self.applied.borrow_mut().insert(key_hash.to_owned(), (loaded.clone(), self.clock.get() + 600_000));
        Some(loaded)
    }

    /// One request against `limits`, counted only when `permitted` (`decide_request`).
    fn count(
        &self,
        name: &str,
        limits: gatehouse_core::rate_limit::Limits,
        cost: u32,
        permitted: bool,
    ) -> (Verdict, Usage) {
        let mut counters = self.counters.borrow_mut();
        let prev = counters.get(name).copied().unwrap_or_default();
        let (verdict, usage, taken) = decide_request(prev, self.clock.get(), limits, cost, permitted);
        if let Some(next) = taken {
            counters.insert(name.to_owned(), next);
        }
        (verdict, usage)
    }

    /// The decision on one request of `key`, in the real guard's order (`lease::admit`): its own
    /// windows, then a credit of each level above it, exchanging with the level's authority when
    /// it holds too few.
    fn admit(
        &self,
        key: &KeyRecord,
        cost: u32,
        permitted: bool,
        lease: Option<&LeaseAsk>,
    ) -> (Verdict, Usage, Option<Grant>) {
        let limits = self.config.limits(key);
        let levels = self.config.levels(key);
        let hot = lease.is_some_and(|ask| self.is_hot(key, ask));
        let (verdict, usage, lease) = self.decide(key, limits, &levels, cost, permitted, lease, hot);
        match (verdict, lease) {
            (Verdict::Allowed, lease) => (verdict, usage, lease),
            // A hot key's isolate repeats the refusal for up to a second without asking.
            (refused, _) => (refused, usage, hot.then(|| refusal_lease(self.clock.get(), refused, &usage))),
        }
    }

    /// As the real guard: hot from `LEASE_ABOVE_PER_SECOND` requests a second, or while renewing.
    fn is_hot(&self, key: &KeyRecord, ask: &LeaseAsk) -> bool {
        let mut rates = self.rates.borrow_mut();
        let seen = rates.entry(key.key_hash.clone()).or_default().count(self.clock.get());
        self.config.lease_above_per_second.is_some_and(|above| ask.is_hot(seen, above))
    }

    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        key: &KeyRecord,
        limits: gatehouse_core::rate_limit::Limits,
        levels: &[(String, LimitSpec)],
        cost: u32,
        permitted: bool,
        lease: Option<&LeaseAsk>,
        hot: bool,
    ) -> (Verdict, Usage, Option<Grant>) {
        loop {
            let now = self.clock.get();
            let mut held = self.held_of(key, levels);
            let prev = self.counters.borrow().get(&key.key_hash).copied().unwrap_or_default();
            let specs: Vec<LimitSpec> = levels.iter().map(|(_, spec)| *spec).collect();
            match admit(prev, now, limits, cost, permitted, &specs, &mut held) {
                Decision::Decided { verdict: Verdict::RateLimited, usage, counters: None } => {
                    // Over a window: is the quota used up too? (The real guard asks once a minute.)
                    if let Some(i) = quota_to_ask(levels, &held, now) {
                        let (level, spec) = &levels[i];
                        let slot = (key.key_hash.clone(), level.clone());
                        let last = self.held.borrow_mut().remove(&slot);
                        let grant = self.exchange(level, spec, last.as_ref(), cost);
                        if grant.credits > 0 {
                            self.held.borrow_mut().insert(slot, Held::from_grant(&grant));
                        }
                        if grant.verdict == Verdict::QuotaExceeded {
                            let (verdict, usage) = refused_by_level(usage, &grant);
                            return (verdict, usage, None);
                        }
                    }
                    return (Verdict::RateLimited, usage, None);
                }
                Decision::Decided { verdict, usage, counters } => {
                    let mut leased = None;
                    if let Some(next) = counters {
                        let lease = match lease {
                            Some(ask) if hot => {
                                let id = format!("lease-{}", self.isolate_leases.borrow().len());
                                lease_to_isolate(next, now, &limits, levels, &mut held, &id, ask.want, hot)
                            }
                            _ => None,
                        };
                        let next = match lease {
                            Some((grant, after, drawn)) => {
                                self.isolate_leases.borrow_mut().insert(
                                    grant.grant_id.clone(),
                                    (grant.clone(), drawn, Returned::default()),
                                );
                                leased = Some(grant);
                                after
                            }
                            None => next,
                        };
                        self.counters.borrow_mut().insert(key.key_hash.clone(), next);
                        self.keep_held(key, levels, held);
                    }
                    let project = self
                        .held
                        .borrow()
                        .get(&(key.key_hash.clone(), project_authority(&key.project_id)))
                        .cloned();
                    return (verdict, with_project_quota(usage, project.as_ref()), leased);
                }
                Decision::NeedsCredits(i) => {
                    let (level, spec) = &levels[i];
                    let slot = (key.key_hash.clone(), level.clone());
                    let last = self.held.borrow_mut().remove(&slot);
                    let grant = self.exchange(level, spec, last.as_ref(), cost);
                    if grant.credits < cost.max(1) {
                        let (verdict, usage) =
                            refused_by_level(decide_request(prev, now, limits, cost, false).1, &grant);
                        return (verdict, usage, None);
                    }
                    self.held.borrow_mut().insert(slot, Held::from_grant(&grant));
                }
            }
        }
    }

    /// A level's authority takes back what a holder did not use of a grant, once.
    fn take_back_grant(&self, level: &str, back: &GiveBack) {
        let mut counters = self.counters.borrow().get(level).copied().unwrap_or_default();
        if let Some((grant, returned)) = self.grants.borrow_mut().get_mut(&back.grant_id) {
            accept_give_back(&mut counters, self.clock.get(), grant, returned, back);
        }
        self.counters.borrow_mut().insert(level.to_owned(), counters);
    }

    /// The keys' guards' alarms (the real guard sets one at each grant's end): grants that ended
    /// are given back to their levels.
    fn run_alarms(&self) {
        let now = self.clock.get();
        let ended: Vec<((String, String), Held)> = self
            .held
            .borrow()
            .iter()
            .filter(|(_, h)| h.until_ms <= now)
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        for ((holder, level), held) in ended {
            self.held.borrow_mut().remove(&(holder, level.clone()));
            if let Some(back) = held.give_back() {
                self.take_back_grant(&level, &back);
            }
        }
    }

    fn held_of(&self, key: &KeyRecord, levels: &[(String, LimitSpec)]) -> Vec<Option<Held>> {
        let held = self.held.borrow();
        levels.iter().map(|(level, _)| held.get(&(key.key_hash.clone(), level.clone())).cloned()).collect()
    }

    fn keep_held(&self, key: &KeyRecord, levels: &[(String, LimitSpec)], held: Vec<Option<Held>>) {
        for ((level, _), h) in levels.iter().zip(held) {
            if let Some(h) = h {
                self.held.borrow_mut().insert((key.key_hash.clone(), level.clone()), h);
            }
        }
    }

    /// As the key's guard: takes back what an isolate did not use of its leases, once each.
    fn take_back_leases(&self, key_hash: &str, give_back: &[GiveBack]) {
        let now = self.clock.get();
        let key = self.record(key_hash);
        let levels = key.as_ref().map(|k| self.config.levels(k)).unwrap_or_default();
        let mut held = key.as_ref().map(|k| self.held_of(k, &levels)).unwrap_or_default();
        let mut counters = self.counters.borrow().get(key_hash).copied().unwrap_or_default();
        let mut late = Vec::new();
        for back in give_back {
            if let Some((grant, drawn, returned)) = self.isolate_leases.borrow_mut().get_mut(&back.grant_id) {
                let credits = accept_give_back(&mut Counters::default(), now, grant, returned, back);
                late.extend(take_back(&mut counters, now, grant, drawn, &levels, &mut held, credits));
            }
        }
        self.counters.borrow_mut().insert(key_hash.to_owned(), counters);
        if let Some(key) = key {
            self.keep_held(&key, &levels, held);
        }
        // What came back for a level grant the guard no longer holds goes to the level (the real
        // guard's alarm sends it within a second).
        for (level, back) in late {
            self.take_back_grant(&level, &back);
        }
    }

    /// A level's authority: takes back what `last` did not use (once), then grants.
    fn exchange(&self, level: &str, spec: &LimitSpec, last: Option<&Held>, cost: u32) -> Grant {
        let now = self.clock.get();
        if let Some(back) = last.and_then(Held::give_back) {
            self.take_back_grant(level, &back);
        }
        let counters = self.counters.borrow().get(level).copied().unwrap_or_default();
        let grant_id = format!("grant-{}", self.grants.borrow().len());
        let want = Held::want(last, now, cost);
        let (grant, next) = grant(counters, now, spec, &grant_id, cost, want);
        self.counters.borrow_mut().insert(level.to_owned(), next);
        self.grants.borrow_mut().insert(grant_id, (grant.clone(), Returned::default()));
        grant
    }

    fn claim(&self, key_hash: &str, request: &ClaimRequest) -> ClaimDecision {
        let now = self.clock.get();
        let slot = (key_hash.to_owned(), request.idempotency_key.clone());
        let mut claims = self.claims.borrow_mut();
        let held = claims.get(&slot);
        let mut existing = held.map(|h| h.claim.clone());
        if let (Some(c), Some(h)) = (existing.as_mut(), held) {
            if c.completed && h.inline_until <= now {
                c.response = None;
            }
        }
        let decision = decide_claim(existing.as_ref(), &request.fingerprint, &request.request_id, now);
        if let ClaimDecision::Execute { operation } = &decision {
            if held.is_some_and(|h| !h.claim.completed && !h.claim.released) {
                self.lapsed.set(self.lapsed.get() + 1);
            }
            if held.is_some_and(|h| h.claim.fingerprint != request.fingerprint) {
                self.taken_over.set(self.taken_over.get() + 1);
            }
            self.executions.set(self.executions.get() + 1);
            let claim = Claim {
                fingerprint: request.fingerprint.clone(),
                until_ms: now + LEASE_MS,
                completed: false,
                released: false,
                operation: operation.clone(),
                response: None,
            };
            claims.insert(slot, HeldClaim { claim, owner: request.request_id.clone(), inline_until: 0 });
        }
        decision
    }
}

impl KeyGuard for FakeGuard {
    async fn authorize(
        &self,
        key_hash: &str,
        scope: Scope,
        claim: Option<&ClaimRequest>,
        lease: Option<&LeaseAsk>,
    ) -> Result<Authorization, PortError> {
        self.asked.borrow_mut().push(key_hash.to_owned());
        self.faults
            .run("guard.authorize", || {
                self.run_alarms();
                if let Some(lease) = lease {
                    self.take_back_leases(key_hash, &lease.give_back);
                }
                match self.record(key_hash) {
                    Some(key) if key.refusal(self.clock.get()).is_none() => {
                        let permitted = key.key_type.allows(scope);
                        let (verdict, usage, lease) = if scope.is_dashboard_read() {
                            let budget = format!("dashboard:{key_hash}");
                            let (verdict, usage) =
                                self.count(&budget, self.config.dashboard_limits(), 1, permitted);
                            (verdict, usage, None)
                        } else {
                            self.admit(&key, scope.cost(), permitted, lease)
                        };
                        // The guard takes it, or the key's claim object that holds it (SPEC §20).
                        let claim = claim
                            .filter(|_| verdict == Verdict::Allowed && permitted)
                            .map(|c| self.claim(&key.claim_object(&c.idempotency_key), c));
                        Authorization::Admitted(Box::new(Admission { key, verdict, usage, claim, lease }))
                    }
                    refused => Authorization::Denied(refused.map(|key| {
                        let reason = key.refusal(self.clock.get()).expect("refused");
                        (Box::new(key), reason)
                    })),
                }
            })
            .await
    }

    async fn give_back_leases(&self, key_hash: &str, give_back: &[GiveBack]) -> Result<(), PortError> {
        self.faults.run("guard.give_back_leases", || self.take_back_leases(key_hash, give_back)).await
    }

    async fn renew_lease(
        &self,
        key_hash: &str,
        lease: &LeaseAsk,
    ) -> Result<(Option<KeyRecord>, Option<Grant>), PortError> {
        self.faults
            .run("guard.renew_lease", || {
                let now = self.clock.get();
                self.take_back_leases(key_hash, &lease.give_back);
                let Some(key) = self.record(key_hash).filter(|k| k.refusal(now).is_none()) else {
                    return (None, None);
                };
                if !self.is_hot(&key, lease) {
                    return (Some(key), None);
                }
                let limits = self.config.limits(&key);
                let levels = self.config.levels(&key);
                let mut held = self.held_of(&key, &levels);
                let counters = self.counters.borrow().get(key_hash).copied().unwrap_or_default();
                let id = format!("lease-{}", self.isolate_leases.borrow().len());
                match lease_to_isolate(counters, now, &limits, &levels, &mut held, &id, lease.want, true) {
                    Some((grant, after, drawn)) => {
                        self.isolate_leases
                            .borrow_mut()
                            .insert(grant.grant_id.clone(), (grant.clone(), drawn, Returned::default()));
                        self.counters.borrow_mut().insert(key_hash.to_owned(), after);
                        self.keep_held(&key, &levels, held);
                        (Some(key), Some(grant))
                    }
                    None => (Some(key), None),
                }
            })
            .await
    }

    async fn take_claim(&self, principal: &str, claim: &ClaimRequest) -> Result<ClaimDecision, PortError> {
        self.asked.borrow_mut().push(principal.to_owned());
        self.faults.run("guard.take_claim", || self.claim(principal, claim)).await
    }

    async fn complete_claim(
        &self,
        key_hash: &str,
        claim: &ClaimRequest,
        response: &KeptResponse,
    ) -> Result<bool, PortError> {
        let stored = serde_json::to_string(response).map_or(usize::MAX, |s| s.len());
        super::over_limit("durable object value", stored, gatehouse_core::platform::DO_MAX_VALUE_BYTES)?;
        self.faults
            .run("guard.complete_claim", || {
                let now = self.clock.get();
                let slot = (key_hash.to_owned(), claim.idempotency_key.clone());
                let mut claims = self.claims.borrow_mut();
                let Some(held) = claims.get_mut(&slot).filter(|h| h.owner == claim.request_id) else {
                    return false;
                };
                if !held.claim.completed && !held.claim.released {
                    held.claim.completed = true;
                    held.claim.until_ms = now + self.config.idempotency_ttl_seconds as i64 * 1000;
                    held.claim.response = Some(response.clone());
                    held.inline_until = now + 60_000;
                }
                held.claim.completed
            })
            .await
    }

    async fn release_claim(&self, holder: &ClaimHolder, claim: &ClaimRequest) -> Result<(), PortError> {
        self.faults
            .run("guard.release_claim", || {
                let object = match holder {
                    ClaimHolder::Object(object) => object.clone(),
                    // The key's guard knows where: it forwards the release there.
                    ClaimHolder::GuardOf(key_hash) => self
                        .record(key_hash)
                        .map_or_else(|| key_hash.clone(), |key| key.claim_object(&claim.idempotency_key)),
                };
                let slot = (object, claim.idempotency_key.clone());
                let mut claims = self.claims.borrow_mut();
                if let Some(held) = claims.get_mut(&slot) {
                    if held.owner == claim.request_id && !held.claim.completed {
                        held.claim.released = true;
                    }
                }
            })
            .await
    }

    async fn held_response(
        &self,
        key_hash: &str,
        idempotency_key: &str,
    ) -> Result<Option<KeptResponse>, PortError> {
        self.faults
            .run("guard.held_response", || {
                let slot = (key_hash.to_owned(), idempotency_key.to_owned());
                let claims = self.claims.borrow();
                claims
                    .get(&slot)
                    .filter(|h| h.claim.completed && h.claim.until_ms > self.clock.get())
                    .and_then(|h| h.claim.response.clone())
            })
            .await
    }

    async fn apply(&self, key: &KeyRecord, undo: Option<i64>) -> Result<(), PortError> {
        if self.unreachable.borrow().contains(&key.key_hash) {
            return Err(PortError("guard.apply: the object cannot be reached".into()));
        }
        self.faults
            .run("guard.apply", || {
                let now = self.clock.get();
                let mut applied = self.applied.borrow_mut();
                let held =
                    applied.get(&key.key_hash).filter(|(_, until)| *until > now).map(|(k, _)| k.clone());
                let key = KeyRecord::told(held.as_ref(), key.clone(), undo);
                applied.insert(key.key_hash.clone(), (key, now + 600_000));
            })
            .await
    }

    async fn ping(&self) -> Result<(), PortError> {
        self.faults.run("guard.ping", || ()).await
    }

    async fn record_auth_failure(&self, client_ip: &str) -> Result<(Verdict, Usage), PortError> {
        let name = client_guard_name(client_ip);
        self.asked.borrow_mut().push(name.clone());
        self.faults.run("guard.record_auth_failure", || self.count(&name, AUTH_FAILURE_LIMITS, 1, true)).await
    }
}

/// Workers KV: eventually consistent, so a read may miss a value written shortly before.
pub struct FakeResponses {
    pub faults: Rc<Faults>,
    /// By their KV key (`Entry::storage_key`), as KV holds them.
    pub entries: RefCell<HashMap<String, KeptResponse>>,
    /// The chance that a read misses a present entry.
    pub miss_rate: f64,
}

impl ResponseStore for FakeResponses {
    async fn put(&self, entry: Entry<'_>, response: &KeptResponse) -> Result<(), PortError> {
        use gatehouse_core::platform::{KV_MAX_KEY_BYTES, KV_MAX_VALUE_BYTES};
        let key = entry.storage_key();
        super::over_limit("kv key", key.len(), KV_MAX_KEY_BYTES)?;
        let value = serde_json::to_string(response).map_or(usize::MAX, |s| s.len());
        super::over_limit("kv value", value, KV_MAX_VALUE_BYTES)?;
        self.faults
            .run("kv.put", || {
                self.entries.borrow_mut().insert(key, response.clone());
            })
            .await
    }

    async fn get(&self, entry: Entry<'_>) -> Result<Option<KeptResponse>, PortError> {
        let miss = self.faults.chance(self.miss_rate);
        self.faults
            .run("kv.get", || self.entries.borrow().get(&entry.storage_key()).filter(|_| !miss).cloned())
            .await
    }
}

/// The audit queue: the rows it took.
pub struct FakeAuditQueue {
    pub faults: Rc<Faults>,
    pub sent: RefCell<Vec<AuditRow>>,
}

impl AuditSink for FakeAuditQueue {
    /// A hung send never answers at all (the outbox's own deadline must end the wait).
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let what = "queue.send_audit";
        match self.faults.call(what).await {
            Fault::Hang => std::future::pending().await,
            Fault::FailBefore => Err(PortError(format!("{what}: injected failure"))),
            fault => {
                self.sent.borrow_mut().extend(rows.iter().cloned());
                match fault {
                    Fault::Ok => Ok(()),
                    _ => Err(PortError(format!("{what}: injected timeout after the effect"))),
                }
            }
        }
    }
}

#[derive(Default)]
pub struct DirectoryTables {
    pub projects: RefCell<Vec<FakeProject>>,
    /// Each key's `identity` holds its identity's limits as they are now, as D1's join reads
    /// them: every change of an identity is written to its keys here too.
    pub keys: Rc<RefCell<Vec<KeyRecord>>>,
    pub identities: RefCell<Vec<Identity>>,
}

pub struct FakeProject {
    pub id: String,
    pub name: String,
    pub plan: String,
    pub created_at: i64,
}

impl DirectoryTables {
    fn plan_of(&self, project_id: &str) -> Option<String> {
        self.projects.borrow().iter().find(|p| p.id == project_id).map(|p| p.plan.clone())
    }

    /// The key as D1 stores it: on the identity it names only while that identity exists in the
    /// key's project (the insert's sub-select), with that identity's limits now (the join).
    fn joined(&self, mut key: KeyRecord) -> KeyRecord {
        key.identity = key.identity.and_then(|named| {
            let identities = self.identities.borrow();
            let found = identities.iter().find(|i| i.id == named.id && i.project_id == key.project_id)?;
            Some(IdentityLimits { id: found.id.clone(), limits: found.limits.unwrap_or_default() })
        });
        key
    }

    /// Writes the identity's limits (or its deletion) into its keys; answers up to `tell` of them
    /// that are not revoked, newest first, as they are now, and how many it has (had).
    fn rewrite_keys(&self, identity: &Identity, deleted: bool, tell: usize) -> (Vec<KeyRecord>, u64) {
        let mut keys = self.keys.borrow_mut();
        let mut told = Vec::new();
        let mut count = 0;
        for key in keys.iter_mut().rev() {
            if key.identity.as_ref().is_none_or(|i| i.id != identity.id) {
                continue;
            }
            count += 1;
            key.identity = (!deleted).then(|| IdentityLimits {
                id: identity.id.clone(),
                limits: identity.limits.unwrap_or_default(),
            });
            if !key.is_revoked() && told.len() < tell {
                told.push(key.clone());
            }
        }
        (told, count)
    }
}

impl Directory for FakeStore {
    async fn create_project(&self, name: &str, owner_key: &KeyRecord) -> Result<KeyRecord, PortError> {
        let project_id = owner_key.project_id.as_str();
        self.faults
            .run("d1.create_project", || {
                let mut projects = self.directory.projects.borrow_mut();
                if !projects.iter().any(|p| p.id == project_id) {
                    let project = FakeProject {
                        id: project_id.to_owned(),
                        name: name.to_owned(),
                        plan: owner_key.plan.clone(),
                        created_at: owner_key.created_at,
                    };
                    projects.push(project);
                }
                let mut keys = self.directory.keys.borrow_mut();
                if let Some(found) = keys.iter().find(|k| k.id == owner_key.id) {
                    return found.clone();
                }
                keys.push(owner_key.clone());
                owner_key.clone()
            })
            .await
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.insert_key", || {
                let plan = self.directory.plan_of(&key.project_id)?;
                let mut keys = self.directory.keys.borrow_mut();
                if let Some(found) = keys.iter().find(|k| k.id == key.id || k.key_hash == key.key_hash) {
                    return (found.project_id == key.project_id && found.id == key.id).then(|| found.clone());
                }
                let stored = self.directory.joined(KeyRecord { plan, ..key.clone() });
                keys.push(stored.clone());
                Some(stored)
            })
            .await
    }

    async fn set_project_plan(&self, project_id: &str, plan: &str) -> Result<Option<PlanChange>, PortError> {
        self.faults
            .run("d1.set_project_plan", || {
                let mut projects = self.directory.projects.borrow_mut();
                let project = projects.iter_mut().find(|p| p.id == project_id)?;
                project.plan = plan.to_owned();
                let mut keys = self.directory.keys.borrow_mut();
                let keys = keys.iter_mut().filter(|k| k.project_id == project_id).map(|k| {
                    k.plan = plan.to_owned();
                    k.clone()
                });
                Some(PlanChange { name: project.name.clone(), keys: keys.collect() })
            })
            .await
    }

    async fn list_keys(&self, project_id: &str, _: &PageRequest) -> Result<Vec<KeyRecord>, PortError> {
        self.faults
            .run("d1.list_keys", || {
                let keys = self.directory.keys.borrow();
                keys.iter().rev().filter(|k| k.project_id == project_id).cloned().collect()
            })
            .await
    }

    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError> {
        self.faults
            .run("d1.update_key", || {
                let mut keys = self.directory.keys.borrow_mut();
                let others = keys.iter().filter(|k| k.is_other_lasting_owner(project_id, key_id)).count();
                match keys.iter_mut().find(|k| k.id == key_id && k.project_id == project_id) {
                    None => KeyUpdate::NotFound,
                    Some(k) if k.is_revoked() => KeyUpdate::Revoked,
                    Some(k)
                        if matches!(changes.expires_at, Some(Some(_)))
                            && k.key_type == KeyType::Owner
                            && k.rolled_at.is_none()
                            && others == 0 =>
                    {
                        KeyUpdate::LastOwnerKey
                    }
                    Some(k) => {
                        *k = self.directory.joined(changes.applied_to(k.clone()));
                        KeyUpdate::Updated(k.clone())
                    }
                }
            })
            .await
    }

    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError> {
        self.faults
            .run("d1.revoke_key", || {
                let mut keys = self.directory.keys.borrow_mut();
                let others = keys.iter().filter(|k| k.is_other_lasting_owner(project_id, key_id)).count();
                match keys.iter_mut().find(|k| k.id == key_id && k.project_id == project_id) {
                    None => Revocation::NotFound,
                    Some(k) if k.is_revoked() => Revocation::AlreadyRevoked(k.clone()),
                    Some(k) if k.key_type == KeyType::Owner && k.refusal(now_ms).is_none() && others == 0 => {
                        Revocation::LastOwnerKey
                    }
                    Some(k) => {
                        k.revoked_at = Some(now_ms);
                        Revocation::Revoked(k.clone())
                    }
                }
            })
            .await
    }

    async fn roll_key(
        &self,
        rolled: &KeyRecord,
        replacement: &KeyRecord,
        now_ms: i64,
    ) -> Result<Option<(KeyRecord, KeyRecord)>, PortError> {
        self.faults
            .run("d1.roll_key", || {
                let plan = self.directory.plan_of(&rolled.project_id)?;
                let mut keys = self.directory.keys.borrow_mut();
                let old = keys.iter_mut().find(|k| k.id == rolled.id && k.project_id == rolled.project_id)?;
                if old.is_revoked()
                    || old.rolled_at.is_some()
                    || old.expires_at.is_some_and(|at| at <= now_ms)
                {
                    return None;
                }
                old.rolled_at = Some(now_ms);
                old.rolled_to.clone_from(&rolled.rolled_to);
                old.expires_at = rolled.expires_at;
                let old = old.clone();
                let new = self.directory.joined(KeyRecord { plan, ..replacement.clone() });
                keys.push(new.clone());
                Some((old, new))
            })
            .await
    }

    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.find_key", || {
                let keys = self.directory.keys.borrow();
                keys.iter().find(|k| k.id == key_id && k.project_id == project_id).cloned()
            })
            .await
    }

    async fn lasting_owner_keys(&self, project_id: &str, except_key_id: &str) -> Result<u32, PortError> {
        self.faults
            .run("d1.lasting_owner_keys", || {
                let keys = self.directory.keys.borrow();
                keys.iter().filter(|k| k.is_other_lasting_owner(project_id, except_key_id)).count() as u32
            })
            .await
    }

    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.key_by_hash", || {
                self.directory.keys.borrow().iter().find(|k| k.key_hash == key_hash).cloned()
            })
            .await
    }

    async fn create_identity(&self, identity: &Identity) -> Result<IdentityInsert, PortError> {
        self.faults
            .run("d1.create_identity", || {
                if self.directory.plan_of(&identity.project_id).is_none() {
                    return IdentityInsert::NoProject;
                }
                let mut identities = self.directory.identities.borrow_mut();
                if let Some(found) = identities.iter().find(|i| i.id == identity.id) {
                    return IdentityInsert::Stored(found.clone());
                }
                let same = |i: &&Identity| {
                    i.project_id == identity.project_id && i.external_id == identity.external_id
                };
                if let Some(found) = identities.iter().find(same) {
                    return IdentityInsert::Duplicate(found.id.clone());
                }
                identities.push(identity.clone());
                IdentityInsert::Stored(identity.clone())
            })
            .await
    }

    async fn identity(&self, project_id: &str, identity_id: &str) -> Result<Option<Identity>, PortError> {
        self.faults
            .run("d1.identity", || {
                let identities = self.directory.identities.borrow();
                identities.iter().find(|i| i.id == identity_id && i.project_id == project_id).cloned()
            })
            .await
    }

    async fn list_identities(
        &self,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<Identity>, PortError> {
        self.faults
            .run("d1.list_identities", || {
                let mut rows: Vec<Identity> = self
                    .directory
                    .identities
                    .borrow()
                    .iter()
                    .filter(|i| i.project_id == project_id)
                    .filter(|i| page.after.as_ref().is_none_or(|c| (i.created_at, &i.id) < (c.ts, &c.id)))
                    .cloned()
                    .collect();
                rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
                rows.truncate(page.fetch_len());
                rows
            })
            .await
    }

    async fn update_identity(
        &self,
        project_id: &str,
        identity_id: &str,
        changes: &IdentityChanges,
        now_ms: i64,
        tell: usize,
    ) -> Result<Option<IdentityChange>, PortError> {
        self.faults
            .run("d1.update_identity", || {
                let mut identities = self.directory.identities.borrow_mut();
                let found =
                    identities.iter_mut().find(|i| i.id == identity_id && i.project_id == project_id)?;
                *found = changes.applied_to(found.clone(), now_ms);
                let identity = found.clone();
                drop(identities);
                let (keys, key_count) = self.directory.rewrite_keys(&identity, false, tell);
                Some(IdentityChange { identity, keys, key_count })
            })
            .await
    }

    async fn delete_identity(
        &self,
        project_id: &str,
        identity_id: &str,
        tell: usize,
    ) -> Result<Option<IdentityChange>, PortError> {
        self.faults
            .run("d1.delete_identity", || {
                let mut identities = self.directory.identities.borrow_mut();
                let at = identities.iter().position(|i| i.id == identity_id && i.project_id == project_id)?;
                let identity = identities.remove(at);
                drop(identities);
                let (keys, key_count) = self.directory.rewrite_keys(&identity, true, tell);
                Some(IdentityChange { identity, keys, key_count })
            })
            .await
    }
}

#[derive(Default)]
pub struct ResourceTables {
    pub contacts: RefCell<Vec<Contact>>,
    pub messages: RefCell<Vec<Message>>,
    pub scenarios: RefCell<Vec<Scenario>>,
    pub runs: RefCell<Vec<ScenarioRun>>,
    pub markers: RefCell<Vec<ReleaseMarker>>,
}

/// Create-or-find by id, as the D1 statements do: answers the stored row's `created_at`.
fn create_or_find<T: Clone>(
    rows: &mut Vec<T>,
    row: &T,
    id: impl Fn(&T) -> &str,
    at: impl Fn(&T) -> i64,
) -> i64 {
    match rows.iter().find(|r| id(r) == id(row)) {
        Some(stored) => at(stored),
        None => {
            rows.push(row.clone());
            at(row)
        }
    }
}

impl Resources for FakeStore {
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        _: &[OutgoingEvent],
    ) -> Result<(Vec<i64>, Vec<String>), PortError> {
        self.faults
            .run("d1.create_contacts", || {
                let mut rows = self.resources.contacts.borrow_mut();
                let stored =
                    contacts.iter().map(|c| create_or_find(&mut rows, c, |c| &c.id, |c| c.created_at));
                (stored.collect(), Vec::new())
            })
            .await
    }

    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError> {
        self.faults
            .run("d1.contact", || {
                let contacts = self.resources.contacts.borrow();
                contacts.iter().find(|c| c.id == id && c.project_id == project_id).cloned()
            })
            .await
    }

    async fn list_contacts(&self, project_id: &str, _: &PageRequest) -> Result<Vec<Contact>, PortError> {
        self.faults
            .run("d1.list_contacts", || {
                let contacts = self.resources.contacts.borrow();
                contacts.iter().rev().filter(|c| c.project_id == project_id).cloned().collect()
            })
            .await
    }

    async fn create_messages(
        &self,
        messages: &[Message],
        _: &[OutgoingEvent],
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError> {
        self.faults
            .run("d1.create_messages", || {
                let contacts = self.resources.contacts.borrow();
                let mut rows = self.resources.messages.borrow_mut();
                let stored = messages.iter().map(|m| {
                    let known = contacts.iter().any(|c| c.id == m.contact_id && c.project_id == m.project_id);
                    known.then(|| create_or_find(&mut rows, m, |m| &m.id, |m| m.created_at))
                });
                (stored.collect(), Vec::new())
            })
            .await
    }

    async fn create_scenario(&self, scenario: &Scenario) -> Result<i64, PortError> {
        self.faults
            .run("d1.create_scenario", || {
                create_or_find(
                    &mut self.resources.scenarios.borrow_mut(),
                    scenario,
                    |s| &s.id,
                    |s| s.created_at,
                )
            })
            .await
    }

    async fn start_run(
        &self,
        run: &ScenarioRun,
        _: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError> {
        self.faults
            .run("d1.start_run", || {
                create_or_find(&mut self.resources.runs.borrow_mut(), run, |r| &r.id, |r| r.created_at);
                (RunStart::Started, Vec::new())
            })
            .await
    }

    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        _: &[OutgoingEvent],
    ) -> Result<(i64, Vec<String>), PortError> {
        self.faults
            .run("d1.create_release_marker", || {
                let mut rows = self.resources.markers.borrow_mut();
                (create_or_find(&mut rows, marker, |m| &m.id, |m| m.created_at), Vec::new())
            })
            .await
    }
}
