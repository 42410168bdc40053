//! The fake of the key guard port: every key's guard, every level's authority and every claim
//! shard in one struct, with the real claim, rate and lease decisions of `core` — and what each
//! object keeps, counted in bytes and purged by `core::retention`, as the Durable Objects do.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::gateway::Clock;
use crate::sim::Faults;
use gatehouse_core::api_key::{CurrentHash, KeyRecord};
use gatehouse_core::browser::VisitorCheck;
use gatehouse_core::config::Config;
use gatehouse_core::guard::protocol::{client_guard_name, project_authority, Completed};
use gatehouse_core::idempotency::{decide_claim, Claim, ClaimDecision, Entry, KeptResponse, LEASE_MS};
use gatehouse_core::lease::{
    accept_give_back, admit, lease_to_isolate, quota_to_ask, refusal_lease, refused_by_level, take_back,
    with_project_quota, Decision, Drawn, GiveBack, Grant, Held, LeaseAsk, RequestRate, Returned,
};
use gatehouse_core::ports::{
    Admission, Authorization, AuthorizeCall, ClaimHolder, ClaimRequest, Completion, KeyGuard, PortError,
};
use gatehouse_core::rate_limit::{decide_request, Counters, LimitSpec, Limits, Usage, Verdict};
use gatehouse_core::retention::{body_until, STORE_PROPAGATION_MS};

/// A claim as the guard keeps it.
#[derive(Debug, Clone)]
pub struct HeldClaim {
    pub claim: Claim,
    pub owner: String,
    /// Replays carry the response inline until then.
    pub inline_until: i64,
    /// The claim row is kept until then (its TTL), its response body until `body_until`: once
    /// the response store took it, until the store shows it everywhere (SPEC §23).
    pub keep_until: i64,
    pub body_until: i64,
}

/// A lease to an isolate: the grant, what it drew from the levels above, what came back.
pub type IsolateLease = (Grant, Drawn, Returned);

/// A row an object keeps, in which object and until when (`core::retention`).
#[derive(Debug, Clone)]
pub struct Kept<T> {
    pub row: T,
    pub object: String,
    pub keep_until: i64,
}

/// Every key's guard in one fake: what the Durable Objects keep, keyed by key hash.
pub struct FakeGuard {
    pub faults: Rc<Faults>,
    /// The projects' chain heads (SPEC §23): the same objects' other role.
    pub heads: Rc<super::audit_heads::FakeAuditHeads>,
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
    /// Browser keys' visitors this minute (SPEC §24), as every key's guard keeps them in memory.
    pub visitors: RefCell<gatehouse_core::browser::VisitorWindows>,
    /// The grant each key's guard holds of each level above it, by (key hash, level).
    pub held: RefCell<HashMap<(String, String), Held>>,
    /// Every grant an authority made, and whether its unused credits came back.
    pub grants: RefCell<HashMap<String, Kept<(Grant, Returned)>>>,
    /// Requests from isolates each key's guard saw in the current second (a hot key leases).
    pub rates: RefCell<HashMap<String, RequestRate>>,
    /// Every lease a key's guard made to an isolate, what it drew from, and whether it came back.
    pub isolate_leases: RefCell<HashMap<String, Kept<IsolateLease>>>,
    pub claims: RefCell<HashMap<(String, String), HeldClaim>>,
    /// Leases that ran out before their claim was completed or released.
    pub lapsed: Cell<u32>,
    /// Claims that were taken (`Execute` answers).
    pub executions: Cell<u32>,
    /// Guards (by key hash) and authorities (by name) that cannot be told anything: `apply` and
    /// `set_level_limits` fail before their effect.
    pub unreachable: RefCell<std::collections::HashSet<String>>,
    /// Claims another request (another fingerprint) took over after a release or a lapse: the
    /// first request's operation is forgotten (the forfeit of docs/operations/faults.md).
    pub taken_over: Cell<u32>,
    /// The guard of every call, in order: a key hash (an `authorize` creates that key's object
    /// and, for a key it does not hold, costs a D1 lookup) or `ip:<address>`.
    pub asked: RefCell<Vec<String>>,
    /// The response store (the real claim object writes it when a claim completes).
    pub responses: Rc<super::gateway::KvEntries>,
    /// Grant and lease ids made so far.
    ids: Cell<u64>,
    /// Each level's limits as told to its authority, their version, and until when they hold (10
    /// minutes, as the real authority: SPEC §23).
    pub level_limits: RefCell<HashMap<String, (LimitSpec, i64, i64)>>,
}

impl FakeGuard {
    pub fn new(
        faults: Rc<Faults>,
        clock: Clock,
        config: &'static Config,
        keys: Rc<RefCell<Vec<KeyRecord>>>,
        responses: Rc<super::gateway::KvEntries>,
    ) -> Self {
        FakeGuard {
            heads: Rc::new(super::audit_heads::FakeAuditHeads::new(faults.clone())),
            faults,
            clock,
            config,
            applied: RefCell::default(),
            keys,
            counters: RefCell::default(),
            visitors: RefCell::default(),
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
            responses,
            ids: Cell::new(0),
            level_limits: RefCell::default(),
        }
    }

    /// A new grant or lease id.
    pub(super) fn next_id(&self, kind: &str) -> String {
        self.ids.set(self.ids.get() + 1);
        format!("{kind}-{}", self.ids.get())
    }

    fn record(&self, key_hash: &str) -> Option<KeyRecord> {
        if let Some((key, until)) = self.applied.borrow().get(key_hash) {
            if *until > self.clock.get() {
                return Some(key.clone());
            }
        }
        // As the real guard: a record read from D1 is used for 10 minutes before it is read again.
        // By its hash, or by its guard's name once re-hashed (SPEC §26).
        let found = |k: &&KeyRecord| k.key_hash == key_hash || k.guard_hash.as_deref() == Some(key_hash);
        let loaded = self.keys.borrow().iter().find(found).cloned()?;
        self.applied.borrow_mut().insert(key_hash.to_owned(), (loaded.clone(), self.clock.get() + 600_000));
        Some(loaded)
    }

    /// The key re-hashed as `current` says, in the directory and as this guard's record.
    fn rehash(&self, key: KeyRecord, current: &CurrentHash) -> KeyRecord {
        let (to, pepper) = (&current.key_hash, &current.pepper);
        let rehashed =
            super::rotations::rehash(&mut self.keys.borrow_mut(), &key.id, &key.key_hash, to, pepper);
        let rehashed = rehashed.unwrap_or(key);
        let until = self.clock.get() + 600_000;
        self.applied.borrow_mut().insert(rehashed.guard().to_owned(), (rehashed.clone(), until));
        rehashed
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
        let levels = self.levels(key);
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
        let seen = rates.entry(key.guard().to_owned()).or_default().count(self.clock.get());
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
            let prev = self.counters.borrow().get(key.guard()).copied().unwrap_or_default();
            let specs: Vec<LimitSpec> = levels.iter().map(|(_, spec)| *spec).collect();
            match admit(prev, now, limits, cost, permitted, &specs, &mut held) {
                Decision::Decided { verdict: Verdict::RateLimited, usage, counters: None } => {
                    // Over a window: is the quota used up too? (The real guard asks once a minute.)
                    if let Some(i) = quota_to_ask(levels, &held, now) {
                        let (level, spec) = &levels[i];
                        let slot = (key.guard().to_owned(), level.clone());
                        let last = self.held.borrow_mut().remove(&slot);
                        let grant = self.exchange(level, key.guard(), spec, last.as_ref(), cost);
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
                                let id = self.next_id("lease");
                                lease_to_isolate(next, now, &limits, levels, &mut held, &id, ask.want, hot)
                            }
                            _ => None,
                        };
                        let next = match lease {
                            Some((grant, after, drawn)) => {
                                self.keep_isolate_lease(key.guard(), &grant, drawn);
                                leased = Some(grant);
                                after
                            }
                            None => next,
                        };
                        self.counters.borrow_mut().insert(key.guard().to_owned(), next);
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
                    let grant = self.exchange(level, &key.key_hash, spec, last.as_ref(), cost);
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
        let levels = key.as_ref().map(|k| self.levels(k)).unwrap_or_default();
        let mut held = key.as_ref().map(|k| self.held_of(k, &levels)).unwrap_or_default();
        let mut counters = self.counters.borrow().get(key_hash).copied().unwrap_or_default();
        let mut late = Vec::new();
        for back in give_back {
            if let Some(Kept { row: (grant, drawn, returned), .. }) =
                self.isolate_leases.borrow_mut().get_mut(&back.grant_id)
            {
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
            let keep_until = now + self.config.idempotency_ttl_seconds as i64 * 1000;
            let owner = request.request_id.clone();
            claims.insert(
                slot,
                HeldClaim { claim, owner, inline_until: 0, keep_until, body_until: keep_until },
            );
        }
        decision
    }
}

impl KeyGuard for FakeGuard {
    async fn authorize(&self, ask: AuthorizeCall<'_>) -> Result<Authorization, PortError> {
        let AuthorizeCall { key_hash, scope, claim, lease, visitor, current } = ask;
        self.asked.borrow_mut().push(key_hash.to_owned());
        self.purge();
        self.refuse_if_full(key_hash)?;
        self.faults
            .run("guard.authorize", || {
                self.run_alarms();
                if let Some(lease) = lease {
                    self.take_back_leases(key_hash, &lease.give_back);
                }
                // As the real guard (SPEC §26): a re-hashed key's guard is elsewhere; a key
                // hashed otherwise than the isolate's current pepper says is re-hashed.
                let record = match (self.record(key_hash), current) {
                    (Some(key), _) if key.guard() != key_hash => {
                        return Authorization::Moved(key.guard().to_owned())
                    }
                    (Some(key), Some(current)) if key.needs_rehash(current) => {
                        Some(self.rehash(key, current))
                    }
                    (record, _) => record,
                };
                match record {
                    Some(key) if key.refusal(self.clock.get()).is_none() => {
                        let per_visitor = self.config.browser_per_address_per_minute(&key);
                        let now = self.clock.get();
                        let told = visitor.filter(|_| key.key_type.allows(scope));
                        let visitor = self.visitors.borrow_mut().check(&key, told, per_visitor, now);
                        let permitted = key.key_type.allows(scope) && visitor != VisitorCheck::OriginRefused;
                        let by_visitor = matches!(visitor, VisitorCheck::Over(_));
                        let (verdict, usage, lease) = if let VisitorCheck::Over(usage) = visitor {
                            (Verdict::RateLimited, usage, None)
                        } else if scope.is_dashboard_read() {
                            let budget = format!("dashboard:{key_hash}");
                            let (verdict, usage) =
                                self.count(&budget, self.config.dashboard_limits(), 1, permitted);
                            (verdict, usage, None)
                        } else {
                            self.admit(&key, self.config.cost(&key.plan, scope), permitted, lease)
                        };
                        // The guard takes it, or the key's claim object that holds it (SPEC §20).
                        let claim = claim
                            .filter(|_| verdict == Verdict::Allowed && permitted)
                            .map(|c| self.claim(&key.claim_object(&c.idempotency_key), c));
                        let admission = Admission { key, verdict, usage, claim, lease, by_visitor };
                        Authorization::Admitted(Box::new(admission))
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
        self.purge();
        self.refuse_if_full(key_hash)?;
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
                let levels = self.levels(&key);
                let mut held = self.held_of(&key, &levels);
                let counters = self.counters.borrow().get(key_hash).copied().unwrap_or_default();
                let id = self.next_id("lease");
                match lease_to_isolate(counters, now, &limits, &levels, &mut held, &id, lease.want, true) {
                    Some((grant, after, drawn)) => {
                        self.keep_isolate_lease(key_hash, &grant, drawn);
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
        self.purge();
        self.refuse_if_full(principal)?;
        self.faults.run("guard.take_claim", || self.claim(principal, claim)).await
    }

    async fn complete_claim(&self, completion: Completion<'_>) -> Result<Completed, PortError> {
        let Completion { key_hash, api_key_id, claim, response } = completion;
        let stored = serde_json::to_string(response).map_or(usize::MAX, |s| s.len());
        super::over_limit("durable object value", stored, gatehouse_core::platform::DO_MAX_VALUE_BYTES)?;
        self.purge();
        self.refuse_if_full(key_hash)?;
        self.faults
            .run("guard.complete_claim", || {
                let now = self.clock.get();
                let slot = (key_hash.to_owned(), claim.idempotency_key.clone());
                let mut claims = self.claims.borrow_mut();
                let Some(held) = claims.get_mut(&slot).filter(|h| h.owner == claim.request_id) else {
                    return Completed { completed: false, stored: false };
                };
                if held.claim.completed || held.claim.released {
                    // A repeated notice: the caller writes the store itself.
                    return Completed { completed: held.claim.completed, stored: false };
                }
                held.claim.completed = true;
                held.claim.until_ms = now + self.config.idempotency_ttl_seconds as i64 * 1000;
                held.claim.response = Some(response.clone());
                held.inline_until = now + STORE_PROPAGATION_MS;
                held.keep_until = held.claim.until_ms;
                held.body_until = held.keep_until;
                // The claim's object writes the response store; once it did, the body stays only
                // until the store shows it.
                let entry = Entry { api_key_id, idempotency_key: &claim.idempotency_key };
                let stored = !self.faults.inner_call_fails("guard.store_response");
                if stored {
                    self.responses.put(entry, response, now);
                    held.body_until = body_until(now);
                }
                Completed { completed: true, stored }
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

    async fn set_level_limits(&self, level: &str, limits: &LimitSpec, version: i64) -> Result<(), PortError> {
        if self.unreachable.borrow().contains(level) {
            return Err(PortError(format!("guard.set_level_limits: {level} cannot be reached")));
        }
        self.faults
            .run("guard.set_level_limits", || {
                let now = self.clock.get();
                let mut told = self.level_limits.borrow_mut();
                if told.get(level).is_none_or(|(_, v, until)| *v <= version || *until <= now) {
                    told.insert(level.to_owned(), (*limits, version, now + 600_000));
                }
            })
            .await
    }

    async fn ping(&self) -> Result<(), PortError> {
        self.faults.run("guard.ping", || ()).await
    }

    async fn wake(&self, object: &str) -> Result<(), PortError> {
        self.faults.run("guard.wake", || self.asked.borrow_mut().push(object.to_owned())).await
    }

    async fn record_auth_failure(&self, group: &str, per_minute: u32) -> Result<(Verdict, Usage), PortError> {
        let name = client_guard_name(group);
        self.asked.borrow_mut().push(name.clone());
        self.faults
            .run("guard.record_auth_failure", || self.count(&name, Limits::per_minute(per_minute), 1, true))
            .await
    }
}
