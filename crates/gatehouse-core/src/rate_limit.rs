//! Rate-limit and quota math (SPEC §4, §20) as a pure function of (previous counters, now,
//! limits) → (verdict, usage, new counters). A guard may hold up to four windows at once — a
//! second, a minute, an hour and a day — each fixed and aligned to the wall clock (UTC), each
//! exact; the quota runs per calendar month (UTC). A request passes only when every window and
//! the quota have room for its cost; a refused request consumes nothing of any of them.

use serde::{Deserialize, Serialize};

use super::time::{civil_from_days, days_from_civil};

/// One rate window (SPEC §20), aligned to the wall clock: a second starts at a whole second, a
/// minute at a whole minute, an hour at a whole hour and a day at 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    Second,
    Minute,
    Hour,
    Day,
}

impl Window {
    /// Shortest first: the order in which a request is checked and headers list them.
    pub const ALL: [Window; 4] = [Window::Second, Window::Minute, Window::Hour, Window::Day];

    pub const fn ms(self) -> i64 {
        match self {
            Window::Second => 1_000,
            Window::Minute => 60_000,
            Window::Hour => 3_600_000,
            Window::Day => 86_400_000,
        }
    }

    /// The name of the window in headers, `details.window` and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Window::Second => "second",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Unix ms at which the window holding `now_ms` started.
    pub fn start(self, now_ms: i64) -> i64 {
        now_ms - now_ms.rem_euclid(self.ms())
    }
}

/// Limits as an operator writes them in `PLANS`, and an owner on an identity or a key (SPEC
/// §20): any of the four windows, and a monthly quota. A window left out is not limited there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_second: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_quota: Option<u64>,
}

impl LimitSpec {
    /// The field name of each window, in [`Window::ALL`]'s order.
    pub const FIELDS: [&'static str; 4] = ["per_second", "per_minute", "per_hour", "per_day"];

    pub fn window(&self, window: Window) -> Option<u32> {
        self.windows()[window.index()]
    }

    pub fn windows(&self) -> [Option<u32>; 4] {
        [self.per_second, self.per_minute, self.per_hour, self.per_day]
    }

    /// Whether it limits anything at all.
    pub fn is_empty(&self) -> bool {
        self.windows().iter().all(Option::is_none) && self.monthly_quota.is_none()
    }

    /// The first field that is 0 (a limit admits at least one request), if any.
    pub fn zero_field(&self) -> Option<&'static str> {
        let windows = self.windows();
        (0..4)
            .find(|&i| windows[i] == Some(0))
            .map(|i| Self::FIELDS[i])
            .or((self.monthly_quota == Some(0)).then_some("monthly_quota"))
    }

    /// The first field set above `ceiling`'s (an owner's limits never exceed the plan's), if any.
    pub fn above(&self, ceiling: &LimitSpec) -> Option<(&'static str, u64)> {
        let (mine, theirs) = (self.windows(), ceiling.windows());
        (0..4)
            .find_map(|i| match (mine[i], theirs[i]) {
                (Some(m), Some(c)) if m > c => Some((Self::FIELDS[i], u64::from(c))),
                _ => None,
            })
            .or(match (self.monthly_quota, ceiling.monthly_quota) {
                (Some(m), Some(c)) if m > c => Some(("monthly_quota", c)),
                _ => None,
            })
    }

    /// These limits, each lowered to `other`'s where both set one (the stricter of the two).
    pub fn lowered_by(&self, other: &LimitSpec) -> LimitSpec {
        let min = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        LimitSpec {
            per_second: min(self.per_second, other.per_second),
            per_minute: min(self.per_minute, other.per_minute),
            per_hour: min(self.per_hour, other.per_hour),
            per_day: min(self.per_day, other.per_day),
            monthly_quota: match (self.monthly_quota, other.monthly_quota) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The limits one guard decides: a limit per window (`None`: that window is not limited) and a
/// monthly quota (`None`: none at this level — a key's quota is its project's, SPEC §20).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub per: [Option<u32>; 4],
    pub monthly_quota: Option<u64>,
}

impl Limits {
    pub const fn per_minute(limit: u32) -> Self {
        Limits { per: [None, Some(limit), None, None], monthly_quota: None }
    }

    pub fn from_spec(spec: &LimitSpec) -> Self {
        Limits { per: spec.windows(), monthly_quota: spec.monthly_quota }
    }

    pub fn window(&self, window: Window) -> Option<u32> {
        self.per[window.index()]
    }
}

/// Failed authentications one client address may make per window before it gets 429 (SPEC §2).
pub const AUTH_FAILURES_PER_MINUTE: u32 = 20;
pub const AUTH_FAILURE_LIMITS: Limits = Limits::per_minute(AUTH_FAILURES_PER_MINUTE);

/// What one window has counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowCount {
    pub start_ms: i64,
    pub used: u32,
}

/// What a guard keeps between requests: each window's count (in [`Window::ALL`]'s order) and the
/// month's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub windows: [WindowCount; 4],
    pub month_start_ms: i64,
    pub month_used: u64,
}

impl Counters {
    /// The counters as they stand at `now_ms`: a past window or month counts from zero.
    pub fn at(&self, now_ms: i64) -> Counters {
        let mut next = *self;
        for w in Window::ALL {
            let start_ms = w.start(now_ms);
            let count = &mut next.windows[w.index()];
            if count.start_ms != start_ms {
                *count = WindowCount { start_ms, used: 0 };
            }
        }
        let month = month_start(now_ms);
        if next.month_start_ms != month {
            next.month_start_ms = month;
            next.month_used = 0;
        }
        next
    }

    /// What still fits at `now_ms` under `limits`: the least room of any limited window and the
    /// quota (`u64::MAX` when nothing is limited).
    pub fn room(&self, now_ms: i64, limits: &Limits) -> u64 {
        let c = self.at(now_ms);
        let windows = Window::ALL.iter().filter_map(|&w| {
            limits.window(w).map(|limit| u64::from(limit.saturating_sub(c.windows[w.index()].used)))
        });
        let quota = limits.monthly_quota.map(|q| q.saturating_sub(c.month_used));
        windows.chain(quota).min().unwrap_or(u64::MAX)
    }

    /// Takes `cost` in every window and in the month (the caller checked that it fits).
    fn take(&mut self, cost: u32) {
        for count in &mut self.windows {
            count.used = count.used.saturating_add(cost);
        }
        self.month_used = self.month_used.saturating_add(u64::from(cost));
    }

    /// Gives back `credits` taken at a time whose windows started at `starts` and whose month at
    /// `month_start_ms`: only the windows (and the month) that are still those get them back.
    pub fn give_back(&mut self, credits: u32, starts: &[i64; 4], month_start_ms: i64) {
        for (count, start) in self.windows.iter_mut().zip(starts) {
            if count.start_ms == *start {
                count.used = count.used.saturating_sub(credits);
            }
        }
        if self.month_start_ms == month_start_ms {
            self.month_used = self.month_used.saturating_sub(u64::from(credits));
        }
    }

    /// Each window's start, in [`Window::ALL`]'s order.
    pub fn starts(&self) -> [i64; 4] {
        self.windows.map(|w| w.start_ms)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allowed,
    RateLimited,
    QuotaExceeded,
}

/// One limited window as it stands after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowUsage {
    pub limit: u32,
    pub remaining: u32,
    /// Unix ms of the window's end.
    pub reset_ms: i64,
}

/// The state of the limits right after a decision, as the response headers and `/me` show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Each limited window, in [`Window::ALL`]'s order.
    pub windows: [Option<WindowUsage>; 4],
    /// The window that refused the request, when one did (a 429's `details.window`).
    pub refused_by: Option<Window>,
    pub quota_used: u64,
    /// `None`: no quota applies.
    pub quota_limit: Option<u64>,
    /// Unix ms of the next month's start, when the quota resets.
    pub quota_resets_ms: i64,
    /// The clock the decision was made with (the guard's).
    pub now_ms: i64,
}

impl Usage {
    /// A minute window of `limit` used up until `reset_ms`, and nothing else: a browser key's
    /// visitor refused (SPEC §24).
    pub fn refused_minute(limit: u32, reset_ms: i64, now_ms: i64) -> Usage {
        let mut windows = [None; 4];
        windows[Window::Minute.index()] = Some(WindowUsage { limit, remaining: 0, reset_ms });
        let refused_by = Some(Window::Minute);
        Usage { windows, refused_by, quota_used: 0, quota_limit: None, quota_resets_ms: reset_ms, now_ms }
    }

    /// The window the headers advertise: the one that refused, else the one closest to refusing
    /// (the least remaining; of equals, the longest, which takes longest to come back). `None`
    /// only when no window is limited.
    pub fn advertised(&self) -> Option<(Window, WindowUsage)> {
        if let Some(w) = self.refused_by {
            if let Some(u) = self.windows[w.index()] {
                return Some((w, u));
            }
        }
        Window::ALL
            .iter()
            .rev()
            .filter_map(|&w| self.windows[w.index()].map(|u| (w, u)))
            .min_by_key(|(_, u)| u.remaining)
    }

    /// The advertised window's limit, remaining and end (0, 0 and now when none is limited).
    pub fn limit(&self) -> u32 {
        self.advertised().map_or(0, |(_, u)| u.limit)
    }

    pub fn remaining(&self) -> u32 {
        self.advertised().map_or(0, |(_, u)| u.remaining)
    }

    pub fn reset_ms(&self) -> i64 {
        self.advertised().map_or(self.now_ms, |(_, u)| u.reset_ms)
    }

    /// The advertised window's name ("minute" when none is limited).
    pub fn window_name(&self) -> &'static str {
        self.advertised().map_or(Window::Minute.name(), |(w, _)| w.name())
    }

    /// Whole seconds until the advertised window ends, at least 1: `Retry-After` and the `t` of
    /// `RateLimit`.
    pub fn seconds_to_reset(&self) -> u64 {
        (((self.reset_ms() - self.now_ms).max(1) + 999) / 1000) as u64
    }

    /// The rate-limit headers of SPEC §4, §20 and §25, for every authenticated response: the
    /// `X-RateLimit-*` and `RateLimit` of the advertised window, and a `RateLimit-Policy` that
    /// lists every limited window and the monthly quota (`"month"`, its `w` the month's seconds):
    /// an RFC 9651 List of the IETF draft's policies.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let Some((window, advertised)) = self.advertised() else { return Vec::new() };
        // The calendar month of now (a grant's reset may be last month's), and a quota an
        // sf-integer can carry (15 digits).
        let month_ends = next_month_start(self.now_ms);
        let month = self.quota_limit.map(|quota| {
            let seconds = (month_ends - month_start(self.now_ms)) / 1000;
            format!("\"month\";q={};w={seconds}", quota.min(SF_INTEGER_MAX))
        });
        let policy = Window::ALL
            .iter()
            .filter_map(|&w| {
                self.windows[w.index()].map(|u| format!("\"{}\";q={};w={}", w.name(), u.limit, w.ms() / 1000))
            })
            .chain(month)
            .collect::<Vec<_>>()
            .join(", ");
        vec![
            ("x-ratelimit-limit", advertised.limit.to_string()),
            ("x-ratelimit-remaining", advertised.remaining.to_string()),
            ("x-ratelimit-reset", (advertised.reset_ms / 1000).to_string()),
            ("ratelimit-policy", policy),
            // The month's quota used up: that is what refuses, until the month ends (review M5).
            match self.quota_limit.filter(|q| self.quota_used >= *q) {
                Some(_) => {
                    ("ratelimit", format!("\"month\";r=0;t={}", ((month_ends - self.now_ms) + 999) / 1000))
                }
                None => (
                    "ratelimit",
                    format!("\"{}\";r={};t={}", window.name(), advertised.remaining, self.seconds_to_reset()),
                ),
            },
        ]
    }
}

/// The largest integer an RFC 9651 structured field carries.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Decides one request of cost 1.
pub fn decide(prev: Counters, now_ms: i64, limits: Limits) -> (Verdict, Usage, Counters) {
    decide_cost(prev, now_ms, limits, 1)
}

/// Decides one request that takes `cost` units of every window and of the monthly quota (a
/// proxied route's `cost`, SPEC §15). It passes only if all `cost` units fit everywhere; a
/// refusal takes none. The quota is checked first: when the month is used up, waiting for the
/// next window would not help, and the client must learn that. Then the windows, shortest first.
pub fn decide_cost(prev: Counters, now_ms: i64, limits: Limits, cost: u32) -> (Verdict, Usage, Counters) {
    let cost = cost.max(1);
    let mut next = prev.at(now_ms);
    let over_quota =
        limits.monthly_quota.is_some_and(|q| next.month_used.saturating_add(u64::from(cost)) > q);
    let full = Window::ALL.into_iter().find(|&w| {
        limits.window(w).is_some_and(|limit| next.windows[w.index()].used.saturating_add(cost) > limit)
    });
    let (verdict, refused_by) = match (over_quota, full) {
        (true, _) => (Verdict::QuotaExceeded, None),
        (false, Some(w)) => (Verdict::RateLimited, Some(w)),
        (false, None) => {
            next.take(cost);
            (Verdict::Allowed, None)
        }
    };
    (verdict, usage(next, now_ms, &limits, refused_by), next)
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
        Verdict::Allowed => (verdict, usage(prev.at(now_ms), now_ms, &limits, None), None),
        refused => (refused, taken_usage, None),
    }
}

/// The usage `limits` show for `counters` (already [`Counters::at`] `now_ms`).
pub fn usage(counters: Counters, now_ms: i64, limits: &Limits, refused_by: Option<Window>) -> Usage {
    let mut windows = [None; 4];
    for w in Window::ALL {
        if let Some(limit) = limits.window(w) {
            let count = counters.windows[w.index()];
            windows[w.index()] = Some(WindowUsage {
                limit,
                remaining: limit.saturating_sub(count.used),
                reset_ms: w.start(now_ms) + w.ms(),
            });
        }
    }
    Usage {
        windows,
        refused_by,
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

pub fn next_month_start(now_ms: i64) -> i64 {
    let (y, m, _) = civil_from_days(now_ms.div_euclid(86_400_000));
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days_from_civil(y, m, 1) * 86_400_000
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIAL: Limits = Limits { per: [None, Some(30), None, None], monthly_quota: Some(10_000) };
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
        assert_eq!((v, u.remaining(), next.windows[1].used), (Verdict::RateLimited, 2, 28));
        let (v, u, next) = decide_cost(next, T0, TRIAL, 2);
        assert_eq!((v, u.remaining(), next.month_used), (Verdict::Allowed, 0, 30));
    }

    #[test]
    fn a_request_the_key_type_may_not_make_takes_nothing_and_shows_the_window_as_it_stands() {
        let (_, c) = run(3, Counters::default(), T0 + 1_000, TRIAL);
        let (v, u, kept) = decide_request(c, T0 + 2_000, TRIAL, 1, false);
        assert_eq!((v, u.remaining(), u.quota_used, kept), (Verdict::Allowed, 27, 3, None));
        assert_eq!(u.reset_ms(), T0 + 60_000);
        // The same request of a permitted key takes its cost.
        let (v, u, kept) = decide_request(c, T0 + 2_000, TRIAL, 1, true);
        assert_eq!((v, u.remaining(), kept.map(|k| k.month_used)), (Verdict::Allowed, 26, Some(4)));
        // In the next window nothing of the last one shows, and still nothing is taken.
        let (v, u, kept) = decide_request(c, T0 + 60_000, TRIAL, 1, false);
        assert_eq!((v, u.remaining(), u.quota_used, kept), (Verdict::Allowed, 30, 3, None));
        // Over the limit, the refusal is the limit's, and it takes nothing either.
        let (_, full) = run(30, Counters::default(), T0, TRIAL);
        let (v, u, kept) = decide_request(full, T0, TRIAL, 1, false);
        assert_eq!((v, u.remaining(), kept), (Verdict::RateLimited, 0, None));
    }

    #[test]
    fn first_request_opens_the_window_with_limit_minus_one_remaining() {
        let (v, u, c) = decide(Counters::default(), T0 + 5_000, TRIAL);
        assert_eq!(v, Verdict::Allowed);
        assert_eq!((u.limit(), u.remaining(), u.reset_ms()), (30, 29, T0 + 60_000));
        assert_eq!(u.seconds_to_reset(), 55);
        assert_eq!((c.windows[1], c.month_used), (WindowCount { start_ms: T0, used: 1 }, 1));
    }

    #[test]
    fn thirtieth_passes_with_zero_left_and_thirty_first_is_refused_without_consuming() {
        let (out, c) = run(31, Counters::default(), T0 + 1_500, TRIAL);
        assert!(out[..30].iter().all(|(v, _)| *v == Verdict::Allowed));
        let remaining: Vec<u32> = out[..30].iter().map(|(_, u)| u.remaining()).collect();
        assert_eq!(remaining, (0..30).rev().collect::<Vec<_>>());
        let (v, u) = out[30];
        assert_eq!((v, u.remaining(), u.refused_by), (Verdict::RateLimited, 0, Some(Window::Minute)));
        assert_eq!(u.seconds_to_reset(), 59); // 58.5 s left, rounded up
        assert_eq!((c.windows[1].used, c.month_used), (30, 30));
    }

    #[test]
    fn window_rolls_over_at_the_minute_boundary() {
        let (_, c) = run(30, Counters::default(), T0 + 59_999, TRIAL);
        let (v, u, _) = decide(c, T0 + 59_999, TRIAL);
        assert_eq!((v, u.seconds_to_reset()), (Verdict::RateLimited, 1));
        let (v, u, next) = decide(c, T0 + 60_000, TRIAL);
        assert_eq!((v, u.remaining(), u.seconds_to_reset()), (Verdict::Allowed, 29, 60));
        assert_eq!((next.windows[1].start_ms, next.month_used), (T0 + 60_000, 31));
    }

    #[test]
    fn an_override_is_just_another_limit() {
        let five = Limits { per: [None, Some(5), None, None], ..TRIAL };
        let (out, c) = run(6, Counters::default(), T0, five);
        assert_eq!(out[5].0, Verdict::RateLimited);
        assert_eq!(out[4].1.limit(), 5);
        // Raising the limit mid-window lets the key continue where it stands.
        let (v, u, _) = decide(c, T0, TRIAL);
        assert_eq!((v, u.remaining()), (Verdict::Allowed, 24));
    }

    #[test]
    fn quota_is_checked_first_and_resets_with_the_month() {
        let tiny = Limits { per: [None, Some(100), None, None], monthly_quota: Some(3) };
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
        // November: 30 days.
        assert_eq!(h[3], ("ratelimit-policy", "\"minute\";q=30;w=60, \"month\";q=10000;w=2592000".into()));
        assert_eq!(h[4], ("ratelimit", "\"minute\";r=29;t=40".into()));
    }

    /// SPEC §25: `RateLimit-Policy` and `RateLimit` are RFC 9651 Lists of the draft's items (a
    /// policy name as an sf-string with integer parameters), read back by a parser of RFC 9651
    /// (the `sfv` crate), for every mix of windows and a quota.
    #[test]
    fn the_fields_are_structured_fields_an_rfc_9651_parser_reads_back() {
        use sfv::{BareItem, FieldType, ListEntry, Parser};
        let read = |field: &str, params: &[&str]| -> Vec<(String, Vec<i64>)> {
            let list: sfv::List = Parser::new(field).parse().unwrap_or_else(|e| panic!("{field}: {e}"));
            // Serialised again, the same text: nothing the parser had to repair.
            assert_eq!(list.serialize().as_deref(), Some(field));
            list.into_iter()
                .map(|entry| {
                    let ListEntry::Item(item) = entry else { panic!("{field}: an inner list") };
                    let BareItem::String(name) = &item.bare_item else { panic!("{field}: not a string") };
                    let values = params
                        .iter()
                        .map(|p| item.params.get(*p).and_then(BareItem::as_integer).map(i64::from).expect(p))
                        .collect();
                    (name.as_str().to_owned(), values)
                })
                .collect()
        };
        let all = Limits { per: [Some(3), Some(5), Some(100), Some(7)], monthly_quota: Some(999_999_999) };
        let none_monthly = Limits { per: [None, Some(5), None, None], monthly_quota: None };
        let huge = Limits { per: [None, Some(5), None, None], monthly_quota: Some(u64::MAX) };
        for limits in [TRIAL, all, none_monthly, huge] {
            let (_, u, _) = decide(Counters::default(), T0 + 1_500, limits);
            let h: std::collections::HashMap<_, _> = u.headers().into_iter().collect();
            let policies = read(&h["ratelimit-policy"], &["q", "w"]);
            let expected_windows = limits.per.iter().filter(|l| l.is_some()).count();
            assert_eq!(policies.len(), expected_windows + usize::from(limits.monthly_quota.is_some()));
            if let Some(quota) = limits.monthly_quota {
                let quota = quota.min(SF_INTEGER_MAX) as i64;
                assert_eq!(policies.last(), Some(&("month".to_owned(), vec![quota, 2_592_000])));
            }
            let current = read(&h["ratelimit"], &["r", "t"]);
            assert_eq!(current.len(), 1);
            assert!(policies.iter().any(|(name, _)| *name == current[0].0), "{policies:?} {current:?}");
        }
        // The month used up: RateLimit names it, with nothing left until the month ends.
        let tiny = Limits { per: [None, Some(100), None, None], monthly_quota: Some(1) };
        let (_, _, c) = decide(Counters::default(), T0, tiny);
        let (verdict, u, _) = decide(c, T0 + 1_000, tiny);
        assert_eq!(verdict, Verdict::QuotaExceeded);
        let h: std::collections::HashMap<_, _> = u.headers().into_iter().collect();
        let current = read(&h["ratelimit"], &["r", "t"]);
        // 2026-11-29T09:00:01Z to December: 1 day 14:59:59.
        assert_eq!(current, vec![("month".to_owned(), vec![0, 140_399])]);
    }

    /// SPEC §20: several windows at once, each exact; the headers advertise the one closest to
    /// refusing and the policy lists all; a refusal names its window and takes nothing of any.
    #[test]
    fn several_windows_each_exact_and_the_closest_is_advertised() {
        let limits = Limits { per: [Some(3), Some(5), None, Some(7)], monthly_quota: None };
        let mut c = Counters::default();
        let mut verdicts = Vec::new();
        // Three seconds of four requests each: 3 pass in the first second, 2 in the second (the
        // minute is full at 5), none in the third.
        for s in 0..3 {
            for _ in 0..4 {
                let (v, u, next) = decide(c, T0 + s * 1_000 + 10, limits);
                verdicts.push((v, u.refused_by));
                c = next;
            }
        }
        let passed = verdicts.iter().filter(|(v, _)| *v == Verdict::Allowed).count();
        assert_eq!(passed, 5);
        assert_eq!(verdicts[3], (Verdict::RateLimited, Some(Window::Second)));
        assert_eq!(verdicts[11], (Verdict::RateLimited, Some(Window::Minute)));
        assert_eq!((c.windows[0].used, c.windows[1].used, c.windows[3].used), (0, 5, 5));
        // The next minute: the day still has 2.
        let (v, u, c2) = decide(c, T0 + 60_000, limits);
        assert_eq!(v, Verdict::Allowed);
        assert_eq!(u.advertised().map(|(w, u)| (w, u.remaining)), Some((Window::Day, 1)));
        let h = u.headers();
        assert_eq!(h[3].1, "\"second\";q=3;w=1, \"minute\";q=5;w=60, \"day\";q=7;w=86400");
        let t = (Window::Day.start(T0) + 86_400_000 - (T0 + 60_000) + 999) / 1000;
        assert_eq!(h[4].1, format!("\"day\";r=1;t={t}"));
        let (_, _, c3) = decide(c2, T0 + 60_001, limits);
        let (v, u, _) = decide(c3, T0 + 60_002, limits);
        assert_eq!((v, u.refused_by, u.remaining()), (Verdict::RateLimited, Some(Window::Day), 0));
    }

    #[test]
    fn room_is_the_least_of_every_window_and_the_quota() {
        let limits = Limits { per: [Some(10), Some(100), None, None], monthly_quota: Some(8) };
        let (_, _, c) = decide(Counters::default(), T0, limits);
        assert_eq!(c.room(T0, &limits), 7);
        assert_eq!(c.room(T0, &Limits { monthly_quota: None, ..limits }), 9);
        assert_eq!(c.room(T0, &Limits::default()), u64::MAX);
        // Given back while the windows are the same; after the second rolled only the rest.
        let mut back = c;
        back.give_back(1, &c.starts(), c.month_start_ms);
        assert_eq!((back.windows[0].used, back.windows[1].used, back.month_used), (0, 0, 0));
        let mut later = c.at(T0 + 1_000);
        later.give_back(1, &c.starts(), c.month_start_ms);
        assert_eq!((later.windows[0].used, later.windows[1].used, later.month_used), (0, 0, 0));
        let (_, _, mut next) = decide(c, T0 + 1_000, limits);
        next.give_back(1, &c.starts(), c.month_start_ms);
        assert_eq!((next.windows[0].used, next.windows[1].used, next.month_used), (1, 1, 1));
    }

    #[test]
    fn limit_specs_check_and_combine() {
        let plan: LimitSpec =
            serde_json::from_str(r#"{"per_second":20,"per_minute":600,"per_day":200000}"#).unwrap();
        assert_eq!(plan.windows(), [Some(20), Some(600), None, Some(200_000)]);
        assert!(serde_json::from_str::<LimitSpec>(r#"{"per_week":1}"#).is_err());
        let key = LimitSpec { per_minute: Some(700), per_hour: Some(5), ..Default::default() };
        assert_eq!(key.above(&plan), Some(("per_minute", 600)));
        assert_eq!(LimitSpec { per_day: Some(0), ..Default::default() }.zero_field(), Some("per_day"));
        assert_eq!(key.lowered_by(&plan).windows(), [Some(20), Some(600), Some(5), Some(200_000)]);
        assert!(LimitSpec::default().is_empty());
    }
}
