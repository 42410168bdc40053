//! The audit log's fakes: the `audit_log`, `audit_objects` and `audit_daily` tables behind
//! [`AuditStore`] (on the shared [`FakeStore`]) and the R2 bucket behind [`Archive`]. Every call goes through the schedule's
//! [`Faults`]; a D1 statement and an R2 put take effect whole or not at all, as they do in the
//! worker.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use super::FakeStore;
use crate::sim::Faults;
use gatehouse_core::audit::{packed_for_d1, AuditRow, DayCount, EndpointCount, LatencyBuckets, LogFilter};
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::platform::fits_d1_value;
use gatehouse_core::ports::{
    Archive, ArchiveObject, ArchivedSlice, AuditStore, ChainStart, DigestDue, DigestHealth, DigestRecord,
    DigestStore, DigestWritten, DigestsOf, PortError, Settled, StatsOf, StoredObject, UndigestedObject,
};
use gatehouse_core::tiers::{ObjectSummary, SUMMARIES_PER_PAGE};
use gatehouse_core::time::utc_date;

/// A key's daily aggregate: (project, key, day, method, route) → (total, 4xx, 5xx, requests per
/// response-time bucket).
pub type DailyCounts = BTreeMap<(String, String, String, String, String), (i64, i64, i64, [i64; 10])>;

/// `audit_log` keyed by `request_id` like the table's primary key, the summaries of
/// `audit_objects` by object key, and `audit_daily`.
#[derive(Default)]
pub struct AuditTables {
    pub rows: RefCell<BTreeMap<String, AuditRow>>,
    pub objects: RefCell<BTreeMap<String, ObjectSummary>>,
    pub daily: RefCell<DailyCounts>,
    /// This many coming slice deletes fail before their effect.
    pub refuse_deletes: Cell<u32>,
    /// `audit_digests` by (project, period start), and each object's `digest_period`.
    pub digests: RefCell<BTreeMap<(String, i64), DigestRecord>>,
    pub digested: RefCell<BTreeMap<String, i64>>,
    /// `projects.digest_next`.
    pub digest_next: RefCell<BTreeMap<String, i64>>,
    /// `digest_due`: per project, the first row time of its oldest object no digest lists.
    pub digest_due: RefCell<BTreeMap<String, i64>>,
    /// `audit_alerts`: per project, when and what disagreed with its chain head.
    pub digest_alerts: RefCell<BTreeMap<String, (i64, String)>>,
    /// `usage_counts`, `usage_runs` and `usage_records` (SPEC §22), and the period the counts are
    /// kept by (0: an hour).
    pub usage: RefCell<super::usage::UsageTables>,
    pub usage_period_ms: Cell<i64>,
}

impl AuditTables {
    /// Inserts rows straight into the table (test setup: no faults, no yield).
    pub fn seed(&self, rows: impl IntoIterator<Item = AuditRow>) {
        let mut table = self.rows.borrow_mut();
        for row in rows {
            table.entry(row.request_id.clone()).or_insert(row);
        }
    }

    /// Adds rows to the daily aggregates and the usage counts (`sign` 1) or takes them out (`-1`).
    fn count(&self, rows: &[AuditRow], sign: i64) {
        self.usage.borrow_mut().count(rows, sign, self.usage_period());
        let mut daily = self.daily.borrow_mut();
        for r in rows {
            let (Some(project), Some(key)) = (&r.project_id, &r.key_id) else { continue };
            let route = r.route.clone().unwrap_or_else(|| r.path.clone());
            let slot = (project.clone(), key.clone(), utc_date(r.ts), r.method.clone(), route);
            let c = daily.entry(slot).or_default();
            c.0 += sign;
            c.1 += sign * i64::from((400..500).contains(&r.status));
            c.2 += sign * i64::from(r.status >= 500);
            c.3[LatencyBuckets::bucket(r.response_time_ms)] += sign;
        }
    }

    pub fn usage_period(&self) -> i64 {
        match self.usage_period_ms.get() {
            0 => 3_600_000,
            ms => ms,
        }
    }

    /// A project's rows in `(ts, request_id)` order.
    fn project_rows(&self, project_id: Option<&str>) -> Vec<AuditRow> {
        let mut rows: Vec<AuditRow> =
            self.rows.borrow().values().filter(|r| r.project_id.as_deref() == project_id).cloned().collect();
        rows.sort_by(|a, b| position(a).cmp(&position(b)));
        rows
    }
}

fn position(row: &AuditRow) -> (i64, &str) {
    (row.ts, row.request_id.as_str())
}

fn at(c: &Cursor) -> (i64, &str) {
    (c.ts, c.id.as_str())
}

impl AuditStore for FakeStore {
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        // D1 refuses a bound string over 2,000,000 bytes: the arrays the adapter binds must fit.
        if let Some(array) = packed_for_d1(rows).iter().find(|a| !fits_d1_value(a)) {
            return Err(PortError(format!("D1: string or blob too big ({} bytes)", array.len())));
        }
        self.faults
            .run("d1 insert audit rows", || {
                let new: Vec<AuditRow> = {
                    let table = self.audit.rows.borrow();
                    let mut seen = std::collections::BTreeSet::new();
                    rows.iter()
                        .filter(|r| !table.contains_key(&r.request_id) && seen.insert(r.request_id.clone()))
                        .cloned()
                        .collect()
                };
                self.audit.count(&new, 1);
                self.audit.seed(new);
            })
            .await
    }

    async fn log_snapshot(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<(Vec<AuditRow>, Vec<ObjectSummary>), PortError> {
        self.faults
            .run("d1 log snapshot", || {
                let mut rows = self.audit.project_rows(Some(project_id));
                rows.reverse();
                let hot = rows
                    .into_iter()
                    .filter(|r| filter.matches(r))
                    .filter(|r| page.after.as_ref().is_none_or(|c| position(r) < at(c)))
                    .take(page.fetch_len())
                    .collect();
                let mut objects: Vec<ObjectSummary> = self
                    .audit
                    .objects
                    .borrow()
                    .values()
                    .filter(|o| o.project_id.as_deref() == Some(project_id))
                    .filter(|o| filter.from_ms.is_none_or(|f| o.last_ts >= f))
                    .filter(|o| filter.to_ms.is_none_or(|t| o.first_ts <= t))
                    .filter(|o| page.after.as_ref().is_none_or(|c| at(&o.first()) < at(c)))
                    .cloned()
                    .collect();
                objects.sort_by(|a, b| (b.last_ts, &b.last_id).cmp(&(a.last_ts, &a.last_id)));
                objects.truncate(SUMMARIES_PER_PAGE);
                (hot, objects)
            })
            .await
    }

    async fn objects_covering_each(
        &self,
        positions: &[(Option<&str>, &Cursor)],
        limit: usize,
    ) -> Result<Vec<Vec<ObjectSummary>>, PortError> {
        self.faults
            .run("d1 objects covering", || {
                let objects = self.audit.objects.borrow();
                let covering = |(project_id, at_): &(Option<&str>, &Cursor)| {
                    let mut covering: Vec<ObjectSummary> = objects
                        .values()
                        .filter(|o| {
                            o.project_id.as_deref() == *project_id
                                && at(&o.first()) <= at(at_)
                                && at(at_) <= at(&o.last())
                        })
                        .cloned()
                        .collect();
                    covering.sort_by(|a, b| (a.last_ts, &a.last_id).cmp(&(b.last_ts, &b.last_id)));
                    covering.truncate(limit);
                    covering
                };
                positions.iter().map(covering).collect()
            })
            .await
    }

    async fn stats(&self, of: StatsOf<'_>) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
        let StatsOf { project_id, key_id, endpoint, since_ms } = of;
        self.faults
            .run("d1 stats", || {
                let since = utc_date(since_ms);
                let mut days: BTreeMap<String, DayCount> = BTreeMap::new();
                let mut endpoints: BTreeMap<(String, String), EndpointCount> = BTreeMap::new();
                for ((p, k, day, method, route), (total, c4, c5, buckets)) in self.audit.daily.borrow().iter()
                {
                    let other_endpoint = endpoint.is_some_and(|(m, r)| m != method || r != route);
                    if p != project_id || key_id.is_some_and(|key| key != k) || other_endpoint || *day < since
                    {
                        continue;
                    }
                    let latency = LatencyBuckets::from_counts(buckets.map(|b| b as u64));
                    let d = days.entry(day.clone()).or_insert(DayCount {
                        day: day.clone(),
                        total: 0,
                        client_errors: 0,
                        server_errors: 0,
                        latency: LatencyBuckets::default(),
                    });
                    d.total += *total as u64;
                    d.client_errors += *c4 as u64;
                    d.server_errors += *c5 as u64;
                    d.latency = d.latency.plus(&latency);
                    let e = endpoints.entry((method.clone(), route.clone())).or_insert(EndpointCount {
                        method: method.clone(),
                        route: route.clone(),
                        total: 0,
                        errors: 0,
                        latency: LatencyBuckets::default(),
                    });
                    e.total += *total as u64;
                    e.errors += (*c4 + *c5) as u64;
                    e.latency = e.latency.plus(&latency);
                }
                let mut top: Vec<EndpointCount> = endpoints.into_values().collect();
                top.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.route.cmp(&b.route)));
                top.truncate(10);
                (days.into_values().collect(), top)
            })
            .await
    }

    async fn keys_last_used(
        &self,
        project_id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, String)>, PortError> {
        self.faults
            .run("d1 keys last used", || {
                let since = utc_date(since_ms);
                let mut last: BTreeMap<String, String> = BTreeMap::new();
                for ((p, key, day, ..), (total, ..)) in self.audit.daily.borrow().iter() {
                    if p == project_id && *day >= since && *total > 0 {
                        let d = last.entry(key.clone()).or_default();
                        *d = d.clone().max(day.clone());
                    }
                }
                last.into_iter().collect()
            })
            .await
    }

    async fn expired_rows(&self, before_ms: i64, limit: usize) -> Result<Vec<AuditRow>, PortError> {
        self.faults
            .run("d1 expired rows", || {
                let mut rows: Vec<AuditRow> =
                    self.audit.rows.borrow().values().filter(|r| r.ts < before_ms).cloned().collect();
                rows.sort_by(|a, b| position(a).cmp(&position(b)));
                rows.truncate(limit);
                rows
            })
            .await
    }

    async fn clear_slices(&self, slices: &[ArchivedSlice<'_>]) -> Result<Vec<usize>, PortError> {
        if self.audit.refuse_deletes.get() > 0 {
            self.audit.refuse_deletes.set(self.audit.refuse_deletes.get() - 1);
            return Err(PortError("d1 clear slices: refused".into()));
        }
        // One transaction: every slice's statements in order, each slice's under its own guard.
        self.faults
            .run("d1 clear slices", || slices.iter().map(|slice| self.clear_slice(slice)).collect())
            .await
    }
}

impl FakeStore {
    fn clear_slice(&self, slice: &ArchivedSlice<'_>) -> usize {
        let in_range: Vec<String> = self
            .audit
            .project_rows(slice.project_id)
            .into_iter()
            .filter(|r| position(r) >= at(slice.first) && position(r) <= at(slice.last))
            .map(|r| r.request_id)
            .collect();
        if in_range.len() != slice.count {
            return 0;
        }
        if let Some(s) = slice.summary {
            self.audit.objects.borrow_mut().insert(s.key.clone(), s.clone());
            if let Some(project) = &s.project_id {
                let mut due = self.audit.digest_due.borrow_mut();
                let since = due.entry(project.clone()).or_insert(s.first_ts);
                *since = (*since).min(s.first_ts);
            }
        }
        self.audit.count(slice.copies, -1);
        let mut table = self.audit.rows.borrow_mut();
        let tail = slice
            .tail
            .iter()
            .filter(|id| table.get(*id).is_some_and(|r| r.project_id.as_deref() == slice.project_id));
        let tail: Vec<String> = tail.cloned().collect();
        in_range.iter().chain(&tail).for_each(|id| {
            table.remove(id);
        });
        slice.count
    }
}

/// R2 in memory. Objects hold the NDJSON as written (compression is the adapter's business), so a
/// day's download is the concatenation of its objects' lines.
pub struct FakeArchive {
    pub faults: Rc<Faults>,
    pub objects: RefCell<BTreeMap<String, Vec<u8>>>,
    /// The request ids each object holds, in its order (kept beside the bytes for cheap checks).
    pub ids: RefCell<BTreeMap<String, Vec<String>>>,
    /// Session-recording segments, apart from the audit objects.
    pub recording_segments: RefCell<BTreeMap<String, Vec<u8>>>,
    /// Usage exports (`usage/…`), apart from the audit objects.
    pub usage_objects: RefCell<BTreeMap<String, Vec<u8>>>,
    /// Puts fail before their effect while this is set.
    pub refuse_puts: Cell<bool>,
    /// The chain heads of the projects whose objects it holds (their Durable Objects, where the
    /// roll-up binds each object it writes): kept beside the bucket for the tests' convenience.
    pub heads: Rc<super::audit_heads::FakeAuditHeads>,
}

impl FakeArchive {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeArchive {
            heads: Rc::new(super::audit_heads::FakeAuditHeads::new(faults.clone())),
            faults,
            objects: RefCell::default(),
            ids: RefCell::default(),
            recording_segments: RefCell::default(),
            usage_objects: RefCell::default(),
            refuse_puts: Cell::new(false),
        }
    }

    /// Every archived row, object by object in key order.
    pub fn rows(&self) -> Vec<(String, AuditRow)> {
        self.objects
            .borrow()
            .iter()
            .flat_map(|(key, bytes)| {
                let text = String::from_utf8(bytes.clone()).expect("NDJSON is UTF-8");
                text.lines()
                    .map(|line| (key.clone(), serde_json::from_str(line).expect("an archived line is a row")))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

fn ndjson_ids(ndjson: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(ndjson).expect("NDJSON is UTF-8");
    text.lines()
        .map(|line| serde_json::from_str::<AuditRow>(line).expect("an archived line is a row").request_id)
        .collect()
}

impl Archive for FakeArchive {
    /// Objects are kept as their NDJSON here (compression is the adapter's business).
    async fn seal(&self, ndjson: &[u8]) -> Result<Vec<u8>, PortError> {
        Ok(ndjson.to_vec())
    }

    async fn put(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError> {
        super::over_limit("r2 key", key.len(), gatehouse_core::platform::R2_MAX_KEY_BYTES)?;
        if self.refuse_puts.get() {
            return Err(PortError("r2 put: refused".into()));
        }
        let ids = ndjson_ids(ndjson);
        self.faults
            .run("r2 put", || {
                self.objects.borrow_mut().insert(key.to_owned(), ndjson.to_vec());
                self.ids.borrow_mut().insert(key.to_owned(), ids);
            })
            .await
    }

    async fn put_digest(&self, key: &str, json: &[u8]) -> Result<(), PortError> {
        super::over_limit("r2 key", key.len(), gatehouse_core::platform::R2_MAX_KEY_BYTES)?;
        self.faults
            .run("r2 put digest", || self.objects.borrow_mut().insert(key.to_owned(), json.to_vec()))
            .await?;
        Ok(())
    }

    async fn put_usage(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError> {
        super::over_limit("r2 key", key.len(), gatehouse_core::platform::R2_MAX_KEY_BYTES)?;
        if self.refuse_puts.get() {
            return Err(PortError("r2 put: refused".into()));
        }
        self.faults
            .run("r2 put usage", || self.usage_objects.borrow_mut().insert(key.to_owned(), ndjson.to_vec()))
            .await?;
        Ok(())
    }

    async fn put_recording_segment(&self, key: &str, json: &[u8]) -> Result<(), PortError> {
        super::over_limit("r2 key", key.len(), gatehouse_core::platform::R2_MAX_KEY_BYTES)?;
        self.faults
            .run("r2 put recording segment", || {
                self.recording_segments.borrow_mut().insert(key.to_owned(), json.to_vec());
            })
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ArchiveObject>, PortError> {
        self.faults
            .run("r2 list", || {
                self.objects
                    .borrow()
                    .iter()
                    .filter(|(k, _)| k.starts_with(prefix))
                    .map(|(k, v)| ArchiveObject { key: k.clone(), size: v.len() as u64, uploaded_ms: 0 })
                    .collect()
            })
            .await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        self.faults.run("r2 get", || self.objects.borrow().get(key).cloned()).await
    }

    async fn read_ndjson(&self, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        self.faults.run("r2 read", || self.objects.borrow().get(key).cloned()).await
    }

    /// Objects are kept as their NDJSON here: its hash is what [`Archive::put`] answers.
    async fn read_stored(&self, key: &str) -> Result<Option<StoredObject>, PortError> {
        let stored = self.objects.borrow().get(key).map(|ndjson| StoredObject {
            sha256: gatehouse_core::digest::sha256_hex(ndjson),
            ndjson: Some(ndjson.clone()),
        });
        self.faults.run("r2 read", || stored).await
    }
}

impl DigestStore for FakeStore {
    async fn projects_due_for_digest(
        &self,
        period_ms: i64,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<DigestDue>, PortError> {
        self.faults
            .run("d1 projects due for digest", || {
                let mut due: Vec<(i64, String)> = self
                    .audit
                    .digest_due
                    .borrow()
                    .iter()
                    .filter(|(_, since)| **since < before_ms)
                    .map(|(p, since)| (*since, p.clone()))
                    .collect();
                due.sort();
                due.truncate(limit);
                let next = self.audit.digest_next.borrow();
                let projects = self.directory.projects.borrow();
                due.into_iter()
                    .map(|(since, id)| {
                        let created = projects.iter().find(|p| p.id == id).map_or(since, |p| p.created_at);
                        let first_period = next
                            .get(&id)
                            .copied()
                            .unwrap_or(gatehouse_core::digest::period_start(created, period_ms));
                        DigestDue { project_id: id, first_period }
                    })
                    .collect()
            })
            .await
    }

    async fn projects_waiting(&self, projects: &[String], before_ms: i64) -> Result<Vec<String>, PortError> {
        self.faults
            .run("d1 projects waiting", || {
                let rows = self.audit.rows.borrow();
                projects
                    .iter()
                    .filter(|p| rows.values().any(|r| r.project_id.as_ref() == Some(*p) && r.ts < before_ms))
                    .cloned()
                    .collect()
            })
            .await
    }

    async fn chain_starts(&self, projects: &[String]) -> Result<Vec<ChainStart>, PortError> {
        self.faults
            .run("d1 chain starts", || {
                let digests = self.audit.digests.borrow();
                let digested = self.audit.digested.borrow();
                let objects = self.audit.objects.borrow();
                projects
                    .iter()
                    .map(|project| ChainStart {
                        project_id: project.clone(),
                        last: digests
                            .iter()
                            .filter(|((p, _), _)| p == project)
                            .map(|(_, d)| d.clone())
                            .next_back(),
                        objects: objects
                            .values()
                            .filter(|o| {
                                o.project_id.as_ref() == Some(project) && !digested.contains_key(&o.key)
                            })
                            .map(|o| UndigestedObject {
                                project_id: project.clone(),
                                key: o.key.clone(),
                                sha256: o.sha256.clone(),
                                rows: u64::from(o.rows),
                                first_id: o.first_id.clone(),
                                last_id: o.last_id.clone(),
                                first_ts: o.first_ts,
                            })
                            .collect(),
                    })
                    .collect()
            })
            .await
    }

    async fn record_digests(&self, digests: &[DigestWritten]) -> Result<(), PortError> {
        self.faults
            .run("d1 record digests", || {
                let mut digested = self.audit.digested.borrow_mut();
                let mut records = self.audit.digests.borrow_mut();
                for d in digests {
                    records.insert((d.project_id.clone(), d.record.period_start), d.record.clone());
                    for key in &d.listed {
                        digested.entry(key.clone()).or_insert(d.record.period_start);
                    }
                }
            })
            .await
    }

    async fn settle_digests(
        &self,
        settled: &[Settled],
        alerts: &[(String, String)],
        now_ms: i64,
    ) -> Result<(), PortError> {
        self.faults
            .run("d1 settle digests", || {
                let mut due = self.audit.digest_due.borrow_mut();
                let mut next = self.audit.digest_next.borrow_mut();
                let mut kept = self.audit.digest_alerts.borrow_mut();
                for s in settled {
                    match s.oldest_pending_ts {
                        Some(since) => due.insert(s.project_id.clone(), since),
                        None => due.remove(&s.project_id),
                    };
                    let at = next.entry(s.project_id.clone()).or_insert(s.covered_to);
                    *at = (*at).max(s.covered_to);
                    kept.remove(&s.project_id);
                }
                for (project, alert) in alerts {
                    kept.insert(project.clone(), (now_ms, alert.clone()));
                }
            })
            .await
    }

    async fn digest_health(&self, before_ms: i64) -> Result<DigestHealth, PortError> {
        self.faults
            .run("d1 digest health", || {
                let due = self.audit.digest_due.borrow();
                let behind: Vec<i64> = due.values().copied().filter(|since| *since < before_ms).collect();
                DigestHealth {
                    projects_behind: behind.len() as u64,
                    oldest_undigested_ts: behind.iter().copied().min(),
                    alerts: self
                        .audit
                        .digest_alerts
                        .borrow()
                        .iter()
                        .map(|(p, (at, what))| (p.clone(), *at, what.clone()))
                        .collect(),
                }
            })
            .await
    }

    async fn digests(&self, of: DigestsOf<'_>) -> Result<Vec<DigestRecord>, PortError> {
        let DigestsOf { project_id, from_ms, to_ms, limit } = of;
        self.faults
            .run("d1 digests", || {
                let digests = self.audit.digests.borrow();
                let range = (project_id.to_owned(), i64::MIN)..(project_id.to_owned(), to_ms);
                digests
                    .range(range)
                    .map(|(_, d)| d)
                    .filter(|d| d.period_end > from_ms)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .await
    }
}
