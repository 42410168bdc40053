//! The audit log's read side (SPEC §9): the filtered log, one row, per-key statistics, the
//! archives; and its two jobs: the queue consumer's insert and the daily retention move to R2.

use serde_json::{json, Value};

use super::{unavailable, Call, Gateway, Payload, Reply};
use crate::core::audit::{archive_key, log_page, log_position, stats_days, stats_view, AuditRow, LogFilter};
use crate::core::error::ApiError;
use crate::core::page::PageRequest;
use crate::core::time::rfc3339;
use crate::ports::{Archive, AuditStore, Directory, PortError, Ports};

/// Rows one retention run moves at most per (project, day), and (project, day) pairs per run.
const RETENTION_ROWS_PER_DAY: usize = 5_000;
const RETENTION_DAYS_PER_RUN: usize = 50;
/// The archive folder of rows that no project could be named for.
const UNATTRIBUTED: &str = "_unattributed";

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn list_logs(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (filter, page) = log_page(call.query)?;
        let rows = self.store.audit_rows(call.project_id(), &filter, &page).await.map_err(unavailable)?;
        Ok(Reply::ok(page.respond(rows, log_position, AuditRow::view)))
    }

    pub(super) async fn get_log(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let request_id = call.params[0];
        let filter = LogFilter { request_id: Some(request_id.to_owned()), ..Default::default() };
        let page = PageRequest { limit: 1, after: None };
        let rows = self.store.audit_rows(call.project_id(), &filter, &page).await.map_err(unavailable)?;
        match rows.first() {
            Some(row) => Ok(Reply::ok(row.view())),
            None => {
                Err(ApiError::not_found("request in this project's log")
                    .with_detail("request_id", request_id))
            }
        }
    }

    pub(super) async fn key_stats(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let days = stats_days(call.query)?;
        // Zeros for a key of another project would tell its id exists: 404 instead.
        if self.store.find_key(call.project_id(), key_id).await.map_err(unavailable)?.is_none() {
            return Err(ApiError::not_found("API key").with_detail("id", key_id));
        }
        let today_start = call.now_ms - call.now_ms.rem_euclid(86_400_000);
        let since = today_start - i64::from(days - 1) * 86_400_000;
        let (counted, endpoints) =
            self.store.key_stats(call.project_id(), key_id, since).await.map_err(unavailable)?;
        Ok(Reply::ok(stats_view(key_id, days, call.now_ms, &counted, &endpoints)))
    }

    pub(super) async fn list_archives(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let prefix = format!("audit/{}/", call.project_id());
        let objects = self.archive.list(&prefix).await.map_err(unavailable)?;
        let data: Vec<Value> = objects
            .iter()
            .map(|o| {
                let date = o.key.trim_start_matches(&prefix).trim_end_matches(".ndjson.gz");
                json!({ "date": date, "key": o.key, "size": o.size, "uploaded_at": rfc3339(o.uploaded_ms) })
            })
            .collect();
        Ok(Reply::ok(json!({ "data": data, "next_cursor": null })))
    }

    pub(super) async fn get_archive(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let date = call.params[0];
        let valid =
            date.len() == 10 && crate::core::time::parse_rfc3339(&format!("{date}T00:00:00Z")).is_some();
        if !valid {
            return Err(ApiError::bad_request("date must be YYYY-MM-DD").with_detail("field", "date"));
        }
        match self.archive.get(&archive_key(call.project_id(), date)).await.map_err(unavailable)? {
            Some(bytes) => Ok(Reply {
                status: 200,
                body: Payload::File { content_type: "application/gzip", bytes },
                log: None,
                deliveries: Vec::new(),
            }),
            None => Err(ApiError::not_found("archive for this date").with_detail("date", date)),
        }
    }
}

/// The queue consumer's side: rows are inserted once per `request_id`, so a batch delivered twice
/// leaves one row per request.
pub async fn store_rows<S: AuditStore>(store: &S, rows: &[AuditRow]) -> Result<(), PortError> {
    if rows.is_empty() {
        return Ok(());
    }
    store.insert_audit_rows(rows).await
}

/// What a retention run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub archived: usize,
    pub objects: usize,
}

/// Moves rows older than `retention_days` (whole UTC days) to the archive, then deletes exactly
/// the rows archived. A failed archive write deletes nothing; the next run tries again.
pub async fn enforce_retention<S: AuditStore, A: Archive>(
    store: &S,
    archive: &A,
    now_ms: i64,
    retention_days: u32,
) -> Result<RetentionReport, PortError> {
    let today = now_ms - now_ms.rem_euclid(86_400_000);
    let cutoff = today - i64::from(retention_days) * 86_400_000;
    let mut report = RetentionReport::default();
    for (project_id, day) in store.expired_days(cutoff, RETENTION_DAYS_PER_RUN).await? {
        let rows = store.expired_rows(project_id.as_deref(), &day, cutoff, RETENTION_ROWS_PER_DAY).await?;
        if rows.is_empty() {
            continue;
        }
        let mut ndjson = Vec::new();
        for row in &rows {
            serde_json::to_writer(&mut ndjson, row).map_err(PortError::from_display)?;
            ndjson.push(b'\n');
        }
        archive.append(&archive_key(project_id.as_deref().unwrap_or(UNATTRIBUTED), &day), &ndjson).await?;
        let ids: Vec<String> = rows.iter().map(|r| r.request_id.clone()).collect();
        store.delete_audit_rows(&ids).await?;
        report.archived += rows.len();
        report.objects += 1;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::audit::{DayCount, EndpointCount};
    use crate::core::time::utc_date;
    use crate::ports::ArchiveObject;

    /// Rows keyed by request_id, as the D1 table's primary key keeps them.
    #[derive(Default)]
    struct Store {
        rows: RefCell<BTreeMap<String, AuditRow>>,
    }

    impl AuditStore for Store {
        async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
            let mut table = self.rows.borrow_mut();
            for r in rows {
                table.entry(r.request_id.clone()).or_insert_with(|| r.clone());
            }
            Ok(())
        }
        async fn audit_rows(
            &self,
            _: &str,
            _: &LogFilter,
            _: &PageRequest,
        ) -> Result<Vec<AuditRow>, PortError> {
            unimplemented!("not used by the jobs")
        }
        async fn key_stats(
            &self,
            _: &str,
            _: &str,
            _: i64,
        ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
            unimplemented!("not used by the jobs")
        }
        async fn expired_days(
            &self,
            before_ms: i64,
            _: usize,
        ) -> Result<Vec<(Option<String>, String)>, PortError> {
            let mut days: Vec<_> = self
                .rows
                .borrow()
                .values()
                .filter(|r| r.ts < before_ms)
                .map(|r| (r.project_id.clone(), utc_date(r.ts)))
                .collect();
            days.dedup();
            Ok(days)
        }
        async fn expired_rows(
            &self,
            project: Option<&str>,
            day: &str,
            before_ms: i64,
            _: usize,
        ) -> Result<Vec<AuditRow>, PortError> {
            Ok(self
                .rows
                .borrow()
                .values()
                .filter(|r| r.project_id.as_deref() == project && utc_date(r.ts) == day && r.ts < before_ms)
                .cloned()
                .collect())
        }
        async fn delete_audit_rows(&self, ids: &[String]) -> Result<(), PortError> {
            let mut table = self.rows.borrow_mut();
            ids.iter().for_each(|id| {
                table.remove(id);
            });
            Ok(())
        }
    }

    struct Bucket {
        fail: bool,
        objects: RefCell<BTreeMap<String, Vec<u8>>>,
    }

    impl Archive for Bucket {
        async fn append(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError> {
            if self.fail {
                return Err(PortError("R2 unavailable".into()));
            }
            self.objects.borrow_mut().entry(key.to_owned()).or_default().extend_from_slice(ndjson);
            Ok(())
        }
        async fn list(&self, _: &str) -> Result<Vec<ArchiveObject>, PortError> {
            Ok(vec![])
        }
        async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError> {
            Ok(self.objects.borrow().get(key).cloned())
        }
    }

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 1_795_942_112_123; // 2026-11-29T08:48Z

    fn row(id: &str, ts: i64) -> AuditRow {
        let mut row = AuditRow::new(id.into(), ts, "GET".into(), "/".into());
        row.project_id = Some("prj_1".into());
        row
    }

    #[test]
    fn a_batch_delivered_three_times_leaves_one_row_per_request() {
        let store = Store::default();
        let batch = [row("r1", NOW), row("r2", NOW)];
        for _ in 0..3 {
            pollster::block_on(store_rows(&store, &batch)).unwrap();
        }
        assert_eq!(store.rows.borrow().len(), 2);
    }

    #[test]
    fn retention_archives_old_days_then_deletes_only_what_it_archived() {
        let store = Store::default();
        let rows = [row("old-1", NOW - 100 * DAY), row("old-2", NOW - 100 * DAY + 1), row("new", NOW - DAY)];
        pollster::block_on(store_rows(&store, &rows)).unwrap();
        let bucket = Bucket { fail: false, objects: RefCell::default() };
        let report = pollster::block_on(enforce_retention(&store, &bucket, NOW, 90)).unwrap();
        assert_eq!(report, RetentionReport { archived: 2, objects: 1 });
        let key = archive_key("prj_1", &utc_date(NOW - 100 * DAY));
        let text = String::from_utf8(bucket.objects.borrow()[&key].clone()).unwrap();
        let ids: Vec<String> =
            text.lines().map(|l| serde_json::from_str::<AuditRow>(l).unwrap().request_id).collect();
        assert_eq!(ids, ["old-1", "old-2"]);
        assert_eq!(store.rows.borrow().keys().collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn a_failed_archive_write_deletes_nothing() {
        let store = Store::default();
        pollster::block_on(store_rows(&store, &[row("old", NOW - 100 * DAY)])).unwrap();
        let bucket = Bucket { fail: true, objects: RefCell::default() };
        assert!(pollster::block_on(enforce_retention(&store, &bucket, NOW, 90)).is_err());
        assert_eq!(store.rows.borrow().len(), 1);
    }
}
