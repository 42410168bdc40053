//! The audit log's read side (SPEC §9): the filtered log, one row, per-key statistics, the
//! archives. (Rows are written by the queue consumer, `app::queues`, and by the producer's
//! fallback, `app::after_response`; the roll-up to R2 is `app::roll_up`.)

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{unavailable, Call, Gateway, Payload, Reply};
use gatehouse_core::archive;
use gatehouse_core::audit::{log_page, stats_days, stats_view, AuditRow, LogFilter};
use gatehouse_core::encoding::uuid_v7_ms;
use gatehouse_core::error::ApiError;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{Archive, AuditStore, Directory, PortError, Ports, StatsOf};
use gatehouse_core::tiers::PageMerge;
use gatehouse_core::time::rfc3339;

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn list_logs(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (filter, page) = log_page(call.query)?;
        let (rows, next) = self.log_page(call, filter, page).await?;
        let next = next.map(|c| c.encode());
        Ok(Reply::ok(
            json!({ "data": rows.iter().map(AuditRow::view).collect::<Vec<_>>(), "next_cursor": next }),
        ))
    }

    pub(super) async fn get_log(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let request_id = call.params[0];
        let filter = LogFilter { request_id: Some(request_id.to_owned()), ..Default::default() };
        let (rows, _) = self.log_page(call, filter, PageRequest { limit: 1, after: None }).await?;
        match rows.first() {
            Some(row) => Ok(Reply::ok(row.view())),
            None => {
                Err(ApiError::not_found("request in this project's log")
                    .with_detail("request_id", request_id))
            }
        }
    }

    /// One page of the project's log from its first retained row on (SPEC §18; see
    /// [`read_log_page`]).
    async fn log_page(
        &self,
        call: &Call<'_>,
        mut filter: LogFilter,
        page: PageRequest,
    ) -> Result<(Vec<AuditRow>, Option<Cursor>), ApiError> {
        let floor = archive::retention_cutoff(call.now_ms, self.config.audit_retention_days);
        filter.from_ms = Some(filter.from_ms.map_or(floor, |f| f.max(floor)));
        read_log_page(&self.store, &self.archive, call.project_id(), filter, page).await.map_err(unavailable)
    }

    pub(super) async fn key_stats(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let days = stats_days(call.query)?;
        // Zeros for a key of another project would tell its id exists: 404 instead.
        if self.store.find_key(call.project_id(), key_id).await.map_err(unavailable)?.is_none() {
            return Err(ApiError::not_found("API key").with_detail("id", key_id));
        }
        let since = first_day(call.now_ms, days);
        let (counted, endpoints) = self
            .store
            .stats(StatsOf {
                project_id: call.project_id(),
                key_id: Some(key_id),
                endpoint: None,
                since_ms: since,
            })
            .await
            .map_err(unavailable)?;
        Ok(Reply::ok(stats_view(Some(key_id), days, call.now_ms, &counted, &endpoints)))
    }

    /// `GET /public/v1/stats?days=&endpoint=`: the project's overview, every key together — per
    /// UTC day requests, 4xx, 5xx and p50/p95/p99 response times, and the top endpoints, from the
    /// daily aggregates (never a scan of the rows); with `endpoint=METHOD route` (as the top
    /// endpoints name them) the same for that endpoint alone.
    pub(super) async fn project_stats(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let days = stats_days(call.query)?;
        let endpoint = match call.query.iter().find(|(k, _)| k == "endpoint").map(|(_, v)| v.as_str()) {
            None => None,
            Some(e) => Some(
                e.split_once(' ').filter(|(m, r)| !m.is_empty() && r.starts_with('/')).ok_or_else(|| {
                    ApiError::bad_request(
                        "endpoint must be a method and a route, e.g. \"GET /public/v1/contacts/{id}\"",
                    )
                    .with_detail("field", "endpoint")
                })?,
            ),
        };
        let since = first_day(call.now_ms, days);
        let (counted, endpoints) = self
            .store
            .stats(StatsOf { project_id: call.project_id(), key_id: None, endpoint, since_ms: since })
            .await
            .map_err(unavailable)?;
        let mut view = stats_view(None, days, call.now_ms, &counted, &endpoints);
        view["endpoint"] = endpoint.map(|(m, r)| format!("{m} {r}")).into();
        Ok(Reply::ok(view))
    }

    /// `GET /public/v1/keys/last-used`: the last day each key of the project was used in the last
    /// 31 days, in one call from the daily aggregates (the dashboard's "Last use" column).
    pub(super) async fn keys_last_used(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let since = first_day(call.now_ms, 31);
        let used = self.store.keys_last_used(call.project_id(), since).await.map_err(unavailable)?;
        let data: Vec<_> =
            used.into_iter().map(|(key_id, day)| json!({ "key_id": key_id, "last_used_on": day })).collect();
        Ok(Reply::ok(json!({ "since": gatehouse_core::time::utc_date(since), "data": data })))
    }

    /// The project's archived days, oldest first: each day's objects counted and sized together.
    pub(super) async fn list_archives(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let prefix = archive::project_prefix(Some(call.project_id()));
        let objects = self.archive.list(&prefix).await.map_err(unavailable)?;
        let mut days: BTreeMap<&str, (u64, u64, i64)> = BTreeMap::new();
        for o in &objects {
            if let Some(day) = archive::object_day(&prefix, &o.key) {
                let (count, size, uploaded) = days.entry(day).or_insert((0, 0, i64::MIN));
                *count += 1;
                *size += o.size;
                *uploaded = (*uploaded).max(o.uploaded_ms);
            }
        }
        let data: Vec<Value> = days
            .into_iter()
            .map(|(date, (objects, size, uploaded))| {
                json!({ "date": date, "objects": objects, "size": size, "uploaded_at": rfc3339(uploaded) })
            })
            .collect();
        Ok(Reply::ok(json!({ "data": data, "next_cursor": null })))
    }

    /// One archived day as one gzip stream: its objects' gzip members one after another (a gzip
    /// file may hold several members; every gunzip reads them as one stream).
    pub(super) async fn get_archive(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let date = gatehouse_core::audit::archive_date(call.params[0])?;
        let project = Some(call.project_id());
        // `audit/{project}/{date}` covers the day's folder of slices and a whole-day object.
        let prefix = format!("{}{date}", archive::project_prefix(project));
        let keys: Vec<String> =
            self.archive.list(&prefix).await.map_err(unavailable)?.into_iter().map(|o| o.key).collect();
        let mut bytes = Vec::new();
        for key in archive::download_order(project, date, &keys) {
            // An object listed a moment ago is always there: archives are never deleted.
            let member = self.archive.get(&key).await.map_err(unavailable)?;
            bytes.extend_from_slice(&member.unwrap_or_default());
        }
        if bytes.is_empty() {
            return Err(ApiError::not_found("archive for this date").with_detail("date", date));
        }
        Ok(Reply {
            status: 200,
            body: Payload::File { content_type: "application/gzip", bytes },
            log: None,
            deliveries: Vec::new(),
            after: None,
        })
    }
}

/// One page of a project's log across both tiers (SPEC §18): the hot rows and the cold objects'
/// summaries from one D1 snapshot, then the objects the page needs, merged newest first. A UUIDv7
/// `request_id` filter narrows the range to its millisecond; any other id (from before request
/// ids were UUIDv7) is looked for in the hot tier only, so a lookup never scans the cold tier.
pub(super) async fn read_log_page<S: AuditStore, A: Archive>(
    store: &S,
    archive: &A,
    project_id: &str,
    mut filter: LogFilter,
    page: PageRequest,
) -> Result<(Vec<AuditRow>, Option<Cursor>), PortError> {
    let mut cold = true;
    if let Some(id) = filter.request_id.as_deref() {
        match uuid_v7_ms(id) {
            Some(ms) => {
                filter.from_ms = Some(filter.from_ms.map_or(ms, |f| f.max(ms)));
                filter.to_ms = Some(filter.to_ms.map_or(ms, |t| t.min(ms)));
            }
            None => cold = false,
        }
    }
    if filter.to_ms.is_some_and(|t| filter.from_ms.is_some_and(|f| t < f)) {
        return Ok((Vec::new(), None));
    }
    let (hot, mut summaries) = store.log_snapshot(project_id, &filter, &page).await?;
    if !cold {
        summaries.clear();
    }
    let mut merge = PageMerge::new(filter, page, hot, summaries);
    while let Some(object) = merge.wanted() {
        let rows = read_object(archive, &object.key).await?;
        merge.add(rows);
    }
    Ok(merge.finish())
}

/// The rows of one cold object.
pub(super) async fn read_object<A: Archive>(archive: &A, key: &str) -> Result<Vec<AuditRow>, PortError> {
    let Some(ndjson) = archive.read_ndjson(key).await? else {
        return Err(PortError(format!("audit object {key} is indexed but missing")));
    };
    object_rows(&ndjson).map_err(PortError::from_display)
}

/// The rows of an object's NDJSON, one a line.
pub(super) fn object_rows(ndjson: &[u8]) -> Result<Vec<AuditRow>, serde_json::Error> {
    ndjson.split(|b| *b == b'\n').filter(|line| !line.is_empty()).map(serde_json::from_slice).collect()
}

/// The start (Unix ms) of the first UTC day of the `days` days that end today.
pub(super) fn first_day(now_ms: i64, days: u32) -> i64 {
    now_ms - now_ms.rem_euclid(86_400_000) - i64::from(days.max(1) - 1) * 86_400_000
}
