//! The audit log at scale (SPEC §18), time-compressed: rows of several simulated days go through
//! the audit queue consumer's own code (`queues::consume`) into the fake audit database, the
//! roll-up runs every simulated hour, and then the log is checked the way the API reads it: the
//! hot tier holds only the hot window, every row is found exactly once by `request_id` and by a
//! time-range scan, and the statistics equal the raw counts.
//!
//! `cargo test` runs 10,000 rows; `scripts/bench` runs `AUDIT_LOAD_ROWS` (2,000,000) in release
//! mode and prints the rates.

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::time::Instant;

use super::audit::read_log_page;
use super::queues::{consume, Disposition, Incoming};
use super::roll_up::{roll_up, RollUpLimits};
use crate::fakes::audit::FakeArchive;
use crate::fakes::queue::FakeDeadLetters;
use crate::fakes::FakeStore;
use crate::sim::{complete, Faults};
use gatehouse_core::archive::{hot_cutoff, HOUR_MS};
use gatehouse_core::audit::{AuditMessage, AuditRow, LogFilter};
use gatehouse_core::encoding::uuid_v7;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{AuditStore, StatsOf};
use gatehouse_core::queue::RetryPolicy;
use gatehouse_core::time::utc_date;

const PROJECTS: [&str; 4] = ["prj_a", "prj_b", "prj_c", "prj_d"];
const KEYS_PER_PROJECT: u64 = 3;
const DAYS: i64 = 3;
const HOT_SECONDS: u32 = 3_600;
const START: i64 = 1_795_000_000_000 - 1_795_000_000_000 % (24 * HOUR_MS);

/// A row of the load: spread over projects, keys, routes and statuses by its number.
fn row(n: u64, ts: i64) -> AuditRow {
    let project = PROJECTS[(n % PROJECTS.len() as u64) as usize];
    let mut random = [0u8; 10];
    random[2..].copy_from_slice(&n.to_be_bytes());
    let mut r = AuditRow::new(
        uuid_v7(ts, random),
        ts,
        ["GET", "POST"][n.is_multiple_of(7) as usize].into(),
        format!("/public/v1/contacts/con_{n}"),
    );
    r.project_id = Some(project.into());
    r.key_id = Some(format!("key_{project}_{}", n / 4 % KEYS_PER_PROJECT));
    r.route = Some("/public/v1/contacts/{id}".into());
    r.status = match n % 50 {
        0 => 500,
        1..=4 => 404,
        _ => 200,
    };
    r.response_bytes = 120;
    r.response_time_ms = 4;
    r
}

struct Load {
    rows: usize,
    consume_secs: f64,
    roll_up_secs: f64,
    check_secs: f64,
    objects: usize,
}

fn run(total: u64) -> Load {
    let faults = Rc::new(Faults::new(7, 0.0));
    let store = FakeStore::new(faults.clone());
    let archive = FakeArchive::new(faults.clone());
    let letters = FakeDeadLetters::new(faults);
    let span = DAYS * 24 * HOUR_MS;
    let ts_of = |n: u64| START + (n as i128 * span as i128 / total as i128) as i64;
    let (mut consume_secs, mut roll_up_secs) = (0.0, 0.0);
    let mut n = 0;
    let mut hour_end = START + HOUR_MS;
    while n < total {
        // One simulated hour of traffic through the consumer, in batches of 100 messages.
        let mut batch = Vec::new();
        while n < total && ts_of(n) < hour_end {
            let body = serde_json::to_string(&AuditMessage::Audit(Box::new(row(n, ts_of(n))))).unwrap();
            batch.push(Incoming { id: n.to_string(), body, sent_ms: ts_of(n) });
            n += 1;
        }
        let started = Instant::now();
        for messages in batch.chunks(100) {
            let dispatch = |_: String| async { unreachable!("no deliveries in the load") };
            let dispositions = complete(consume(
                &store,
                &letters,
                "gatehouse-audit",
                messages,
                dispatch,
                RetryPolicy { base_seconds: 5, max_seconds: 3_600 },
                hour_end,
            ));
            assert!(dispositions.iter().all(|s| *s == Disposition::Ack), "every message stored");
        }
        consume_secs += started.elapsed().as_secs_f64();
        let started = Instant::now();
        let cutoff = hot_cutoff(hour_end, HOT_SECONDS);
        while !complete(roll_up(
            &store,
            &crate::RollUpRun::into_fake(
                &archive,
                cutoff,
                RollUpLimits::PER_MINUTE,
                &crate::cron::RunBudget::unbounded(),
            ),
            || 0,
        ))
        .expect("no faults")
        .done
        {}
        roll_up_secs += started.elapsed().as_secs_f64();
        hour_end += HOUR_MS;
    }
    let started = Instant::now();
    check(&store, &archive, total, ts_of, hour_end - HOUR_MS);
    let objects = store.audit.objects.borrow().len();
    Load {
        rows: total as usize,
        consume_secs,
        roll_up_secs,
        check_secs: started.elapsed().as_secs_f64(),
        objects,
    }
}

/// One page of a project's log, as `GET /public/v1/logs` reads it.
fn page(
    store: &FakeStore,
    archive: &FakeArchive,
    project: &str,
    filter: &LogFilter,
    page: PageRequest,
) -> (Vec<AuditRow>, Option<Cursor>) {
    complete(read_log_page(store, archive, project, filter.clone(), page)).unwrap()
}

fn check(store: &FakeStore, archive: &FakeArchive, total: u64, ts_of: impl Fn(u64) -> i64, now: i64) {
    let cutoff = hot_cutoff(now, HOT_SECONDS);
    // D1 holds only the hot window, and all of it.
    let hot = store.audit.rows.borrow().len() as u64;
    assert!(store.audit.rows.borrow().values().all(|r| r.ts >= cutoff), "a row past the hot window is in D1");
    assert_eq!(hot, (0..total).filter(|&n| ts_of(n) >= cutoff).count() as u64, "the hot window is complete");
    // Every row once by a time-range scan of each project, newest first.
    for project in PROJECTS {
        let mut seen = HashSet::new();
        let mut request = PageRequest { limit: 5_000, after: None };
        let mut last: Option<(i64, String)> = None;
        loop {
            let (rows, next) = page(store, archive, project, &LogFilter::default(), request.clone());
            for r in rows {
                let position = (r.ts, r.request_id.clone());
                assert!(last.as_ref().is_none_or(|l| *l > position), "out of order at {}", r.request_id);
                assert!(seen.insert(r.request_id.clone()), "{} shown twice", r.request_id);
                last = Some(position);
            }
            match next {
                Some(c) => request.after = Some(c),
                None => break,
            }
        }
        let expected =
            (0..total).filter(|n| PROJECTS[(n % PROJECTS.len() as u64) as usize] == project).count();
        assert_eq!(seen.len(), expected, "{project}: rows found by the time-range scan");
    }
    // By request id: a sample across the whole span (one page each: the id names its millisecond).
    for n in (0..total).step_by((total / 500).max(1) as usize) {
        let r = row(n, ts_of(n));
        let filter = LogFilter {
            request_id: Some(r.request_id.clone()),
            from_ms: Some(r.ts),
            to_ms: Some(r.ts),
            ..Default::default()
        };
        let (found, _) = page(
            store,
            archive,
            r.project_id.as_deref().unwrap(),
            &filter,
            PageRequest { limit: 1, after: None },
        );
        assert_eq!(found, [r], "row {n} by its request id");
    }
    // Statistics from the aggregates equal the raw counts.
    let mut raw: BTreeMap<(String, String), (u64, u64, u64)> = BTreeMap::new();
    for n in 0..total {
        let r = row(n, ts_of(n));
        let c = raw.entry((r.key_id.clone().unwrap(), utc_date(r.ts))).or_default();
        c.0 += 1;
        c.1 += u64::from((400..500).contains(&r.status));
        c.2 += u64::from(r.status >= 500);
    }
    for project in PROJECTS {
        for k in 0..KEYS_PER_PROJECT {
            let key = format!("key_{project}_{k}");
            let (days, _) = complete(store.stats(StatsOf {
                project_id: project,
                key_id: Some(&key),
                endpoint: None,
                since_ms: START,
            }))
            .unwrap();
            for d in days {
                assert_eq!(
                    raw[&(key.clone(), d.day.clone())],
                    (d.total, d.client_errors, d.server_errors),
                    "{key} on {}",
                    d.day
                );
            }
        }
    }
}

#[test]
fn the_audit_log_holds_days_of_rows_in_two_tiers_each_found_once() {
    let total = std::env::var("AUDIT_LOAD_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let load = run(total);
    println!(
        "audit load: {} rows over {DAYS} simulated days, {} objects; consumer {:.0} rows/s, roll-up {:.0} rows/s, checks {:.1} s",
        load.rows,
        load.objects,
        load.rows as f64 / load.consume_secs,
        load.rows as f64 / load.roll_up_secs,
        load.check_secs
    );
}
