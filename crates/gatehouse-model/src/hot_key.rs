//! `hot-key`: one key at 10,000 requests/s over isolates in several locations, its guard deciding
//! with the real lease code (SPEC §20, docs/internals/model.md).

use std::collections::HashMap;

use gatehouse_core::api_key::{KeyRecord, KeyType, Scope};
use gatehouse_core::lease::{
    accept_give_back, admit, lease_to_isolate, refusal_lease, take_back, Decision, Drawn, GiveBack, Grant,
    LeaseAsk, LeaseBook, Leased, RequestRate, Returned,
};
use gatehouse_core::rate_limit::{Counters, Limits, Usage, Verdict};

use crate::platform::{percentile, round_trip_us, Rng, Scheduler, Server, T0_MS};

/// The hot-key scenario's parameters.
pub struct HotKey {
    pub seed: u64,
    requests_per_second: f64,
    limit_per_minute: u32,
    isolates: usize,
    /// Round trip from each location to the key's guard (ms); isolates are spread over them.
    round_trips_ms: Vec<f64>,
    /// Requests arrive at an isolate in bursts of 1 to 2 × this many at once.
    mean_burst: f64,
    /// How long the key's guard takes per call (µs): 1,000 calls a second at most.
    service_us: i64,
    lease_above_per_second: u32,
    /// Simulated time (ms) and when the key is revoked.
    duration_ms: i64,
    revoke_at_ms: i64,
    /// A lease rule that grants what is asked for, whatever is left: the model must catch it.
    pub broken_rule: bool,
}

impl HotKey {
    pub fn full() -> Self {
        HotKey {
            seed: 1,
            requests_per_second: 10_000.0,
            limit_per_minute: 300_000,
            isolates: 20,
            round_trips_ms: vec![2.0, 10.0, 25.0, 40.0, 50.0],
            mean_burst: 10.0,
            service_us: 1_000,
            lease_above_per_second: 100,
            duration_ms: 183_000,
            revoke_at_ms: 180_500,
            broken_rule: false,
        }
    }

    /// One window and a revocation: the same model in a few seconds, for scripts/test.
    pub fn quick() -> Self {
        HotKey { duration_ms: 63_000, revoke_at_ms: 60_500, ..Self::full() }
    }

    pub fn duration_seconds(&self) -> f64 {
        self.duration_ms as f64 / 1000.0
    }
}

/// What travels to the key's guard.
enum ToGuard {
    Authorize { isolate: usize, request: usize, ask: LeaseAsk },
    GiveBack { isolate: usize, give_back: Vec<GiveBack> },
    Renew { isolate: usize, ask: LeaseAsk },
}

/// The guard's answer to an isolate.
#[allow(clippy::large_enum_variant)] // one per simulated call, matched at once
enum Answer {
    Decided { verdict: Verdict, lease: Option<Grant>, decided_ms: i64 },
    Denied,
}

enum Event {
    /// A burst of requests reaches an isolate.
    Burst {
        isolate: usize,
        size: usize,
    },
    /// A request at an isolate (again, while it waits for a lease another request asks for).
    Request {
        isolate: usize,
        arrived_us: i64,
    },
    /// A message reaches the guard's queue.
    AtGuard(ToGuard),
    /// The guard finished serving a message.
    Served(ToGuard),
    /// The guard's answer reaches the isolate.
    Reply {
        isolate: usize,
        request: usize,
        ask: LeaseAsk,
        answer: Answer,
    },
    /// The guard's answer to a renewal reaches the isolate.
    Renewed {
        isolate: usize,
        ask: LeaseAsk,
        revoked: bool,
        lease: Option<Grant>,
    },
    /// An isolate's after-response work wakes to give back what ended.
    GiveBackDue {
        isolate: usize,
    },
    Revoke,
}

/// The key's guard as the model runs it: one single-threaded server, the real decision code.
struct Guard {
    key: KeyRecord,
    limits: Limits,
    counters: Counters,
    /// Leases to isolates, what they drew from, and whether they came back.
    leases: HashMap<String, (Grant, Drawn, Returned)>,
    rate: RequestRate,
    server: Server,
    grants: u64,
}

struct Isolate {
    book: LeaseBook,
    round_trip_us: i64,
    give_back_waiting: bool,
}

/// What one run measured.
pub struct Report {
    admitted_per_window: Vec<u64>,
    pub over_limit_admissions: u64,
    /// Leases the guard made to isolates, and the largest such row as the guard stores it
    /// (`isolate_leases`): the soak model's rate and size of that table.
    pub leases_made: u64,
    pub lease_row_bytes: u64,
    max_object_calls_per_second: u64,
    revocation_seconds: f64,
    added_ms: Vec<f64>,
    requests: u64,
}

pub fn hot_key(p: &HotKey) -> Report {
    let mut rng = Rng(p.seed);
    let key_hash = "hot";
    let key = KeyRecord::fresh(
        "key_hot",
        "prj_model",
        KeyType::Server,
        "model",
        key_hash.into(),
        "gh_s_model".into(),
        0,
    );
    let mut guard = Guard {
        key: key.clone(),
        limits: Limits::per_minute(p.limit_per_minute),
        counters: Counters::default(),
        leases: HashMap::new(),
        rate: RequestRate::default(),
        server: Server::default(),
        grants: 0,
    };
    let mut isolates: Vec<Isolate> = (0..p.isolates)
        .map(|i| Isolate {
            book: LeaseBook::default(),
            round_trip_us: round_trip_us(&p.round_trips_ms, i),
            give_back_waiting: false,
        })
        .collect();
    let mut events = Scheduler::default();
    // Bursts at each isolate: its share of the rate, in bursts of random size at exponential gaps.
    let per_isolate = p.requests_per_second / p.isolates as f64;
    let mut first_bursts = Vec::new();
    for isolate in 0..p.isolates {
        let size = rng.burst(p.mean_burst);
        let at = rng.burst_gap_us(size, per_isolate);
        first_bursts.push((at, isolate, size));
    }
    for (at, isolate, size) in first_bursts {
        events.push(at, Event::Burst { isolate, size });
    }
    events.push(p.revoke_at_ms * 1000, Event::Revoke);

    let scope = Scope::SelfInfo;
    let windows = (p.duration_ms / 60_000 + 1) as usize;
    let mut report = Report {
        admitted_per_window: vec![0; windows],
        over_limit_admissions: 0,
        max_object_calls_per_second: 0,
        revocation_seconds: 0.0,
        added_ms: Vec::new(),
        requests: 0,
        leases_made: 0,
        lease_row_bytes: 0,
    };
    let mut arrived_us: Vec<i64> = Vec::new();
    let mut last_admission_after_revoke_ms = p.revoke_at_ms;
    let admit_at = |report: &mut Report, at_ms: i64, last: &mut i64| {
        let w = (at_ms / 60_000) as usize;
        if w < report.admitted_per_window.len() {
            report.admitted_per_window[w] += 1;
        }
        if at_ms >= p.revoke_at_ms {
            *last = (*last).max(at_ms);
        }
    };

    while let Some((now_us, event)) = events.pop() {
        if now_us > p.duration_ms * 1000 {
            break;
        }
        let now_ms = T0_MS + now_us / 1000;
        match event {
            Event::Burst { isolate, size } => {
                for _ in 0..size {
                    report.requests += 1;
                    events.push(now_us, Event::Request { isolate, arrived_us: now_us });
                }
                let next_size = rng.burst(p.mean_burst);
                let gap = rng.burst_gap_us(next_size, per_isolate);
                events.push(now_us + gap.max(1), Event::Burst { isolate, size: next_size });
                schedule_give_back(&mut isolates[isolate], isolate, now_ms, &mut events);
            }
            Event::Request { isolate, arrived_us: arrival } => {
                // As `authenticate`: the lease, else wait (polling every 2 ms, at most 1 s) for the
                // answer another request is getting when it will likely bring a lease, else ask.
                let iso = &mut isolates[isolate];
                match iso.book.admit(key_hash, scope, now_ms) {
                    Some(Leased::Admitted(..)) => {
                        report.added_ms.push((now_us - arrival) as f64 / 1000.0);
                        admit_at(&mut report, now_us / 1000, &mut last_admission_after_revoke_ms);
                    }
                    Some(Leased::Refused(..) | Leased::Denied(..)) => {
                        report.added_ms.push((now_us - arrival) as f64 / 1000.0)
                    }
                    None if now_us - arrival < 1_000_000
                        && iso.book.should_wait(key_hash, now_ms, p.lease_above_per_second) =>
                    {
                        events.push(now_us + 2_000, Event::Request { isolate, arrived_us: arrival });
                    }
                    None => {
                        let ask = iso.book.ask(key_hash, now_ms, 1);
                        let request = arrived_us.len();
                        arrived_us.push(arrival);
                        let at = now_us + iso.round_trip_us / 2;
                        events.push(at, Event::AtGuard(ToGuard::Authorize { isolate, request, ask }));
                    }
                }
                // The after-response work asks for the renewals the lease hits wanted.
                for (_, ask) in iso.book.take_renewals(now_ms) {
                    let at = now_us + iso.round_trip_us / 2;
                    events.push(at, Event::AtGuard(ToGuard::Renew { isolate, ask }));
                }
                schedule_give_back(&mut isolates[isolate], isolate, now_ms, &mut events);
            }
            Event::AtGuard(message) => {
                // One call at a time: a message waits for the ones before it.
                let done = guard.server.queue(now_us, p.service_us);
                events.push(done, Event::Served(message));
            }
            Event::Served(message) => {
                guard.server.count_call(now_us);
                match message {
                    ToGuard::GiveBack { isolate, give_back } => {
                        guard.take_back(now_ms, &give_back);
                        isolates[isolate].book.settled(key_hash, &give_back);
                    }
                    ToGuard::Renew { isolate, ask } => {
                        let (revoked, lease) = guard.renew(now_ms, &ask, p);
                        let at = now_us + isolates[isolate].round_trip_us / 2;
                        events.push(at, Event::Renewed { isolate, ask, revoked, lease });
                    }
                    ToGuard::Authorize { isolate, request, ask } => {
                        let answer = guard.authorize(now_ms, &ask, p);
                        let at = now_us + isolates[isolate].round_trip_us / 2;
                        events.push(at, Event::Reply { isolate, request, ask, answer });
                    }
                }
            }
            Event::Reply { isolate, request, ask, answer } => {
                report.added_ms.push((now_us - arrived_us[request]) as f64 / 1000.0);
                isolates[isolate].book.answered(key_hash, &ask, true);
                if let Answer::Denied = answer {
                    isolates[isolate].book.deny(
                        key_hash,
                        guard.key.clone(),
                        now_ms,
                        p.lease_above_per_second,
                    );
                }
                if let Answer::Decided { verdict, lease, decided_ms } = answer {
                    if verdict == Verdict::Allowed {
                        admit_at(&mut report, decided_ms - T0_MS, &mut last_admission_after_revoke_ms);
                    }
                    if let Some(grant) = lease {
                        isolates[isolate].book.hold(key_hash, key.clone(), &grant, ask.asked);
                    }
                }
                schedule_give_back(&mut isolates[isolate], isolate, now_ms, &mut events);
            }
            Event::Renewed { isolate, ask, revoked, lease } => {
                let key = (!revoked).then(|| key.clone());
                isolates[isolate].book.renewed(key_hash, &ask, key, lease.as_ref());
                schedule_give_back(&mut isolates[isolate], isolate, now_ms, &mut events);
            }
            Event::GiveBackDue { isolate } => {
                let iso = &mut isolates[isolate];
                iso.give_back_waiting = false;
                for (_, give_back) in iso.book.ended(now_ms) {
                    let at = now_us + iso.round_trip_us / 2;
                    events.push(at, Event::AtGuard(ToGuard::GiveBack { isolate, give_back }));
                }
                iso.book.give_back_done();
                schedule_give_back(iso, isolate, now_ms, &mut events);
            }
            Event::Revoke => guard.key.revoked_at = Some(now_ms),
        }
    }
    let limit = u64::from(p.limit_per_minute);
    report.over_limit_admissions = report.admitted_per_window.iter().map(|&n| n.saturating_sub(limit)).sum();
    report.max_object_calls_per_second = guard.server.max_calls_per_second(..);
    if std::env::var("MODEL_TRACE").is_ok() {
        let seconds: Vec<_> = guard.server.calls().iter().collect();
        eprintln!("calls per second: {seconds:?}");
    }
    report.revocation_seconds = (last_admission_after_revoke_ms - p.revoke_at_ms) as f64 / 1000.0;
    report.leases_made = guard.leases.len() as u64;
    report.lease_row_bytes = guard.leases.values().map(lease_row_bytes).max().unwrap_or_default();
    report
}

/// A lease row as `isolate_leases` keeps it: grant id, grant, returned, drawn, keep-until.
fn lease_row_bytes((grant, drawn, returned): &(Grant, Drawn, Returned)) -> u64 {
    let len = |text: serde_json::Result<String>| text.map_or(0, |s| s.len());
    let values = [
        grant.grant_id.len(),
        len(serde_json::to_string(grant)),
        len(serde_json::to_string(returned)),
        len(serde_json::to_string(drawn)),
        8,
    ];
    gatehouse_core::retention::row_bytes(&values)
}

/// An isolate's after-response work waits for its first lease to end, then gives back.
fn schedule_give_back(iso: &mut Isolate, isolate: usize, now_ms: i64, events: &mut Scheduler<Event>) {
    if iso.give_back_waiting {
        return;
    }
    if let Some(at) = iso.book.give_back_at() {
        iso.give_back_waiting = true;
        events.push((at.max(now_ms) - T0_MS) * 1000 + 5_000, Event::GiveBackDue { isolate });
    }
}

impl Guard {
    /// The decision the key's guard makes (src/objects/key_guard.rs without the levels above a
    /// key): the same calls of `gatehouse_core::lease`, in the same order.
    fn authorize(&mut self, now_ms: i64, ask: &LeaseAsk, p: &HotKey) -> Answer {
        self.take_back(now_ms, &ask.give_back);
        if self.key.refusal(now_ms).is_some() {
            return Answer::Denied;
        }
        let hot = self.is_hot(now_ms, ask, p);
        match admit(self.counters, now_ms, self.limits, 1, true, &[], &mut []) {
            Decision::Decided { verdict, counters: Some(next), .. } => {
                self.grants += 1;
                let grant_id = format!("lease-{}", self.grants);
                let leased = match p.broken_rule {
                    true => hot.then(|| broken_lease(next, now_ms, &self.limits, &grant_id, ask.want)),
                    false => {
                        lease_to_isolate(next, now_ms, &self.limits, &[], &mut [], &grant_id, ask.want, hot)
                    }
                };
                let (next, lease) = match leased {
                    Some((grant, after, drawn)) => {
                        self.leases
                            .insert(grant.grant_id.clone(), (grant.clone(), drawn, Returned::default()));
                        (after, Some(grant))
                    }
                    None => (next, None),
                };
                self.counters = next;
                Answer::Decided { verdict, lease, decided_ms: now_ms }
            }
            Decision::Decided { verdict, usage, counters: None } => {
                let lease = hot.then(|| refusal_lease(now_ms, verdict, &usage));
                Answer::Decided { verdict, lease, decided_ms: now_ms }
            }
            Decision::NeedsCredits(_) => unreachable!("a key without levels above it needs no credits"),
        }
    }

    fn is_hot(&mut self, now_ms: i64, ask: &LeaseAsk, p: &HotKey) -> bool {
        let seen = self.rate.count(now_ms);
        ask.is_hot(seen, p.lease_above_per_second)
    }

    /// A renewal (`KeyGuardObject::renew`): give-backs, then a lease without a request.
    fn renew(&mut self, now_ms: i64, ask: &LeaseAsk, p: &HotKey) -> (bool, Option<Grant>) {
        self.take_back(now_ms, &ask.give_back);
        if self.key.refusal(now_ms).is_some() {
            return (true, None);
        }
        if !self.is_hot(now_ms, ask, p) {
            return (false, None);
        }
        self.grants += 1;
        let grant_id = format!("lease-{}", self.grants);
        let leased = match p.broken_rule {
            true => Some(broken_lease(self.counters, now_ms, &self.limits, &grant_id, ask.want)),
            false => {
                lease_to_isolate(self.counters, now_ms, &self.limits, &[], &mut [], &grant_id, ask.want, true)
            }
        };
        match leased {
            Some((grant, after, drawn)) => {
                self.leases.insert(grant.grant_id.clone(), (grant.clone(), drawn, Returned::default()));
                self.counters = after;
                (false, Some(grant))
            }
            None => (false, None),
        }
    }

    fn take_back(&mut self, now_ms: i64, give_back: &[GiveBack]) {
        for back in give_back {
            if let Some((grant, drawn, returned)) = self.leases.get_mut(&back.grant_id) {
                let credits = accept_give_back(&mut Counters::default(), now_ms, grant, returned, back);
                take_back(&mut self.counters, now_ms, grant, drawn, &[], &mut [], credits);
            }
        }
    }
}

/// The broken rule `--broken-rule` stands in for `lease_to_isolate`: it grants what is asked,
/// whatever is left of the window.
fn broken_lease(
    next: Counters,
    now_ms: i64,
    limits: &Limits,
    grant_id: &str,
    want: u32,
) -> (Grant, Counters, Drawn) {
    let mut after = next.at(now_ms);
    for w in &mut after.windows {
        w.used += want;
    }
    let usage: Usage = gatehouse_core::rate_limit::usage(after, now_ms, limits, None);
    let grant = Grant {
        grant_id: grant_id.into(),
        credits: want,
        until_ms: now_ms + gatehouse_core::lease::ISOLATE_LEASE_MS,
        starts: after.starts(),
        month_start_ms: after.month_start_ms,
        verdict: Verdict::Allowed,
        usage,
        limits: Default::default(),
    };
    (grant, after, Vec::new())
}

impl Report {
    /// The least share of its limit a window admitted, of the windows the demand filled whole
    /// (before the revocation).
    fn admitted_share(&self, p: &HotKey) -> f64 {
        let full = (p.revoke_at_ms / 60_000) as usize;
        self.admitted_per_window[..full]
            .iter()
            .map(|&n| n as f64 / f64::from(p.limit_per_minute))
            .fold(f64::INFINITY, f64::min)
    }

    pub fn missed(&self, p: &HotKey) -> Vec<String> {
        let mut missed = Vec::new();
        if self.over_limit_admissions > 0 {
            missed.push(format!("{} admissions over the limit", self.over_limit_admissions));
        }
        if self.admitted_share(p) < 0.99 {
            missed.push(format!("admitted share at 2x {:.4} < 0.99", self.admitted_share(p)));
        }
        if self.max_object_calls_per_second > 500 {
            missed.push(format!("{} object calls in a second > 500", self.max_object_calls_per_second));
        }
        if self.revocation_seconds > 1.0 {
            missed.push(format!("revocation took {} s > 1", self.revocation_seconds));
        }
        missed
    }

    pub fn json(&self, p: &HotKey) -> serde_json::Value {
        let locations = p.round_trips_ms.len().min(p.isolates);
        serde_json::json!({
            "requests_per_second": p.requests_per_second,
            "limit_per_minute": p.limit_per_minute,
            "isolates": p.isolates,
            "locations": locations,
            "seed": p.seed,
            "simulated_seconds": p.duration_ms / 1000,
            "requests": self.requests,
            "admitted_per_window": self.admitted_per_window,
            "over_limit_admissions": self.over_limit_admissions,
            "admitted_share_at_2x": (self.admitted_share(p) * 10_000.0).round() / 10_000.0,
            "max_object_calls_per_second": self.max_object_calls_per_second,
            "revocation_seconds": self.revocation_seconds,
            "p99_added_ms": (percentile(&self.added_ms, 0.99) * 10.0).round() / 10.0,
            "broken_rule": p.broken_rule,
        })
    }
}
