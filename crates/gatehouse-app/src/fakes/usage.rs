//! Usage for billing in memory (SPEC §22): `usage_counts`, `usage_runs` and `usage_records` behind
//! [`UsageStore`], each call one D1 statement or batch, whole or not at all, through the faults.

use std::collections::BTreeMap;

use super::FakeStore;
use gatehouse_core::audit::AuditRow;
use gatehouse_core::ports::{PortError, RunSummary, UsageDue, UsageSnapshot, UsageStore};
use gatehouse_core::time::rfc3339;
use gatehouse_core::usage::{period_start, GroupBy, UsageGroup, UsageQuery, UsageRecord, UsageRun};

/// (project, period start, key, identity or `""`, `METHOD route`).
type Slot = (String, i64, String, String, String);

/// A run as `usage_runs` and its `usage_records` hold it.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub period_ms: i64,
    pub made_at: i64,
    pub sent_at: Option<i64>,
    pub records: Vec<UsageRecord>,
}

#[derive(Debug, Default)]
pub struct UsageTables {
    /// Slot → (requests, exported).
    pub counts: BTreeMap<Slot, (i64, i64)>,
    /// (project, period start, seq) → run.
    pub runs: BTreeMap<(String, i64, u32), StoredRun>,
}

impl UsageTables {
    /// Adds the billable rows to their periods' counts (`sign` 1) or takes them out (`-1`).
    pub fn count(&mut self, rows: &[AuditRow], sign: i64, period_ms: i64) {
        for r in rows.iter().filter(|r| r.billable) {
            let (Some(project), Some(key)) = (&r.project_id, &r.key_id) else { continue };
            let route = format!("{} {}", r.method, r.route.as_deref().unwrap_or(&r.path));
            let identity = r.identity_id.clone().unwrap_or_default();
            let slot = (project.clone(), period_start(r.ts, period_ms), key.clone(), identity, route);
            self.counts.entry(slot).or_default().0 += sign;
        }
    }

    fn period_counts<'a>(
        &'a self,
        project_id: &'a str,
        start: i64,
    ) -> impl Iterator<Item = (&'a Slot, &'a (i64, i64))> + 'a {
        self.counts.iter().filter(move |((p, s, ..), _)| p == project_id && *s == start)
    }

    fn run(&self, project_id: &str, start: i64, seq: u32, stored: &StoredRun) -> UsageRun {
        UsageRun {
            project_id: project_id.to_owned(),
            period_start: start,
            period_ms: stored.period_ms,
            seq,
            made_at: stored.made_at,
            records: stored.records.clone(),
        }
    }
}

impl UsageStore for FakeStore {
    async fn usage_due(&self, due: UsageDue) -> Result<Vec<(String, i64)>, PortError> {
        let UsageDue { period_ms, from_ms, ended_by_ms, limit } = due;
        self.faults
            .run("d1 usage due", || {
                let usage = self.audit.usage.borrow();
                let mut due: Vec<(String, i64)> = usage
                    .counts
                    .iter()
                    .filter(|((_, start, ..), (requests, exported))| {
                        requests != exported && start + period_ms <= ended_by_ms
                    })
                    .map(|((p, start, ..), _)| (p.clone(), *start))
                    .chain(
                        usage
                            .runs
                            .iter()
                            .filter(|(_, r)| r.sent_at.is_none())
                            .map(|((p, s, _), _)| (p.clone(), *s)),
                    )
                    .collect();
                due.retain(|(_, start)| *start >= from_ms);
                due.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
                due.dedup();
                due.truncate(limit);
                due
            })
            .await
    }

    async fn prune_usage(&self, before_ms: i64, limit: usize) -> Result<usize, PortError> {
        self.faults
            .run("d1 prune usage", || {
                let mut usage = self.audit.usage.borrow_mut();
                let old_counts: Vec<Slot> =
                    usage.counts.keys().filter(|(_, s, ..)| *s < before_ms).take(limit).cloned().collect();
                let old_runs: Vec<(String, i64, u32)> =
                    usage.runs.keys().filter(|(_, s, _)| *s < before_ms).take(limit).cloned().collect();
                for slot in &old_counts {
                    usage.counts.remove(slot);
                }
                let records: usize =
                    old_runs.iter().map(|k| usage.runs.remove(k).map_or(0, |r| r.records.len())).sum();
                old_counts.len() + old_runs.len() + records
            })
            .await
    }

    async fn unsent_usage_run(&self, project_id: &str, start: i64) -> Result<Option<UsageRun>, PortError> {
        self.faults
            .run("d1 unsent usage run", || {
                let usage = self.audit.usage.borrow();
                usage
                    .runs
                    .iter()
                    .find(|((p, s, _), r)| p == project_id && *s == start && r.sent_at.is_none())
                    .map(|((_, _, seq), r)| usage.run(project_id, start, *seq, r))
            })
            .await
    }

    async fn take_usage_run(
        &self,
        project_id: &str,
        start: i64,
        period_ms: i64,
        _run_id: &str, // D1 needs it to tell its own insert; here the take is one step
        made_at: i64,
    ) -> Result<Option<UsageRun>, PortError> {
        self.faults
            .run("d1 take usage run", || {
                let mut usage = self.audit.usage.borrow_mut();
                let runs: Vec<(u32, bool)> = usage
                    .runs
                    .iter()
                    .filter(|((p, s, _), _)| p == project_id && *s == start)
                    .map(|((_, _, seq), r)| (*seq, r.sent_at.is_none()))
                    .collect();
                let changed = usage.period_counts(project_id, start).any(|(_, (r, e))| r != e);
                if runs.iter().any(|(_, unsent)| *unsent) || !changed {
                    return None;
                }
                let seq = runs.iter().map(|(seq, _)| seq + 1).max().unwrap_or(0);
                let mut subjects: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
                for ((_, _, key, identity, _), (requests, exported)) in usage.period_counts(project_id, start)
                {
                    let s = subjects.entry((key.clone(), identity.clone())).or_default();
                    s.0 += requests - exported;
                    s.1 += requests;
                }
                let records = subjects
                    .into_iter()
                    .filter(|(_, (value, _))| *value != 0)
                    .map(|((key_id, identity), (value, total))| {
                        let identity_id = Some(identity).filter(|i| !i.is_empty());
                        // The latest earlier run with a record of the subject.
                        let previous_seq = usage
                            .runs
                            .iter()
                            .filter(|((p, s, _), r)| {
                                p == project_id
                                    && *s == start
                                    && r.records
                                        .iter()
                                        .any(|x| x.key_id == key_id && x.identity_id == identity_id)
                            })
                            .map(|((_, _, seq), _)| *seq)
                            .max();
                        UsageRecord { key_id, identity_id, value, total, previous_seq }
                    })
                    .collect();
                for (slot, (requests, exported)) in usage.counts.iter_mut() {
                    if slot.0 == project_id && slot.1 == start {
                        *exported = *requests;
                    }
                }
                let stored = StoredRun { period_ms, made_at, sent_at: None, records };
                let run = usage.run(project_id, start, seq, &stored);
                usage.runs.insert((project_id.to_owned(), start, seq), stored);
                Some(run)
            })
            .await
    }

    async fn usage_run_sent(
        &self,
        project_id: &str,
        start: i64,
        seq: u32,
        sent_at: i64,
    ) -> Result<(), PortError> {
        self.faults
            .run("d1 usage run sent", || {
                if let Some(run) =
                    self.audit.usage.borrow_mut().runs.get_mut(&(project_id.to_owned(), start, seq))
                {
                    run.sent_at.get_or_insert(sent_at);
                }
            })
            .await
    }

    async fn usage_runs(
        &self,
        project_id: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<RunSummary>, PortError> {
        self.faults
            .run("d1 usage runs", || {
                let usage = self.audit.usage.borrow();
                let runs = usage
                    .runs
                    .iter()
                    .rev()
                    .filter(|((p, start, _), _)| p == project_id && (from_ms..to_ms).contains(start));
                runs.take(limit)
                    .map(|((_, period_start, seq), run)| RunSummary {
                        period_start: *period_start,
                        seq: *seq,
                        made_at: run.made_at,
                        sent_at: run.sent_at,
                        records: run.records.len() as u32,
                        requests: run.records.iter().map(|r| r.value).sum(),
                    })
                    .collect()
            })
            .await
    }

    async fn usage(&self, project_id: &str, query: &UsageQuery) -> Result<(Vec<UsageGroup>, i64), PortError> {
        self.faults
            .run("d1 usage", || {
                let usage = self.audit.usage.borrow();
                let mut groups: BTreeMap<String, i64> = BTreeMap::new();
                let mut total = 0;
                for ((p, start, key, identity, route), (requests, _)) in &usage.counts {
                    if p != project_id || *start < query.from_ms || *start >= query.to_ms {
                        continue;
                    }
                    total += requests;
                    let name = match query.group_by {
                        GroupBy::Key => key.clone(),
                        GroupBy::Identity => identity.clone(),
                        GroupBy::Route => route.clone(),
                        GroupBy::Day => rfc3339(*start)[..10].to_owned(),
                        GroupBy::Hour => format!("{}:00:00Z", &rfc3339(*start)[..13]),
                    };
                    *groups.entry(name).or_default() += requests;
                }
                let page = groups
                    .into_iter()
                    .filter(|(name, requests)| *requests > 0 && query.after.as_ref().is_none_or(|a| name > a))
                    .take(query.limit + 1)
                    .map(|(name, requests)| UsageGroup { name, requests })
                    .collect();
                (page, total)
            })
            .await
    }

    async fn usage_snapshot(
        &self,
        project_id: Option<&str>,
        start: i64,
        period_ms: i64,
    ) -> Result<UsageSnapshot, PortError> {
        let end = start + period_ms;
        let ours = |p: &str| project_id.is_none_or(|q| q == p);
        self.faults
            .run("d1 usage snapshot", || {
                let usage = self.audit.usage.borrow();
                let mut snapshot = UsageSnapshot::default();
                for ((p, s, _), run) in &usage.runs {
                    if ours(p) && *s == start {
                        let value: i64 = run.records.iter().map(|r| r.value).sum();
                        match run.sent_at {
                            Some(_) => snapshot.exported += value,
                            None => snapshot.pending += value,
                        }
                    }
                }
                snapshot.pending += usage
                    .counts
                    .iter()
                    .filter(|((p, s, ..), _)| ours(p) && *s == start)
                    .map(|(_, (requests, exported))| requests - exported)
                    .sum::<i64>();
                snapshot.hot_billable = self
                    .audit
                    .rows
                    .borrow()
                    .values()
                    .filter(|r| r.billable && r.ts >= start && r.ts < end)
                    .filter(|r| r.project_id.as_deref().is_some_and(ours))
                    .count() as i64;
                snapshot.objects = self
                    .audit
                    .objects
                    .borrow()
                    .values()
                    .filter(|o| {
                        o.project_id.as_deref().is_some_and(ours) && o.first_ts < end && o.last_ts >= start
                    })
                    .map(|o| o.key.clone())
                    .collect();
                snapshot
            })
            .await
    }
}
