//! Credit leases (SPEC §20): how a limit above one key — an identity's windows and quota, a
//! project's quota — stays exact while every key decides in its own guard.
//!
//! The level's **authority** (one guard object per identity, one per project) counts its limits
//! as a key's guard counts a key's. A key's guard — the **holder** — does not ask it per request:
//! it asks for a **grant** of credits, admits locally while it holds some, and gives back what it
//! did not use with its next exchange. The authority counts credits as used when it grants them
//! and gives them back when they come back, so the credits out plus the requests admitted never
//! exceed the limit: admissions never do. A grant the holder never gives back (its answer was
//! lost, or the holder stopped) stays counted: the level errs towards refusing, and a window's
//! share of it comes back when that window ends. Exchanges are idempotent: a holder that asks
//! again with the same `grant_id` gets the same grant, and a credit given back twice counts once.

use serde::{Deserialize, Serialize};

use crate::rate_limit::{decide_cost, usage, Counters, LimitSpec, Limits, Usage, Verdict, Window};

/// A level's grant to a key's guard lasts at most this long, and never past the end of the
/// level's shortest window.
pub const GRANT_MS: i64 = 10_000;
/// A key's guard's grant to an isolate (a hot key's lease) lasts at most this long: a revoked or
/// rolled-out key is refused everywhere within it (SPEC §20).
pub const ISOLATE_LEASE_MS: i64 = 1_000;
/// How far an isolate's clock may be behind its key's guard's (SPEC §23): a lease to an isolate
/// ends this long before the guard's window its credits were counted in, so an isolate whose clock
/// lags by up to this much still stops admitting from it before that window ends — it never
/// admits into the next one. An isolate's clock further behind admits up to its lease's credits
/// late (docs/api/rate-limits.md says where limits are exact).
pub const LEASE_CLOCK_MARGIN_MS: i64 = 100;
/// The most credits of a key's tightest window that are never leased (SPEC §20).
pub const LEASE_RESERVE: u32 = 8;
/// The most credits a holder asks for at once.
pub const MAX_WANT: u32 = 10_000;

/// A holder's request to an authority: a grant of up to `want` credits under `grant_id` (chosen by
/// the holder, unique), giving back what it did not use of earlier grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub grant_id: String,
    /// The fewest credits of any use now (the request's cost): less is no grant at all.
    pub need: u32,
    pub want: u32,
    pub give_back: Vec<GiveBack>,
    /// The level's limits as the holder was told them (the key's record carries them).
    pub limits: LimitSpec,
    /// The holder's object (its key hash): where the authority asks credits back (SPEC §23).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// The longest a request refused while isolates hold credits of its key waits for them to come
/// back before it is answered 429 (SPEC §23: a refusal is answered now, never after a wait
/// without a deadline).
pub const REFUSAL_WAIT_MS: i64 = 250;

/// Until when a request refused at `now_ms` may wait for credits that isolates' leases of its key
/// hold (they end by `leased_until`, and come back `return_ms` after): never for a used-up quota,
/// never past the end of the window that refused it (a wait must not turn into an admission in
/// the next window), never more than [`REFUSAL_WAIT_MS`]. `None`: answer the refusal now.
pub fn refusal_wait_until(
    now_ms: i64,
    verdict: Verdict,
    refused_by: Option<Window>,
    leased_until: Option<i64>,
    return_ms: i64,
) -> Option<i64> {
    if verdict == Verdict::QuotaExceeded {
        return None;
    }
    let window_end = refused_by.map_or(i64::MAX, |w| w.start(now_ms) + w.ms());
    let until = (leased_until? + return_ms).min(now_ms + REFUSAL_WAIT_MS).min(window_end - 1);
    (until > now_ms).then_some(until)
}

/// The most holders an authority asks credits back of before one refusal (SPEC §23).
pub const RECALLS_PER_REFUSAL: usize = 4;

/// An authority about to refuse asks a holder to give back grant `grant_id` now (SPEC §23): a
/// level refuses only when no credit is left anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecallGrant {
    pub grant_id: String,
}

/// What a holder gives back of a recalled grant: what it did not use of it, and stops using it
/// (nothing: it gave the grant back already, or is exchanging it now).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recalled {
    pub give_back: Vec<GiveBack>,
}

/// Whether a kept grant may have credits parked with its holder that `asker` could use at
/// `now_ms`: it runs, was not given back, and is another holder's.
pub fn parked(
    grant: &Grant,
    returned: &Returned,
    holder: Option<&str>,
    asker: Option<&str>,
    now_ms: i64,
) -> bool {
    grant.until_ms > now_ms && grant.credits > 0 && !returned.closed && holder.is_some() && holder != asker
}

/// Credits of grant `grant_id` that were not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBack {
    pub grant_id: String,
    pub unused: u32,
    /// `None`: the holder is done with the grant (its unused credits, once). `Some(lease)`: the
    /// part of a lease to an isolate, drawn from this grant, that came back after the grant was
    /// given back or replaced — counted once per lease, and never more than the grant's credits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
}

/// An authority's answer: `credits` (0 when the level refuses: then `verdict` and `usage` say
/// why), usable until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub grant_id: String,
    pub credits: u32,
    pub until_ms: i64,
    /// The windows' and the month's starts the credits were counted in (for giving them back).
    pub starts: [i64; 4],
    pub month_start_ms: i64,
    pub verdict: Verdict,
    /// The level's limits right after the grant.
    pub usage: Usage,
    /// The limits it was granted under: a holder told other limits (a plan changed, an
    /// identity's limits were edited) uses none of it any more and gives it back.
    pub limits: LimitSpec,
}

/// The authority's decision on between `need` and `want` credits at `now_ms`: at most half of
/// what is left (so other holders still find some) but at least `need` while that much is left,
/// else none. Answers the grant and the counters to keep.
pub fn grant(
    prev: Counters,
    now_ms: i64,
    spec: &LimitSpec,
    grant_id: &str,
    need: u32,
    want: u32,
) -> (Grant, Counters) {
    grant_for(prev, now_ms, spec, grant_id, need, want, GRANT_MS)
}

/// [`grant`] for at most `max_ms`.
pub fn grant_for(
    prev: Counters,
    now_ms: i64,
    spec: &LimitSpec,
    grant_id: &str,
    need: u32,
    want: u32,
    max_ms: i64,
) -> (Grant, Counters) {
    let limits = &Limits::from_spec(spec);
    let mut next = prev.at(now_ms);
    let room = next.room(now_ms, limits);
    let need = need.max(1);
    // A want of 0 only gives back (a holder whose grants ended, with nothing to admit now).
    let credits = match room < u64::from(need) || want == 0 {
        true => 0,
        false => u64::from(want.clamp(need, MAX_WANT.max(need))).min((room / 2).max(u64::from(need))) as u32,
    };
    let (verdict, usage) = if credits == 0 {
        let (verdict, usage, _) = decide_cost(next, now_ms, *limits, need);
        (verdict, usage)
    } else {
        let (verdict, _, taken) = decide_cost(next, now_ms, *limits, credits);
        debug_assert_eq!(verdict, Verdict::Allowed);
        next = taken;
        (verdict, usage(next, now_ms, limits, None))
    };
    let grant = Grant {
        grant_id: grant_id.to_owned(),
        credits,
        until_ms: grant_end(now_ms, limits, max_ms),
        starts: next.starts(),
        month_start_ms: next.month_start_ms,
        verdict,
        usage,
        limits: *spec,
    };
    (grant, next)
}

/// When a grant made at `now_ms` ends: `max_ms` later, or the end of the shortest limited
/// window, or the month's end, whichever comes first.
fn grant_end(now_ms: i64, limits: &Limits, max_ms: i64) -> i64 {
    let window_end =
        Window::ALL.iter().filter(|w| limits.window(**w).is_some()).map(|w| w.start(now_ms) + w.ms()).min();
    let end = (now_ms + max_ms).min(crate::rate_limit::next_month_start(now_ms));
    window_end.map_or(end, |w| w.min(end))
}

/// What came back of a grant, as its authority keeps it: whether its holder is done with it, the
/// credits taken back so far, and the parts (leases to isolates) already counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Returned {
    pub closed: bool,
    pub credits: u32,
    pub parts: Vec<String>,
}

/// Takes back `back` of `grant` into `counters`, once: a give-back repeated (a retry whose answer
/// was lost) or a part counted before takes nothing, and a grant never gets more back than its
/// credits. Answers the credits taken back.
pub fn accept_give_back(
    counters: &mut Counters,
    now_ms: i64,
    grant: &Grant,
    returned: &mut Returned,
    back: &GiveBack,
) -> u32 {
    match &back.part {
        None if returned.closed => return 0,
        None => returned.closed = true,
        Some(part) if returned.parts.contains(part) => return 0,
        Some(part) => returned.parts.push(part.clone()),
    }
    let credits = back.unused.min(grant.credits.saturating_sub(returned.credits));
    returned.credits += credits;
    give_back(counters, now_ms, grant, credits);
    credits
}

/// Gives `unused` credits of `grant` back to `counters`: only to the windows (and the month) that
/// are still the ones it was counted in. The caller makes sure a grant is given back once.
pub fn give_back(counters: &mut Counters, now_ms: i64, grant: &Grant, unused: u32) {
    *counters = counters.at(now_ms);
    counters.give_back(unused.min(grant.credits), &grant.starts, grant.month_start_ms);
}

/// A grant as its holder keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub grant_id: String,
    pub credits: u32,
    pub used: u32,
    pub until_ms: i64,
    /// The level's limits as of the grant (what `/me` and refusals show).
    pub usage: Usage,
    /// The limits it was granted under.
    pub limits: LimitSpec,
}

impl Held {
    pub fn from_grant(grant: &Grant) -> Self {
        Held {
            grant_id: grant.grant_id.clone(),
            credits: grant.credits,
            used: 0,
            until_ms: grant.until_ms,
            usage: grant.usage,
            limits: grant.limits,
        }
    }

    /// Credits usable at `now_ms` under `limits`: none once the grant ended, or when it was
    /// granted under other limits.
    pub fn available(&self, now_ms: i64, limits: &LimitSpec) -> u32 {
        if now_ms < self.until_ms && self.limits == *limits {
            self.credits.saturating_sub(self.used)
        } else {
            0
        }
    }

    /// What to give back of it (nothing when all was used).
    pub fn give_back(&self) -> Option<GiveBack> {
        (self.used < self.credits).then(|| GiveBack {
            grant_id: self.grant_id.clone(),
            unused: self.credits - self.used,
            part: None,
        })
    }

    /// How many credits to ask for when `cost` is needed now: what the last grant showed the
    /// holder uses in one (twice that when it ran out before it ended), at least `cost`.
    pub fn want(last: Option<&Held>, now_ms: i64, cost: u32) -> u32 {
        let measured = last.map_or(0, |h| match h.until_ms > now_ms && h.used == h.credits {
            true => h.credits.saturating_mul(2),
            false => h.used,
        });
        measured.max(cost).clamp(1, MAX_WANT)
    }
}

/// What an isolate asks of a key's guard with a request (SPEC §20 hot keys): a lease of up to
/// `want` of the key's credits, if the key is hot enough to lease, and what it did not use of
/// earlier leases.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAsk {
    pub want: u32,
    pub give_back: Vec<GiveBack>,
    /// The isolate held a lease of the key within the last lease's time: a key that leases stays
    /// hot while its isolates renew, though its guard then sees few of its requests.
    #[serde(default)]
    pub renew: bool,
    /// The isolate's give-back sequence when this ask was made (its own bookkeeping, not sent):
    /// give-backs owed from later on were not in it, so the guard may have counted them as used
    /// when it answered (see [`LeaseBook::hold`]).
    #[serde(skip)]
    pub asked: u64,
}

impl LeaseAsk {
    /// Whether the key is hot enough to lease to the isolate asking: its guard saw `seen` requests
    /// in this second, or the isolate's own want is that large, from `lease_above` on; or the
    /// isolate is renewing.
    pub fn is_hot(&self, seen: u32, lease_above: u32) -> bool {
        self.renew || seen >= lease_above || self.want >= lease_above
    }
}

mod book;

pub use book::{KeyLease, LeaseBook, Leased, LEASE_BOOK_KEYS};

/// Which grant of which level a lease to an isolate drew its credits from, by level name.
pub type Drawn = Vec<(String, String)>;

/// A key's guard's lease to an isolate, with an admission (SPEC §20 hot keys): when the key is
/// `hot` (its guard saw at least `LEASE_ABOVE_PER_SECOND` requests in this second), up to `want`
/// of its credits — no more than the key's windows have (at most half of it) and than it
/// holds of every level above it (`levels[i]`, `held[i]`), which it takes from those too. For at
/// most [`ISOLATE_LEASE_MS`]. Answers the lease, the key's counters to keep and what it drew from.
#[allow(clippy::too_many_arguments)]
pub fn lease_to_isolate(
    counters: Counters,
    now_ms: i64,
    limits: &Limits,
    levels: &[(String, LimitSpec)],
    held: &mut [Option<Held>],
    grant_id: &str,
    want: u32,
    hot: bool,
) -> Option<(Grant, Counters, Drawn)> {
    if !hot {
        return None;
    }
    let current = counters.at(now_ms);
    let above =
        held.iter().zip(levels).map(|(h, (_, spec))| h.as_ref().map_or(0, |h| h.available(now_ms, spec)));
    // The last few credits of the key's tightest window (a tenth of it, at least one and at most
    // `LEASE_RESERVE`) are never leased: near the limit the guard decides each request itself, so
    // no credit waits in an isolate whose requests have ended while other requests are refused.
    let tightest = limits.per.iter().flatten().min().copied().unwrap_or(u32::MAX);
    let room = current.room(now_ms, limits).min(u64::from(u32::MAX)) as u32;
    let leasable = room.saturating_sub(tightest.div_ceil(10).clamp(1, LEASE_RESERVE));
    let want = above.fold(want.min(leasable), u32::min);
    if want == 0 {
        return None;
    }
    let spec = LimitSpec {
        per_second: limits.window(Window::Second),
        per_minute: limits.window(Window::Minute),
        per_hour: limits.window(Window::Hour),
        per_day: limits.window(Window::Day),
        monthly_quota: None,
    };
    let (mut grant, next) = grant_for(current, now_ms, &spec, grant_id, 1, want, ISOLATE_LEASE_MS);
    if grant.credits == 0 {
        return None;
    }
    // Never past a grant it draws from (a level's window may be shorter than the key's), and never
    // within the clock margin of the end of the window it was counted in.
    let window_end =
        grant_end(now_ms, limits, ISOLATE_LEASE_MS + LEASE_CLOCK_MARGIN_MS) - LEASE_CLOCK_MARGIN_MS;
    // The margin applies at a level grant's end too (its window may be a second).
    let held_end = held.iter().flatten().map(|h| h.until_ms - LEASE_CLOCK_MARGIN_MS);
    grant.until_ms = held_end.fold(grant.until_ms.min(window_end), i64::min);
    if grant.until_ms <= now_ms {
        // Too close to the window's end: the guard decides the key's requests itself until it turns.
        return None;
    }
    let mut drawn = Vec::new();
    for (h, (level, _)) in held.iter_mut().zip(levels) {
        if let Some(h) = h {
            h.used += grant.credits;
            drawn.push((level.clone(), h.grant_id.clone()));
        }
    }
    Some((grant, next, drawn))
}

/// A hot key's refusal the isolate repeats without asking (SPEC §20): until the refusing window
/// ends, at most [`ISOLATE_LEASE_MS`], so a flood over the limit does not queue at the key's guard.
pub fn refusal_lease(now_ms: i64, verdict: Verdict, usage: &Usage) -> Grant {
    let mut until_ms = now_ms + ISOLATE_LEASE_MS;
    if verdict == Verdict::RateLimited {
        until_ms = until_ms.min(usage.reset_ms());
    }
    Grant {
        grant_id: String::new(),
        credits: 0,
        until_ms,
        starts: [0; 4],
        month_start_ms: 0,
        verdict,
        usage: *usage,
        limits: LimitSpec::default(),
    }
}

/// Requests seen in the current second and the one before, admitted or refused: what makes a
/// key hot at its guard, and how many credits an isolate asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestRate {
    second_ms: i64,
    count: u32,
    previous: u32,
}

impl RequestRate {
    /// Counts one request at `now_ms`; answers the count of its second so far.
    pub fn count(&mut self, now_ms: i64) -> u32 {
        self.roll(now_ms);
        self.count = self.count.saturating_add(1);
        self.count
    }

    /// Requests a second as of `now_ms`: the more of the last second's and this one's so far,
    /// extrapolated to a whole second (from a tenth of it on).
    pub fn per_second(&mut self, now_ms: i64) -> u32 {
        self.roll(now_ms);
        let elapsed = (now_ms - self.second_ms).max(100) as u64;
        let this = (u64::from(self.count) * 1_000 / elapsed).min(u64::from(u32::MAX)) as u32;
        this.max(self.previous)
    }

    fn roll(&mut self, now_ms: i64) {
        let second = Window::Second.start(now_ms);
        if second != self.second_ms {
            let previous = if second == self.second_ms + 1_000 { self.count } else { 0 };
            *self = RequestRate { second_ms: second, count: 0, previous };
        }
    }
}

/// Takes back `unused` credits of a lease to an isolate: to the key's windows (those still
/// current) and to each level's grant it drew from, while the guard still holds that grant. Answers
/// what is owed to the levels whose grant it no longer holds (given back or replaced while the
/// lease was out): a part of that grant, to give back to its authority, by level.
pub fn take_back(
    counters: &mut Counters,
    now_ms: i64,
    lease: &Grant,
    drawn: &Drawn,
    levels: &[(String, LimitSpec)],
    held: &mut [Option<Held>],
    unused: u32,
) -> Vec<(String, GiveBack)> {
    let unused = unused.min(lease.credits);
    give_back(counters, now_ms, lease, unused);
    let mut owed = Vec::new();
    for (level, grant_id) in drawn {
        let holding =
            levels.iter().zip(held.iter_mut()).find(|((l, _), _)| l == level).and_then(|(_, h)| h.as_mut());
        match holding.filter(|h| h.grant_id == *grant_id) {
            Some(h) => h.used = h.used.saturating_sub(unused),
            None if unused > 0 => owed.push((
                level.clone(),
                GiveBack { grant_id: grant_id.clone(), unused, part: Some(lease.grant_id.clone()) },
            )),
            None => {}
        }
    }
    owed
}

/// A request the key's own windows refused: the level whose quota its guard should ask about,
/// because it holds no usable grant of it. The quota comes before the windows (SPEC §4): a
/// client over both must learn that the month is used up, since waiting would not help.
pub fn quota_to_ask(levels: &[(String, LimitSpec)], held: &[Option<Held>], now_ms: i64) -> Option<usize> {
    levels.iter().zip(held).position(|((_, spec), h)| {
        spec.monthly_quota.is_some() && h.as_ref().map_or(0, |h| h.available(now_ms, spec)) == 0
    })
}

/// A request a level refused (its grant had fewer credits than the cost): the level's verdict —
/// a grant of some credits but too few for the cost is a rate refusal — and the key's usage as it
/// stands with, in each window, the stricter of the key's and the level's view, and the level's
/// refusing window and quota. Nothing of the key was taken.
pub fn refused_by_level(key_usage: Usage, level: &Grant) -> (Verdict, Usage) {
    let verdict = match level.verdict {
        Verdict::Allowed => Verdict::RateLimited,
        refused => refused,
    };
    let mut usage = key_usage;
    for (mine, theirs) in usage.windows.iter_mut().zip(level.usage.windows) {
        if let Some(theirs) = theirs {
            if mine.is_none_or(|m| theirs.remaining < m.remaining) {
                *mine = Some(theirs);
            }
        }
    }
    usage.refused_by = level.usage.refused_by.or(usage.refused_by);
    if level.usage.quota_limit.is_some() {
        usage.quota_used = level.usage.quota_used;
        usage.quota_limit = level.usage.quota_limit;
    }
    (verdict, usage)
}

/// `usage` with the project's quota as its last grant showed it (`project`): the credits the
/// project's keys hold count as used, those this key holds and has not used do not.
pub fn with_project_quota(mut usage: Usage, project: Option<&Held>) -> Usage {
    if let Some(held) = project {
        usage.quota_limit = held.usage.quota_limit;
        usage.quota_used = held.usage.quota_used.saturating_sub(u64::from(held.credits - held.used));
        usage.quota_resets_ms = held.usage.quota_resets_ms;
    }
    usage
}

/// The decision of a key's guard on one request, given what it holds of each level above the key
/// (`held[i]`, `None` when it holds no grant): the order of checks of SPEC §20.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // made once per decision and matched at once
pub enum Decision {
    /// Decided: the key's own verdict and usage, and its counters to keep when the request took
    /// its cost (then each level's grant gave `cost` credits too).
    Decided { verdict: Verdict, usage: Usage, counters: Option<Counters> },
    /// The key admits the request but holds too few credits of level `i`: exchange, then decide again.
    NeedsCredits(usize),
}

/// Decides one request of a key whose own limits are `limits`: the key's windows first (a request
/// they refuse takes no credit of any level: no double counting), then one credit per unit of
/// `cost` of every level (`levels[i]`'s limits, `held[i]` its grant). Nothing is taken unless
/// everything admits.
pub fn admit(
    prev: Counters,
    now_ms: i64,
    limits: Limits,
    cost: u32,
    permitted: bool,
    levels: &[LimitSpec],
    held: &mut [Option<Held>],
) -> Decision {
    // A request of a class the key's plan exempts (`Config::cost` 0, SPEC §23) takes nothing and
    // no limit refuses it; its answer shows the windows as they stand.
    if cost == 0 {
        let (_, usage, _) = crate::rate_limit::decide_request(prev, now_ms, limits, 1, false);
        return Decision::Decided { verdict: Verdict::Allowed, usage, counters: None };
    }
    let (verdict, usage, counters) = crate::rate_limit::decide_request(prev, now_ms, limits, cost, permitted);
    if counters.is_some() {
        let cost = cost.max(1);
        let short =
            |(h, l): (&Option<Held>, &LimitSpec)| h.as_ref().map_or(0, |h| h.available(now_ms, l)) < cost;
        if let Some(i) = held.iter().zip(levels).position(short) {
            return Decision::NeedsCredits(i);
        }
        for h in held.iter_mut().flatten() {
            h.used += cost;
        }
    }
    Decision::Decided { verdict, usage, counters }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::LimitSpec;

    /// 2026-11-29T09:00:00Z, a minute boundary.
    const T0: i64 = 1_795_942_800_000;

    fn limits(per_minute: Option<u32>, quota: Option<u64>) -> LimitSpec {
        LimitSpec { per_minute, monthly_quota: quota, ..Default::default() }
    }

    /// SPEC §23: a refused request waits for leases to come back at most a quarter of a second,
    /// never into the next window, never for a used-up quota (main waited until the leases out at
    /// the refusal ended, and a request admitted in the next second had waited seconds).
    #[test]
    fn a_refusal_waits_briefly_and_never_into_the_next_window() {
        let now = 1_796_000_000_100; // 100 ms into a second
        let second = Some(Window::Second);
        assert_eq!(
            refusal_wait_until(now, Verdict::RateLimited, second, Some(now + 5_000), 250),
            Some(now + 250)
        );
        assert_eq!(refusal_wait_until(now, Verdict::RateLimited, second, Some(now + 20), 50), Some(now + 70));
        let late = now + 850; // 50 ms before the second ends
        assert_eq!(
            refusal_wait_until(late, Verdict::RateLimited, second, Some(late + 500), 250),
            Some(late + 49)
        );
        assert_eq!(refusal_wait_until(late + 49, Verdict::RateLimited, second, Some(late + 500), 250), None);
        assert_eq!(refusal_wait_until(now, Verdict::QuotaExceeded, None, Some(now + 500), 250), None);
        assert_eq!(refusal_wait_until(now, Verdict::RateLimited, second, None, 250), None, "no lease out");
    }

    #[test]
    fn an_exempt_request_is_admitted_over_a_full_window_and_takes_nothing_anywhere() {
        let limits = Limits::per_minute(1);
        let (_, _, full) = crate::rate_limit::decide_request(Counters::default(), T0, limits, 1, true);
        let full = full.unwrap();
        let quota = [LimitSpec { monthly_quota: Some(1), ..Default::default() }];
        let mut held = [None];
        match admit(full, T0 + 1, limits, 0, true, &quota, &mut held) {
            Decision::Decided { verdict, usage, counters } => {
                assert_eq!((verdict, counters), (Verdict::Allowed, None));
                assert_eq!(usage.remaining(), 0, "the window as it stands");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(held, [None], "no level's credit asked for or taken");
    }

    #[test]
    fn an_isolate_lease_ends_a_clock_margin_before_its_window_so_a_lagging_isolate_stays_inside_it() {
        let limits = Limits::per_minute(1_000);
        let minute_end = Window::Minute.start(T0) + 60_000;
        // Half a second before the minute ends: the lease ends the margin before it.
        let at = minute_end - 500;
        let (lease, _, _) =
            lease_to_isolate(Counters::default(), at, &limits, &[], &mut [], "l", 10, true).unwrap();
        assert_eq!(lease.until_ms, minute_end - LEASE_CLOCK_MARGIN_MS);
        // An isolate whose clock lags the margin admits while its time is before the lease's end,
        // that is while the guard's is before `until + margin`: never past the guard's minute.
        assert!(lease.until_ms + LEASE_CLOCK_MARGIN_MS <= minute_end);
        // Within the margin of the minute's end no lease is made: the guard decides each request.
        assert!(lease_to_isolate(Counters::default(), minute_end - 50, &limits, &[], &mut [], "m", 10, true)
            .is_none());
        // Far from a window's end the lease runs its usual second.
        let early = Window::Minute.start(T0) + 1_000;
        let (lease, _, _) =
            lease_to_isolate(Counters::default(), early, &limits, &[], &mut [], "n", 10, true).unwrap();
        assert_eq!(lease.until_ms, early + ISOLATE_LEASE_MS);
    }

    #[test]
    fn a_grant_is_at_most_half_of_what_is_left_and_at_least_what_is_needed() {
        let l = limits(Some(10), None);
        let (g1, c) = grant(Counters::default(), T0, &l, "g1", 1, 100);
        assert_eq!((g1.credits, g1.until_ms, g1.verdict), (5, T0 + GRANT_MS, Verdict::Allowed));
        let (g2, c) = grant(c, T0, &l, "g2", 1, 2);
        let (g3, c) = grant(c, T0, &l, "g3", 1, 100);
        // 2 left: half is 1, but the request needs 2 and they are there.
        let (g4, c) = grant(c, T0, &l, "g4", 2, 100);
        assert_eq!((g2.credits, g3.credits, g4.credits), (2, 1, 2));
        let (g5, c) = grant(c, T0, &l, "g5", 1, 1);
        assert_eq!(
            (g5.credits, g5.verdict, g5.usage.refused_by),
            (0, Verdict::RateLimited, Some(Window::Minute))
        );
        // Given back, they can be granted again, but a need above what is left gets nothing.
        let mut back = c;
        give_back(&mut back, T0 + 5, &g3, 1);
        assert_eq!(grant(back, T0 + 5, &l, "g6", 2, 9).0.credits, 0);
        assert_eq!(grant(back, T0 + 5, &l, "g7", 1, 9).0.credits, 1);
        // The next minute starts from zero.
        assert_eq!(grant(c, T0 + 60_000, &l, "g8", 1, 9).0.credits, 5);
    }

    #[test]
    fn a_quota_grant_lasts_ten_seconds_at_most_and_never_past_the_month() {
        let l = limits(None, Some(1_000));
        let (g, _) = grant(Counters::default(), T0 + 7, &l, "g", 1, 10);
        assert_eq!((g.credits, g.until_ms), (10, T0 + 7 + GRANT_MS));
        let december = 1_796_083_200_000;
        let (g, _) = grant(Counters::default(), december - 10, &l, "g", 1, 10);
        assert_eq!(g.until_ms, december);
        let (g, _) = grant(
            Counters::default(),
            T0 + 100,
            &LimitSpec { per_second: Some(5), ..Default::default() },
            "g",
            1,
            1,
        );
        assert_eq!(g.until_ms, T0 + 1_000);
    }

    #[test]
    fn a_key_refusal_takes_no_credit_and_missing_credits_are_asked_for() {
        let key = Limits::per_minute(2);
        let level = limits(None, Some(100));
        let (g, _) = grant(Counters::default(), T0, &level, "g", 1, 3);
        let mut held = [Some(Held::from_grant(&g))];
        let mut c = Counters::default();
        for _ in 0..2 {
            match admit(c, T0, key, 1, true, &[level], &mut held) {
                Decision::Decided { verdict: Verdict::Allowed, counters: Some(next), .. } => c = next,
                other => panic!("{other:?}"),
            }
        }
        // The key's own minute refuses: nothing of the level is taken.
        let d = admit(c, T0, key, 1, true, &[level], &mut held);
        assert!(matches!(d, Decision::Decided { verdict: Verdict::RateLimited, counters: None, .. }));
        assert_eq!(held[0].as_ref().unwrap().used, 2);
        // A 403 takes nothing either.
        let d = admit(Counters::default(), T0, key, 1, false, &[level], &mut held);
        assert!(matches!(d, Decision::Decided { verdict: Verdict::Allowed, counters: None, .. }));
        // Next minute: one credit left; a cost of 2 needs more; no grant at all needs one.
        assert_eq!(admit(c, T0 + 60_000, key, 2, true, &[level], &mut held), Decision::NeedsCredits(0));
        assert_eq!(admit(c, T0 + 60_000, key, 1, true, &[level], &mut [None]), Decision::NeedsCredits(0));
        // An ended grant is no credit.
        assert_eq!(held[0].as_ref().unwrap().available(g.until_ms, &level), 0);
        // Granted under other limits (the plan changed): none of it is usable.
        assert_eq!(held[0].as_ref().unwrap().available(T0, &limits(None, Some(99))), 0);
        assert_eq!(held[0].as_ref().unwrap().available(T0, &level), 1);
        assert_eq!(
            held[0].as_ref().unwrap().give_back(),
            Some(GiveBack { grant_id: "g".into(), unused: 1, part: None })
        );
    }

    #[test]
    fn a_holder_asks_for_what_it_used_and_doubles_when_it_ran_out() {
        let (g, _) = grant(Counters::default(), T0, &limits(None, Some(1_000)), "g", 1, 8);
        let mut h = Held::from_grant(&g);
        assert_eq!(Held::want(None, T0, 1), 1);
        h.used = 3;
        assert_eq!(Held::want(Some(&h), T0, 1), 3);
        h.used = 8;
        assert_eq!(Held::want(Some(&h), T0, 1), 16);
        assert_eq!(Held::want(Some(&h), h.until_ms, 1), 8);
        assert_eq!(Held::want(None, T0, 5), 5);
    }

    /// The lease rule's invariant under random holders, wants, losses and give-backs: what the
    /// holders admit never exceeds the limit in any window, and credits given back are used.
    #[test]
    fn holders_never_admit_more_than_the_limit_whatever_is_lost() {
        let level = LimitSpec {
            per_second: Some(7),
            per_minute: Some(50),
            monthly_quota: Some(400),
            ..Default::default()
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut authority = Counters::default();
        let mut grants: Vec<(Grant, bool)> = Vec::new();
        let mut holders: Vec<Option<Held>> = vec![None; 5];
        let mut admitted: std::collections::BTreeMap<(usize, i64), u64> = Default::default();
        let mut now = T0;
        for n in 0..20_000 {
            now += next(40) as i64;
            let h = next(5) as usize;
            let key = Limits::per_minute(1_000);
            let mut slot = [holders[h].take()];
            match admit(Counters::default(), now, key, 1, true, &[level], &mut slot) {
                Decision::Decided { verdict: Verdict::Allowed, counters: Some(_), .. } => {
                    for w in [Window::Second, Window::Minute] {
                        *admitted.entry((w as usize, w.start(now))).or_default() += 1;
                    }
                    *admitted.entry((9, crate::rate_limit::month_start(now))).or_default() += 1;
                }
                Decision::NeedsCredits(_) => {
                    // Give back (unless this give-back is lost), then ask.
                    if let Some(old) = slot[0].take() {
                        if let (Some(back), false) = (old.give_back(), next(10) == 0) {
                            let (g, given) =
                                grants.iter_mut().find(|(g, _)| g.grant_id == back.grant_id).unwrap();
                            if !*given {
                                give_back(&mut authority, now, g, back.unused);
                                *given = true;
                            }
                        }
                    }
                    let want = Held::want(None, now, 1 + next(6) as u32);
                    let (g, c) = grant(authority, now, &level, &format!("g{n}"), 1, want);
                    authority = c;
                    // The answer is lost now and then: the credits stay counted.
                    if next(20) != 0 {
                        slot[0] = Some(Held::from_grant(&g));
                    }
                    grants.push((g, false));
                }
                other => panic!("{other:?}"),
            }
            holders[h] = slot[0].take();
        }
        for ((w, start), n) in &admitted {
            let limit = match w {
                0 => 7,
                1 => 50,
                _ => 400,
            };
            assert!(*n <= limit, "window {w} starting {start} admitted {n} over {limit}");
        }
        // Exact, not only safe: some second and some minute were used up to their limit.
        assert!(admitted.iter().any(|((w, _), n)| *w == 0 && *n == 7));
        assert!(admitted.iter().any(|((w, _), n)| *w == 1 && *n == 50));
    }

    /// The guard stores a new grant's `Returned` as `{}`.
    #[test]
    fn nothing_returned_is_an_empty_object() {
        assert_eq!(serde_json::from_str::<Returned>("{}").unwrap(), Returned::default());
    }

    // Found by an outside review of the lease rules: each failed before its fix.

    fn some_key() -> crate::api_key::KeyRecord {
        let (hash, prefix) = ("ab".into(), "gh_s_abcdefg".into());
        crate::api_key::KeyRecord::fresh(
            "key_1",
            "prj_1",
            crate::api_key::KeyType::Server,
            "trial",
            hash,
            prefix,
            1,
        )
    }

    /// A lease to an isolate ends at the end of the KEY's shortest window, not at the end of the
    /// level grant it drew from: credits counted in the identity's second N are admitted by the
    /// isolate in second N+1, while the authority grants second N+1's whole limit afresh.
    #[test]
    fn a_lease_drawn_from_a_level_admits_nothing_past_the_level_window() {
        // The identity is limited per second; the key only per minute (its plan's).
        let identity = LimitSpec { per_second: Some(10), ..Default::default() };
        let levels = vec![("identity:i".to_owned(), identity)];
        let key = Limits::per_minute(1_000);
        let mut authority = Counters::default();
        // Key 1's guard at 0.800 s: a grant of the identity, a request, a lease to an isolate
        // (which ends the clock margin before the grant: none is made within it).
        let t = T0 + 800;
        let (g1, a) = grant(authority, t, &identity, "g1", 1, 10);
        authority = a;
        assert_eq!(g1.until_ms, T0 + 1_000);
        let mut held = [Some(Held::from_grant(&g1))];
        let next = match admit(Counters::default(), t, key, 1, true, &[identity], &mut held) {
            Decision::Decided { verdict: Verdict::Allowed, counters: Some(next), .. } => next,
            other => panic!("{other:?}"),
        };
        let (lease, _, _) = lease_to_isolate(next, t, &key, &levels, &mut held, "L1", 100, true).unwrap();
        assert!(lease.credits > 0);
        // Second 1 (1.500 s): the isolate admits from its lease ...
        let t2 = T0 + 1_500;
        let mut isolate = Held::from_grant(&lease);
        let mut admitted_in_second_1 = 0;
        while isolate.available(t2, &lease.limits) >= 1 {
            isolate.used += 1;
            admitted_in_second_1 += 1;
        }
        // ... and key 2's guard (same identity) is granted the identity's fresh second.
        for n in 0.. {
            let (g, a) = grant(authority, t2, &identity, &format!("k2-{n}"), 1, 10);
            authority = a;
            if g.credits == 0 {
                break;
            }
            admitted_in_second_1 += g.credits;
        }
        assert!(
            admitted_in_second_1 <= 10,
            "the identity's second 1 admitted {admitted_in_second_1} over its limit of 10 \
             (lease until {} ms, its level grant until {} ms)",
            lease.until_ms - T0,
            g1.until_ms - T0
        );
    }

    /// Credits of an isolate lease come back to the level only while the guard still holds the
    /// grant they were drawn from. When that grant was replaced meanwhile (it ran out — the lease
    /// itself emptied it — and the next request exchanged it), what the isolate gives back goes to
    /// the key's windows but never to the level: a project's monthly quota loses them for the
    /// month, though the isolate gave them back.
    #[test]
    fn a_lease_given_back_after_its_level_grant_was_replaced_loses_no_quota() {
        let project = LimitSpec { monthly_quota: Some(1_000), ..Default::default() };
        let levels = vec![("project:p".to_owned(), project)];
        let key = Limits::per_minute(10_000);
        let mut authority = Counters::default();
        let mut key_counters = Counters::default();
        let mut admitted = 0u64;
        let t = T0 + 100;
        let (g1, a) = grant(authority, t, &project, "g1", 1, 20);
        authority = a;
        let mut held = [Some(Held::from_grant(&g1))];
        // Request 1: admitted, and the isolate is leased what is left of the grant.
        let Decision::Decided { verdict: Verdict::Allowed, counters: Some(next), .. } =
            admit(key_counters, t, key, 1, true, &[project], &mut held)
        else {
            panic!()
        };
        admitted += 1;
        let (lease, after, drawn) =
            lease_to_isolate(next, t, &key, &levels, &mut held, "L1", 100, true).unwrap();
        key_counters = after;
        assert_eq!(lease.credits, 19);
        // Request 2 at the guard (another isolate): the grant is used up, it is exchanged.
        let t = t + 10;
        assert_eq!(admit(key_counters, t, key, 1, true, &[project], &mut held), Decision::NeedsCredits(0));
        let old = held[0].take().unwrap();
        let mut returned_g1 = Returned::default();
        if let Some(back) = old.give_back() {
            accept_give_back(&mut authority, t, &g1, &mut returned_g1, &back);
        }
        let (g2, a) = grant(authority, t, &project, "g2", 1, Held::want(Some(&old), t, 1));
        authority = a;
        held[0] = Some(Held::from_grant(&g2));
        let Decision::Decided { verdict: Verdict::Allowed, counters: Some(next), .. } =
            admit(key_counters, t, key, 1, true, &[project], &mut held)
        else {
            panic!()
        };
        key_counters = next;
        admitted += 1;
        // The isolate's requests ended: it gives back its whole lease when it ends.
        let t = lease.until_ms;
        let owed = take_back(&mut key_counters, t, &lease, &drawn, &levels, &mut held, lease.credits);
        // The lease drew from g1, which the guard no longer holds: what came back is owed to the
        // project as a part of g1 (the guard's alarm sends it), counted once however often it is sent.
        assert_eq!(owed.len(), 1);
        for (_, part) in owed.iter().chain(owed.iter()) {
            accept_give_back(&mut authority, t, &g1, &mut returned_g1, part);
        }
        // The guard's grant ends: its alarm gives back what it did not use.
        let t = g2.until_ms;
        let back = held[0].as_ref().unwrap().give_back().unwrap();
        accept_give_back(&mut authority, t, &g2, &mut Returned::default(), &back);
        assert_eq!(
            authority.at(t).month_used,
            admitted,
            "the project's quota counts {} used for {admitted} admitted requests: the lease's {} \
             credits, given back, are lost for the month",
            authority.at(t).month_used,
            lease.credits
        );
    }

    /// A refusal lease is made for the refused request's cost, but the isolate repeats it for any
    /// request of the key: after a proxied request of cost 5 is refused with 3 credits left, the
    /// key's cost-1 requests at that isolate are refused from memory until the window ends (at
    /// most 1 s) though the window has room for them.
    #[test]
    fn a_refusal_lease_for_a_costly_request_does_not_refuse_a_cheap_one() {
        let limits = Limits::per_minute(30);
        let mut c = Counters::default();
        for _ in 0..27 {
            c = crate::rate_limit::decide(c, T0, limits).2;
        }
        let (verdict, usage, _) = decide_cost(c, T0, limits, 5);
        assert_eq!(verdict, Verdict::RateLimited);
        let refusal = refusal_lease(T0, verdict, &usage);
        let mut book = LeaseBook::default();
        book.hold("ab", some_key(), &refusal, 0);
        // Cost 1: the guard would admit it (3 left).
        assert_eq!(crate::rate_limit::decide_cost(c, T0 + 10, limits, 1).0, Verdict::Allowed);
        let decided = book.admit("ab", crate::api_key::Scope::Resources, T0 + 10);
        assert!(
            !matches!(decided, Some(Leased::Refused(..))),
            "a cost-1 request is refused from the memory of a cost-5 refusal with 3 credits left"
        );
    }

    /// One sequential client of a hot key at one isolate, its lease renewed while it still
    /// serves (the renewal's grant counts the old lease's unused credits as used until they come
    /// back): the remaining count still goes down one by one, across renewals, whether the old
    /// lease's credits came back before the next renewal or not.
    #[test]
    fn a_hot_keys_remaining_counts_down_one_by_one_across_renewals() {
        let limits = Limits::per_minute(30);
        for give_back_between in [false, true] {
            let mut book = LeaseBook::default();
            let mut guard = Counters::default();
            let mut grants: Vec<Grant> = Vec::new();
            let mut shown = Vec::new();
            let mut t = T0 + 10;
            for i in 0..3 {
                // The renewal (or the first ask) reaches the guard: what it carries comes back first.
                let ask = match i {
                    0 => book.ask("ab", t, 1),
                    _ => book.take_renewals(t).pop().map(|(_, ask)| ask).expect("a renewal is wanted"),
                };
                for back in &ask.give_back {
                    let g = grants.iter().find(|g| g.grant_id == back.grant_id).unwrap();
                    accept_give_back(&mut guard, t, g, &mut Returned::default(), back);
                }
                let (grant, next, _) =
                    lease_to_isolate(guard, t, &limits, &[], &mut [], &format!("l{i}"), 4, true).unwrap();
                guard = next;
                grants.push(grant.clone());
                match i {
                    0 => {
                        book.answered("ab", &ask, true);
                        book.hold("ab", some_key(), &grant, ask.asked);
                    }
                    _ => book.renewed("ab", &ask, Some(some_key()), Some(&grant)),
                }
                if give_back_between {
                    for (key, back) in book.ended(t) {
                        for b in &back {
                            let g = grants.iter().find(|g| g.grant_id == b.grant_id).unwrap();
                            accept_give_back(&mut guard, t, g, &mut Returned::default(), b);
                        }
                        book.settled(&key, &back);
                    }
                }
                // Three requests from the lease (the second one asks for a renewal).
                for _ in 0..3 {
                    t += 1;
                    match book.admit("ab", crate::api_key::Scope::Resources, t) {
                        Some(Leased::Admitted(_, usage)) => shown.push(usage.remaining()),
                        other => panic!("{other:?}"),
                    }
                }
            }
            assert_eq!(
                shown,
                (21..=29).rev().collect::<Vec<u32>>(),
                "given back between: {give_back_between}"
            );
        }
    }

    /// An ask carries every give-back still owed, and one that reached the guard is owed no more;
    /// a key being asked is left out of what `ended` gives back (its ask carries it).
    #[test]
    fn owed_give_backs_go_with_every_ask_until_one_is_answered() {
        let limits = Limits::per_minute(1_000);
        let mut book = LeaseBook::default();
        let (grant, _, _) =
            lease_to_isolate(Counters::default(), T0, &limits, &[], &mut [], "l1", 10, true).unwrap();
        book.hold("ab", some_key(), &grant, 0);
        book.admit("ab", crate::api_key::Scope::Resources, T0 + 1);
        let first = book.ask("ab", T0 + 2, 1);
        assert_eq!(first.give_back.len(), 1);
        assert!(book.ended(T0 + 2).is_empty(), "asked meanwhile: its ask carries it");
        book.answered("ab", &first, false);
        let again = book.ended(T0 + 3);
        assert_eq!(again, vec![("ab".to_owned(), first.give_back.clone())], "unanswered: still owed");
        let second = book.ask("ab", T0 + 4, 1);
        assert_eq!(second.give_back, first.give_back);
        book.answered("ab", &second, true);
        assert!(book.ended(T0 + 5).is_empty());
        assert_eq!(book.give_back_at(), None);
    }

    /// Two asks of one isolate answered out of order: the later grant (held) counts the earlier
    /// one's credits as used, and those come back whole — the count stays exact.
    #[test]
    fn leases_answered_out_of_order_keep_the_count_exact() {
        let limits = Limits::per_minute(30);
        let mut book = LeaseBook::default();
        let (first, second) = (book.ask("ab", T0, 1), book.ask("ab", T0, 1));
        let (earlier, guard, _) =
            lease_to_isolate(Counters::default(), T0 + 5, &limits, &[], &mut [], "b", 4, true).unwrap();
        let (later, _, _) = lease_to_isolate(guard, T0 + 6, &limits, &[], &mut [], "a", 4, true).unwrap();
        book.answered("ab", &first, true);
        book.hold("ab", some_key(), &later, first.asked);
        book.answered("ab", &second, true);
        book.hold("ab", some_key(), &earlier, second.asked);
        match book.admit("ab", crate::api_key::Scope::Resources, T0 + 7) {
            Some(Leased::Admitted(_, usage)) => assert_eq!(usage.remaining(), 29),
            other => panic!("{other:?}"),
        }
        let owed = book.ended(T0 + 7);
        assert_eq!(owed[0].1, vec![GiveBack { grant_id: "b".into(), unused: 4, part: None }]);
    }
}
