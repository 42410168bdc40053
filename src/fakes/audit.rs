//! The audit log's fakes: the `audit_log` table behind [`AuditStore`] (on the shared
//! [`FakeStore`]) and the R2 archive behind [`Archive`]. Every call goes through the schedule's
//! [`Faults`]; a D1 statement and an R2 put take effect whole or not at all, as they do in the
//! worker.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use super::FakeStore;
use crate::core::audit::AuditRow;
use crate::core::audit::{DayCount, EndpointCount, LogFilter};
use crate::core::page::{Cursor, PageRequest};
use crate::ports::{Archive, ArchiveObject, AuditStore, PortError};
use crate::sim::Faults;

/// `audit_log`, keyed by `request_id` like the table's primary key.
#[derive(Default)]
pub struct AuditTables {
    pub rows: RefCell<BTreeMap<String, AuditRow>>,
    /// This many coming chunk deletes fail before their effect.
    pub refuse_deletes: Cell<u32>,
}

impl AuditTables {
    /// Inserts rows straight into the table (test setup: no faults, no yield).
    pub fn seed(&self, rows: impl IntoIterator<Item = AuditRow>) {
        let mut table = self.rows.borrow_mut();
        for row in rows {
            table.entry(row.request_id.clone()).or_insert(row);
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
        self.faults.run("d1 insert audit rows", || self.audit.seed(rows.iter().cloned())).await
    }

    async fn audit_rows(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<Vec<AuditRow>, PortError> {
        self.faults
            .run("d1 audit rows", || {
                let mut rows = self.audit.project_rows(Some(project_id));
                rows.reverse();
                rows.into_iter()
                    .filter(|r| filter.method.as_ref().is_none_or(|m| *m == r.method))
                    .filter(|r| filter.status.is_none_or(|s| (s.range().0..=s.range().1).contains(&r.status)))
                    .filter(|r| filter.path.as_ref().is_none_or(|glob| glob.matches(&r.path)))
                    .filter(|r| filter.request_id.as_ref().is_none_or(|id| *id == r.request_id))
                    .filter(|r| filter.key_id.is_none() || filter.key_id == r.key_id)
                    .filter(|r| {
                        filter.idempotency_key.is_none() || filter.idempotency_key == r.idempotency_key
                    })
                    .filter(|r| filter.from_ms.is_none_or(|from| r.ts >= from))
                    .filter(|r| filter.to_ms.is_none_or(|to| r.ts <= to))
                    .filter(|r| page.after.as_ref().is_none_or(|c| position(r) < at(c)))
                    .take(page.fetch_len())
                    .collect()
            })
            .await
    }

    async fn key_stats(
        &self,
        _: &str,
        _: &str,
        _: i64,
    ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
        Err(PortError("key statistics are not simulated".into()))
    }

    async fn oldest_expired(&self, before_ms: i64) -> Result<Option<(Option<String>, Cursor)>, PortError> {
        self.faults
            .run("d1 oldest expired row", || {
                self.audit
                    .rows
                    .borrow()
                    .values()
                    .filter(|r| r.ts < before_ms)
                    .min_by(|a, b| position(a).cmp(&position(b)))
                    .map(|r| (r.project_id.clone(), Cursor { ts: r.ts, id: r.request_id.clone() }))
            })
            .await
    }

    async fn rows_between(
        &self,
        project_id: Option<&str>,
        from: &Cursor,
        to: &Cursor,
        limit: usize,
    ) -> Result<Vec<AuditRow>, PortError> {
        self.faults
            .run("d1 read a chunk", || {
                self.audit
                    .project_rows(project_id)
                    .into_iter()
                    .filter(|r| position(r) >= at(from) && position(r) < at(to))
                    .take(limit)
                    .collect()
            })
            .await
    }

    async fn delete_archived(
        &self,
        project_id: Option<&str>,
        first: &Cursor,
        last: &Cursor,
        count: usize,
    ) -> Result<usize, PortError> {
        if self.audit.refuse_deletes.get() > 0 {
            self.audit.refuse_deletes.set(self.audit.refuse_deletes.get() - 1);
            return Err(PortError("d1 delete a chunk: refused".into()));
        }
        self.faults
            .run("d1 delete a chunk", || {
                let in_range: Vec<String> = self
                    .audit
                    .project_rows(project_id)
                    .into_iter()
                    .filter(|r| position(r) >= at(first) && position(r) <= at(last))
                    .map(|r| r.request_id)
                    .collect();
                if in_range.len() != count {
                    return 0;
                }
                let mut table = self.audit.rows.borrow_mut();
                in_range.iter().for_each(|id| {
                    table.remove(id);
                });
                count
            })
            .await
    }
}

/// R2 in memory. Objects hold the NDJSON as written (compression is the adapter's business), so a
/// day's download is the concatenation of its objects' lines.
pub struct FakeArchive {
    pub faults: Rc<Faults>,
    pub objects: RefCell<BTreeMap<String, Vec<u8>>>,
    /// The request ids each object holds, in its order (kept beside the bytes for cheap checks).
    pub ids: RefCell<BTreeMap<String, Vec<String>>>,
    /// Session-replay chunks, apart from the audit objects.
    pub replay_chunks: RefCell<BTreeMap<String, Vec<u8>>>,
    /// Puts fail before their effect while this is set.
    pub refuse_puts: Cell<bool>,
}

impl FakeArchive {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeArchive {
            faults,
            objects: RefCell::default(),
            ids: RefCell::default(),
            replay_chunks: RefCell::default(),
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
    async fn put(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError> {
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

    async fn put_replay_chunk(&self, key: &str, json: &[u8]) -> Result<(), PortError> {
        self.faults
            .run("r2 put replay chunk", || {
                self.replay_chunks.borrow_mut().insert(key.to_owned(), json.to_vec());
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
}
