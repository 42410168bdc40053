//! The isolate's side of hot keys (SPEC §20): the leases of keys' credits it holds, how it admits
//! from them, and what it owes back of leases it dropped.

use super::{GiveBack, Grant, Held, LeaseAsk, RequestRate, ISOLATE_LEASE_MS, MAX_WANT};
use crate::rate_limit::{Usage, Verdict, Window};

/// A hot key's credits as an isolate holds them: it admits the key's requests without asking the
/// key's guard while they last (at most [`ISOLATE_LEASE_MS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLease {
    pub key: crate::api_key::KeyRecord,
    pub held: Held,
    /// By window: credits of this isolate's earlier leases that the grant's usage counts as used
    /// but that were not used — owed back, and not given back before the grant was made.
    pub carried: [u32; 4],
}

impl KeyLease {
    /// The key's usage as this isolate sees it now: as of the grant, with what it has not used
    /// yet of this lease and of the leases it replaced counted as remaining. Exact for one
    /// isolate's requests: a sequential client counts down one by one across renewals.
    pub fn usage_now(&self, now_ms: i64) -> Usage {
        let unused = self.held.credits - self.held.used;
        let mut usage = self.held.usage;
        for (w, carried) in usage.windows.iter_mut().zip(self.carried) {
            if let Some(w) = w {
                w.remaining = w.remaining.saturating_add(unused).saturating_add(carried).min(w.limit);
            }
        }
        usage.now_ms = now_ms;
        usage
    }
}

/// Adds `credits` granted at `counted_ms` to what a lease granted at `granted_ms` carries, in each
/// window the two grants were counted in alike.
fn carry(carried: &mut [u32; 4], granted_ms: i64, counted_ms: i64, credits: u32) {
    for (c, w) in carried.iter_mut().zip(Window::ALL) {
        if w.start(granted_ms) == w.start(counted_ms) {
            *c = c.saturating_add(credits);
        }
    }
}

/// Unused credits of a lease this isolate dropped, owed back to the key's guard until a call that
/// carried them is answered (a credit given back twice counts once).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owed {
    back: GiveBack,
    /// When the lease was granted (the guard's clock): its credits count in that time's windows.
    granted_ms: i64,
    /// The book's give-back sequence when it was dropped.
    seq: u64,
}

/// Whether a refusal lease refuses a request of `cost`: the limit that refused has less room than
/// that (a refusal made for a costly request does not refuse a cheaper one that fits).
fn refuses(refusal: &Grant, cost: u32) -> bool {
    let usage = &refusal.usage;
    match refusal.verdict {
        Verdict::QuotaExceeded => {
            usage.quota_limit.is_some_and(|q| q.saturating_sub(usage.quota_used) < u64::from(cost))
        }
        _ => usage.remaining() < cost,
    }
}

/// What an isolate decided from what it holds of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leased {
    Admitted(crate::api_key::KeyRecord, Usage),
    Refused(crate::api_key::KeyRecord, Verdict, Usage),
    /// The key's guard refused the key itself (revoked, expired, rolled out) a moment ago.
    Denied(crate::api_key::KeyRecord),
}

/// An ask of a key's guard this isolate has had no answer to for this long is forgotten (its
/// request was cancelled; every call to a guard has a shorter deadline).
const ASK_FORGOTTEN_MS: i64 = 30_000;

/// Keys whose leases one isolate holds at most.
pub const LEASE_BOOK_KEYS: usize = 10_000;

/// The leases of hot keys this isolate holds, and what it owes back of leases it dropped (sent
/// with the key's next request to its guard, or on their own once they end). At most
/// [`LEASE_BOOK_KEYS`] keys: a new one past that drops the lease that ends first.
#[derive(Debug, Default)]
pub struct LeaseBook {
    leases: std::collections::HashMap<String, KeyLease>,
    /// Each key's requests at this isolate (for the size of its next lease).
    rates: std::collections::HashMap<String, RequestRate>,
    /// Keys whose lease runs low: a renewal is wanted (`Some`), or on its way (`None`).
    renewals: std::collections::HashMap<String, Option<LeaseAsk>>,
    /// Keys whose guard this isolate is asking for a lease (with a request or a renewal): since
    /// when, and how many asks are on their way.
    asking: std::collections::HashMap<String, (i64, u32)>,
    /// Until when this isolate last held a lease or a refusal lease of each key.
    held_until: std::collections::HashMap<String, i64>,
    /// Hot keys their guard refused (revoked, expired, rolled out): their record, and until when
    /// this isolate answers 401 without asking.
    denied: std::collections::HashMap<String, (crate::api_key::KeyRecord, i64)>,
    /// Hot keys refused until a time (a refusal lease): the key, and the refusal.
    refused: std::collections::HashMap<String, (crate::api_key::KeyRecord, Grant)>,
    owed: std::collections::HashMap<String, Vec<Owed>>,
    /// Counts the leases dropped (each owed give-back's place in time, for [`Self::hold`]).
    seq: u64,
    /// Whether a request's after-response work waits to give back what ends (one at a time).
    give_back_waiting: bool,
}

impl LeaseBook {
    /// Decides a request of `scope` at `now_ms` from what the isolate holds of the key, when it
    /// can: admitted from its lease (the key is valid then, its type may call the route, and the
    /// lease holds the cost, which it takes), or refused by a refusal lease. `None`: ask the
    /// key's guard.
    pub fn admit(&mut self, key_hash: &str, scope: crate::api_key::Scope, now_ms: i64) -> Option<Leased> {
        let known = self.rates.contains_key(key_hash);
        let rate = match known || self.leases.contains_key(key_hash) || self.rates.len() < LEASE_BOOK_KEYS {
            true => self.rates.entry(key_hash.to_owned()).or_default().count(now_ms),
            false => 1,
        };
        if let Some(lease) = self.leases.get_mut(key_hash) {
            let cost = scope.cost().max(1);
            let usable = lease.key.refusal(now_ms).is_none()
                && lease.key.key_type.allows(scope)
                && lease.held.available(now_ms, &lease.held.limits) >= cost;
            if usable {
                lease.held.used += cost;
                let admitted = Leased::Admitted(lease.key.clone(), lease.usage_now(now_ms));
                // Running low (half used, or half its time gone): a new lease is asked for after
                // this response, while this one still serves.
                let low = 2 * (lease.held.credits - lease.held.used) <= lease.held.credits
                    || 2 * (lease.held.until_ms - now_ms) <= ISOLATE_LEASE_MS;
                if low && !self.renewals.contains_key(key_hash) {
                    let rate = self.rates.get_mut(key_hash).map_or(rate, |r| r.per_second(now_ms));
                    let want = rate.max(lease.held.credits).clamp(1, MAX_WANT);
                    let ask = LeaseAsk { want, renew: true, ..LeaseAsk::default() };
                    self.renewals.insert(key_hash.to_owned(), Some(ask));
                }
                return Some(admitted);
            }
        }
        if let Some((key, until)) = self.denied.get(key_hash) {
            if now_ms < *until {
                return Some(Leased::Denied(key.clone()));
            }
        }
        match self.refused.get(key_hash) {
            Some((key, refusal))
                if now_ms < refusal.until_ms
                    && key.refusal(now_ms).is_none()
                    && key.key_type.allows(scope)
                    && refuses(refusal, scope.cost().max(1)) =>
            {
                let usage = Usage { now_ms, ..refusal.usage };
                Some(Leased::Refused(key.clone(), refusal.verdict, usage))
            }
            _ => None,
        }
    }

    /// The record of a key this isolate holds a lease or a refusal lease of.
    pub fn key(&self, key_hash: &str) -> Option<&crate::api_key::KeyRecord> {
        self.leases.get(key_hash).map(|l| &l.key).or_else(|| self.refused.get(key_hash).map(|(key, _)| key))
    }

    /// What to send with the key's next request to its guard: a lease of what the last one
    /// showed this isolate uses, and what is owed back (the last lease is dropped with it).
    /// Every give-back still owed goes with it (one already on its way too: counted once), so the
    /// guard's answer counts none of them as used. `answered` when the call ends.
    pub fn ask(&mut self, key_hash: &str, now_ms: i64, cost: u32) -> LeaseAsk {
        let last = self.drop_lease(key_hash);
        let rate = self.rates.get_mut(key_hash).map_or(0, |r| r.per_second(now_ms));
        let want = Held::want(last.as_ref(), now_ms, cost).max(rate).min(MAX_WANT);
        self.refused.remove(key_hash);
        let renew = self.recently_held(key_hash, now_ms);
        self.start_asking(key_hash, now_ms);
        LeaseAsk { want, give_back: self.owed_by(key_hash), renew, asked: self.seq }
    }

    fn owed_by(&self, key_hash: &str) -> Vec<GiveBack> {
        self.owed.get(key_hash).map_or_else(Vec::new, |o| o.iter().map(|o| o.back.clone()).collect())
    }

    fn start_asking(&mut self, key_hash: &str, now_ms: i64) {
        if self.asking.len() < LEASE_BOOK_KEYS || self.asking.contains_key(key_hash) {
            let (since, on_the_way) = self.asking.entry(key_hash.to_owned()).or_insert((now_ms, 0));
            *since = now_ms;
            *on_the_way += 1;
        }
    }

    /// An ask of the key (a request's or a renewal) got its answer (`reached`: what it gave back
    /// was taken) or could not reach the guard (what it gave back is still owed).
    pub fn answered(&mut self, key_hash: &str, ask: &LeaseAsk, reached: bool) {
        if let Some((_, on_the_way)) = self.asking.get_mut(key_hash) {
            *on_the_way -= 1;
            if *on_the_way == 0 {
                self.asking.remove(key_hash);
            }
        }
        if reached {
            self.settled(key_hash, &ask.give_back);
        }
    }

    /// The key's guard took `give_back`: no longer owed.
    pub fn settled(&mut self, key_hash: &str, give_back: &[GiveBack]) {
        if let Some(owed) = self.owed.get_mut(key_hash) {
            owed.retain(|o| !give_back.contains(&o.back));
            if owed.is_empty() {
                self.owed.remove(key_hash);
            }
        }
    }

    /// Whether a request of the key should wait for the answer another request of this isolate is
    /// getting from the key's guard (for at most a lease's time) instead of asking too: when that
    /// answer will likely bring a lease — the isolate held one (or a refusal) within the last
    /// lease's time, or sees the key at `lease_above` requests a second. So a burst at a hot key's
    /// isolate makes one call, and a busy key that is not hot is never held up.
    pub fn should_wait(&mut self, key_hash: &str, now_ms: i64, lease_above: u32) -> bool {
        let asking = self.asking.get(key_hash).is_some_and(|(since, _)| now_ms - since < ISOLATE_LEASE_MS);
        asking && (self.recently_held(key_hash, now_ms) || self.rate(key_hash, now_ms) >= lease_above)
    }

    /// This isolate's requests a second of the key (extrapolated).
    pub fn rate(&mut self, key_hash: &str, now_ms: i64) -> u32 {
        self.rates.get_mut(key_hash).map_or(0, |r| r.per_second(now_ms))
    }

    fn recently_held(&self, key_hash: &str, now_ms: i64) -> bool {
        self.held_until.get(key_hash).is_some_and(|until| now_ms < until + ISOLATE_LEASE_MS)
    }

    /// The key's guard refused a hot key (one this isolate leased, was refused for, or sees at
    /// `lease_above` requests a second): the isolate answers 401 without asking for a lease's
    /// time, so a revoked hot key does not send its whole traffic to its guard.
    pub fn deny(&mut self, key_hash: &str, key: crate::api_key::KeyRecord, now_ms: i64, lease_above: u32) {
        let hot = self.recently_held(key_hash, now_ms)
            || self.denied.contains_key(key_hash)
            || self.rate(key_hash, now_ms) >= lease_above;
        if hot && (self.denied.len() < LEASE_BOOK_KEYS || self.denied.contains_key(key_hash)) {
            self.drop_lease(key_hash);
            self.refused.remove(key_hash);
            self.denied.insert(key_hash.to_owned(), (key, now_ms + ISOLATE_LEASE_MS));
        }
    }

    /// The renewals wanted since the last call, now on their way (each with what is owed back):
    /// what to ask each key's guard at `now_ms`. Not while a request of the key is asking its
    /// guard (its answer may bring a lease): one ask of a key at a time.
    pub fn take_renewals(&mut self, now_ms: i64) -> Vec<(String, LeaseAsk)> {
        let asking = &self.asking;
        let wanted: Vec<(String, LeaseAsk)> = self
            .renewals
            .iter_mut()
            .filter(|(k, _)| !asking.contains_key(*k))
            .filter_map(|(k, state)| state.take().map(|ask| (k.clone(), ask)))
            .collect();
        wanted
            .into_iter()
            .map(|(key_hash, ask)| {
                self.start_asking(&key_hash, now_ms);
                let ask = LeaseAsk { give_back: self.owed_by(&key_hash), asked: self.seq, ..ask };
                (key_hash, ask)
            })
            .collect()
    }

    /// A renewal got no answer: the lease runs out, and the key's next request asks its guard.
    pub fn renewal_failed(&mut self, key_hash: &str, ask: &LeaseAsk) {
        self.renewals.remove(key_hash);
        self.answered(key_hash, ask, false);
    }

    /// The key's guard answered a renewal: a new lease to hold (with the key's record as its
    /// guard holds it), or none (the key is refused, or no longer hot: the old lease runs out).
    pub fn renewed(
        &mut self,
        key_hash: &str,
        ask: &LeaseAsk,
        key: Option<crate::api_key::KeyRecord>,
        grant: Option<&Grant>,
    ) {
        self.renewals.remove(key_hash);
        self.answered(key_hash, ask, true);
        match (key, grant) {
            (Some(key), Some(grant)) => self.hold(key_hash, key, grant, ask.asked),
            (None, _) => drop(self.drop_lease(key_hash)),
            (Some(_), None) => {}
        }
    }

    /// The key's guard granted `grant` with an admission of `key`, answering an ask made at
    /// `asked`: held from now on. A lease it replaces (another request's or the renewed one) is
    /// owed back — unless that one was granted later: then this one is. The grant's usage counts
    /// as used every lease of this isolate the guard had granted and not taken back: what was
    /// owed when the ask was made went with it, so what the isolate dropped since (in the same
    /// windows) is the part of it still unused (`KeyLease::carried`).
    pub fn hold(&mut self, key_hash: &str, key: crate::api_key::KeyRecord, grant: &Grant, asked: u64) {
        let room = self.held_until.len() < LEASE_BOOK_KEYS || self.held_until.contains_key(key_hash);
        if (grant.credits > 0 || grant.verdict != Verdict::Allowed) && room {
            self.held_until.insert(key_hash.to_owned(), grant.until_ms);
        }
        if grant.credits == 0 {
            if grant.verdict != Verdict::Allowed {
                if self.refused.len() >= LEASE_BOOK_KEYS {
                    let now = grant.usage.now_ms;
                    self.refused.retain(|_, (_, r)| r.until_ms > now);
                }
                if self.refused.len() < LEASE_BOOK_KEYS {
                    self.refused.insert(key_hash.to_owned(), (key, grant.clone()));
                }
            }
            return;
        }
        self.refused.remove(key_hash);
        let granted_ms = grant.usage.now_ms;
        if let Some(later) = self.leases.get_mut(key_hash).filter(|l| l.held.usage.now_ms > granted_ms) {
            // Answered out of order: the lease held was granted after this one, counting it as used.
            let later_ms = later.held.usage.now_ms;
            carry(&mut later.carried, later_ms, granted_ms, grant.credits);
            let back = GiveBack { grant_id: grant.grant_id.clone(), unused: grant.credits, part: None };
            self.owe(key_hash, back, granted_ms);
            return;
        }
        self.drop_lease(key_hash);
        // A renewal wanted of the lease it replaces, not asked for yet, is not wanted of this one.
        if self.renewals.get(key_hash).is_some_and(Option::is_some) {
            self.renewals.remove(key_hash);
        }
        let mut carried = [0u32; 4];
        for o in self.owed.get(key_hash).into_iter().flatten().filter(|o| o.seq > asked) {
            carry(&mut carried, granted_ms, o.granted_ms, o.back.unused);
        }
        if self.leases.len() >= LEASE_BOOK_KEYS {
            let first = self.leases.iter().min_by_key(|(_, l)| l.held.until_ms).map(|(k, _)| k.clone());
            if let Some(first) = first {
                self.drop_lease(&first);
            }
        }
        self.leases.insert(key_hash.to_owned(), KeyLease { key, held: Held::from_grant(grant), carried });
    }

    /// Drops the key's lease; its unused credits are owed back. Answers what it held.
    pub fn drop_lease(&mut self, key_hash: &str) -> Option<Held> {
        let held = self.leases.remove(key_hash)?.held;
        if let Some(back) = held.give_back() {
            self.owe(key_hash, back, held.usage.now_ms);
        }
        Some(held)
    }

    fn owe(&mut self, key_hash: &str, back: GiveBack, granted_ms: i64) {
        self.seq += 1;
        let owed = Owed { back, granted_ms, seq: self.seq };
        self.owed.entry(key_hash.to_owned()).or_default().push(owed);
    }

    /// Drops the leases that ended by `now_ms` and answers what is owed back, by key hash: to
    /// give back to each key's guard without waiting for its next request (`settled` once it
    /// took them). Not for a key being asked meanwhile: its ask carries them, and a lease it
    /// brings must know which of them its guard counted (see [`Self::hold`]).
    pub fn ended(&mut self, now_ms: i64) -> Vec<(String, Vec<GiveBack>)> {
        let ended: Vec<String> =
            self.leases.iter().filter(|(_, l)| l.held.until_ms <= now_ms).map(|(k, _)| k.clone()).collect();
        for key_hash in &ended {
            self.drop_lease(key_hash);
        }
        let now = now_ms;
        self.rates.retain(|_, r| r.per_second(now) > 0);
        self.denied.retain(|_, (_, until)| *until > now);
        self.held_until.retain(|_, until| now < *until + ISOLATE_LEASE_MS);
        // An ask never answered (its request was cancelled) stops counting after a while.
        self.asking.retain(|_, (since, _)| now - *since < ASK_FORGOTTEN_MS);
        let idle = self.owed.keys().filter(|k| !self.asking.contains_key(*k));
        idle.map(|k| (k.clone(), self.owed_by(k))).collect()
    }

    /// When the first lease held ends, if something will be owed back then and no request's
    /// after-response work waits for it yet; that work is this caller's from now on
    /// (`give_back_done` when it ends).
    pub fn give_back_at(&mut self) -> Option<i64> {
        if self.give_back_waiting {
            return None;
        }
        let first = self.first_end().or_else(|| (!self.owed.is_empty()).then_some(i64::MIN));
        self.give_back_waiting = first.is_some();
        first
    }

    /// When the first lease held with credits unused ends, if any.
    pub fn first_end(&self) -> Option<i64> {
        self.leases.values().filter(|l| l.held.give_back().is_some()).map(|l| l.held.until_ms).min()
    }

    pub fn give_back_done(&mut self) {
        self.give_back_waiting = false;
    }
}
