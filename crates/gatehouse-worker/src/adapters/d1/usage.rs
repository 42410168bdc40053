//! Usage for billing (SPEC §22): the [`UsageStore`] port over each project's audit database, where
//! the counts are kept by the transactions that insert the rows they count.

use wasm_bindgen::JsValue;

use super::{int, opt_text, text, AuditLogs, D1Store};
use gatehouse_core::ports::{PortError, RunSummary, UsageDue, UsageSnapshot, UsageStore};
use gatehouse_core::usage::{GroupBy, UsageGroup, UsageQuery, UsageRun, RECONCILE_OBJECTS_MAX};

/// A run's row of `usage_runs`.
#[derive(serde::Deserialize)]
struct RunRow {
    seq: u32,
    period_ms: i64,
    made_at: i64,
}

/// What the runs of period ?2 (of project ?1; NULL: every project) exported, to be narrowed by
/// the runs' state.
const RUN_VALUES: &str = "SELECT coalesce(sum(r.value), 0) FROM usage_records r JOIN usage_runs u
      ON (u.project_id, u.period_start, u.seq) = (r.project_id, r.period_start, r.seq)
    WHERE r.period_start = ?2 AND (?1 IS NULL OR r.project_id = ?1)";

/// ?1 project, ?2 period start: one period's rows.
const PERIOD: &str = "project_id = ?1 AND period_start = ?2";

impl D1Store {
    /// Every audit database this store reaches (itself when it is one).
    fn audit_logs(&self) -> Vec<&D1Store> {
        match &self.audit {
            AuditLogs::Own => vec![self],
            AuditLogs::Placed(logs) => logs.iter().collect(),
        }
    }

    /// A run and its records in one batch: `which` is the condition on `usage_runs` that names it
    /// (bound as `args`, ?1 the project and ?2 the period start).
    async fn read_run(
        &self,
        project_id: &str,
        start: i64,
        which: &str,
        args: &[JsValue],
    ) -> Result<Option<UsageRun>, PortError> {
        let run = self.statement(
            &format!("SELECT seq, period_ms, made_at FROM usage_runs WHERE {which} LIMIT 1"),
            args,
        )?;
        let records = self.statement(
            &format!(
                "SELECT key_id, identity_id, value, total, previous_seq FROM usage_records
                 WHERE {PERIOD} AND seq = (SELECT seq FROM usage_runs WHERE {which} LIMIT 1)
                 ORDER BY key_id, identity_id"
            ),
            args,
        )?;
        let results = self.results(vec![run, records]).await?;
        let runs: Vec<RunRow> = results[0].results().map_err(PortError::from_display)?;
        let Some(row) = runs.into_iter().next() else { return Ok(None) };
        Ok(Some(UsageRun {
            project_id: project_id.to_owned(),
            period_start: start,
            period_ms: row.period_ms,
            seq: row.seq,
            made_at: row.made_at,
            records: results[1].results().map_err(PortError::from_display)?,
        }))
    }
}

impl UsageStore for D1Store {
    async fn usage_due(&self, due: UsageDue) -> Result<Vec<(String, i64)>, PortError> {
        let UsageDue { period_ms, from_ms, ended_by_ms, limit } = due;
        #[derive(serde::Deserialize)]
        struct Due {
            project_id: String,
            period_start: i64,
        }
        let mut due = Vec::new();
        for log in self.audit_logs() {
            let rows: Vec<Due> = log
                .rows(
                    "SELECT project_id, period_start FROM usage_counts
                     WHERE requests <> exported AND period_start + ?1 <= ?2 AND period_start >= ?4
                     UNION
                     SELECT project_id, period_start FROM usage_runs WHERE sent_at IS NULL AND period_start >= ?4
                     ORDER BY period_start, project_id LIMIT ?3",
                    &[int(period_ms), int(ended_by_ms), int(limit as i64), int(from_ms)],
                )
                .await?;
            due.extend(rows.into_iter().map(|d| (d.project_id, d.period_start)));
        }
        due.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        due.truncate(limit);
        Ok(due)
    }

    async fn prune_usage(&self, before_ms: i64, limit: usize) -> Result<usize, PortError> {
        let mut pruned = 0;
        for log in self.audit_logs() {
            let args = [int(before_ms), int(limit as i64)];
            let statements = [
                ("usage_counts", "project_id, period_start, key_id, identity_id, route"),
                ("usage_records", "project_id, period_start, seq, key_id, identity_id"),
                ("usage_runs", "project_id, period_start, seq"),
            ]
            .iter()
            .map(|(table, key)| {
                log.statement(
                    &format!(
                        "DELETE FROM {table} WHERE ({key}) IN
                           (SELECT {key} FROM {table} WHERE period_start < ?1 LIMIT ?2)"
                    ),
                    &args,
                )
            })
            .collect::<Result<Vec<_>, PortError>>()?;
            pruned += log.batch(statements).await?.iter().sum::<usize>();
        }
        Ok(pruned)
    }

    async fn unsent_usage_run(&self, project_id: &str, start: i64) -> Result<Option<UsageRun>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let unsent = format!("{PERIOD} AND sent_at IS NULL");
        log.read_run(project_id, start, &unsent, &[text(project_id), int(start)]).await
    }

    async fn take_usage_run(
        &self,
        project_id: &str,
        start: i64,
        period_ms: i64,
        run_id: &str,
        made_at: i64,
    ) -> Result<Option<UsageRun>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let args = [text(project_id), int(start), int(period_ms), text(run_id), int(made_at)];
        // One transaction: the run (only if none of the period is unsent and a count changed),
        // its records (per subject, what the counts hold beyond earlier runs), the counts marked
        // exported — the last two only if this attempt's run was written. A record names the run
        // whose record of its subject it replaces.
        let ours = "EXISTS (SELECT 1 FROM usage_runs WHERE run_id = ?4)";
        let statements = vec![
            log.statement(
                &format!(
                    "INSERT INTO usage_runs (project_id, period_start, seq, period_ms, run_id, made_at)
                     SELECT ?1, ?2, coalesce((SELECT max(seq) + 1 FROM usage_runs WHERE {PERIOD}), 0), ?3, ?4, ?5
                     WHERE NOT EXISTS (SELECT 1 FROM usage_runs WHERE {PERIOD} AND sent_at IS NULL)
                       AND EXISTS (SELECT 1 FROM usage_counts WHERE {PERIOD} AND requests <> exported)"
                ),
                &args,
            )?,
            log.statement(
                "INSERT INTO usage_records (project_id, period_start, seq, key_id, identity_id, value, total, previous_seq)
                 SELECT ?1, ?2, r.seq, c.key_id, c.identity_id, sum(c.requests - c.exported), sum(c.requests),
                        (SELECT max(p.seq) FROM usage_records p
                         WHERE p.project_id = ?1 AND p.period_start = ?2 AND p.key_id = c.key_id
                           AND p.identity_id = c.identity_id AND p.seq < r.seq)
                 FROM usage_counts c JOIN usage_runs r ON r.run_id = ?4
                 WHERE c.project_id = ?1 AND c.period_start = ?2
                 GROUP BY c.key_id, c.identity_id HAVING sum(c.requests - c.exported) <> 0",
                &args[..4],
            )?,
            log.statement(
                &format!("UPDATE usage_counts SET exported = requests WHERE {PERIOD} AND requests <> exported AND {ours}"),
                &args[..4],
            )?,
        ];
        log.batch(statements).await?;
        let ours = format!("{PERIOD} AND run_id = ?3");
        log.read_run(project_id, start, &ours, &[text(project_id), int(start), text(run_id)]).await
    }

    async fn usage_run_sent(
        &self,
        project_id: &str,
        start: i64,
        seq: u32,
        sent_at: i64,
    ) -> Result<(), PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let statement = log.statement(
            &format!("UPDATE usage_runs SET sent_at = ?4 WHERE {PERIOD} AND seq = ?3 AND sent_at IS NULL"),
            &[text(project_id), int(start), int(seq.into()), int(sent_at)],
        )?;
        log.batch(vec![statement]).await.map(drop)
    }

    async fn usage(&self, project_id: &str, query: &UsageQuery) -> Result<(Vec<UsageGroup>, i64), PortError> {
        #[derive(serde::Deserialize)]
        struct Total {
            total: i64,
        }
        let name = match query.group_by {
            GroupBy::Key => "key_id",
            GroupBy::Identity => "identity_id",
            GroupBy::Route => "route",
            GroupBy::Day => "strftime('%Y-%m-%d', period_start / 1000, 'unixepoch')",
            GroupBy::Hour => "strftime('%Y-%m-%dT%H:00:00Z', period_start / 1000, 'unixepoch')",
        };
        let range = "project_id = ?1 AND period_start >= ?2 AND period_start < ?3";
        let args = [
            text(project_id),
            int(query.from_ms),
            int(query.to_ms),
            opt_text(query.after.as_deref()),
            int(query.limit as i64 + 1),
        ];
        let log = self.log_of(Some(project_id)).await?;
        let groups = log.statement(
            &format!(
                "SELECT {name} AS name, sum(requests) AS requests FROM usage_counts WHERE {range}
                 GROUP BY 1 HAVING sum(requests) > 0 AND (?4 IS NULL OR name > ?4) ORDER BY 1 LIMIT ?5"
            ),
            &args,
        )?;
        let total = log.statement(
            &format!("SELECT coalesce(sum(requests), 0) AS total FROM usage_counts WHERE {range}"),
            &args[..3],
        )?;
        let results = log.results(vec![groups, total]).await?;
        let groups = results[0].results().map_err(PortError::from_display)?;
        let total: Vec<Total> = results[1].results().map_err(PortError::from_display)?;
        Ok((groups, total.first().map_or(0, |t| t.total)))
    }

    async fn usage_runs(
        &self,
        project_id: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<RunSummary>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        log.rows(
            "SELECT r.period_start, r.seq, r.made_at, r.sent_at,
               count(c.key_id) AS records, coalesce(sum(c.value), 0) AS requests
             FROM usage_runs r LEFT JOIN usage_records c
               ON c.project_id = r.project_id AND c.period_start = r.period_start AND c.seq = r.seq
             WHERE r.project_id = ?1 AND r.period_start >= ?2 AND r.period_start < ?3
             GROUP BY r.period_start, r.seq ORDER BY r.period_start DESC, r.seq DESC LIMIT ?4",
            &[text(project_id), int(from_ms), int(to_ms), int(limit as i64)],
        )
        .await
    }

    async fn usage_snapshot(
        &self,
        project_id: Option<&str>,
        start: i64,
        period_ms: i64,
    ) -> Result<UsageSnapshot, PortError> {
        #[derive(serde::Deserialize)]
        struct Sum {
            n: i64,
        }
        #[derive(serde::Deserialize)]
        struct Object {
            key: String,
        }
        let logs = match project_id {
            Some(p) => vec![self.log_of(Some(p)).await?],
            None => self.audit_logs(),
        };
        // ?1 project (NULL: every one), ?2 start, ?3 end.
        let args = [opt_text(project_id), int(start), int(start + period_ms)];
        let ours = "(?1 IS NULL OR project_id = ?1)";
        let mut snapshot = UsageSnapshot::default();
        for log in logs {
            let statements = vec![
                log.statement(&format!("SELECT ({RUN_VALUES} AND u.sent_at IS NOT NULL) AS n"), &args[..2])?,
                log.statement(
                    &format!(
                        "SELECT (SELECT coalesce(sum(requests - exported), 0) FROM usage_counts
                                 WHERE period_start = ?2 AND {ours})
                              + ({RUN_VALUES} AND u.sent_at IS NULL) AS n"
                    ),
                    &args[..2],
                )?,
                log.statement(
                    &format!(
                        "SELECT count(*) AS n FROM audit_log
                         WHERE ts >= ?2 AND ts < ?3 AND billable = 1 AND project_id IS NOT NULL AND {ours}"
                    ),
                    &args,
                )?,
                log.statement(
                    &format!(
                        "SELECT key FROM audit_objects
                         WHERE last_ts >= ?2 AND first_ts < ?3 AND project_id IS NOT NULL AND {ours}
                         LIMIT {}",
                        RECONCILE_OBJECTS_MAX + 1
                    ),
                    &args,
                )?,
            ];
            // One batch: a roll-up commits before or after it, so no row is counted twice or missed.
            let results = log.results(statements).await?;
            let sum = |i: usize| -> Result<i64, PortError> {
                let rows: Vec<Sum> = results[i].results().map_err(PortError::from_display)?;
                Ok(rows.first().map_or(0, |s| s.n))
            };
            snapshot.exported += sum(0)?;
            snapshot.pending += sum(1)?;
            snapshot.hot_billable += sum(2)?;
            let objects: Vec<Object> = results[3].results().map_err(PortError::from_display)?;
            snapshot.objects.extend(objects.into_iter().map(|o| o.key));
        }
        Ok(snapshot)
    }
}
