//! Usage for billing (SPEC §22): the minute cron's export and the routes that read usage.
//!
//! A request's audit row says whether it bills; the transaction that inserts the row adds it to
//! its period's counts. Once a period has ended (and a grace for rows still in the audit queue has
//! passed), the export takes a *run* in one transaction — per subject, what the counts hold beyond
//! what earlier runs exported — then writes it to R2 as CloudEvents and records its webhook event
//! (`usage.hourly`, or `usage.adjustment` for a later run of the same period), and only then marks
//! it sent. A run that stops in between is sent again as it was taken: the same object bytes
//! under the same key, the same event id (delivered once). Rows that arrive after their period was
//! exported make the counts differ again, and the next run exports the difference.

use super::cron::RunBudget;
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::{
    Archive, DeliveryQueue, OriginEvent, PortError, Ports, UsageDue, UsageStore, WebhookStore,
};
use gatehouse_core::time::parse_rfc3339_checked;
use gatehouse_core::usage::{
    grace_ms, period_start, Reconciliation, UsageQuery, UsageRun, EXPORT_TIME_BOX_MS, RECONCILE_OBJECTS_MAX,
    RUNS_PER_EXPORT,
};
use gatehouse_core::webhook::payload;

/// The usage period and how long its counts are kept (`AUDIT_RETENTION_DAYS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsagePeriods {
    pub period_ms: i64,
    pub keep_ms: i64,
}

/// A period's D1 queries at most (its unsent run, taking one, marking it sent, the event's rows).
const PERIOD_QUERIES: u32 = 5;

/// Rows of each usage table one export prunes at most.
const PRUNE_PER_RUN: usize = 5_000;

/// What one export did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageReport {
    /// Runs sent (objects written and events recorded).
    pub runs: usize,
    pub records: usize,
    /// Usage rows past the retention deleted.
    pub pruned: usize,
    /// Periods whose run failed this time (tried again the next), and why.
    pub failed: Vec<String>,
}

/// Exports every period due at `now_ms()` (ended a grace ago) whose counts changed since its last
/// run, and sends runs taken but not sent, oldest first, at most [`RUNS_PER_EXPORT`] and for
/// about [`EXPORT_TIME_BOX_MS`]. `run_id` makes the id of each run taken.
pub async fn export_usage<S: UsageStore + WebhookStore, A: Archive, Q: DeliveryQueue>(
    store: &S,
    archive: &A,
    queue: &Q,
    periods: UsagePeriods,
    budget: &RunBudget,
    now_ms: impl Fn() -> i64,
    mut run_id: impl FnMut() -> String,
) -> Result<UsageReport, PortError> {
    let started = now_ms();
    let period_ms = periods.period_ms;
    let mut report = UsageReport::default();
    // Counts older than the log's retention go (their objects stay in R2), and their periods are
    // never exported again: a row that late never makes a run that would reuse a name.
    let keep_from = started - periods.keep_ms;
    // Pruning is housekeeping: when it fails, the exports still run (it is tried again next minute).
    match store.prune_usage(keep_from, PRUNE_PER_RUN).await {
        Ok(pruned) => report.pruned = pruned,
        Err(e) => report.failed.push(format!("pruning: {}", e.0)),
    }
    if !budget.take(started, 2, 0) {
        return Ok(report);
    }
    let due = UsageDue {
        period_ms,
        from_ms: keep_from,
        ended_by_ms: started - grace_ms(period_ms),
        limit: RUNS_PER_EXPORT,
    };
    let due = store.usage_due(due).await?;
    for (project, start) in due {
        // A period: its unsent run, its run taken, its object, its event, its run marked sent.
        if now_ms() - started > EXPORT_TIME_BOX_MS || !budget.take(now_ms(), PERIOD_QUERIES, 2) {
            break;
        }
        // One period's failure holds up no other.
        let exported = async {
            let run = match store.unsent_usage_run(&project, start).await? {
                Some(run) => Some(run),
                None => store.take_usage_run(&project, start, period_ms, &run_id(), now_ms()).await?,
            };
            match run {
                Some(run) => send(store, archive, queue, &run, now_ms()).await.map(|()| Some(run)),
                None => Ok(None),
            }
        };
        match exported.await {
            Ok(Some(run)) => {
                report.runs += 1;
                report.records += run.records.len();
            }
            Ok(None) => {}
            Err(e) => {
                report.failed.push(format!("{project} {}: {}", gatehouse_core::time::rfc3339(start), e.0))
            }
        }
    }
    Ok(report)
}

/// Writes the run's object and records its event (a run with no records — changes that cancel
/// out per subject — writes neither), then marks it sent.
async fn send<S: UsageStore + WebhookStore, A: Archive, Q: DeliveryQueue>(
    store: &S,
    archive: &A,
    queue: &Q,
    run: &UsageRun,
    now_ms: i64,
) -> Result<(), PortError> {
    if !run.records.is_empty() {
        archive.put_usage(&run.object_key(), &run.ndjson()).await?;
        let (event_id, event_type) = (run.event_id(), run.event_type());
        let created_at = gatehouse_core::time::rfc3339(run.made_at);
        let event = OriginEvent {
            project_id: run.project_id.clone(),
            payload: payload(&event_id, event_type, &created_at, run.event_data()).to_string(),
            request_id: event_id.clone(),
            // The gateway's own event: no request, no trace.
            traceparent: None,
            event_id,
            event_type: event_type.to_owned(),
            created_at: run.made_at,
            request: None,
        };
        // A project deleted since has no subscription to deliver to; its object stays written.
        if let gatehouse_core::ports::OriginEventRecord::Recorded(deliveries) =
            store.record_origin_event(&event).await?
        {
            // Not queued now, queued by the minute sweep: the deliveries are recorded.
            let _ = queue.enqueue(&deliveries, 0).await;
        }
    }
    store.usage_run_sent(&run.project_id, run.period_start, run.seq, now_ms).await
}

impl<P: Ports> Gateway<'_, P> {
    /// `GET /public/v1/usage?from&to&group_by&limit&cursor`: the project's billable requests of
    /// the periods starting in `[from, to)`, grouped.
    pub(super) async fn usage(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let query = UsageQuery::parse(call.query, call.now_ms)?;
        let (groups, total) = self.store.usage(call.project_id(), &query).await.map_err(unavailable)?;
        Ok(Reply::ok(query.view(groups, total, self.config.usage_period_seconds)))
    }

    /// `GET /public/v1/usage/file?key=usage/{project}/…`: one of the project's usage exports, its
    /// bytes as written (the records an event leaves out past the first 100).
    pub(super) async fn usage_file(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let prefix = format!("usage/{}/", call.project_id());
        self.project_object(call, &prefix, "usage object", "application/x-ndjson").await
    }

    /// `GET /admin/v1/usage/reconcile?hour=<period start>[&project_id=]`: the period's export
    /// against its audit rows, counted row by row — the hot ones in D1 and the archived ones read
    /// back from R2.
    pub(super) async fn reconcile_usage(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let get = |name: &str| call.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let period_ms = self.config.usage_period_ms();
        let hour = get("hour").ok_or_else(|| {
            ApiError::bad_request("hour is required: the RFC 3339 start of a usage period")
                .with_detail("field", "hour")
        })?;
        let start = parse_rfc3339_checked(hour)
            .ok()
            .filter(|ms| period_start(*ms, period_ms) == *ms)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "hour must be the RFC 3339 start of a usage period ({} s long), e.g. 2026-12-01T10:00:00Z",
                    self.config.usage_period_seconds
                ))
                .with_detail("field", "hour")
            })?;
        let project = get("project_id").filter(|p| !p.is_empty());
        let counts = reconcile(&self.store, &self.archive, project, start, period_ms).await?;
        Ok(Reply::ok(counts.view(start, self.config.usage_period_seconds, project)))
    }
}

/// A period's export against its audit rows, counted row by row: the billable rows still hot, and
/// those of the archived objects that overlap the period, read back from R2.
pub async fn reconcile<S: UsageStore, A: Archive>(
    store: &S,
    archive: &A,
    project: Option<&str>,
    start: i64,
    period_ms: i64,
) -> Result<Reconciliation, ApiError> {
    let snapshot = store.usage_snapshot(project, start, period_ms).await.map_err(unavailable)?;
    if snapshot.objects.len() > RECONCILE_OBJECTS_MAX {
        return Err(ApiError::unprocessable(format!(
            "the period's archived rows are in more than {RECONCILE_OBJECTS_MAX} objects, more than one call reads: name a project_id"
        ))
        .with_detail("field", "project_id"));
    }
    let mut archived = 0;
    for key in &snapshot.objects {
        let bytes = archive.read_ndjson(key).await.map_err(unavailable)?.unwrap_or_default();
        archived += billable_rows(&bytes, start, start + period_ms);
    }
    Ok(Reconciliation {
        exported: snapshot.exported,
        audited: snapshot.hot_billable + archived,
        pending: snapshot.pending,
    })
}

/// The billable rows of an archived object's NDJSON whose time is in `[from, to)`.
fn billable_rows(ndjson: &[u8], from: i64, to: i64) -> i64 {
    String::from_utf8_lossy(ndjson)
        .lines()
        .filter_map(|line| serde_json::from_str::<gatehouse_core::audit::AuditRow>(line).ok())
        .filter(|r| r.billable && r.ts >= from && r.ts < to)
        .count() as i64
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::{BTreeMap, BTreeSet};
    use std::rc::Rc;

    use super::*;
    use crate::fakes::audit::FakeArchive;
    use crate::fakes::gateway::FakeProject;
    use crate::fakes::webhooks::FakeDeliveryQueue;
    use crate::fakes::FakeStore;
    use crate::sim::{check_seeds, complete, drive, Faults};
    use crate::{roll_up, RollUpLimits};
    use gatehouse_core::audit::AuditRow;
    use gatehouse_core::ports::AuditStore;
    use gatehouse_core::webhook::{StoredSecret, Webhook};

    const MINUTE: i64 = 60_000;
    /// One-minute periods, kept far longer than a schedule.
    const KEPT: UsagePeriods = UsagePeriods { period_ms: MINUTE, keep_ms: 90 * 86_400_000 };
    const T0: i64 = 1_795_910_400_000; // a UTC midnight
    const PERIODS: i64 = 8;
    /// Seeds that once broke a promise, replayed on every run.
    const REGRESSIONS: &[u64] = &[62];

    fn setup(faults: &Rc<Faults>, clock: &Rc<Cell<i64>>) -> (FakeStore, FakeArchive, FakeDeliveryQueue) {
        let store = FakeStore::new(faults.clone());
        store.audit.usage_period_ms.set(MINUTE);
        for id in ["prj_a", "prj_b"] {
            store.directory.projects.borrow_mut().push(FakeProject {
                id: id.into(),
                name: id.into(),
                plan: "trial".into(),
                created_at: T0,
            });
        }
        // prj_a subscribes to the usage events; prj_b to "*", which does not take them.
        for (project, events) in [("prj_a", vec!["usage.hourly", "usage.adjustment"]), ("prj_b", vec!["*"])] {
            let id = format!("wh_{project}");
            store.webhooks.borrow_mut().webhooks.insert(
                id.clone(),
                Webhook {
                    id,
                    project_id: project.into(),
                    url: "https://receiver.example/hook".into(),
                    events: events.into_iter().map(String::from).collect(),
                    secret: StoredSecret::from_column("whsec_test".into()),
                    public_key: None,
                    name: None,
                    previous_secret: None,
                    status: "active".into(),
                    disabled_reason: None,
                    created_at: T0,
                },
            );
        }
        (store, FakeArchive::new(faults.clone()), FakeDeliveryQueue::new(faults.clone(), clock.clone()))
    }

    fn row(faults: &Faults, n: u64, ts: i64) -> AuditRow {
        let mut r = AuditRow::new(format!("r{n:05}"), ts, "GET".into(), "/public/v1/me".into());
        r.project_id = Some(["prj_a", "prj_b"][faults.below(2) as usize].into());
        let key = faults.below(3);
        r.key_id = Some(format!("key_{key}"));
        // key_1 belongs to an identity; key_2 moves to one halfway.
        r.identity_id = match key {
            1 => Some("idn_1".into()),
            2 if faults.chance(0.5) => Some("idn_2".into()),
            _ => None,
        };
        if faults.chance(0.3) {
            r.method = "POST".into();
        }
        r.route = Some("/public/v1/me".into());
        r.status = [200, 201, 404, 429][faults.below(4) as usize];
        r.billable = r.status != 429 && faults.chance(0.9);
        r
    }

    /// (project, period, subject) → billable rows.
    type Truth = BTreeMap<(String, i64, String), i64>;

    fn truth(rows: &BTreeMap<String, AuditRow>) -> Truth {
        let mut t = Truth::new();
        for r in rows.values().filter(|r| r.billable) {
            let subject =
                gatehouse_core::usage::subject(r.key_id.as_deref().unwrap(), r.identity_id.as_deref());
            *t.entry((r.project_id.clone().unwrap(), period_start(r.ts, MINUTE), subject)).or_default() += 1;
        }
        t
    }

    /// What the bucket's usage objects add up to, per (project, period, subject); every object
    /// must be the bytes of the run it is named for, and every record id must be unique.
    fn exported(store: &FakeStore, bucket: &FakeArchive, sent_only: bool) -> Result<Truth, String> {
        let usage = store.audit.usage.borrow();
        let objects = bucket.usage_objects.borrow();
        let mut sums = Truth::new();
        let mut ids = BTreeSet::new();
        let mut named = BTreeSet::new();
        let mut last_seq: BTreeMap<(String, i64, String), u32> = BTreeMap::new();
        for ((project, start, seq), stored) in &usage.runs {
            let run = UsageRun {
                project_id: project.clone(),
                period_start: *start,
                period_ms: stored.period_ms,
                seq: *seq,
                made_at: stored.made_at,
                records: stored.records.clone(),
            };
            named.insert(run.object_key());
            match objects.get(&run.object_key()) {
                Some(bytes) if *bytes != run.ndjson() => {
                    return Err(format!("object {} is not its run's records", run.object_key()))
                }
                None if stored.sent_at.is_some() && !run.records.is_empty() => {
                    return Err(format!("run {} sent without its object", run.object_key()))
                }
                _ => {}
            }
            if sent_only && stored.sent_at.is_none() {
                continue;
            }
            for record in &run.records {
                if !ids.insert(run.record_id(record)) {
                    return Err(format!("record id {} twice", run.record_id(record)));
                }
                let slot = (project.clone(), *start, record.subject());
                // The Stripe recipe replaces the subject's last record by this one's total: it must
                // name that record, and its total must be what the values add up to.
                if record.previous_seq != last_seq.get(&slot).copied() {
                    return Err(format!(
                        "{} replaces run {:?}, not {:?}",
                        run.object_key(),
                        record.previous_seq,
                        last_seq.get(&slot)
                    ));
                }
                last_seq.insert(slot.clone(), *seq);
                let sum = sums.entry(slot).or_default();
                *sum += record.value;
                if *sum != record.total {
                    return Err(format!(
                        "{}: total {} but the values add up to {sum}",
                        run.object_key(),
                        record.total
                    ));
                }
            }
        }
        if let Some(stray) = objects.keys().find(|k| !named.contains(*k)) {
            return Err(format!("object {stray} belongs to no run"));
        }
        sums.retain(|_, v| *v != 0);
        Ok(sums)
    }

    /// One schedule: rows of two projects arrive over eight one-minute periods, in batches that
    /// fail and are sent again (a redelivered batch after the roll-up archived its rows makes
    /// copies), some late for periods long exported; the roll-up and the export run each minute
    /// with any D1, R2 or queue call failing before or after its effect and the run stopping
    /// anywhere (between object and event too). Then everything left arrives and both run with
    /// faults off. Every period must reconcile to 0 with nothing pending; the objects must add up
    /// to the billable rows per subject; every run with records must have reached prj_a's usage
    /// subscription once, and none prj_b's "*".
    fn schedule(seed: u64) -> Result<(), String> {
        let faults = Rc::new(Faults::new(seed, 0.0));
        let clock = Rc::new(Cell::new(T0));
        let (store, bucket, queue) = setup(&faults, &clock);
        let limits = RollUpLimits {
            rows_per_batch: 1 + faults.below(4) as usize,
            slices_per_run: 4,
            time_box_ms: i64::MAX,
        };
        let mut all: BTreeMap<String, AuditRow> = BTreeMap::new();
        let mut sent: Vec<Vec<AuditRow>> = Vec::new();
        let mut waiting: Vec<Vec<AuditRow>> = Vec::new();
        let mut n = 0;
        let mut runs = 0u64;
        for step in 1..=PERIODS {
            let now = T0 + step * MINUTE + faults.below(MINUTE as u64) as i64;
            clock.set(now);
            for _ in 0..faults.below(4) {
                let batch: Vec<AuditRow> = (0..1 + faults.below(3))
                    .map(|_| {
                        n += 1;
                        // Mostly the period just ended; sometimes one long exported.
                        let back = if faults.chance(0.2) { 1 + faults.below(step as u64) as i64 } else { 1 };
                        row(&faults, n, T0 + (step - back) * MINUTE + faults.below(MINUTE as u64) as i64)
                    })
                    .collect();
                all.extend(batch.iter().map(|r| (r.request_id.clone(), r.clone())));
                waiting.push(batch);
            }
            // A batch sent before may come again (the queue's at-least-once).
            if !sent.is_empty() && faults.chance(0.3) {
                waiting.push(sent[faults.below(sent.len() as u64) as usize].clone());
            }
            faults.set_failure_rate([0.0, 0.1, 0.3][faults.below(3) as usize]);
            let crash = [0.0, 0.02, 0.1][faults.below(3) as usize];
            let mut still = Vec::new();
            for batch in waiting.drain(..) {
                match drive(store.insert_audit_rows(&batch), &faults, crash) {
                    Some(Ok(())) => sent.push(batch),
                    _ => still.push(batch),
                }
            }
            waiting = still;
            let cutoff = now - 2 * MINUTE;
            let _ = drive(
                roll_up(
                    &store,
                    &crate::RollUpRun::into_fake(
                        &bucket,
                        cutoff,
                        limits,
                        &crate::cron::RunBudget::unbounded(),
                    ),
                    || now,
                ),
                &faults,
                crash,
            );
            for _ in 0..1 + faults.below(2) {
                let run_id = || {
                    runs += 1;
                    format!("run{runs}")
                };
                let _ = drive(
                    export_usage(
                        &store,
                        &bucket,
                        &queue,
                        KEPT,
                        &crate::cron::RunBudget::unbounded(),
                        || now,
                        run_id,
                    ),
                    &faults,
                    crash,
                );
            }
            exported(&store, &bucket, false)?;
            faults.set_failure_rate(0.0);
        }
        for batch in waiting {
            complete(store.insert_audit_rows(&batch)).map_err(|e| e.0)?;
        }
        let end = T0 + (PERIODS + 2) * MINUTE;
        for _ in 0..30 {
            complete(roll_up(
                &store,
                &crate::RollUpRun::into_fake(&bucket, end, limits, &crate::cron::RunBudget::unbounded()),
                || end,
            ))
            .map_err(|e| e.0)?;
        }
        for _ in 0..5 {
            let run_id = || {
                runs += 1;
                format!("run{runs}")
            };
            complete(export_usage(
                &store,
                &bucket,
                &queue,
                KEPT,
                &crate::cron::RunBudget::unbounded(),
                || end,
                run_id,
            ))
            .map_err(|e| e.0)?;
        }
        let truth = truth(&all);
        let objects = exported(&store, &bucket, true)?;
        if objects != truth {
            return Err(format!("the objects add up to {objects:?}, the rows to {truth:?}"));
        }
        for project in ["prj_a", "prj_b"] {
            for p in 0..PERIODS {
                let start = T0 + p * MINUTE;
                let r = complete(reconcile(&store, &bucket, Some(project), start, MINUTE))
                    .map_err(|e| e.message)?;
                let expected: i64 =
                    truth.iter().filter(|((q, s, _), _)| q == project && *s == start).map(|(_, v)| v).sum();
                if r.audited - r.exported != 0 || r.pending != 0 || r.exported != expected {
                    return Err(format!("{project} period {p}: {r:?}, {expected} billable rows"));
                }
            }
        }
        let webhooks = store.webhooks.borrow();
        for ((project, start, seq), stored) in &store.audit.usage.borrow().runs {
            if stored.records.is_empty() {
                continue;
            }
            let event_id = UsageRun {
                project_id: project.clone(),
                period_start: *start,
                period_ms: MINUTE,
                seq: *seq,
                made_at: 0,
                records: Vec::new(),
            }
            .event_id();
            let found = webhooks.deliveries.values().filter(|d| d.delivery.event_id == event_id).count();
            let wanted = usize::from(project == "prj_a");
            if found != wanted {
                return Err(format!("run {project} {start} {seq}: {found} deliveries, {wanted} wanted"));
            }
        }
        Ok(())
    }

    /// Counts, runs and records older than the retention are pruned, and a row that late for a
    /// pruned period never makes a run again (its name would be the first run's).
    #[test]
    fn usage_past_the_retention_is_pruned_and_never_exported_again() {
        let faults = Rc::new(Faults::new(1, 0.0));
        let clock = Rc::new(Cell::new(T0));
        let (store, bucket, queue) = setup(&faults, &clock);
        let keep = UsagePeriods { period_ms: MINUTE, keep_ms: 10 * MINUTE };
        let mut n = 0;
        let mut export = |at: i64| {
            let run_id = || {
                n += 1;
                format!("run{n}")
            };
            complete(export_usage(
                &store,
                &bucket,
                &queue,
                keep,
                &crate::cron::RunBudget::unbounded(),
                || at,
                run_id,
            ))
            .unwrap()
        };
        let billable = |id: &str| {
            let mut r = AuditRow::new(id.into(), T0 + 1_000, "GET".into(), "/public/v1/me".into());
            (r.project_id, r.key_id, r.status, r.billable) =
                (Some("prj_a".into()), Some("key_1".into()), 200, true);
            r
        };
        complete(store.insert_audit_rows(&[billable("r1")])).unwrap();
        assert_eq!(export(T0 + 2 * MINUTE).runs, 1);
        let report = export(T0 + 60 * MINUTE);
        assert_eq!((report.runs, report.pruned), (0, 3), "a count, a run and its record");
        assert!(store.audit.usage.borrow().runs.is_empty());
        complete(store.insert_audit_rows(&[billable("r2")])).unwrap();
        let report = export(T0 + 61 * MINUTE);
        assert_eq!((report.runs, report.pruned), (0, 1), "the late count is pruned, not exported");
        assert_eq!(bucket.usage_objects.borrow().len(), 1, "the first run's object stays as written");
    }

    fn config(plans: &'static str) -> gatehouse_core::config::Config {
        gatehouse_core::config::Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("usage-pepper-0123456".into()),
            "WEBHOOK_SECRETS_KEY" => Some("usage-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some("usage-admin-token-01".into()),
            "PLANS" => Some(plans.into()),
            "USAGE_PERIOD_SECONDS" => Some("60".into()),
            _ => None,
        })
        .expect("the test configuration is valid")
    }

    /// Each request's audit row as the gateway wrote it: whether it bills.
    fn billed(config: &'static gatehouse_core::config::Config) -> (Vec<(u16, bool)>, Vec<AuditRow>) {
        use crate::testing::{api_request, fake_gateway, WholeBody};
        use gatehouse_core::api_key::KeyType;
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, clock, secrets) = fake_gateway(
            config,
            &faults,
            T0,
            "prj_u",
            &[KeyType::Owner, KeyType::Server, KeyType::Browser],
            0.0,
        );
        let (owner, server) = (&secrets[0], &secrets[1]);
        let calls = [
            (server.as_str(), "GET", "/public/v1/me", None),
            (server, "POST", "/public/v1/contacts", Some("retry-1")),
            (server, "POST", "/public/v1/contacts", Some("retry-1")), // a replay
            (server, "GET", "/public/v1/contacts/ct_missing", None),
            (server, "GET", "/public/v1/me", None), // the window's 5th: 429
            (owner, "GET", "/public/v1/keys", None),
            (&secrets[2], "GET", "/public/v1/contacts/ct_1", None), // a browser key may not: 403
            ("gh_s_unknownunknownunknownunknown0000", "GET", "/public/v1/me", None),
        ];
        let mut rows = Vec::new();
        for (token, method, path, idem) in calls {
            let body = (method == "POST").then(|| br#"{"name":"Ada"}"#.to_vec());
            let request = api_request(method, path, token, idem, WholeBody(body), clock.get());
            let mut response = complete(gateway.handle(request));
            let after = response.after_response();
            complete(gateway.finish(after, |_| async {}));
            rows.push(response.audit);
        }
        (rows.iter().map(|r| (r.status, r.billable)).collect(), rows)
    }

    #[test]
    fn an_accepted_request_bills_by_its_plan_whatever_its_key_type_and_usage_counts_it() {
        static DEFAULT: std::sync::OnceLock<gatehouse_core::config::Config> = std::sync::OnceLock::new();
        let default = DEFAULT.get_or_init(|| config(r#"{"trial":{"per_minute":4}}"#));
        let (flags, rows) = billed(default);
        // Every status but a limit's 429, an owner key's calls too (SPEC §23: by what it calls, not
        // by its key type; an owner's traffic billed nothing); never a replay, a key refused for
        // its type (no window counted it) nor an unknown key's.
        assert_eq!(
            flags,
            [
                (200, true),
                (201, true),
                (201, false),
                (404, true),
                (429, false),
                (200, true),
                (403, false),
                (401, false)
            ]
        );
        static TWO_XX: std::sync::OnceLock<gatehouse_core::config::Config> = std::sync::OnceLock::new();
        let two_xx = TWO_XX.get_or_init(|| config(r#"{"trial":{"per_minute":4,"billable":["2xx"]}}"#));
        assert_eq!(
            billed(two_xx).0,
            [
                (200, true),
                (201, true),
                (201, false),
                (404, false),
                (429, false),
                (200, true),
                (403, false),
                (401, false)
            ]
        );

        // The rows counted, as the audit consumer inserts them (twice: a redelivery counts nothing).
        let faults = Rc::new(Faults::new(1, 0.0));
        let clock = Rc::new(Cell::new(T0));
        let (store, ..) = setup(&faults, &clock);
        let mut rows = rows;
        rows.iter_mut().for_each(|r| r.project_id = r.project_id.as_ref().map(|_| "prj_a".to_owned()));
        complete(store.insert_audit_rows(&rows)).unwrap();
        complete(store.insert_audit_rows(&rows)).unwrap();
        let query = |group_by: &str| {
            let q = [
                ("group_by".to_owned(), group_by.to_owned()),
                ("from".to_owned(), "2026-11-29T00:00:00Z".to_owned()),
            ];
            UsageQuery::parse(&q, T0 + 3_600_000).unwrap()
        };
        let (groups, total) = complete(store.usage("prj_a", &query("route"))).unwrap();
        assert_eq!(total, 4);
        let routes: Vec<(&str, i64)> = groups.iter().map(|g| (g.name.as_str(), g.requests)).collect();
        assert_eq!(
            routes,
            [
                ("GET /public/v1/contacts/{id}", 1),
                ("GET /public/v1/keys", 1),
                ("GET /public/v1/me", 1),
                ("POST /public/v1/contacts", 1)
            ]
        );
        let (server_key, owner_key) = (rows[0].key_id.clone().unwrap(), rows[5].key_id.clone().unwrap());
        let (mut groups, _) = complete(store.usage("prj_a", &query("key"))).unwrap();
        groups.sort_by_key(|g| g.requests);
        let group = |name: String, requests| gatehouse_core::usage::UsageGroup { name, requests };
        assert_eq!(groups, [group(owner_key, 1), group(server_key, 3)]);
        let (groups, _) = complete(store.usage("prj_a", &query("hour"))).unwrap();
        assert_eq!(groups[0].name, "2026-11-29T00:00:00Z");
    }

    /// A plan's `exempt` route classes (SPEC §23) count in no window and no quota and never bill,
    /// whatever the key; the other classes do, an owner key's included.
    #[test]
    fn a_plans_exempt_classes_count_in_no_window_and_never_bill() {
        use crate::testing::{api_request, fake_gateway, WholeBody};
        use gatehouse_core::api_key::KeyType;
        static EXEMPT: std::sync::OnceLock<gatehouse_core::config::Config> = std::sync::OnceLock::new();
        static LEASING: std::sync::OnceLock<gatehouse_core::config::Config> = std::sync::OnceLock::new();
        let plans = r#"{"trial":{"per_minute":2,"exempt":["self","manage"]}}"#;
        let exempt = EXEMPT.get_or_init(|| config(plans));
        // Every key leases (a hot key): an exempt request neither admits from a lease nor is refused
        // by a refusal lease (found by an adversarial review: /me was 429 and took credits).
        let leasing = LEASING.get_or_init(|| {
            gatehouse_core::config::Config::from_lookup(|name| match name {
                "KEY_PEPPER" => Some("usage-pepper-0123456".into()),
                "WEBHOOK_SECRETS_KEY" => Some("usage-webhook-secrets".into()),
                "ADMIN_TOKEN" => Some("usage-admin-token-01".into()),
                "PLANS" => Some(plans.into()),
                "LEASE_ABOVE_PER_SECOND" => Some("0".into()),
                _ => None,
            })
            .unwrap()
        });
        for config in [exempt, leasing] {
            let faults = Rc::new(Faults::new(1, 0.0));
            let (gateway, clock, secrets) =
                fake_gateway(config, &faults, T0, "prj_x", &[KeyType::Owner, KeyType::Server], 0.0);
            let call = |token: &str, method: &str, path: &str| {
                let body = (method == "POST").then(|| br#"{"name":"Ada"}"#.to_vec());
                let request = api_request(method, path, token, None, WholeBody(body), clock.get());
                let mut response = complete(gateway.handle(request));
                let after = response.after_response();
                complete(gateway.finish(after, |_| async {}));
                (response.status, response.audit.billable)
            };
            let (owner, server) = (&secrets[0], &secrets[1]);
            let me: Vec<_> = (0..4).map(|_| call(server, "GET", "/public/v1/me")).collect();
            assert_eq!(me, [(200, false); 4], "/me is exempt: four in a window of 2, none billed");
            let creates: Vec<_> = (0..3).map(|_| call(server, "POST", "/public/v1/contacts")).collect();
            assert_eq!(creates, [(201, true), (201, true), (429, false)], "resources count and bill");
            assert_eq!(
                call(server, "GET", "/public/v1/me"),
                (200, false),
                "over the window, /me still answers"
            );
            assert_eq!(call(owner, "GET", "/public/v1/keys"), (200, false), "manage is exempt");
            assert_eq!(
                call(owner, "POST", "/public/v1/contacts"),
                (201, true),
                "an owner's resource call bills"
            );
        }
        let unknown = r#"{"trial":{"per_minute":2,"exempt":["reads"]}}"#;
        let refused = gatehouse_core::config::Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("usage-pepper-pepper".into()),
            "WEBHOOK_SECRETS_KEY" => Some("usage-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some("usage-admin-token".into()),
            "PLANS" => Some(unknown.into()),
            _ => None,
        });
        assert!(refused.unwrap_err().0.contains("exempt names \"reads\""));
    }

    #[test]
    fn every_period_reconciles_to_zero_and_the_exports_add_up_to_the_rows_under_faults() {
        check_seeds(
            "every_period_reconciles_to_zero_and_the_exports_add_up_to_the_rows_under_faults",
            400,
            REGRESSIONS,
            schedule,
        );
    }
}
