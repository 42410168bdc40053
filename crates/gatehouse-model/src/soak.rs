//! `soak`: what the objects keep after simulated months at the rates of SPEC §20 (SPEC §23).
//!
//! Each object counts its rows and bytes as the platform does (`retention::StoredRows`, which
//! refuses a write past 10 GB) and keeps every row until the keep-until the worker gives it
//! (`gatehouse_core::retention`), purged by the worker's rule: a pass when one is due, at most a
//! batch of rows per table, again at the next command when it left rows behind. Rates and row
//! sizes come from the real code: the hot key's leases from the `hot-key` model (the guard's real
//! lease code at 10,000 requests/s), grants from `lease::grant`, claim rows and sealed response
//! bodies from `idempotency`. The model steps one simulated second at a time.

use gatehouse_core::config::DEFAULT_CLAIM_SHARDS;
use gatehouse_core::idempotency::{fingerprint, Entry, KeptResponse, StoredResponse};
use gatehouse_core::lease::{grant, Grant, Returned, GRANT_MS, ISOLATE_LEASE_MS};
use gatehouse_core::rate_limit::{Counters, LimitSpec};
use gatehouse_core::retention::{
    body_until, grant_kept_until, isolate_lease_until, row_bytes, ObjectKind, StoredRows,
};
use gatehouse_core::sealing::Keyring;

use gatehouse_core::events::RESERVATION_LEASE_MS;
use gatehouse_core::ledger::shards::{
    reservation_bytes, should_split, MAX_LEVEL, ROOT_SHARDS, SPLIT_ABOVE_PER_SECOND,
};

use crate::hot_key::{hot_key, HotKey};

const DAY_S: i64 = 86_400;
/// The idempotency TTL (`IDEMPOTENCY_TTL_SECONDS`'s default).
const TTL_S: i64 = 86_400;
/// One response store write in this many fails: that body stays for the TTL.
const STORE_FAILS_ONE_IN: f64 = 1_000.0;

pub struct Soak {
    pub days: i64,
    pub quick: bool,
    /// Purges switched off: the model must fail.
    pub no_purge: bool,
}

impl Soak {
    pub fn full() -> Self {
        Soak { days: 30, quick: false, no_purge: false }
    }

    /// A few simulated days, a few seconds of real time: scripts/test runs it.
    pub fn quick() -> Self {
        Soak { days: 3, quick: true, ..Self::full() }
    }
}

/// One kind of row an object writes: how many a second, how big, and until when each is kept.
struct Writes {
    table: &'static str,
    per_second: f64,
    bytes: u64,
    /// The keep-until of a row written at `now_ms`.
    keep_until: Box<dyn Fn(i64) -> i64>,
}

/// One object of the scenario, as the model runs it.
struct Object {
    kind: ObjectKind,
    name: &'static str,
    writes: Vec<Writes>,
    /// Commands a second it serves: each may run a purge pass when one is due.
    calls_per_second: u32,
    rows: StoredRows,
    written: Vec<f64>,
    bytes_day_1: u64,
    max_bytes: u64,
    refused_writes: u64,
}

pub struct Report {
    objects: Vec<Object>,
    ledger: LedgerPath,
    over_limit_admissions: u64,
    duplicates_accepted: u64,
    days: i64,
}

pub fn soak(p: &Soak) -> Report {
    // The hot key's guard, at 10,000 requests/s, over the model's one window.
    let hot = hot_key(&HotKey::quick());
    let hot_seconds = HotKey::quick().duration_seconds();
    let mut objects = vec![
        hot_key_guard(hot.leases_made as f64 / hot_seconds, hot.lease_row_bytes),
        authority(
            "project with 1,000 active keys",
            1_000.0 / (GRANT_MS as f64 / 1000.0),
            project_grant(),
            GRANT_MS,
        ),
        authority("identity, per-second window, 10 keys", 10.0, identity_grant(), 1_000),
        claim_shard(),
    ];
    let mut duplicates_accepted = 0;
    let mut ledger = LedgerPath::default();
    for second in 1..=p.days * DAY_S {
        let now = second * 1000;
        ledger.step(second, now, p.no_purge);
        for o in &mut objects {
            for (w, written) in o.writes.iter().zip(o.written.iter_mut()) {
                let before = *written as u64;
                *written += w.per_second;
                let n = *written as u64 - before;
                if n == 0 {
                    continue;
                }
                if o.rows.keep(w.table, n, w.bytes, (w.keep_until)(now)).is_err() {
                    o.refused_writes += n;
                }
            }
            if !p.no_purge {
                for _ in 0..o.calls_per_second {
                    if !o.rows.purge_due(now) {
                        break;
                    }
                    o.rows.purge_pass(now);
                }
            }
            o.max_bytes = o.max_bytes.max(o.rows.bytes());
            if second == DAY_S {
                o.bytes_day_1 = o.rows.bytes();
            }
        }
        // Every claim of the last TTL is still kept (a retry of any of them finds it): one lost
        // is a duplicate accepted.
        let claims = objects.last().expect("the claim shard");
        let made = claims.written[0] as u64 - claims.written_before(second - TTL_S.min(second));
        duplicates_accepted =
            duplicates_accepted.max(made.saturating_sub(claims.rows.rows("idempotency_claims")));
    }
    Report {
        objects,
        ledger,
        over_limit_admissions: hot.over_limit_admissions,
        duplicates_accepted,
        days: p.days,
    }
}

/// Events a second into one project (SPEC §20), in batches of this many.
const EVENTS_PER_SECOND: f64 = 100_000.0;
const EVENTS_PER_BATCH: f64 = 100.0;
/// `EVENT_DEDUP_WINDOW_SECONDS`' default.
const DEDUP_WINDOW_MS: i64 = 172_800_000;

/// 100,000 events/s into one project: its ledger's shards, one of each level — the tree is
/// symmetric, every shard of a level has the same share — each taking its share of the ids while
/// its level is the deepest, split by the real rule (`ledger::shards::should_split`: its calls a
/// second, then its storage), every id kept for the window and the lease after it.
struct LedgerPath {
    levels: Vec<StoredRows>,
    /// The level whose shards take new ids.
    taking: u8,
    written: f64,
    bytes_day_1: u64,
    max_bytes: u64,
    refused_writes: u64,
}

impl Default for LedgerPath {
    fn default() -> Self {
        LedgerPath {
            levels: vec![StoredRows::default(); usize::from(MAX_LEVEL) + 1],
            taking: 0,
            written: 0.0,
            bytes_day_1: 0,
            max_bytes: 0,
            refused_writes: 0,
        }
    }
}

impl LedgerPath {
    fn shards(&self) -> u64 {
        ROOT_SHARDS << self.taking
    }

    fn step(&mut self, second: i64, now: i64, no_purge: bool) {
        let shards = self.shards() as f64;
        let before = self.written as u64;
        self.written += EVENTS_PER_SECOND / shards;
        let n = self.written as u64 - before;
        let taking = &mut self.levels[usize::from(self.taking)];
        if taking
            .keep("reservations", n, reservation_bytes(), now + DEDUP_WINDOW_MS + RESERVATION_LEASE_MS)
            .is_err()
        {
            self.refused_writes += n;
        }
        // A batch of 100 ids calls each shard that holds one of them.
        let batches = EVENTS_PER_SECOND / EVENTS_PER_BATCH;
        let calls = batches * (1.0 - (1.0 - 1.0 / shards).powf(EVENTS_PER_BATCH));
        if should_split(self.taking, calls as u32, SPLIT_ABOVE_PER_SECOND, taking.bytes()) {
            self.taking += 1;
            self.written = 0.0;
        }
        // Each reserve and check runs a pass when one is due (and the alarm of an idle shard).
        if !no_purge {
            for level in &mut self.levels {
                for _ in 0..calls.ceil() as u32 {
                    if !level.purge_due(now) {
                        break;
                    }
                    level.purge_pass(now);
                }
            }
        }
        let fullest = self.levels.iter().map(StoredRows::bytes).max().unwrap_or(0);
        self.max_bytes = self.max_bytes.max(fullest);
        if second == DAY_S {
            self.bytes_day_1 = fullest;
        }
    }

    fn bytes_now(&self) -> u64 {
        self.levels.iter().map(StoredRows::bytes).max().unwrap_or(0)
    }
}

impl Object {
    fn new(kind: ObjectKind, name: &'static str, calls_per_second: u32, writes: Vec<Writes>) -> Self {
        let written = vec![0.0; writes.len()];
        Object {
            kind,
            name,
            writes,
            calls_per_second,
            rows: StoredRows::default(),
            written,
            bytes_day_1: 0,
            max_bytes: 0,
            refused_writes: 0,
        }
    }

    /// How many rows of the first kind were written by the end of `second`.
    fn written_before(&self, second: i64) -> u64 {
        (self.writes[0].per_second * second as f64) as u64
    }
}

/// A key at 10,000 requests/s: its guard's leases to isolates.
fn hot_key_guard(leases_per_second: f64, bytes: u64) -> Object {
    Object::new(
        ObjectKind::KeyGuard,
        "hot key, 10,000 requests/s",
        500,
        vec![Writes {
            table: "isolate_leases",
            per_second: leases_per_second,
            bytes,
            keep_until: Box::new(|now| isolate_lease_until(now + ISOLATE_LEASE_MS)),
        }],
    )
}

/// A level's authority making `per_second` grants like `sample`, each running `grant_ms`.
fn authority(name: &'static str, per_second: f64, sample: Grant, grant_ms: i64) -> Object {
    let bytes = row_bytes(&[
        sample.grant_id.len(),
        json_len(serde_json::to_string(&sample)),
        json_len(serde_json::to_string(&Returned {
            closed: true,
            credits: sample.credits,
            parts: Vec::new(),
        })),
        8,
    ]);
    Object::new(
        ObjectKind::Authority,
        name,
        per_second.ceil() as u32,
        vec![Writes {
            table: "lease_grants",
            per_second,
            bytes,
            keep_until: Box::new(move |now| {
                let mut g = sample.clone();
                g.until_ms = now + grant_ms;
                grant_kept_until(&g).expect("a grant of credits is kept")
            }),
        }],
    )
}

/// A grant of a project's monthly quota to one key's guard, as the authority decides it.
fn project_grant() -> Grant {
    let spec = LimitSpec { monthly_quota: Some(10_000_000), ..LimitSpec::default() };
    grant(Counters::default(), 1_000, &spec, &"a".repeat(32), 1, 64).0
}

/// A grant of an identity's per-second window.
fn identity_grant() -> Grant {
    let spec = LimitSpec { per_second: Some(100), per_minute: Some(3_000), ..LimitSpec::default() };
    grant(Counters::default(), 1_000, &spec, &"b".repeat(32), 1, 8).0
}

/// One of a key's claim shards, its key at 1,000 idempotent requests/s.
fn claim_shard() -> Object {
    let per_second = 1_000.0 / f64::from(DEFAULT_CLAIM_SHARDS);
    let idempotency_key = "0b6c6f4e-8f43-4b4e-9d55-3f8f0e6f7a21";
    let request_id = "req_01JH5QZ8W3M4N6P7R8S9T0V1W2";
    let body = format!(
        r#"{{"id":"ct_01JH5QZ8W3M4N6P7R8S9T0V1W2","name":"{}","created_at":1767225600000}}"#,
        "x".repeat(400)
    );
    let claim = row_bytes(&[
        idempotency_key.len(),
        fingerprint("POST", "/public/v1/contacts", body.as_bytes()).len(),
        request_id.len(),
        request_id.len(),
        8 * 6,
    ]);
    let stored = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
        base64: false,
        request_id: request_id.into(),
        not_stored: false,
    };
    let keys = Keyring::for_responses(&["pepper-of-at-least-32-bytes-length!!"], "gh_s_model");
    let entry = Entry { api_key_id: "key_model", idempotency_key };
    let sealed = KeptResponse::seal(&keys, entry, &stored, [7; 12]);
    let body_bytes = row_bytes(&[idempotency_key.len(), json_len(serde_json::to_string(&sealed)), 8]);
    Object::new(
        ObjectKind::ClaimShard,
        "claim shard of a key at 1,000 idempotent requests/s",
        per_second.ceil() as u32,
        vec![
            Writes {
                table: "idempotency_claims",
                per_second,
                bytes: claim,
                keep_until: Box::new(|now| now + TTL_S * 1000),
            },
            Writes {
                table: "claim_bodies",
                per_second: per_second * (1.0 - 1.0 / STORE_FAILS_ONE_IN),
                bytes: body_bytes,
                keep_until: Box::new(body_until),
            },
            // The bodies the response store refused stay for the TTL.
            Writes {
                table: "claim_bodies",
                per_second: per_second / STORE_FAILS_ONE_IN,
                bytes: body_bytes,
                keep_until: Box::new(|now| now + TTL_S * 1000),
            },
        ],
    )
}

fn json_len(value: serde_json::Result<String>) -> usize {
    value.map_or(0, |s| s.len())
}

impl Report {
    pub fn missed(&self) -> Vec<String> {
        let mut missed = Vec::new();
        for o in &self.objects {
            if o.max_bytes > o.kind.budget_bytes() {
                missed.push(format!(
                    "{} ({}): {} bytes > {}",
                    o.kind.name(),
                    o.name,
                    o.max_bytes,
                    o.kind.budget_bytes()
                ));
            }
            if o.rows.bytes() as f64 > 1.1 * o.bytes_day_1 as f64 {
                missed.push(format!(
                    "{} ({}): {} bytes on the last day > 1.1 × {} on day 1",
                    o.kind.name(),
                    o.name,
                    o.rows.bytes(),
                    o.bytes_day_1
                ));
            }
            if o.refused_writes > 0 {
                missed.push(format!(
                    "{} ({}): {} writes refused (object full)",
                    o.kind.name(),
                    o.name,
                    o.refused_writes
                ));
            }
        }
        let l = &self.ledger;
        let budget = ObjectKind::LedgerShard.budget_bytes();
        if l.max_bytes > budget {
            missed.push(format!("ledger shard: {} bytes > {budget}", l.max_bytes));
        }
        if l.bytes_now() as f64 > 1.1 * l.bytes_day_1 as f64 {
            missed.push(format!(
                "ledger shard: {} bytes on the last day > 1.1 × {} on day 1",
                l.bytes_now(),
                l.bytes_day_1
            ));
        }
        if l.refused_writes > 0 {
            missed.push(format!("ledger shard: {} writes refused (object full)", l.refused_writes));
        }
        if self.over_limit_admissions > 0 {
            missed.push(format!("{} admissions over the limit", self.over_limit_admissions));
        }
        if self.duplicates_accepted > 0 {
            missed.push(format!(
                "{} claims lost before their TTL (duplicates accepted)",
                self.duplicates_accepted
            ));
        }
        missed
    }

    pub fn json(&self, p: &Soak) -> serde_json::Value {
        let l = &self.ledger;
        let ledger = serde_json::json!({
            "kind": ObjectKind::LedgerShard.name(),
            "scenario": "the fullest ledger shard of a project at 100,000 events/s",
            "bytes_day_1": l.bytes_day_1,
            "bytes_last_day": l.bytes_now(),
            "max_bytes": l.max_bytes,
            "shards": l.shards(),
            "rows_per_second": { "reservations": ((EVENTS_PER_SECOND / l.shards() as f64) * 10.0).round() / 10.0 },
            "row_bytes": { "reservations": reservation_bytes() },
        });
        let objects: Vec<_> = self
            .objects
            .iter()
            .map(|o| {
                serde_json::json!({
                    "kind": o.kind.name(),
                    "scenario": o.name,
                    "bytes_day_1": o.bytes_day_1,
                    "bytes_last_day": o.rows.bytes(),
                    "max_bytes": o.max_bytes,
                    "rows_per_second": o.writes.iter().map(|w| (w.table, (w.per_second * 10.0).round() / 10.0)).collect::<std::collections::BTreeMap<_, _>>(),
                    "row_bytes": o.writes.iter().map(|w| (w.table, w.bytes)).collect::<std::collections::BTreeMap<_, _>>(),
                })
            })
            .chain([ledger])
            .collect();
        serde_json::json!({
            "days": self.days,
            "quick": p.quick,
            "purge": !p.no_purge,
            "objects": objects,
            "over_limit_admissions": self.over_limit_admissions,
            "duplicates_accepted": self.duplicates_accepted,
            "refused_writes": self.objects.iter().map(|o| o.refused_writes).sum::<u64>() + l.refused_writes,
        })
    }
}
