//! A key's guard deciding its requests (SPEC §4, §20): the key's windows and monthly quota
//! (`limit_counters`), the dashboard's budget apart from them (`budget_counters`), and the credits
//! of the levels above the key ([`super::holder`]). An address guard (`ip:…`) counts failed
//! authentications with the same counters. One row each, rewritten in place: nothing to purge.

use std::time::Duration;

use serde::Deserialize;
use worker::{Delay, Result};

use super::isolate_leases::LEASE_RETURN_MS;
use super::{holder::project_held, rust_error, tables::Role, KeyGuardObject};
use crate::adapters::clock::now_ms;
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::browser::VisitorCheck;
use gatehouse_core::config::Config;
use gatehouse_core::guard::protocol::{
    Authorize, Authorized, Decided, Denied, Moved, RenewLease, Renewed, TakeClaim,
};
use gatehouse_core::lease::{
    admit, lease_to_isolate, quota_to_ask, refusal_lease, refusal_wait_until, refused_by_level,
    with_project_quota, Decision, Grant, LeaseAsk,
};
use gatehouse_core::rate_limit::{
    decide_request, Counters, LimitSpec, Limits, Usage, Verdict, Window, WindowCount,
};

const LEASE_WAIT_POLL_MS: u64 = 20;

pub(super) const TABLES: &[&str] = &[
    // Every window's count and the month's, as JSON (`Counters`). The first version kept one
    // minute window in `counters`; it is read once when this table has no row yet.
    "CREATE TABLE IF NOT EXISTS limit_counters (
       id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL)",
    // The counters of a budget apart from the key's windows: the dashboard's (`Counters` as JSON).
    "CREATE TABLE IF NOT EXISTS budget_counters (budget TEXT PRIMARY KEY, state TEXT NOT NULL)",
];

impl KeyGuardObject {
    pub(super) async fn authorize(&self, c: Authorize) -> Result<Authorized> {
        let (record, mut d1_queries) = self.record(&c.key_hash).await?;
        // SPEC §26: a key re-hashed under a new pepper keeps the guard it had; asked by its new
        // hash, this object only says where that guard is. One the isolate hashed otherwise than
        // its record says is re-hashed (once per key and rotation).
        if let Some(key) = record.as_ref().filter(|key| key.guard() != c.key_hash) {
            return Ok(Authorized::Moved(Moved { guard: key.guard().to_owned(), d1_queries }));
        }
        let record = match (record, &c.current) {
            (Some(key), Some(current)) if key.needs_rehash(current) => {
                d1_queries += 1;
                Some(self.rehash(key, current).await?)
            }
            (record, _) => record,
        };
        // Expiry and a roll's grace are decided here, per request, with the object's clock and
        // the record it holds (told first of every change): no D1 read, no cache that lags.
        let refusal = record.as_ref().and_then(|key| key.refusal(now_ms()));
        Ok(match record {
            Some(key) if refusal.is_none() => {
                // A key whose type may not call the route (403) is refused before anything is
                // counted and takes no claim: its answer carries the window as it stands.
                // A browser key's visitor (SPEC §24): a page of another origin is refused like
                // another key type, and a visitor over its window before the key's is counted.
                // A request its key's type may not make (403) is not the visitor's either.
                let config = self.config()?;
                let per_visitor = config.browser_per_address_per_minute(&key);
                let told = c.visitor.as_ref().filter(|_| key.key_type.allows(c.scope));
                let visitor = self.visitors.borrow_mut().check(&key, told, per_visitor, now_ms());
                let permitted = key.key_type.allows(c.scope) && visitor != VisitorCheck::OriginRefused;
                if let Some(lease) = &c.lease {
                    self.take_back_and_wake(Some(&key), &lease.give_back).await?;
                }
                let by_visitor = matches!(visitor, VisitorCheck::Over(_));
                let (verdict, usage, lease) = if let VisitorCheck::Over(usage) = visitor {
                    (Verdict::RateLimited, usage, None)
                } else if c.scope.is_dashboard_read() {
                    let (verdict, usage) = self.count_dashboard_read(permitted)?;
                    (verdict, usage, None)
                } else {
                    self.admit(&key, self.config()?.cost(&key.plan, c.scope), permitted, c.lease.as_ref())
                        .await?
                };
                let claim = match c.claim {
                    Some(claim) if verdict == Verdict::Allowed && permitted => {
                        // Taken here, or by the key's claim object that holds it (SPEC §20).
                        let object = key.claim_object(&claim.idempotency_key);
                        Some(if object == c.key_hash {
                            self.claim_waiting(&claim).await?
                        } else {
                            self.ask_other(&object, TakeClaim { claim }).await?
                        })
                    }
                    _ => None,
                };
                Authorized::Decided(Decided { key, verdict, usage, claim, d1_queries, lease, by_visitor })
            }
            refused => {
                if let Some(lease) = &c.lease {
                    self.take_back_and_wake(refused.as_ref(), &lease.give_back).await?;
                }
                Authorized::Denied(Denied { key: refused, reason: refusal, d1_queries })
            }
        })
    }

    /// One of the dashboard's reads, in the key's dashboard window only (`DASHBOARD_READS_PER_MINUTE`),
    /// counted only when `permitted`: read, decide and write without yielding.
    fn count_dashboard_read(&self, permitted: bool) -> Result<(Verdict, Usage)> {
        let prev = match self.dashboard_counters.get() {
            Some(c) => c,
            None if self.plays(Role::Admission)? => self
                .stored_state("SELECT state FROM budget_counters WHERE budget = 'dashboard'")?
                .unwrap_or_default(),
            None => Counters::default(),
        };
        let (verdict, usage, taken) =
            decide_request(prev, now_ms(), self.config()?.dashboard_limits(), 1, permitted);
        if let Some(next) = taken {
            self.keep_state(
                "INSERT OR REPLACE INTO budget_counters (budget, state) VALUES ('dashboard', ?)",
                next,
            )?;
            self.dashboard_counters.set(Some(next));
        }
        Ok((verdict, usage))
    }

    /// Counters kept as JSON in the `state` of the one row `query` reads, if there is one.
    fn stored_state(&self, query: &str) -> Result<Option<Counters>> {
        #[derive(Deserialize)]
        struct State {
            state: String,
        }
        match self.sql.exec(query, None)?.to_array::<State>()?.pop() {
            Some(row) => serde_json::from_str(&row.state).map(Some).map_err(rust_error),
            None => Ok(None),
        }
    }

    /// Keeps counters as JSON by `statement` (its one parameter), the tables made first.
    fn keep_state(&self, statement: &str, next: Counters) -> Result<()> {
        self.create_tables(Role::Admission)?;
        self.sql.exec(statement, vec![serde_json::to_string(&next).map_err(rust_error)?.into()])?;
        Ok(())
    }

    /// One request of `cost` units against `limits`, counted only when `permitted`
    /// (`decide_request`): read, decide and write the counters without yielding.
    pub(super) fn count(&self, limits: Limits, cost: u32, permitted: bool) -> Result<(Verdict, Usage)> {
        let (verdict, usage, taken) =
            decide_request(self.current_counters()?, now_ms(), limits, cost, permitted);
        if let Some(next) = taken {
            self.keep_counters(next)?;
        }
        Ok((verdict, usage))
    }

    /// The decision on one request of `key` (SPEC §20): its own windows, then a credit of each
    /// level above it (its identity, its project), asking a level's authority for a grant when
    /// it holds too few. Read, decide and write happen without yielding; only an exchange waits,
    /// and the decision is made again after it.
    ///
    /// With `lease` (the isolate would hold one), an admission of a hot key also leases the
    /// isolate some of its credits, and a refusal of a hot key comes with a refusal lease. A
    /// refusal while isolates hold credits of the key waits (at most until those leases end and a
    /// moment for them to come back) for what they give back, so leases never make a request fail
    /// that the limit still has room for.
    async fn admit(
        &self,
        key: &KeyRecord,
        cost: u32,
        permitted: bool,
        lease: Option<&LeaseAsk>,
    ) -> Result<(Verdict, Usage, Option<Grant>)> {
        let config = self.config()?;
        let limits = config.limits(key);
        let hot = lease.is_some_and(|ask| self.is_hot(config, ask));
        let mut waited = false;
        let mut wait_until: Option<i64> = None;
        // Each round admits at least one request of this key, ends in a refusal, or waits for
        // leases to come back; the bound is only a guard against a bug. The levels' limits are read
        // each round: an exchange may have learnt an authority's own.
        for _ in 0..256 {
            let levels = self.levels(key)?;
            let specs: Vec<LimitSpec> = levels.iter().map(|(_, spec)| *spec).collect();
            let mut held = self.held(&levels)?;
            let now = now_ms();
            let refused =
                match admit(self.current_counters()?, now, limits, cost, permitted, &specs, &mut held) {
                    Decision::Decided { verdict, usage, counters: Some(next) } => {
                        // A request that waited for credits to come back leases none: others wait too.
                        let leased = match lease {
                            Some(ask) if hot && !waited => {
                                let grant_id = gatehouse_core::encoding::hex(&gatehouse_app::random::<16>());
                                lease_to_isolate(
                                    next, now, &limits, &levels, &mut held, &grant_id, ask.want, hot,
                                )
                            }
                            _ => None,
                        };
                        let project = project_held(key, &levels, &held);
                        let (next, lease) = match leased {
                            Some((mut grant, after, drawn)) => {
                                grant.usage = with_project_quota(grant.usage, project.as_ref());
                                self.keep_isolate_lease(&grant, &drawn)?;
                                (after, Some(grant))
                            }
                            None => (next, None),
                        };
                        self.keep_counters(next)?;
                        self.keep_held(&levels, held)?;
                        return Ok((verdict, with_project_quota(usage, project.as_ref()), lease));
                    }
                    Decision::Decided { verdict: Verdict::Allowed, usage, counters: None } => {
                        // A 403: nothing taken.
                        return Ok((Verdict::Allowed, usage, None));
                    }
                    Decision::Decided { verdict: Verdict::RateLimited, usage, counters: None } => {
                        // Over a window: is the quota used up too? Asked once per minute and level.
                        match quota_to_ask(&levels, &held, now).filter(|&i| self.first_ask(&levels[i].0, now))
                        {
                            Some(i) => {
                                let (level, spec) = &levels[i];
                                let flight =
                                    self.exchanges.borrow_mut().entry(level.clone()).or_default().clone();
                                let grant = flight
                                    .run(|| self.exchange_with(level, *spec, cost))
                                    .await
                                    .map_err(rust_error)?;
                                match grant.verdict {
                                    Verdict::QuotaExceeded => refused_by_level(usage, &grant),
                                    _ => (Verdict::RateLimited, usage),
                                }
                            }
                            None => (Verdict::RateLimited, usage),
                        }
                    }
                    Decision::Decided { verdict, usage, counters: None } => (verdict, usage),
                    Decision::NeedsCredits(i) => {
                        let (level, spec) = &levels[i];
                        let flight = self.exchanges.borrow_mut().entry(level.clone()).or_default().clone();
                        let grant = flight
                            .run(|| self.exchange_with(level, *spec, cost))
                            .await
                            .map_err(rust_error)?;
                        if grant.credits >= cost.max(1) {
                            continue;
                        }
                        let (_, stands, _) =
                            decide_request(self.current_counters()?, now, limits, cost, false);
                        refused_by_level(stands, &grant)
                    }
                };
            // Waiting helps a window, never a used-up quota; only for the leases out when the
            // request was first refused (leases made meanwhile do not extend its wait), and
            // briefly, within the refusing window (SPEC §23: a 429 now, not after a wait).
            let deadline = match wait_until {
                Some(deadline) => Some(deadline),
                None => refusal_wait_until(
                    now,
                    refused.0,
                    refused.1.refused_by,
                    self.leased_until(now),
                    LEASE_RETURN_MS,
                ),
            };
            wait_until = deadline;
            match deadline {
                Some(deadline) if now < deadline => {
                    waited = true;
                    Delay::from(Duration::from_millis(LEASE_WAIT_POLL_MS)).await;
                }
                // A hot key's isolate repeats the refusal for up to a second without asking.
                _ => {
                    return Ok((refused.0, refused.1, hot.then(|| refusal_lease(now, refused.0, &refused.1))))
                }
            }
        }
        // Never reached in practice: 256 rounds without an answer.
        let (_, usage, _) = decide_request(self.current_counters()?, now_ms(), limits, cost, false);
        Ok((Verdict::RateLimited, usage, None))
    }

    /// Whether the key is hot: its guard saw `LEASE_ABOVE_PER_SECOND` requests from isolates in
    /// this second, or the isolate asking is renewing a lease.
    fn is_hot(&self, config: &Config, ask: &LeaseAsk) -> bool {
        let mut rate = self.rate.get();
        let seen = rate.count(now_ms());
        self.rate.set(rate);
        config.lease_above_per_second.is_some_and(|above| ask.is_hot(seen, above))
    }

    /// A new lease for an isolate whose lease runs low (SPEC §20): what it gives back first, then
    /// a lease of the key's credits as with an admission, without a request. None for a refused
    /// key, or when nothing is left to lease (the isolate asks with its next request then).
    pub(super) async fn renew(&self, c: RenewLease) -> Result<Renewed> {
        let (record, _) = self.record(&c.key_hash).await?;
        let now = now_ms();
        self.take_back_and_wake(record.as_ref(), &c.lease.give_back).await?;
        let Some(key) = record.filter(|k| k.refusal(now).is_none()) else {
            return Ok(Renewed { key: None, lease: None });
        };
        let config = self.config()?;
        if !self.is_hot(config, &c.lease) {
            return Ok(Renewed { key: Some(key), lease: None });
        }
        let limits = config.limits(&key);
        let levels = self.levels(&key)?;
        let mut held = self.held(&levels)?;
        let grant_id = gatehouse_core::encoding::hex(&gatehouse_app::random::<16>());
        let counters = self.current_counters()?;
        let leased =
            lease_to_isolate(counters, now, &limits, &levels, &mut held, &grant_id, c.lease.want, true);
        let Some((mut grant, after, drawn)) = leased else {
            return Ok(Renewed { key: Some(key), lease: None });
        };
        let project = project_held(&key, &levels, &held);
        grant.usage = with_project_quota(grant.usage, project.as_ref());
        self.keep_isolate_lease(&grant, &drawn)?;
        self.keep_counters(after)?;
        self.keep_held(&levels, held)?;
        Ok(Renewed { key: Some(key), lease: Some(grant) })
    }

    /// Whether `level`'s quota was not asked about yet in this minute (then it is, from now).
    fn first_ask(&self, level: &str, now: i64) -> bool {
        let minute = Window::Minute.start(now);
        self.quota_asked.borrow_mut().insert(level.to_owned(), minute) != Some(minute)
    }

    /// The counters as they stand (memory, else storage).
    pub(super) fn current_counters(&self) -> Result<Counters> {
        Ok(match self.counters.get() {
            Some(c) => c,
            None if self.plays(Role::Admission)? => self.stored_counters()?,
            None => Counters::default(),
        })
    }

    pub(super) fn keep_counters(&self, next: Counters) -> Result<()> {
        self.keep_state("INSERT OR REPLACE INTO limit_counters (id, state) VALUES (1, ?)", next)?;
        self.counters.set(Some(next));
        Ok(())
    }

    /// The counters in storage: `limit_counters`, else the first version's one minute window.
    fn stored_counters(&self) -> Result<Counters> {
        if let Some(counters) = self.stored_state("SELECT state FROM limit_counters")? {
            return Ok(counters);
        }
        #[derive(Deserialize)]
        struct FirstVersion {
            window_start_ms: i64,
            window_used: u32,
            month_start_ms: i64,
            month_used: u64,
        }
        let old = match self.sql.exec("SELECT * FROM counters", None) {
            Ok(rows) => rows.to_array::<FirstVersion>()?.pop(),
            Err(_) => None, // no such table: a guard that never had the first version
        };
        Ok(old.map_or_else(Counters::default, |o| {
            let mut c =
                Counters { month_start_ms: o.month_start_ms, month_used: o.month_used, ..Default::default() };
            c.windows[1] = WindowCount { start_ms: o.window_start_ms, used: o.window_used };
            c
        }))
    }
}
