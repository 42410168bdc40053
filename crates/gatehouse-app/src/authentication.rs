//! Authentication (SPEC §2, §3, §13) in two steps. `screen` decides what it can without I/O
//! beyond the client address's guard, before the body is read: a public route, the admin token,
//! a missing or malformed key, a key hash known to be unknown, an address known to be over its
//! limit. `authenticate` then asks the key's guard to decide on the key, its type's scope, its
//! limits and its idempotency claim in one round trip.
//!
//! Anonymous traffic (failed authentication and unmatched routes) is counted per client address
//! (`refuse_anonymous`); once an address is over its limit, the isolate remembers it until the
//! window ends and answers its anonymous requests from memory: no Durable Object, no D1 query,
//! no audit row. A key hash its guard did not know is remembered as unknown for a minute.

use super::pipeline::{Caller, Trace};
use super::visitors::{origin_refused, visitor_over};
use super::{unavailable, Gateway};
use gatehouse_core::api_key::{self, CurrentHash, KeyRecord, KeyTypes, RefusalReason, Scope};
use gatehouse_core::browser::Visitor;
use gatehouse_core::error::{ApiError, ErrorCode};
use gatehouse_core::lease::Leased;
use gatehouse_core::ports::Pause;
use gatehouse_core::ports::{
    Admission, Authorization, AuthorizeCall, ClaimHolder, ClaimRequest, KeyGuard, PortError, Ports,
};
use gatehouse_core::rate_limit::{Usage, Verdict};
use gatehouse_core::route::{Access, Route, RouteId};
use gatehouse_core::time::rfc3339;

/// A refusal during authentication, with the key's usage when the key itself was valid.
pub(super) type Refusal = (Option<Usage>, ApiError);

/// What the screen let through.
pub(super) enum Credentials {
    /// A public route, or an admin route with the admin token.
    Open,
    /// An API key for its guard to decide on.
    Key(KeyCredentials),
}

/// An API key as presented (the key itself seals its stored responses), by its hash under the
/// current pepper (`current`) or under `KEY_PEPPER_PREVIOUS`, with the browser key's visitor.
pub(super) struct KeyCredentials {
    pub(super) token: String,
    /// The name of the key's guard to ask: its hash (under the current pepper, or the previous
    /// one when the current one is remembered as unknown), or the guard of a re-hashed key.
    pub(super) key_hash: String,
    pub(super) current: bool,
    /// The key's hash under the current pepper, told to its guard (SPEC §26: a record hashed
    /// otherwise is re-hashed).
    pub(super) hashed: CurrentHash,
    pub(super) scope: Scope,
    /// A browser key's sender (SPEC §24): the client address and the page's `Origin`.
    pub(super) visitor: Option<Visitor>,
}

/// What a request presents for authentication: `Authorization`, the `?key=` of its query, its
/// `Origin` and its client address.
#[derive(Clone, Copy)]
pub(super) struct Presented<'a> {
    pub(super) authorization: Option<&'a str>,
    pub(super) query_key: Option<&'a str>,
    pub(super) origin: Option<&'a str>,
    pub(super) client_ip: Option<&'a str>,
}

impl<P: Ports> Gateway<'_, P> {
    /// What can be decided before the body is read and without the key's guard.
    /// `dashboard`: the request is one of the dashboard's reads under its budget
    /// ([`gatehouse_core::budget`]), decided under [`Scope::DashboardRead`].
    pub(super) async fn screen(
        &self,
        route: &Route,
        dashboard: bool,
        presented: Presented<'_>,
        now_ms: i64,
        trace: &mut Trace,
    ) -> Result<Credentials, ApiError> {
        let client_ip = presented.client_ip;
        let token = presented.authorization.and_then(api_key::bearer_token);
        let scope = match route.access {
            Access::Public => return Ok(Credentials::Open),
            Access::Admin => {
                let expected = self.config.admin_token.as_bytes();
                return match token {
                    Some(t) if api_key::constant_time_eq(t.as_bytes(), expected) => Ok(Credentials::Open),
                    _ => {
                        let e =
                            ApiError::new(ErrorCode::InvalidApiKey, "The admin token is missing or wrong.");
                        Err(self.refuse_anonymous(client_ip, e, now_ms, trace).await)
                    }
                };
            }
            Access::Origin => {
                let expected = self.config.events_secret.as_deref().map(str::as_bytes);
                return match (token, expected) {
                    (Some(t), Some(expected)) if api_key::constant_time_eq(t.as_bytes(), expected) => {
                        Ok(Credentials::Open)
                    }
                    _ => {
                        let e = ApiError::new(
                            ErrorCode::InvalidApiKey,
                            "The events secret is missing or wrong (or EVENTS_SECRET is not set).",
                        );
                        Err(self.refuse_anonymous(client_ip, e, now_ms, trace).await)
                    }
                };
            }
            Access::Key(_) if dashboard => Scope::DashboardRead,
            Access::Key(scope) => scope,
        };
        // SPEC §24: a page's `navigator.sendBeacon` cannot set `Authorization`; a browser key may
        // come as `?key=` on `/v1/track`, and no other key, nor on any other route.
        let token = match (token, presented.query_key) {
            (None, Some(key)) if route.id == RouteId::Track && key.starts_with(BROWSER_KEY_START) => {
                Some(key)
            }
            (None, Some(_)) => {
                let e = ApiError::new(
                    ErrorCode::InvalidApiKey,
                    "An API key in the query (?key=) is taken only from a browser key on /v1/track; \
                     send it as `Authorization: Bearer <key>`.",
                );
                return Err(self.refuse_anonymous(client_ip, e, now_ms, trace).await);
            }
            (token, _) => token,
        };
        let Some(token) = token.filter(|t| api_key::is_well_formed(t)) else {
            return Err(self.refuse_anonymous(client_ip, ApiError::invalid_api_key(), now_ms, trace).await);
        };
        let Some((key_hash, current, hashed)) = self.hash_to_ask(token, client_ip, now_ms) else {
            return Err(self.refuse_anonymous(client_ip, ApiError::invalid_api_key(), now_ms, trace).await);
        };
        // Only a browser key's visitor is told to its guard; the guard checks the key's type too.
        let visitor = token.starts_with(BROWSER_KEY_START).then(|| Visitor::of(client_ip, presented.origin));
        let token = token.to_owned();
        Ok(Credentials::Key(KeyCredentials { token, key_hash, current, hashed, scope, visitor }))
    }

    /// SPEC §3 order: authenticate and the key type's scope, then the rate decision and the
    /// idempotency claim, all made by the key's guard in one round trip: a key refused for its
    /// type (403) is counted against nothing.
    pub(super) async fn authenticate(
        &self,
        credentials: Credentials,
        client_ip: Option<&str>,
        claim: Option<&ClaimRequest>,
        now_ms: i64,
        trace: &mut Trace,
    ) -> Result<Caller, Refusal> {
        let Credentials::Key(mut credentials) = credentials else {
            return Ok(Caller { key: None, key_hash: None, usage: None, claim: None, sealing: None });
        };
        let (key_hash, scope) = (credentials.key_hash.clone(), credentials.scope);
        // A hot key (SPEC §20): admitted from this isolate's lease of its credits, or refused by
        // a refusal lease, with no round trip to its guard. A request with an Idempotency-Key
        // takes its claim from the one object that holds it, spread over the key's claim objects.
        // A dashboard read is counted by the guard in its own window, never from a lease.
        // A request its plan exempts from the limits (SPEC §23) takes nothing from a lease: its
        // guard admits it without counting.
        trace.scope = Some(scope);
        let exempt = self.exempt(&key_hash, scope);
        let leasing = self.config.lease_above_per_second.filter(|_| !scope.is_dashboard_read() && !exempt);
        // A browser key's visitor (SPEC §24): a refusal this isolate remembers, or counted here
        // when this isolate holds a lease of the key.
        if let Some(refusal) = self.screen_visitor(&mut credentials, leasing.is_some(), now_ms, trace) {
            return Err(refusal);
        }
        let mut leased = leasing.and_then(|_| self.leases.borrow_mut().admit(&key_hash, scope, now_ms));
        // Another request of this isolate is asking the key's guard for a lease: wait for it (a
        // little) instead of asking too, so a burst at a hot key makes one call, not one each.
        let mut waited = 0;
        while leased.is_none()
            && waited < LEASE_WAIT_MS
            && leasing.is_some_and(|above| {
                self.leases.borrow_mut().should_wait(&key_hash, now_ms + waited as i64, above)
            })
        {
            self.timer.pause(LEASE_POLL_MS).await;
            waited += LEASE_POLL_MS;
            leased = self.leases.borrow_mut().admit(&key_hash, scope, now_ms + waited as i64);
        }
        let (key_hash, answer) = match leased {
            Some(Leased::Admitted(key, usage)) => {
                let claim = match claim {
                    None => None,
                    Some(c) => {
                        let object = key.claim_object(&c.idempotency_key);
                        match self.guard.take_claim(&object, c).await {
                            Ok(decision) => Some(decision),
                            Err(e) => {
                                trace.key = Some(key);
                                trace.unanswered_claim = Some(ClaimHolder::Object(object));
                                return Err((Some(usage), unavailable(e)));
                            }
                        }
                    }
                };
                let admission = Admission {
                    key,
                    verdict: Verdict::Allowed,
                    usage,
                    claim,
                    lease: None,
                    by_visitor: false,
                };
                (key_hash, Ok(Authorization::Admitted(Box::new(admission))))
            }
            Some(Leased::Refused(key, verdict, usage)) => {
                let admission =
                    Admission { key, verdict, usage, claim: None, lease: None, by_visitor: false };
                (key_hash, Ok(Authorization::Admitted(Box::new(admission))))
            }
            Some(Leased::Denied(key)) => {
                let reason = key.refusal(now_ms).unwrap_or(gatehouse_core::api_key::RefusalReason::Revoked);
                (key_hash, Ok(Authorization::Denied(Some((Box::new(key), reason)))))
            }
            None => self.ask_guard(&credentials, claim, now_ms).await,
        };
        let Admission { key, verdict, usage, claim, by_visitor, .. } = match answer {
            Ok(Authorization::Admitted(admission)) => {
                self.memory.borrow_mut().remember_recent_key(&key_hash, now_ms);
                trace.key = Some(admission.key.clone());
                *admission
            }
            Ok(Authorization::Denied(refused)) => {
                if let (Some((key, _)), Some(above)) = (&refused, self.config.lease_above_per_second) {
                    self.leases.borrow_mut().deny(&key_hash, (**key).clone(), now_ms, above);
                }
                let e = match &refused {
                    None => {
                        self.memory.borrow_mut().remember_unknown_key(&key_hash, now_ms);
                        ApiError::invalid_api_key()
                    }
                    Some((key, reason)) => refused_key(key, *reason),
                };
                trace.key = refused.map(|(k, _)| *k);
                return Err((None, self.refuse_anonymous(client_ip, e, now_ms, trace).await));
            }
            // Sent on twice (SPEC §26): no guard of this version points to another that points on.
            Ok(Authorization::Moved(guard)) => {
                return Err((
                    None,
                    unavailable(PortError(format!("a re-hashed key's guard moved again, to {guard}"))),
                ));
            }
            Err(e) => {
                // The guard may have taken a claim and lost only its answer.
                trace.unanswered_claim = Some(ClaimHolder::GuardOf(key_hash));
                return Err((None, unavailable(e)));
            }
        };
        if !key.key_type.allows(scope) {
            // Decided by the guard before it counted: no part of the window or the quota and no
            // claim was taken for it (a guard of the previous version counted it; it is 403 all the same).
            let message = match scope {
                Scope::DashboardRead => {
                    "Only an owner key reads under the dashboard budget (Gatehouse-Budget).".to_owned()
                }
                _ => format!("A {} key may not call this route.", key.key_type.as_str()),
            };
            let e = ApiError::forbidden(message).with_detail("key_type", key.key_type.as_str());
            return Err((Some(usage), e));
        }
        let origin = credentials.visitor.as_ref().and_then(|v| v.origin.as_deref());
        if !key.admits_origin(origin) {
            // Decided by the guard before it counted, as for another key type.
            self.remember_refusal(&key_hash, credentials.visitor.as_ref(), None, now_ms);
            return Err((Some(usage), origin_refused(origin, Some(&key.allowed_origins))));
        }
        // Accepted: from here on the request may bill (SPEC §22) — a refusal for the key's type
        // above took nothing of any window, so it never does.
        trace.accepted = true;
        trace.dashboard = scope.is_dashboard_read();
        let refusal = match verdict {
            Verdict::Allowed => None,
            Verdict::RateLimited if by_visitor => {
                self.remember_refusal(&key_hash, credentials.visitor.as_ref(), Some(&usage), now_ms);
                Some(visitor_over(&usage))
            }
            Verdict::RateLimited => Some(window_refused(
                match scope {
                    Scope::DashboardRead => format!(
                        "The dashboard budget of {} reads per {} is used up.",
                        usage.limit(),
                        usage.window_name()
                    ),
                    _ => format!(
                        "Rate limit of {} requests per {} exceeded.",
                        usage.limit(),
                        usage.window_name()
                    ),
                },
                &usage,
            )),
            Verdict::QuotaExceeded => {
                let code = if key.plan == gatehouse_core::config::DEFAULT_PLAN {
                    ErrorCode::TrialQuotaExceeded
                } else {
                    ErrorCode::QuotaExceeded
                };
                Some(
                    ApiError::new(
                        code,
                        format!(
                            "The monthly quota of {} requests is used up.",
                            usage.quota_limit.unwrap_or(0)
                        ),
                    )
                    .with_detail("resets_at", rfc3339(usage.quota_resets_ms))
                    .with_detail("plan", key.plan.as_str()),
                )
            }
        };
        if let Some(e) = refusal {
            return Err((Some(usage), e));
        }
        // Its stored response is sealed under the API key itself (SPEC §13): only this caller's
        // requests can derive the key that reads it.
        let sealing = claim.as_ref().map(|_| self.config.response_keys(&credentials.token));
        Ok(Caller { key: Some(key), key_hash: Some(key_hash), usage: Some(usage), claim, sealing })
    }

    /// Whether `scope` is exempt from the limits for the key this isolate holds a lease of (its
    /// plan's `exempt`, SPEC §23): such a request neither admits from a lease nor asks for one.
    fn exempt(&self, key_hash: &str, scope: Scope) -> bool {
        self.leases.borrow().key(key_hash).is_some_and(|k| self.config.exempts(&k.plan, scope))
    }

    /// The guard a key is asked at: the current pepper's hash, or the guard it points to (a key
    /// re-hashed by a rotation, SPEC §26), or `KEY_PEPPER_PREVIOUS`'s hash once the current one is
    /// remembered as unknown (SPEC §19: keys issued before a rotation); `None` for a key
    /// remembered as unknown under both, or one not seen lately from an address over its limit.
    /// With `true` when it is the current pepper's, and the key's hash under the current pepper.
    fn hash_to_ask(
        &self,
        token: &str,
        client_ip: Option<&str>,
        now_ms: i64,
    ) -> Option<(String, bool, CurrentHash)> {
        let memory = self.memory.borrow();
        let blocked = client_ip.is_some_and(|ip| memory.blocked_until(ip, now_ms).is_some());
        let hashed = CurrentHash {
            key_hash: api_key::hash(self.config.key_pepper.as_bytes(), token),
            pepper: self.config.key_pepper_id.clone(),
            previous: self.config.key_pepper_previous_id.clone(),
        };
        let current = || memory.guard_of(&hashed.key_hash, now_ms).unwrap_or_else(|| hashed.key_hash.clone());
        let previous = || Some(api_key::hash(self.config.key_pepper_previous.as_deref()?.as_bytes(), token));
        let (asked, is_current) = if memory.is_unknown_key(&hashed.key_hash, now_ms) {
            (previous().filter(|hash| !memory.is_unknown_key(hash, now_ms))?, false)
        } else {
            (current(), true)
        };
        (!blocked || memory.is_recent_key(&asked, now_ms)).then_some((asked, is_current, hashed))
    }

    /// Asks the key's guard under `key_hash`; when that object points to the guard of a re-hashed
    /// key, that guard is asked (SPEC §26); when it is the current pepper's hash, its guard does
    /// not know the key and a previous pepper is set, it is remembered as unknown and the guard of
    /// the previous pepper's hash is asked. Answers the name asked last and its answer.
    async fn ask_guard(
        &self,
        credentials: &KeyCredentials,
        claim: Option<&ClaimRequest>,
        now_ms: i64,
    ) -> (String, Result<Authorization, PortError>) {
        let KeyCredentials { token, key_hash, current, hashed, scope, visitor } = credentials;
        let (key_hash, scope, visitor) = (key_hash.clone(), *scope, visitor.as_ref());
        // A key's guard leases to the isolates of a hot key (SPEC §20): ask, giving back what
        // this isolate did not use of the key's last lease. A request its plan exempts asks for
        // none (nor gives the lease it holds up).
        let lease = self
            .config
            .lease_above_per_second
            .filter(|_| !scope.is_dashboard_read() && !self.exempt(&key_hash, scope))
            .map(|_| self.leases.borrow_mut().ask(&key_hash, now_ms, scope.cost()));
        let ask = AuthorizeCall {
            key_hash: &key_hash,
            scope,
            claim,
            lease: lease.as_ref(),
            visitor,
            current: Some(hashed),
        };
        let answer = self.guard.authorize(ask).await;
        if let Some(ask) = &lease {
            // Unanswered, what it gave back stays owed (a credit given back twice counts once).
            let mut book = self.leases.borrow_mut();
            book.answered(&key_hash, ask, answer.is_ok());
            if let Ok(Authorization::Admitted(admission)) = &answer {
                if let Some(grant) = &admission.lease {
                    // A lease of credits with an admission, or a refusal lease with a refusal.
                    book.hold(&key_hash, admission.key.clone(), grant, ask.asked);
                }
            }
        }
        match (answer, &self.config.key_pepper_previous) {
            (Ok(Authorization::Moved(guard)), _) => {
                // SPEC §26: a re-hashed key's guard, remembered for its next requests.
                self.memory.borrow_mut().remember_guard(&hashed.key_hash, &guard, now_ms);
                self.ask_elsewhere(guard, credentials, claim, false).await
            }
            (Ok(Authorization::Denied(None)), Some(previous)) if *current => {
                self.memory.borrow_mut().remember_unknown_key(&key_hash, now_ms);
                // The previous pepper's hash: the key's guard, or (a key re-hashed in an earlier
                // rotation) the object that points to it.
                let previous_hash = api_key::hash(previous.as_bytes(), token);
                let (asked, answer) = self.ask_elsewhere(previous_hash, credentials, claim, true).await;
                if matches!(&answer, Ok(Authorization::Admitted(a)) if a.key.key_hash == hashed.key_hash) {
                    // Its guard re-hashed it (SPEC §26): asked there directly from now on.
                    let mut memory = self.memory.borrow_mut();
                    memory.forget_unknown_key(&hashed.key_hash);
                    memory.remember_guard(&hashed.key_hash, &asked, now_ms);
                }
                (asked, answer)
            }
            (answer, _) => (key_hash, answer),
        }
    }

    /// Asks the guard named `guard` without a lease (a re-hashed key's guard, or the previous
    /// pepper's hash), following one `Moved` when `follow` (SPEC §26): answers the name asked last
    /// and its answer.
    async fn ask_elsewhere(
        &self,
        mut guard: String,
        credentials: &KeyCredentials,
        claim: Option<&ClaimRequest>,
        mut follow: bool,
    ) -> (String, Result<Authorization, PortError>) {
        let KeyCredentials { hashed, scope, visitor, .. } = credentials;
        loop {
            let ask = AuthorizeCall {
                key_hash: &guard,
                scope: *scope,
                claim,
                lease: None,
                visitor: visitor.as_ref(),
                current: Some(hashed),
            };
            match self.guard.authorize(ask).await {
                Ok(Authorization::Moved(next)) if follow => (guard, follow) = (next, false),
                answer => return (guard, answer),
            }
        }
    }

    /// The key a request that matched no route (404, 405) was sent with, when its guard knows it:
    /// its audit row then names the key, so its owner's log shows it (SPEC §19). The guard is asked
    /// under a scope no key type has, so nothing of the window or quota is taken and no claim; a
    /// key known to be unknown, or any key from an address over its limit, is not asked about.
    pub(super) async fn key_of_miss(
        &self,
        authorization: &Option<String>,
        client_ip: Option<&str>,
        now_ms: i64,
    ) -> Option<KeyRecord> {
        let token = authorization
            .as_deref()
            .and_then(api_key::bearer_token)
            .filter(|t| api_key::is_well_formed(t))?;
        if client_ip.is_some_and(|ip| self.memory.borrow().blocked_until(ip, now_ms).is_some()) {
            return None;
        }
        let (key_hash, current, hashed) = self.hash_to_ask(token, client_ip, now_ms)?;
        let nobody = Scope::Upstream { key_types: KeyTypes::of(&[]), cost: 1 };
        let token = token.to_owned();
        let credentials = KeyCredentials { token, key_hash, current, hashed, scope: nobody, visitor: None };
        match self.ask_guard(&credentials, None, now_ms).await {
            (_, Ok(Authorization::Admitted(admission))) => Some(admission.key),
            (_, Ok(Authorization::Denied(Some((key, _))))) => Some(*key),
            (key_hash, Ok(Authorization::Denied(None))) => {
                self.memory.borrow_mut().remember_unknown_key(&key_hash, now_ms);
                None
            }
            (_, Ok(Authorization::Moved(_)) | Err(_)) => None,
        }
    }

    /// An anonymous request (failed authentication, unmatched route): counted against the client
    /// address, and 429 instead of `refused` once the address is over its limit this minute. An
    /// address known to be over is answered from memory, without a count and without an audit
    /// row. If the count cannot be made, `refused` stands.
    pub(super) async fn refuse_anonymous(
        &self,
        client_ip: Option<&str>,
        refused: ApiError,
        now_ms: i64,
        trace: &mut Trace,
    ) -> ApiError {
        let Some(ip) = client_ip else {
            return refused;
        };
        let blocked = self.memory.borrow().blocked_until(ip, now_ms);
        if let Some(until) = blocked {
            trace.unaudited = true;
            return too_many_anonymous(((until - now_ms) as u64).div_ceil(1000));
        }
        // Counted for the address (IPv6: its /64) and, for IPv6, its /48 too (SPEC §23).
        for (group, per_minute) in gatehouse_core::abuse::failure_groups(ip) {
            match self.guard.record_auth_failure(&group, per_minute).await {
                Ok((Verdict::RateLimited, usage)) => {
                    self.memory.borrow_mut().block(&group, usage.reset_ms(), now_ms);
                    return too_many_anonymous(usage.seconds_to_reset());
                }
                Ok(_) => {}
                Err(e) => {
                    let mut refused = refused;
                    refused.internal = Some(format!("anonymous-request counter unavailable: {e}"));
                    return refused;
                }
            }
        }
        refused
    }
}

/// How long a request of a hot key waits for the lease another request of its isolate is asking
/// for (at most a lease's time: the guard may be busy), and how often it looks (SPEC §20).
const LEASE_WAIT_MS: u64 = 1_000;
const LEASE_POLL_MS: u64 = 2;

/// A known key its guard refused (SPEC §17): 401 with `details.reason`.
fn refused_key(key: &KeyRecord, reason: RefusalReason) -> ApiError {
    let at = key.expires_at.map(rfc3339).unwrap_or_default();
    let message = match reason {
        RefusalReason::Revoked => "This API key was revoked.".to_owned(),
        RefusalReason::Expired => format!("This API key expired at {at}."),
        RefusalReason::Rolled => {
            format!("This API key was rolled; its grace period ended at {at}. Use its replacement.")
        }
    };
    ApiError::new(ErrorCode::InvalidApiKey, message).with_detail("reason", reason.as_str())
}

/// How a browser key's secret starts (`gh_b_…`): what may come as `?key=` and has a visitor.
const BROWSER_KEY_START: &str = "gh_b_";

/// A window's 429 (the key's, the dashboard budget's, a browser key's visitor's): `Retry-After` and
/// the refusing window as the headers say it, so that after the SDK gives up the caller still
/// knows when to come back.
pub(super) fn window_refused(message: String, usage: &Usage) -> ApiError {
    ApiError::new(ErrorCode::RateLimitExceeded, message)
        .with_retry_after(usage.seconds_to_reset())
        .with_detail("window", usage.window_name())
        .with_detail("limit", usage.limit())
        .with_detail("remaining", usage.remaining())
        .with_detail("reset", usage.reset_ms() / 1000)
}

fn too_many_anonymous(retry_after_seconds: u64) -> ApiError {
    ApiError::new(
        ErrorCode::RateLimitExceeded,
        "Too many unauthenticated requests from this address. Retry after the window ends.",
    )
    .with_retry_after(retry_after_seconds)
}
