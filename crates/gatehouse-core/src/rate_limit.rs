//! Rate-limit and quota math (SPEC §4) as a pure function of (previous counters, now, limits) →
//! (verdict, usage, new counters). The window is fixed and aligned to the wall-clock minute; the
//! quota runs per calendar month (UTC). A refused request consumes neither.

use serde::{Deserialize, Serialize};

use super::time::{civil_from_days, days_from_civil};

pub const WINDOW_MS: i64 = 60_000;

/// Failed authentications one client address may make per window before it gets 429 (SPEC §2).
pub const AUTH_FAILURE_LIMITS: Limits = Limits { per_minute: 20, monthly_quota: u64::MAX };

/// What a guard keeps between requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub window_start_ms: i64,
    pub window_used: u32,
    pub month_start_ms: i64,
    pub month_used: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub per_minute: u32,
    pub monthly_quota: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allowed,
    RateLimited,
    QuotaExceeded,
}

/// The state of the key's limits right after a decision, as the response headers and `/me` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub limit: u32,
    pub remaining: u32,
    /// Unix ms of the current window's end (a minute boundary).
    pub reset_ms: i64,
    pub quota_used: u64,
    pub quota_limit: u64,
    /// Unix ms of the next month's start, when the quota resets.
    pub quota_resets_ms: i64,
    /// The clock the decision was made with (the guard's).
    pub now_ms: i64,
}

impl Usage {
    /// Whole seconds until the window ends, 1..=60: `Retry-After` and the `t` of `RateLimit`.
    pub fn seconds_to_reset(&self) -> u64 {
        (((self.reset_ms - self.now_ms).max(1) + 999) / 1000) as u64
    }

    /// The rate-limit headers of SPEC §4, for every authenticated response.
    pub fn headers(&self) -> [(&'static str, String); 5] {
        let t = self.seconds_to_reset();
        [
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-reset", (self.reset_ms / 1000).to_string()),
            ("ratelimit-policy", format!("\"minute\";q={};w=60", self.limit)),
            ("ratelimit", format!("\"minute\";r={};t={t}", self.remaining)),
        ]
    }
}

/// Decides one request of cost 1. The quota is checked first: when the month is used up, waiting
/// for the next minute would not help, and the client must learn that.
pub fn decide(prev: Counters, now_ms: i64, limits: Limits) -> (Verdict, Usage, Counters) {
    decide_cost(prev, now_ms, limits, 1)
}

/// Decides one request that takes `cost` units of the window and of the monthly quota (a proxied
/// route's `cost`, SPEC §15). It passes only if all `cost` units fit; a refusal takes none.
pub fn decide_cost(prev: Counters, now_ms: i64, limits: Limits, cost: u32) -> (Verdict, Usage, Counters) {
    let cost = cost.max(1);
    let mut next = current(prev, now_ms);
    let verdict = if next.month_used.saturating_add(u64::from(cost)) > limits.monthly_quota {
        Verdict::QuotaExceeded
    } else if next.window_used.saturating_add(cost) > limits.per_minute {
        Verdict::RateLimited
    } else {
        next.window_used += cost;
        next.month_used += u64::from(cost);
        Verdict::Allowed
    };
    (verdict, usage(next, now_ms, limits), next)
}

/// The decision on one request of a valid key, as its guard makes it. A request the key's type may
/// not make (`permitted` false: 403) is refused before anything is counted, so it takes nothing
/// (SPEC §4: a refused request consumes neither the window nor the quota); its verdict and usage
/// are then what the limits say now. Answers the counters to keep when the request took its cost.
pub fn decide_request(
    prev: Counters,
    now_ms: i64,
    limits: Limits,
    cost: u32,
    permitted: bool,
) -> (Verdict, Usage, Option<Counters>) {
    let (verdict, taken_usage, next) = decide_cost(prev, now_ms, limits, cost);
    match verdict {
        Verdict::Allowed if permitted => (verdict, taken_usage, Some(next)),
        Verdict::Allowed => (verdict, usage(current(prev, now_ms), now_ms, limits), None),
        refused => (refused, taken_usage, None),
    }
}

/// The counters as they stand at `now_ms`: a past window or month counts from zero.
fn current(prev: Counters, now_ms: i64) -> Counters {
    let window_start_ms = now_ms - now_ms.rem_euclid(WINDOW_MS);
    let month_start_ms = month_start(now_ms);
    Counters {
        window_start_ms,
        window_used: if prev.window_start_ms == window_start_ms { prev.window_used } else { 0 },
        month_start_ms,
        month_used: if prev.month_start_ms == month_start_ms { prev.month_used } else { 0 },
    }
}

fn usage(counters: Counters, now_ms: i64, limits: Limits) -> Usage {
    Usage {
        limit: limits.per_minute,
        remaining: limits.per_minute.saturating_sub(counters.window_used),
        reset_ms: counters.window_start_ms + WINDOW_MS,
        quota_used: counters.month_used,
        quota_limit: limits.monthly_quota,
        quota_resets_ms: next_month_start(now_ms),
        now_ms,
    }
}

/// Unix ms of 00:00 UTC on the first day of `now_ms`'s month.
pub fn month_start(now_ms: i64) -> i64 {
    let (y, m, _) = civil_from_days(now_ms.div_euclid(86_400_000));
    days_from_civil(y, m, 1) * 86_400_000
}

fn next_month_start(now_ms: i64) -> i64 {
    let (y, m, _) = civil_from_days(now_ms.div_euclid(86_400_000));
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days_from_civil(y, m, 1) * 86_400_000
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIAL: Limits = Limits { per_minute: 30, monthly_quota: 10_000 };
    /// 2026-11-29T09:00:00Z, a minute boundary.
    const T0: i64 = 1_795_942_800_000;

    fn run(n: usize, start: Counters, now_ms: i64, limits: Limits) -> (Vec<(Verdict, Usage)>, Counters) {
        let mut c = start;
        let mut out = Vec::new();
        for _ in 0..n {
            let (v, u, next) = decide(c, now_ms, limits);
            out.push((v, u));
            c = next;
        }
        (out, c)
    }

    #[test]
    fn a_costly_request_takes_its_cost_and_is_refused_whole_when_it_does_not_fit() {
        let mut c = Counters::default();
        for _ in 0..7 {
            let (v, _, next) = decide_cost(c, T0, TRIAL, 4);
            assert_eq!(v, Verdict::Allowed);
            c = next;
        }
        // 28 of 30 used: a cost of 4 does not fit and takes nothing; a cost of 2 does.
        let (v, u, next) = decide_cost(c, T0, TRIAL, 4);
        assert_eq!((v, u.remaining, next.window_used), (Verdict::RateLimited, 2, 28));
        let (v, u, next) = decide_cost(next, T0, TRIAL, 2);
        assert_eq!((v, u.remaining, next.month_used), (Verdict::Allowed, 0, 30));
    }

    #[test]
    fn a_request_the_key_type_may_not_make_takes_nothing_and_shows_the_window_as_it_stands() {
        let (_, c) = run(3, Counters::default(), T0 + 1_000, TRIAL);
        let (v, u, kept) = decide_request(c, T0 + 2_000, TRIAL, 1, false);
        assert_eq!((v, u.remaining, u.quota_used, kept), (Verdict::Allowed, 27, 3, None));
        assert_eq!(u.reset_ms, T0 + 60_000);
        // The same request of a permitted key takes its cost.
        let (v, u, kept) = decide_request(c, T0 + 2_000, TRIAL, 1, true);
        assert_eq!((v, u.remaining, kept.map(|k| k.month_used)), (Verdict::Allowed, 26, Some(4)));
        // In the next window nothing of the last one shows, and still nothing is taken.
        let (v, u, kept) = decide_request(c, T0 + 60_000, TRIAL, 1, false);
        assert_eq!((v, u.remaining, u.quota_used, kept), (Verdict::Allowed, 30, 3, None));
        // Over the limit, the refusal is the limit's, and it takes nothing either.
        let (_, full) = run(30, Counters::default(), T0, TRIAL);
        let (v, u, kept) = decide_request(full, T0, TRIAL, 1, false);
        assert_eq!((v, u.remaining, kept), (Verdict::RateLimited, 0, None));
    }

    #[test]
    fn first_request_opens_the_window_with_limit_minus_one_remaining() {
        let (v, u, c) = decide(Counters::default(), T0 + 5_000, TRIAL);
        assert_eq!(v, Verdict::Allowed);
        assert_eq!((u.limit, u.remaining, u.reset_ms), (30, 29, T0 + 60_000));
        assert_eq!(u.seconds_to_reset(), 55);
        assert_eq!((c.window_start_ms, c.window_used, c.month_used), (T0, 1, 1));
    }

    #[test]
    fn thirtieth_passes_with_zero_left_and_thirty_first_is_refused_without_consuming() {
        let (out, c) = run(31, Counters::default(), T0 + 1_500, TRIAL);
        assert!(out[..30].iter().all(|(v, _)| *v == Verdict::Allowed));
        let remaining: Vec<u32> = out[..30].iter().map(|(_, u)| u.remaining).collect();
        assert_eq!(remaining, (0..30).rev().collect::<Vec<_>>());
        let (v, u) = out[30];
        assert_eq!((v, u.remaining), (Verdict::RateLimited, 0));
        assert_eq!(u.seconds_to_reset(), 59); // 58.5 s left, rounded up
        assert_eq!((c.window_used, c.month_used), (30, 30));
    }

    #[test]
    fn window_rolls_over_at_the_minute_boundary() {
        let (_, c) = run(30, Counters::default(), T0 + 59_999, TRIAL);
        let (v, u, _) = decide(c, T0 + 59_999, TRIAL);
        assert_eq!((v, u.seconds_to_reset()), (Verdict::RateLimited, 1));
        let (v, u, next) = decide(c, T0 + 60_000, TRIAL);
        assert_eq!((v, u.remaining, u.seconds_to_reset()), (Verdict::Allowed, 29, 60));
        assert_eq!((next.window_start_ms, next.month_used), (T0 + 60_000, 31));
    }

    #[test]
    fn an_override_is_just_another_limit() {
        let five = Limits { per_minute: 5, ..TRIAL };
        let (out, c) = run(6, Counters::default(), T0, five);
        assert_eq!(out[5].0, Verdict::RateLimited);
        assert_eq!(out[4].1.limit, 5);
        // Raising the limit mid-window lets the key continue where it stands.
        let (v, u, _) = decide(c, T0, TRIAL);
        assert_eq!((v, u.remaining), (Verdict::Allowed, 24));
    }

    #[test]
    fn quota_is_checked_first_and_resets_with_the_month() {
        let tiny = Limits { per_minute: 100, monthly_quota: 3 };
        let (out, c) = run(4, Counters::default(), T0, tiny);
        assert_eq!(out[3].0, Verdict::QuotaExceeded);
        assert_eq!(out[3].1.quota_used, 3);
        // 2026-12-01T00:00:00Z
        let december = 1_796_083_200_000;
        assert_eq!(out[3].1.quota_resets_ms, december);
        let (v, u, _) = decide(c, december, tiny);
        assert_eq!((v, u.quota_used), (Verdict::Allowed, 1));
        assert_eq!(month_start(december + 5), december);
        assert_eq!(next_month_start(1_798_761_599_999), 1_798_761_600_000); // Dec → Jan 2027
    }

    #[test]
    fn headers_follow_spec_and_ietf_draft() {
        let (_, u, _) = decide(Counters::default(), T0 + 20_000, TRIAL);
        let h = u.headers();
        assert_eq!(h[0], ("x-ratelimit-limit", "30".into()));
        assert_eq!(h[1], ("x-ratelimit-remaining", "29".into()));
        assert_eq!(h[2], ("x-ratelimit-reset", ((T0 + 60_000) / 1000).to_string()));
        assert_eq!(h[3], ("ratelimit-policy", "\"minute\";q=30;w=60".into()));
        assert_eq!(h[4], ("ratelimit", "\"minute\";r=29;t=40".into()));
    }
}
