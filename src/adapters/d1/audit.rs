//! The audit log: the [`AuditStore`] port (rows, filters, stats, retention chunks).

use wasm_bindgen::JsValue;

use super::{after, int, opt_int, opt_text, text, D1Store};
use crate::core::audit::{AuditRow, DayCount, EndpointCount, LogFilter};
use crate::core::page::{Cursor, PageRequest};
use crate::ports::{AuditStore, PortError};

const AUDIT_COLUMNS: &str = "ts, request_id, project_id, key_id, key_prefix, method, path, route, status,
  response_bytes, response_time_ms, ip, user_agent, idempotency_key, replayed, original_request_id,
  rate_limit_remaining, error_code";

/// The `path` glob of [`crate::core::audit::PathGlob`] without `LIKE` or `GLOB`, whose patterns D1
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

impl AuditStore for D1Store {
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let statements = rows
            .iter()
            .map(|r| {
                self.statement(
                    &format!(
                        "INSERT OR IGNORE INTO audit_log ({AUDIT_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
                    ),
                    &[
                        int(r.ts),
                        text(&r.request_id),
                        opt_text(r.project_id.as_deref()),
                        opt_text(r.key_id.as_deref()),
                        opt_text(r.key_prefix.as_deref()),
                        text(&r.method),
                        text(&r.path),
                        opt_text(r.route.as_deref()),
                        int(r.status.into()),
                        int(r.response_bytes as i64),
                        int(r.response_time_ms),
                        opt_text(r.ip.as_deref()),
                        opt_text(r.user_agent.as_deref()),
                        opt_text(r.idempotency_key.as_deref()),
                        int(r.replayed.into()),
                        opt_text(r.original_request_id.as_deref()),
                        opt_int(r.rate_limit_remaining.map(i64::from)),
                        opt_text(r.error_code.as_deref()),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.batch(statements).await?;
        Ok(())
    }

    async fn audit_rows(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<Vec<AuditRow>, PortError> {
        // Every filter is bound (NULL = not filtering), so the statement text never varies.
        let (status_min, status_max) = match filter.status.map(|s| s.range()) {
            Some((a, b)) => (int(a.into()), int(b.into())),
            None => (JsValue::NULL, JsValue::NULL),
        };
        let (after_ts, after_id) = after(page.after.as_ref());
        let glob = filter.path.as_ref();
        self.rows(
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
            ],
        )
        .await
    }

    async fn key_stats(
        &self,
        project_id: &str,
        key_id: &str,
        since_ms: i64,
    ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
        let args = [text(project_id), text(key_id), int(since_ms)];
        let days = self
            .rows(
                "SELECT date(ts / 1000, 'unixepoch') AS day, count(*) AS total,
                        sum(status BETWEEN 400 AND 499) AS client_errors, sum(status >= 500) AS server_errors
                 FROM audit_log WHERE project_id = ?1 AND key_id = ?2 AND ts >= ?3
                 GROUP BY day ORDER BY day",
                &args,
            )
            .await?;
        let endpoints = self
            .rows(
                "SELECT method, coalesce(route, path) AS route, count(*) AS total, sum(status >= 400) AS errors
                 FROM audit_log WHERE project_id = ?1 AND key_id = ?2 AND ts >= ?3
                 GROUP BY method, coalesce(route, path) ORDER BY total DESC, route LIMIT 10",
                &args,
            )
            .await?;
        Ok((days, endpoints))
    }

    async fn oldest_expired(&self, before_ms: i64) -> Result<Option<(Option<String>, Cursor)>, PortError> {
        #[derive(serde::Deserialize)]
        struct Oldest {
            project_id: Option<String>,
            ts: i64,
            request_id: String,
        }
        let rows: Vec<Oldest> = self
            .rows(
                "SELECT project_id, ts, request_id FROM audit_log WHERE ts < ?1
                 ORDER BY ts, request_id LIMIT 1",
                &[int(before_ms)],
            )
            .await?;
        Ok(rows.into_iter().next().map(|r| (r.project_id, Cursor { ts: r.ts, id: r.request_id })))
    }

    async fn rows_between(
        &self,
        project_id: Option<&str>,
        from: &Cursor,
        to: &Cursor,
        limit: usize,
    ) -> Result<Vec<AuditRow>, PortError> {
        // The plain `ts` bounds let the index start at `from` instead of the day's first row.
        self.rows(
            &format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_log
                 WHERE project_id IS ?1 AND ts >= ?2 AND ts <= ?4
                   AND (ts, request_id) >= (?2, ?3) AND (ts, request_id) < (?4, ?5)
                 ORDER BY ts, request_id LIMIT ?6"
            ),
            &[
                opt_text(project_id),
                int(from.ts),
                text(&from.id),
                int(to.ts),
                text(&to.id),
                int(limit as i64),
            ],
        )
        .await
    }

    async fn delete_archived(
        &self,
        project_id: Option<&str>,
        first: &Cursor,
        last: &Cursor,
        count: usize,
    ) -> Result<usize, PortError> {
        // One statement, so all or nothing; the count guard keeps a row that arrived in the range
        // after the chunk was read (it is not in the object yet).
        const RANGE: &str = "project_id IS ?1 AND ts >= ?2 AND ts <= ?4
            AND (ts, request_id) >= (?2, ?3) AND (ts, request_id) <= (?4, ?5)";
        let delete = self.statement(
            &format!(
                "DELETE FROM audit_log WHERE {RANGE} AND (SELECT count(*) FROM audit_log WHERE {RANGE}) = ?6"
            ),
            &[
                opt_text(project_id),
                int(first.ts),
                text(&first.id),
                int(last.ts),
                text(&last.id),
                int(count as i64),
            ],
        )?;
        Ok(self.batch(vec![delete]).await?.first().copied().unwrap_or(0))
    }
}
