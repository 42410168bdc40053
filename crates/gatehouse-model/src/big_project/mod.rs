//! `big-project` (SPEC §20 "Big projects"): 100,000 events/s into one project's de-duplication
//! namespace, whose ledger shards split as the rate ramps up — each shard deciding with the real
//! `gatehouse_core::ledger::shards` code — and 10,000 audit rows/s of 2,000 projects spread over D1
//! databases by the real `gatehouse_core::audit::audit_database` (docs/internals/model.md).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use gatehouse_core::encoding::uuid_v4;
use gatehouse_core::events::Reserved;
use gatehouse_core::ledger::forward::{ForwardTo, Forwarded};
use gatehouse_core::ledger::shards::{
    check_here, id_hash, reserve_here, Checked, LedgerLayout, MemoryShard, ParentChecks, Shard, ShardAnswer,
    ShardMemory, ShardRules, MAX_LEVEL, SPLIT_ABOVE_PER_SECOND,
};

use crate::audit_spread::{audit_spread, AuditLoad, AuditReport};
use crate::platform::{percentile, round_trip_us, Rng, Scheduler, Server, T0_MS};

mod sim;

/// The big-project scenario's parameters.
pub struct BigProject {
    pub seed: u64,
    /// Children that do not ask their parent (`ask_parent` = `None`): the model must catch it.
    pub broken_rule: bool,
    /// Split shards forward reserves to their children (`core::ledger::forward`); off: they
    /// answer `moved` and the isolate goes a level down per round, as before.
    pub forwarding: bool,
    pub quick: bool,
    /// A split storm: shards split above 2 calls a second (the adversarial run's setting).
    pub split_storm: bool,
    namespace: String,
    /// `/v1/track` requests a second at full rate, each a batch of `batch` events.
    requests_per_second: f64,
    batch: usize,
    isolates: usize,
    /// Round trip from each location to the ledger's objects (ms); isolates are spread over them.
    round_trips_ms: Vec<f64>,
    /// Round trip between two ledger objects (a child asking its parent), ms.
    object_round_trip_ms: f64,
    /// Requests arrive at an isolate in bursts of 1 to 2 × this many at once.
    mean_burst: f64,
    /// The rate grows from `ramp_from` of the full rate to all of it over `ramp_ms`.
    ramp_from: f64,
    ramp_ms: i64,
    /// Object calls, latencies and rates are measured from this second on (after the ramp).
    measure_from_s: i64,
    duration_ms: i64,
    /// What one call costs an object (µs): a fixed part and a part per id; going on after its
    /// parent answered costs the part per id again.
    call_us: i64,
    per_id_us: i64,
    /// An object refuses a call that arrives with more than this much work (µs) queued before it.
    overload_us: i64,
    /// The share of a batch's events that retry an id sent before; of those, the share sent again
    /// within 200 ms (often while the first is in flight), the others 1–10 s later.
    retry_share: f64,
    quick_retry_share: f64,
    split_above: u32,
    window_ms: i64,
    /// From a request's last ledger answer to its confirms leaving (the events queue send), µs.
    queue_send_us: i64,
    pub audit: AuditLoad,
}

impl BigProject {
    pub fn full() -> Self {
        BigProject {
            seed: 1,
            broken_rule: false,
            forwarding: true,
            quick: false,
            split_storm: false,
            namespace: "events:prj_big:server".into(),
            requests_per_second: 1_025.0,
            batch: 100,
            isolates: 20,
            round_trips_ms: vec![2.0, 10.0, 25.0, 40.0, 50.0],
            object_round_trip_ms: 5.0,
            mean_burst: 2.0,
            ramp_from: 0.05,
            ramp_ms: 8_000,
            measure_from_s: 10,
            duration_ms: 30_000,
            call_us: 1_000,
            per_id_us: 10,
            overload_us: 1_000_000,
            retry_share: 0.05,
            quick_retry_share: 0.2,
            split_above: SPLIT_ABOVE_PER_SECOND,
            window_ms: 172_800_000,
            queue_send_us: 5_000,
            audit: AuditLoad::full(),
        }
    }

    /// A shorter ramp and run, for scripts/test.
    pub fn quick() -> Self {
        BigProject { quick: true, ramp_ms: 3_000, measure_from_s: 4, duration_ms: 5_000, ..Self::full() }
    }

    /// Every shard splits above 2 calls a second, so the tree grows to its deepest level while
    /// the requests arrive (SPEC §23's split storm, at 10,000 events a second).
    pub fn split_storm(&mut self) {
        self.split_storm = true;
        self.split_above = 2;
        self.requests_per_second = 100.0;
    }

    /// The share of the full rate at `now_us`.
    fn ramp(&self, now_us: i64) -> f64 {
        let done = (now_us as f64 / (self.ramp_ms * 1000) as f64).min(1.0);
        self.ramp_from + (1.0 - self.ramp_from) * done
    }

    fn measured(&self, at_us: i64) -> bool {
        at_us >= self.measure_from_s * 1_000_000 && at_us < self.duration_ms * 1000
    }
}

/// A platform error: the object had too much queued to take the call.
#[derive(Debug, Clone, Copy)]
struct Overloaded;

type Checking = Result<Checked, Overloaded>;

/// One ledger shard's object: the real `MemoryShard` and `ParentChecks` behind one
/// single-threaded server.
struct ShardObject {
    shard: Shard,
    name: String,
    memory: Rc<MemoryShard>,
    checks: Rc<ParentChecks<Overloaded>>,
    server: Server,
    refused: u64,
}

/// What travels to a shard's object.
enum Call {
    Reserve {
        to: ReplyTo,
        ids: Vec<String>,
    },
    /// A child asking what this shard (and its ancestors) hold; `asker` waits for the answer.
    Check {
        ids: Vec<String>,
        asker: u64,
    },
    Confirm {
        owner: String,
        ids: Vec<String>,
        tries: u32,
    },
    Release {
        owner: String,
        ids: Vec<String>,
        tries: u32,
    },
}

/// Who asked for a reserve: an isolate's request, or a split shard forwarding (its
/// [`Forwarding`], and which of its children this is).
#[derive(Debug, Clone, Copy)]
enum ReplyTo {
    Isolate(usize),
    Forward { forward: usize, child: usize },
}

/// A reserve a split shard forwarded to its children (`core::ledger::forward`), waiting for their
/// answers.
struct Forwarding {
    object: usize,
    plan: ForwardTo,
    answers: Vec<Option<ShardAnswer>>,
    failed: bool,
    to: ReplyTo,
    ids: Vec<String>,
}

impl Call {
    fn ids(&self) -> usize {
        match self {
            Call::Reserve { ids, .. }
            | Call::Check { ids, .. }
            | Call::Confirm { ids, .. }
            | Call::Release { ids, .. } => ids.len(),
        }
    }
}

enum Event {
    /// A burst of `/v1/track` requests reaches an isolate.
    Burst {
        isolate: usize,
        size: usize,
    },
    /// A call reaches an object's queue.
    Arrive {
        object: usize,
        call: Call,
    },
    /// The object's turn for the call ends: it runs.
    Serve {
        object: usize,
        call: Call,
    },
    /// A parent's answer to a check reaches the child, which goes on in its next turn.
    Checked {
        task: u64,
        answer: Checking,
    },
    Resume {
        task: u64,
    },
    /// A child's answer to a forwarded reserve reaches the shard that forwarded it.
    Forwarded {
        forward: usize,
        child: usize,
        answer: Result<ShardAnswer, Overloaded>,
    },
    /// A shard's answer to a reserve reaches the isolate.
    Reply {
        track: usize,
        object: usize,
        ids: Vec<String>,
        answer: Result<ShardAnswer, Overloaded>,
    },
}

/// Where a parent's answer goes: the check `ParentChecks` sends stores the ids it asks about and
/// waits until the model delivers the answer.
#[derive(Default)]
struct ParentLink {
    asked: RefCell<Option<Vec<String>>>,
    answer: RefCell<Option<Checking>>,
}

struct ParentAnswer(Rc<ParentLink>);

impl Future for ParentAnswer {
    type Output = Checking;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Checking> {
        match self.0.answer.borrow_mut().take() {
            Some(answer) => Poll::Ready(answer),
            None => Poll::Pending,
        }
    }
}

/// The object's `ask_parent`, as the Durable Object's: through its `ParentChecks`.
fn ask_parent(
    checks: &Rc<ParentChecks<Overloaded>>,
    link: &Rc<ParentLink>,
    now_ms: i64,
) -> impl FnOnce(Vec<String>) -> Pin<Box<dyn Future<Output = Checking>>> {
    let (checks, link) = (checks.clone(), link.clone());
    move |ids| {
        Box::pin(async move {
            let send = |asked| {
                *link.asked.borrow_mut() = Some(asked);
                ParentAnswer(link.clone())
            };
            checks.check(ids, now_ms, send).await
        })
    }
}

/// Wakes a task: it goes on in its object's next turn.
struct TaskWaker {
    task: u64,
    woken: Arc<Mutex<Vec<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.woken.lock().expect("one thread").push(self.task);
    }
}

enum Done {
    Reserved(Result<ShardAnswer, Overloaded>),
    Checked(Checking),
}

/// A call an object is running: `reserve_here` or `check_here`, suspended while it waits for its
/// parent or for its turn in a check (the object serves other calls meanwhile, as a Durable
/// Object does while it awaits a fetch).
struct Task {
    object: usize,
    ids: usize,
    future: Pin<Box<dyn Future<Output = Done>>>,
    link: Rc<ParentLink>,
    waker: Waker,
    then: Then,
}

/// Whom a task answers.
enum Then {
    Reserve { to: ReplyTo, ids: Vec<String> },
    Child { task: u64 },
}

struct Isolate {
    layout: LedgerLayout,
    round_trip_us: i64,
}

/// One `/v1/track` request, as `accept_events` handles it: a round of reserves over the shards
/// its isolate knows, the ids of shards that answered `moved` again to their children, then the
/// confirms (or, when a call failed, the releases and a 500).
struct Track {
    isolate: usize,
    owner: String,
    arrived_us: i64,
    /// Its ids below this number were sent before: retries.
    first_new: u64,
    events: usize,
    waiting: usize,
    rounds: u8,
    /// Reserve calls it made (every round).
    calls: usize,
    moved: Vec<String>,
    failed: bool,
    attempted: Vec<(usize, Vec<String>)>,
    reserved: Vec<(usize, Vec<String>)>,
    /// Per id: its number, whether it repeats an earlier send, the decision and when it was made.
    decisions: Vec<(u64, bool, Reserved, i64)>,
}

/// The event ids: each a UUID v4 whose last 48 bits are its number, so the model knows it again.
#[derive(Default)]
struct Ids {
    made: u64,
    /// Per id: how many requests had it accepted (fresh and sent to the queue).
    accepted: Vec<u8>,
    /// Per id: when a confirm of it was first served (`i64::MAX`: not yet).
    confirmed_us: Vec<i64>,
    /// First sends of the last 10 s: (when, id), oldest first.
    sent: VecDeque<(i64, u64)>,
}

impl Ids {
    fn name(n: u64) -> String {
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        random[10..].copy_from_slice(&n.to_be_bytes()[2..]);
        uuid_v4(random)
    }

    fn number(id: &str) -> u64 {
        u64::from_str_radix(&id[24..], 16).expect("a model id")
    }

    fn fresh(&mut self, now_us: i64) -> u64 {
        let n = self.made;
        self.made += 1;
        self.accepted.push(0);
        self.confirmed_us.push(i64::MAX);
        self.sent.push_back((now_us, n));
        while self.sent.front().is_some_and(|(at, _)| *at < now_us - 10_000_000) {
            self.sent.pop_front();
        }
        n
    }

    /// One of the ids first sent between `ago_us` (a range) before now, each as likely (`None`
    /// when none was).
    fn sent_before(&self, now_us: i64, ago_us: std::ops::Range<i64>, rng: &mut Rng) -> Option<u64> {
        let from = self.sent.partition_point(|(at, _)| *at < now_us - ago_us.end);
        let to = self.sent.partition_point(|(at, _)| *at <= now_us - ago_us.start);
        let i = from + (rng.unit() * to.saturating_sub(from) as f64) as usize;
        (i < to).then(|| self.sent[i].1)
    }
}

/// What the run counted: requests, events and latencies of the measured seconds; the decisions
/// (of the requests answered 202) of the whole run.
#[derive(Default)]
struct Stats {
    requests: u64,
    failed_requests: u64,
    events_offered: u64,
    events_decided: u64,
    repeats: u64,
    duplicates: u64,
    in_flight: u64,
    /// Ids answered `in_flight` more than 1 s after their first send was confirmed.
    in_flight_after_confirm: u64,
    duplicates_accepted: u64,
    /// Ids answered `duplicate` (checked at the end: each must have been accepted).
    answered_duplicate: Vec<u64>,
    moved: u64,
    forwarded: u64,
    max_calls_per_request: usize,
    added_ms: Vec<f64>,
}

struct Sim<'a> {
    p: &'a BigProject,
    rng: Rng,
    events: Scheduler<Event>,
    objects: Vec<ShardObject>,
    by_shard: HashMap<Shard, usize>,
    by_name: HashMap<String, usize>,
    forwards: Vec<Forwarding>,
    tasks: HashMap<u64, Task>,
    tasks_made: u64,
    woken: Arc<Mutex<Vec<u64>>>,
    isolates: Vec<Isolate>,
    tracks: Vec<Track>,
    ids: Ids,
    stats: Stats,
}

/// What one run measured.
pub struct Report {
    stats: Stats,
    false_duplicates: u64,
    shards_in_use: usize,
    objects: usize,
    levels: u8,
    max_calls: u64,
    busiest: String,
    max_calls_ramp: u64,
    busiest_ramp: String,
    max_calls_in_use: u64,
    refused_calls: u64,
    audit: AuditReport,
}

pub fn big_project(p: &BigProject) -> Report {
    let mut sim = Sim {
        p,
        rng: Rng(p.seed),
        events: Scheduler::default(),
        objects: Vec::new(),
        by_shard: HashMap::new(),
        by_name: HashMap::new(),
        forwards: Vec::new(),
        tasks: HashMap::new(),
        tasks_made: 0,
        woken: Arc::default(),
        isolates: (0..p.isolates)
            .map(|i| Isolate {
                layout: LedgerLayout::default(),
                round_trip_us: round_trip_us(&p.round_trips_ms, i),
            })
            .collect(),
        tracks: Vec::new(),
        ids: Ids::default(),
        stats: Stats::default(),
    };
    for isolate in 0..p.isolates {
        let size = sim.rng.burst(p.mean_burst);
        let at = sim.rng.burst_gap_us(size, p.requests_per_second * p.ramp(0) / p.isolates as f64);
        sim.events.push(at, Event::Burst { isolate, size });
    }
    while let Some((now_us, event)) = sim.events.pop() {
        sim.on(now_us, event);
    }
    sim.report()
}

/// The after-response work's pause before another try: 100 ms, 200 ms, … at most 5 s.
fn retry_delay_us(tries: u32) -> i64 {
    (100_000i64 << tries.min(6)).min(5_000_000)
}

impl Report {
    fn measured_seconds(p: &BigProject) -> f64 {
        (p.duration_ms / 1000 - p.measure_from_s) as f64
    }

    fn events_per_second(&self, p: &BigProject) -> f64 {
        (self.stats.events_decided as f64 / Self::measured_seconds(p)).round()
    }

    pub fn missed(&self, p: &BigProject) -> Vec<String> {
        let mut missed = Vec::new();
        if self.stats.duplicates_accepted > 0 {
            missed.push(format!("{} duplicates accepted", self.stats.duplicates_accepted));
        }
        if self.false_duplicates > 0 {
            missed.push(format!("{} ids answered duplicate but never accepted", self.false_duplicates));
        }
        if self.stats.in_flight_after_confirm > 0 {
            let n = self.stats.in_flight_after_confirm;
            missed.push(format!("{n} ids answered in flight more than 1 s after their first was confirmed"));
        }
        // A split storm costs latency, never a failed request; a batch's calls from the worker
        // are at most one per id, whatever the depth of the tree (SPEC §23).
        if self.stats.failed_requests > 0 {
            missed.push(format!("{} requests failed", self.stats.failed_requests));
        }
        if self.stats.max_calls_per_request > p.batch {
            let n = self.stats.max_calls_per_request;
            missed.push(format!("a request made {n} ledger calls > {} (its batch)", p.batch));
        }
        if p.quick || p.split_storm {
            return missed;
        }
        if self.events_per_second(p) < 100_000.0 {
            missed.push(format!("{} events/s < 100,000", self.events_per_second(p)));
        }
        if self.audit.rows_per_second < 10_000.0 {
            missed.push(format!("{} audit rows/s < 10,000", self.audit.rows_per_second));
        }
        if self.max_calls > 500 {
            missed.push(format!("{} calls in a second on {} > 500", self.max_calls, self.busiest));
        }
        if self.audit.max_d1_gb > p.audit.max_gb {
            missed.push(format!("an audit database of {} GB > {}", self.audit.max_d1_gb, p.audit.max_gb));
        }
        missed
    }

    pub fn json(&self, p: &BigProject) -> serde_json::Value {
        let s = &self.stats;
        let round = |x: f64, digits: i32| (x * 10f64.powi(digits)).round() / 10f64.powi(digits);
        let mut report = serde_json::json!({
            "seed": p.seed,
            "simulated_seconds": p.duration_ms / 1000,
            "measured_from_second": p.measure_from_s,
            "quick": p.quick,
            "broken_rule": p.broken_rule,
            "forwarding": p.forwarding,
            "split_storm": p.split_storm,
            "events_per_second": self.events_per_second(p),
            "events_offered_per_second": (s.events_offered as f64 / Self::measured_seconds(p)).round(),
            "track_requests": s.requests,
            "failed_requests": s.failed_requests,
            "batch": p.batch,
            "isolates": p.isolates,
            "ledger_shards": self.shards_in_use,
            "ledger_objects": self.objects,
            "ledger_levels": self.levels,
            "moved_answers": s.moved,
            "forwarded_answers": s.forwarded,
            "max_object_calls_per_request": s.max_calls_per_request,
            "max_object_calls_per_second": self.max_calls,
            "busiest_object": self.busiest,
            "max_calls_per_second_of_a_shard_in_use": self.max_calls_in_use,
            "max_object_calls_per_second_in_ramp": self.max_calls_ramp,
            "busiest_object_in_ramp": self.busiest_ramp,
            "refused_calls": self.refused_calls,
        });
        let more = serde_json::json!({
            // Of the requests answered 202 (`null`: none was).
            "p50_added_ms": (!s.added_ms.is_empty()).then(|| round(percentile(&s.added_ms, 0.5), 1)),
            "p99_added_ms": (!s.added_ms.is_empty()).then(|| round(percentile(&s.added_ms, 0.99), 1)),
            "repeated_events": s.repeats,
            "answered_duplicate": s.duplicates,
            "answered_in_flight": s.in_flight,
            "in_flight_after_confirm": s.in_flight_after_confirm,
            "duplicates_accepted": s.duplicates_accepted,
            "false_duplicates": self.false_duplicates,
            "audit_rows_per_second": self.audit.rows_per_second,
            "audit_projects": p.audit.projects,
            "biggest_project_rows_per_second": round(self.audit.biggest_rows_per_second, 1),
            "audit_row_bytes": self.audit.row_bytes,
            "audit_databases": self.audit.databases,
            "max_d1_gb": round(self.audit.max_d1_gb, 2),
            "d1_gb": self.audit.gb.iter().map(|&gb| round(gb, 2)).collect::<Vec<_>>(),
            "max_d1_inserts_per_second": self.audit.max_inserts_per_second,
            "max_d1_rows_per_second": self.audit.max_rows_per_second,
        });
        if let (Some(all), serde_json::Value::Object(more)) = (report.as_object_mut(), more) {
            all.extend(more);
        }
        report
    }
}
