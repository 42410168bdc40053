//! The audit log in its own database (`AUDIT_DB`): the [`AuditStore`] port — the hot tier's rows
//! with their daily aggregates, the cold tier's object summaries, and the roll-up's slices.

use std::cell::RefCell;
use std::collections::HashMap;

use futures_util::future::try_join_all;
use wasm_bindgen::JsValue;
use worker::D1PreparedStatement;

use super::{after, int, opt_int, opt_text, text, AuditLogs, D1Store};
use gatehouse_core::audit::{
    audit_binding, latency_columns, latency_sums, packed_for_d1, AuditRow, DayCount, EndpointCount,
    LatencyBuckets, LogFilter,
};
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{ArchivedSlice, AuditStore, PortError, StatsOf};
use gatehouse_core::tiers::ObjectSummary;

const AUDIT_COLUMNS: &str = "ts, request_id, project_id, key_id, key_prefix, method, path, route, status,
  response_bytes, response_time_ms, ip, user_agent, idempotency_key, replayed, original_request_id,
  rate_limit_remaining, error_code, identity_id, billable, dashboard, trace_id";

/// The `path` glob of [`gatehouse_core::audit::PathGlob`] without `LIKE` or `GLOB`, whose patterns D1
/// caps at 50 bytes: ?5 the prefix (NULL: no filter), ?14 the suffix (NULL: the glob has no `*`,
/// the path equals ?5), ?15 the middle parts as a JSON array, found in order by a recursive walk
/// over what lies between prefix and suffix (each at its first occurrence after the previous).
/// `substr`, `instr` and `length` all count characters, and `=` and `instr` are case-sensitive.
const PATH_GLOB: &str = "(?5 IS NULL OR (
    substr(path, 1, length(?5)) = ?5
    AND ((?14 IS NULL AND length(path) = length(?5))
      OR (?14 IS NOT NULL AND length(path) >= length(?5) + length(?14)
        AND substr(path, length(path) - length(?14) + 1) = ?14
        AND EXISTS (
          WITH RECURSIVE walk(i, rest) AS (
            SELECT 0, substr(path, length(?5) + 1, length(path) - length(?5) - length(?14))
            UNION ALL
            SELECT walk.i + 1, substr(walk.rest, instr(walk.rest, part.value) + length(part.value))
            FROM walk JOIN json_each(?15) AS part ON part.key = walk.i
            WHERE instr(walk.rest, part.value) > 0)
          SELECT 1 FROM walk WHERE walk.i = json_array_length(?15))))))";

thread_local! {
    /// Each project's audit database as `projects.audit_db` records it: it never changes, so the
    /// isolate asks D1 once per project (a few bytes each; cleared when it grows past 10,000).
    static PLACED: RefCell<HashMap<String, u8>> = RefCell::default();
}

impl D1Store {
    /// The audit databases of `projects` (SPEC §20), from the isolate's memory or in one query;
    /// a project D1 does not know (none yet, or an older version's row) is in the first.
    pub(super) async fn placed(&self, projects: &[&str]) -> Result<HashMap<String, u8>, PortError> {
        #[derive(serde::Deserialize)]
        struct Placed {
            id: String,
            audit_db: u8,
        }
        let mut found = HashMap::new();
        let mut unknown = Vec::new();
        PLACED.with_borrow(|placed| {
            for &p in projects {
                match placed.get(p) {
                    Some(&db) => {
                        found.insert(p.to_owned(), db);
                    }
                    None => unknown.push(p),
                }
            }
        });
        if !unknown.is_empty() {
            let ids = serde_json::to_string(&unknown).map_err(PortError::from_display)?;
            let rows: Vec<Placed> = self
                .rows(
                    "SELECT id, audit_db FROM projects WHERE id IN (SELECT value FROM json_each(?1))",
                    &[text(&ids)],
                )
                .await?;
            PLACED.with_borrow_mut(|placed| {
                if placed.len() > 10_000 {
                    placed.clear();
                }
                for r in rows {
                    placed.insert(r.id.clone(), r.audit_db);
                    found.insert(r.id, r.audit_db);
                }
            });
        }
        Ok(found)
    }

    /// Audit database `index` of the ones bound, or why it is not bound.
    pub(super) fn audit_log(logs: &[D1Store], index: u8) -> Result<&D1Store, PortError> {
        logs.get(usize::from(index)).ok_or_else(|| {
            PortError(format!(
                "the audit log is in {}, which is not bound (bind it and set AUDIT_DATABASES to include it)",
                audit_binding(index)
            ))
        })
    }

    /// Where the audit log of `project` (`None`: requests of no project) is kept.
    pub(super) async fn log_of(&self, project: Option<&str>) -> Result<&D1Store, PortError> {
        match (&self.audit, project) {
            (AuditLogs::Own, _) => Ok(self),
            (AuditLogs::Placed(logs), None) => Self::audit_log(logs, 0),
            (AuditLogs::Placed(logs), Some(p)) => {
                let index = self.placed(&[p]).await?.get(p).copied().unwrap_or(0);
                Self::audit_log(logs, index)
            }
        }
    }

    /// Inserts rows of one audit database (see [`AuditStore::insert_audit_rows`]).
    async fn insert_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let mut statements = self.insert_rows_statements(rows)?;
        // The rows this batch inserted are the uncounted ones (a copy already stored was ignored):
        // they join the aggregates and are marked counted, in the same transaction.
        statements.push(self.statement(
            &format!(
                "INSERT INTO audit_daily (project_id, key_id, day, method, route, total, client_errors, server_errors,
                                          {columns})
                 SELECT project_id, key_id, date(ts / 1000, 'unixepoch'), method, coalesce(route, path), count(*),
                        sum(status BETWEEN 400 AND 499), sum(status >= 500), {sums}
                 FROM audit_log WHERE counted = 0 AND project_id IS NOT NULL AND key_id IS NOT NULL
                 GROUP BY 1, 2, 3, 4, 5
                 ON CONFLICT (project_id, key_id, day, method, route) DO UPDATE SET
                   total = total + excluded.total,
                   client_errors = client_errors + excluded.client_errors,
                   server_errors = server_errors + excluded.server_errors,
                   {added}",
                columns = latency_columns(str::to_owned),
                sums = latency_sums("response_time_ms"),
                added = latency_columns(|c| format!("{c} = {c} + excluded.{c}")),
            ),
            &[],
        )?);
        // The billable ones join their period's usage counts (SPEC §22).
        statements.push(self.statement(
            "INSERT INTO usage_counts (project_id, period_start, key_id, identity_id, route, requests)
             SELECT project_id, ts - ts % ?1, key_id, coalesce(identity_id, ''), method || ' ' || coalesce(route, path),
                    count(*)
             FROM audit_log WHERE counted = 0 AND billable = 1 AND project_id IS NOT NULL AND key_id IS NOT NULL
             GROUP BY 1, 2, 3, 4, 5
             ON CONFLICT (project_id, period_start, key_id, identity_id, route) DO UPDATE SET
               requests = requests + excluded.requests",
            &[int(self.usage_period_ms)],
        )?);
        statements.push(self.statement("UPDATE audit_log SET counted = 1 WHERE counted = 0", &[])?);
        self.batch(statements).await.map(drop)
    }

    /// A batch's rows in as few statements as D1 binds (SPEC §19): each a JSON array of at most
    /// 2,000,000 bytes ([`packed_for_d1`]), each column read by its name (`AuditRow`'s fields are the
    /// columns), instead of a statement of 18 bound values per row.
    fn insert_rows_statements(&self, rows: &[AuditRow]) -> Result<Vec<D1PreparedStatement>, PortError> {
        let values: Vec<String> =
            AUDIT_COLUMNS.split(',').map(|c| format!("value ->> '{}'", c.trim())).collect();
        let sql = format!(
            "INSERT OR IGNORE INTO audit_log ({AUDIT_COLUMNS}) SELECT {} FROM json_each(?1)",
            values.join(", ")
        );
        packed_for_d1(rows).iter().map(|array| self.statement(&sql, &[text(array)])).collect()
    }

    fn hot_rows_statement(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<D1PreparedStatement, PortError> {
        // Every filter is bound (NULL = not filtering), so the statement text never varies.
        let (status_min, status_max) = match filter.status.map(|s| s.range()) {
            Some((a, b)) => (int(a.into()), int(b.into())),
            None => (JsValue::NULL, JsValue::NULL),
        };
        let (after_ts, after_id) = after(page.after.as_ref());
        let glob = filter.path.as_ref();
        self.statement(
            &format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_log
                 WHERE project_id = ?1
                   AND (?2 IS NULL OR method = ?2)
                   AND (?3 IS NULL OR status BETWEEN ?3 AND ?4)
                   AND {PATH_GLOB}
                   AND (?6 IS NULL OR request_id = ?6)
                   AND (?7 IS NULL OR key_id = ?7)
                   AND (?8 IS NULL OR idempotency_key = ?8)
                   AND (?9 IS NULL OR ts >= ?9)
                   AND (?10 IS NULL OR ts <= ?10)
                   AND (?11 IS NULL OR (ts, request_id) < (?11, ?12))
                   AND (?16 IS NULL OR dashboard = ?16)
                   AND (?17 IS NULL OR trace_id = ?17)
                 ORDER BY ts DESC, request_id DESC LIMIT ?13"
            ),
            &[
                text(project_id),
                opt_text(filter.method.as_deref()),
                status_min,
                status_max,
                opt_text(glob.map(|g| g.prefix.as_str())),
                opt_text(filter.request_id.as_deref()),
                opt_text(filter.key_id.as_deref()),
                opt_text(filter.idempotency_key.as_deref()),
                opt_int(filter.from_ms),
                opt_int(filter.to_ms),
                after_ts,
                after_id,
                int(page.fetch_len() as i64),
                opt_text(glob.and_then(|g| g.suffix.as_deref())),
                opt_text(glob.map(|g| g.middle_json()).as_deref()),
                opt_int(filter.dashboard.map(i64::from)),
                opt_text(filter.trace_id.as_deref()),
            ],
        )
    }
}

/// A summary as D1 keeps it: its span in columns (for the index), the whole as JSON.
#[derive(serde::Deserialize)]
struct SummaryRow {
    summary: String,
}

fn summaries(rows: Vec<SummaryRow>) -> Result<Vec<ObjectSummary>, PortError> {
    rows.into_iter().map(|r| serde_json::from_str(&r.summary).map_err(PortError::from_display)).collect()
}

/// The slice's rows, both ends inclusive: ?1 project, ?2/?3 first, ?4/?5 last.
const SLICE: &str = "project_id IS ?1 AND ts >= ?2 AND ts <= ?4
    AND (ts, request_id) >= (?2, ?3) AND (ts, request_id) <= (?4, ?5)";

impl AuditStore for D1Store {
    /// Each database's rows in one transaction, the databases side by side.
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let logs = match &self.audit {
            AuditLogs::Own => return self.insert_rows(rows).await,
            AuditLogs::Placed(logs) => logs,
        };
        let mut projects: Vec<&str> = rows.iter().filter_map(|r| r.project_id.as_deref()).collect();
        projects.sort_unstable();
        projects.dedup();
        let placed = self.placed(&projects).await?;
        let mut by_db: HashMap<u8, Vec<AuditRow>> = HashMap::new();
        for row in rows {
            let index = row.project_id.as_deref().and_then(|p| placed.get(p)).copied().unwrap_or(0);
            by_db.entry(index).or_default().push(row.clone());
        }
        let inserts = by_db
            .into_iter()
            .map(|(index, rows)| async move { Self::audit_log(logs, index)?.insert_rows(&rows).await });
        try_join_all(inserts).await.map(drop)
    }

    async fn log_snapshot(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<(Vec<AuditRow>, Vec<ObjectSummary>), PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let hot = log.hot_rows_statement(project_id, filter, page)?;
        let (after_ts, after_id) = after(page.after.as_ref());
        let objects = log.statement(
            "SELECT summary FROM audit_objects
             WHERE project_id = ?1 AND (?2 IS NULL OR last_ts >= ?2) AND (?3 IS NULL OR first_ts <= ?3)
               AND (?4 IS NULL OR (first_ts, first_id) < (?4, ?5))
             ORDER BY last_ts DESC, last_id DESC LIMIT ?6",
            &[
                text(project_id),
                opt_int(filter.from_ms),
                opt_int(filter.to_ms),
                after_ts,
                after_id,
                int(gatehouse_core::tiers::SUMMARIES_PER_PAGE as i64),
            ],
        )?;
        // One batch is one snapshot: a roll-up commits before or after it, never in between.
        let results = log.results(vec![hot, objects]).await?;
        let rows = results[0].results::<AuditRow>().map_err(PortError::from_display)?;
        let objects = summaries(results[1].results().map_err(PortError::from_display)?)?;
        Ok((rows, objects))
    }

    async fn objects_covering_each(
        &self,
        positions: &[(Option<&str>, &Cursor)],
        limit: usize,
    ) -> Result<Vec<Vec<ObjectSummary>>, PortError> {
        #[derive(serde::Deserialize)]
        struct Covering {
            at: usize,
            summary: String,
        }
        let Some((project, _)) = positions.first() else { return Ok(Vec::new()) };
        let at: Vec<(Option<&str>, i64, &str)> =
            positions.iter().map(|(p, c)| (*p, c.ts, c.id.as_str())).collect();
        let at = serde_json::to_string(&at).map_err(PortError::from_display)?;
        // The roll-up's positions are all of one database (it runs over each on its own).
        let rows: Vec<Covering> = self
            .log_of(*project)
            .await?
            .rows(
                "SELECT p.key AS at, o.summary FROM json_each(?1) p JOIN audit_objects o
                   ON o.project_id IS json_extract(p.value, '$[0]')
                  AND (o.last_ts, o.last_id) >= (json_extract(p.value, '$[1]'), json_extract(p.value, '$[2]'))
                  AND (o.first_ts, o.first_id) <= (json_extract(p.value, '$[1]'), json_extract(p.value, '$[2]'))
                 ORDER BY p.key, o.last_ts, o.last_id",
                &[text(&at)],
            )
            .await?;
        let mut covering = vec![Vec::new(); positions.len()];
        for row in rows {
            let summary = serde_json::from_str(&row.summary).map_err(PortError::from_display)?;
            if let Some(found) = covering.get_mut(row.at).filter(|f| f.len() < limit) {
                found.push(summary);
            }
        }
        Ok(covering)
    }

    async fn stats(&self, of: StatsOf<'_>) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
        let StatsOf { project_id, key_id, endpoint, since_ms } = of;
        const SINCE: &str =
            "project_id = ?1 AND (?2 IS NULL OR key_id = ?2) AND day >= date(?3 / 1000, 'unixepoch')
            AND (?4 IS NULL OR (method = ?4 AND route = ?5))";
        let args = [
            text(project_id),
            opt_text(key_id),
            int(since_ms),
            opt_text(endpoint.map(|(m, _)| m)),
            opt_text(endpoint.map(|(_, r)| r)),
        ];
        let buckets = latency_columns(|c| format!("sum({c}) AS {c}"));
        let log = self.log_of(Some(project_id)).await?;
        let days = log.statement(
            &format!(
                "SELECT day, sum(total) AS total, sum(client_errors) AS client_errors,
                        sum(server_errors) AS server_errors, {buckets}
                 FROM audit_daily WHERE {SINCE} GROUP BY day ORDER BY day"
            ),
            &args,
        )?;
        let endpoints = log.statement(
            &format!(
                "SELECT method, route, sum(total) AS total, sum(client_errors + server_errors) AS errors, {buckets}
                 FROM audit_daily WHERE {SINCE}
                 GROUP BY method, route ORDER BY total DESC, route LIMIT 10"
            ),
            &args,
        )?;
        let results = log.results(vec![days, endpoints]).await?;
        Ok((
            results[0].results().map_err(PortError::from_display)?,
            results[1].results().map_err(PortError::from_display)?,
        ))
    }

    async fn keys_last_used(
        &self,
        project_id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, String)>, PortError> {
        #[derive(serde::Deserialize)]
        struct LastUsed {
            key_id: String,
            day: String,
        }
        let rows: Vec<LastUsed> = self
            .log_of(Some(project_id))
            .await?
            .rows(
                "SELECT key_id, max(day) AS day FROM audit_daily
                 WHERE project_id = ?1 AND day >= date(?2 / 1000, 'unixepoch') AND total > 0 GROUP BY key_id",
                &[text(project_id), int(since_ms)],
            )
            .await?;
        Ok(rows.into_iter().map(|r| (r.key_id, r.day)).collect())
    }

    async fn expired_rows(&self, before_ms: i64, limit: usize) -> Result<Vec<AuditRow>, PortError> {
        // Rows of one database are rolled up from it, whatever their project's record says.
        if let AuditLogs::Placed(_) = self.audit {
            return Err(PortError("the roll-up runs over each audit database on its own".into()));
        }
        self.rows(
            &format!("SELECT {AUDIT_COLUMNS} FROM audit_log WHERE ts < ?1 ORDER BY ts, request_id LIMIT ?2"),
            &[int(before_ms), int(limit as i64)],
        )
        .await
    }

    async fn clear_slices(&self, slices: &[ArchivedSlice<'_>]) -> Result<Vec<usize>, PortError> {
        let Some(first) = slices.first() else { return Ok(Vec::new()) };
        let log = self.log_of(first.project_id).await?;
        // One transaction; each slice's delete is its last statement, and answers its rows.
        let mut statements = Vec::new();
        let mut deletes = Vec::with_capacity(slices.len());
        for slice in slices {
            statements.extend(clear_statements(log, slice)?);
            deletes.push(statements.len() - 1);
        }
        let changes = log.batch(statements).await?;
        Ok(deletes.into_iter().map(|i| changes.get(i).copied().unwrap_or(0)).collect())
    }
}

/// The statements that clear one slice (see [`AuditStore::clear_slices`]), the delete last.
fn clear_statements(log: &D1Store, slice: &ArchivedSlice<'_>) -> Result<Vec<D1PreparedStatement>, PortError> {
    let range = [
        opt_text(slice.project_id),
        int(slice.first.ts),
        text(&slice.first.id),
        int(slice.last.ts),
        text(&slice.last.id),
        int(slice.count as i64),
    ];
    // Every statement holds only while the slice is as it was read (?6 rows): one
    // transaction, evaluated in order, the delete last.
    let condition = format!("(SELECT count(*) FROM audit_log WHERE {SLICE}) = ?6");
    let mut statements = Vec::new();
    if let Some(s) = slice.summary {
        let json = serde_json::to_string(s).map_err(PortError::from_display)?;
        let mut args = range.to_vec();
        args.extend([text(&s.key), opt_text(s.project_id.as_deref()), int(s.first_ts), text(&s.first_id)]);
        args.extend([int(s.last_ts), text(&s.last_id), int(s.rows.into()), text(&json)]);
        statements.push(log.statement(
            &format!(
                "INSERT INTO audit_objects (key, project_id, first_ts, first_id, last_ts, last_id, rows, summary)
                 SELECT ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14 WHERE {condition}
                 ON CONFLICT (key) DO UPDATE SET first_ts = excluded.first_ts, first_id = excluded.first_id,
                   last_ts = excluded.last_ts, last_id = excluded.last_id, rows = excluded.rows,
                   summary = excluded.summary"
            ),
            &args,
        )?);
    }
    for copy in slice.copies.iter().filter(|c| c.billable && c.key_id.is_some()) {
        // Out of the counts of the period it was counted in: the latest that began by its time.
        let mut args = range.to_vec();
        args.extend([
            opt_text(copy.key_id.as_deref()),
            int(copy.ts),
            text(copy.identity_id.as_deref().unwrap_or("")),
            text(&format!("{} {}", copy.method, copy.route.as_deref().unwrap_or(&copy.path))),
        ]);
        let counted = "project_id IS ?1 AND key_id = ?7 AND identity_id = ?9 AND route = ?10";
        statements.push(log.statement(
            &format!(
                "UPDATE usage_counts SET requests = requests - 1
                 WHERE {counted} AND period_start = (SELECT max(period_start) FROM usage_counts
                   WHERE {counted} AND period_start <= ?8)
                   AND {condition}"
            ),
            &args,
        )?);
    }
    for copy in slice.copies.iter().filter(|c| c.key_id.is_some()) {
        let mut args = range.to_vec();
        args.extend([
            opt_text(copy.key_id.as_deref()),
            int(copy.ts),
            text(&copy.method),
            text(copy.route.as_deref().unwrap_or(&copy.path)),
            int(copy.status.into()),
        ]);
        let bucket = LatencyBuckets::bucket(copy.response_time_ms);
        statements.push(log.statement(
            &format!(
                "UPDATE audit_daily SET total = total - 1,
                   client_errors = client_errors - (?11 BETWEEN 400 AND 499), server_errors = server_errors - (?11 >= 500),
                   l{bucket} = l{bucket} - 1
                 WHERE project_id IS ?1 AND key_id = ?7 AND day = date(?8 / 1000, 'unixepoch') AND method = ?9
                   AND route = ?10 AND {condition}"
            ),
            &args,
        )?);
    }
    if let Some(s) = slice.summary.filter(|s| s.project_id.is_some()) {
        // The project has an object no digest lists (SPEC §23): the digest job's work list.
        let mut args = range.to_vec();
        args.push(int(s.first_ts));
        statements.push(log.statement(
            &format!(
                "INSERT INTO digest_due (project_id, since) SELECT ?1, ?7 WHERE {condition}
                 ON CONFLICT (project_id) DO UPDATE SET since = min(since, excluded.since)"
            ),
            &args,
        )?);
    }
    if !slice.tail.is_empty() {
        let mut args = range.to_vec();
        args.push(text(&serde_json::to_string(slice.tail).map_err(PortError::from_display)?));
        statements.push(log.statement(
            &format!(
                "DELETE FROM audit_log WHERE project_id IS ?1 AND request_id IN (SELECT value FROM json_each(?7))
                   AND (ts > ?4 OR (ts = ?4 AND request_id > ?5)) AND {condition}"
            ),
            &args,
        )?);
    }
    statements.push(log.statement(&format!("DELETE FROM audit_log WHERE {SLICE} AND {condition}"), &range)?);
    Ok(statements)
}
