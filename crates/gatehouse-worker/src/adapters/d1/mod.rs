//! The D1-backed ports, one module per concern (`keys`, `resources`, `events`, `audit`,
//! `webhooks`) over the shared statement helpers here. One [`D1Store`] implements them all over
//! the `DB` binding, but the audit log, which lives in its own `AUDIT_DB` (SPEC §18); every query
//! is counted on the request's meter.

mod audit;
mod dead_letters;
mod digests;
mod events;
mod keys;
mod resources;
mod rotations;
mod usage;
mod wake;
mod webhook_rows;
mod webhooks;

impl JobLeases for D1Store {
    async fn take_lease(&self, lease: &Lease<'_>) -> Result<bool, PortError> {
        let statement = self.statement(
            "INSERT INTO job_leases (job, holder, until_ms) VALUES (?1, ?2, ?4)
             ON CONFLICT (job) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms
             WHERE job_leases.until_ms <= ?3",
            &[text(lease.job), text(lease.holder), int(lease.now_ms), int(lease.until_ms)],
        )?;
        Ok(self.batch(vec![statement]).await?[0] == 1)
    }

    async fn release_lease(&self, job: &str, holder: &str) -> Result<(), PortError> {
        let statement = self.statement(
            "UPDATE job_leases SET until_ms = 0 WHERE job = ?1 AND holder = ?2",
            &[text(job), text(holder)],
        )?;
        self.batch(vec![statement]).await.map(drop)
    }
}

use std::rc::Rc;

use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

use super::deadline::within;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{JobLeases, Lease, Meter, PortError};

pub struct D1Store {
    db: D1Database,
    meter: Rc<Meter>,
    audit: AuditLogs,
    /// The period usage is counted by (`USAGE_PERIOD_SECONDS`, SPEC §22), in milliseconds.
    usage_period_ms: i64,
}

/// Where a store keeps the audit log (SPEC §18, §20).
enum AuditLogs {
    /// In its own database, whatever project a row is of: one audit database as the roll-up reads
    /// it, or an older version's `DB`, read once to move its rows.
    Own,
    /// In the audit databases bound (`AUDIT_DB`, `AUDIT_DB_1`, … in order): each project's rows in
    /// the one recorded with it (`projects.audit_db`); a project recorded on one not bound fails,
    /// naming it.
    Placed(Vec<D1Store>),
}

impl D1Store {
    pub fn new(db: D1Database, meter: Rc<Meter>) -> Self {
        Self { db, meter, audit: AuditLogs::Own, usage_period_ms: 3_600_000 }
    }

    /// The same store counting usage by periods of `ms` (its audit databases too).
    pub fn with_usage_period(mut self, ms: i64) -> Self {
        self.usage_period_ms = ms;
        if let AuditLogs::Placed(logs) = &mut self.audit {
            logs.iter_mut().for_each(|log| log.usage_period_ms = ms);
        }
        self
    }

    /// The same store with the audit log in `audit_dbs`, the bound audit databases in order.
    pub fn with_audit_logs(mut self, audit_dbs: Vec<D1Database>) -> Self {
        let logs = audit_dbs.into_iter().map(|db| D1Store::new(db, self.meter.clone())).collect();
        self.audit = AuditLogs::Placed(logs);
        self
    }

    fn statement(&self, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, PortError> {
        self.db.prepare(sql).bind(args).map_err(PortError::from_display)
    }

    async fn rows<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        args: &[JsValue],
    ) -> Result<Vec<T>, PortError> {
        Meter::count(&self.meter.d1_queries);
        let statement = self.statement(sql, args)?;
        let query = async { statement.all().await.map_err(PortError::from_display) };
        let result = within(deadline::D1_MS, "D1 query", query).await?;
        result.results().map_err(PortError::from_display)
    }

    /// The `id`s one statement answers.
    async fn ids(&self, sql: &str, args: &[JsValue]) -> Result<Vec<String>, PortError> {
        Ok(self.rows::<IdRow>(sql, args).await?.into_iter().map(|r| r.id).collect())
    }

    /// A page of a project's rows, newest first, keyset on `(created_at, id)`.
    async fn newest_first<T: serde::de::DeserializeOwned>(
        &self,
        columns: &str,
        table: &str,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<T>, PortError> {
        let (ts, id) = after(page.after.as_ref());
        self.rows(
            &format!(
                "SELECT {columns} FROM {table}
                 WHERE project_id = ?1 AND (?2 IS NULL OR (created_at, id) < (?2, ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            &[text(project_id), ts, id, int(page.fetch_len() as i64)],
        )
        .await
    }

    /// Runs statements as one D1 batch (one transaction); answers each statement's changed rows.
    async fn batch(&self, statements: Vec<D1PreparedStatement>) -> Result<Vec<usize>, PortError> {
        self.results(statements)
            .await?
            .iter()
            .map(|r| Ok(r.meta().map_err(PortError::from_display)?.and_then(|m| m.changes).unwrap_or(0)))
            .collect()
    }

    /// Runs statements as one D1 batch (one transaction) and answers their results.
    async fn results(&self, statements: Vec<D1PreparedStatement>) -> Result<Vec<D1Result>, PortError> {
        Ok(self.batch_with_deliveries(statements, Vec::new()).await?.0)
    }

    /// Runs the statements and then the delivery inserts of their events in one batch; answers the
    /// statements' results and the ids of the deliveries written.
    async fn batch_with_deliveries(
        &self,
        statements: Vec<D1PreparedStatement>,
        deliveries: Vec<D1PreparedStatement>,
    ) -> Result<(Vec<D1Result>, Vec<String>), PortError> {
        if statements.is_empty() && deliveries.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        Meter::count(&self.meter.d1_queries);
        let split = statements.len();
        let all = statements.into_iter().chain(deliveries).collect();
        let batch = async { self.db.batch(all).await.map_err(PortError::from_display) };
        let mut results = within(deadline::D1_MS, "D1 batch", batch).await?;
        let mut ids = Vec::new();
        for r in &results[split..] {
            ids.extend(result_ids(r)?);
        }
        results.truncate(split);
        Ok((results, ids))
    }

    /// The batch of a create-or-find insert per row (`… RETURNING created_at`) and its deliveries:
    /// each row's stored `created_at`, or `None` where the statement wrote and found nothing.
    async fn create_or_find(
        &self,
        statements: Vec<D1PreparedStatement>,
        deliveries: Vec<D1PreparedStatement>,
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError> {
        #[derive(serde::Deserialize)]
        struct Stored {
            created_at: i64,
        }
        let (results, deliveries) = self.batch_with_deliveries(statements, deliveries).await?;
        let stored = results
            .iter()
            .map(|r| {
                Ok(r.results::<Stored>().map_err(PortError::from_display)?.first().map(|s| s.created_at))
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        Ok((stored, deliveries))
    }
}

/// A row of a statement that answers ids (`SELECT id …`, `… RETURNING id`).
#[derive(serde::Deserialize)]
struct IdRow {
    id: String,
}

/// The `id`s a statement of a batch answered.
fn result_ids(result: &D1Result) -> Result<Vec<String>, PortError> {
    Ok(result.results::<IdRow>().map_err(PortError::from_display)?.into_iter().map(|r| r.id).collect())
}

fn text(s: &str) -> JsValue {
    JsValue::from_str(s)
}

fn opt_text(s: Option<&str>) -> JsValue {
    s.map_or(JsValue::NULL, JsValue::from_str)
}

/// D1 numbers are JS numbers: exact for Unix milliseconds (< 2^53).
fn int(n: i64) -> JsValue {
    JsValue::from_f64(n as f64)
}

fn opt_int(n: Option<i64>) -> JsValue {
    n.map_or(JsValue::NULL, int)
}

/// The keyset position of a page as the two bound values of `(created_at, id) < (?, ?)`.
fn after(cursor: Option<&Cursor>) -> (JsValue, JsValue) {
    match cursor {
        Some(c) => (int(c.ts), text(&c.id)),
        None => (JsValue::NULL, JsValue::NULL),
    }
}
