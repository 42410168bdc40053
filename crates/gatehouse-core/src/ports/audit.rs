//! The audit log (SPEC §9, §18): the audit queue, the rows in D1 and their roll-up to R2.

use super::PortError;
use crate::audit::{AuditRow, DayCount, EndpointCount, LogFilter};
use crate::audit_chain::{AdoptHead, AdvanceHead, Advanced, BindObjects, BoundObject, HeadState};
use crate::page::{Cursor, PageRequest};
use crate::tiers::ObjectSummary;
use crate::usage::{UsageGroup, UsageQuery, UsageRun};

/// The audit queue (`AUDIT_QUEUE`): rows leave the hot path here.
pub trait AuditSink {
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError>;
}

/// The audit log's database (`AUDIT_DB`, SPEC §18): the hot tier's rows, the summaries of the
/// cold tier's objects, and the per-key daily aggregates.
pub trait AuditStore {
    /// Inserts each row once per `request_id` and adds it to the daily aggregates and, when it
    /// bills, to the usage counts of its period (SPEC §22) in the same transaction (a retried
    /// batch changes nothing).
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError>;
    /// One snapshot of the log for a page: the project's hot rows matching the filter, newest
    /// first, after the page's cursor (at most `page.fetch_len()`), and the summaries of the cold
    /// objects whose span overlaps the filter's time range before the cursor (at most
    /// [`crate::tiers::SUMMARIES_PER_PAGE`], greatest `last` first).
    async fn log_snapshot(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<(Vec<AuditRow>, Vec<ObjectSummary>), PortError>;
    /// For each position `(project, at)`: the summaries of the project's objects whose span holds
    /// `at`, at most `limit` of them (more than one when a row that arrived late was archived
    /// inside an older object's span). One query for a whole batch of the roll-up.
    async fn objects_covering_each(
        &self,
        positions: &[(Option<&str>, &Cursor)],
        limit: usize,
    ) -> Result<Vec<Vec<ObjectSummary>>, PortError>;
    /// Per UTC day since `since_ms`, and the top endpoints, of one key (`None`: of every key of
    /// the project) and one endpoint (`(method, route)`; `None`: every one): from the aggregates,
    /// response-time buckets included.
    async fn stats(&self, of: StatsOf<'_>) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError>;
    /// The last UTC day (`YYYY-MM-DD`) since `since_ms` on which each key of the project made a
    /// request: from the daily aggregates, one row per key.
    async fn keys_last_used(
        &self,
        project_id: &str,
        since_ms: i64,
    ) -> Result<Vec<(String, String)>, PortError>;
    /// The oldest rows (by `(ts, request_id)`) older than `before_ms`, of every project, at most
    /// `limit`: the roll-up's next batch. Each project's rows in it are that project's oldest.
    async fn expired_rows(&self, before_ms: i64, limit: usize) -> Result<Vec<AuditRow>, PortError>;
    /// Clears slices the roll-up archived, in one transaction; each only if exactly its `count`
    /// rows are still between its `first` and `last` (both inclusive) — a row that arrived since
    /// keeps them all: inserts (or replaces) the summary of the object written, takes the rows
    /// that were copies of rows already rolled up out of the aggregates (the usage counts too),
    /// and deletes the slice's rows and its `tail`. Answers, per slice, how many rows went: its `count` or 0.
    async fn clear_slices(&self, slices: &[ArchivedSlice<'_>]) -> Result<Vec<usize>, PortError>;
}

/// A slice of the roll-up (rows of one project and hour, as far as one object goes), as [`AuditStore::clear_slices`] clears it.
pub struct ArchivedSlice<'a> {
    pub project_id: Option<&'a str>,
    pub first: &'a Cursor,
    pub last: &'a Cursor,
    /// Rows read from D1 between `first` and `last`.
    pub count: usize,
    /// The object written, when the slice held a row not rolled up before.
    pub summary: Option<&'a ObjectSummary>,
    /// Rows of the slice that an earlier object holds already (a redelivered audit message).
    pub copies: &'a [AuditRow],
    /// Request ids after `last` that the object holds too (written before by a batch that read
    /// more, its clearing not done): deleted with the slice, not counted as copies.
    pub tail: &'a [String],
}

/// An archived object, as the archive lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveObject {
    pub key: String,
    pub size: u64,
    pub uploaded_ms: i64,
}

/// The `ARCHIVE` bucket (R2): the audit archive — gzip NDJSON, one object per slice of a project's
/// day (see `core::archive`) — and session-recording segment (`core::events::recording_object_key`).
pub trait Archive {
    /// An audit object's bytes as [`Archive::put`] stores them: the NDJSON lines as one gzip
    /// member (digests list their SHA-256).
    async fn seal(&self, ndjson: &[u8]) -> Result<Vec<u8>, PortError>;
    /// Writes an audit object [`Archive::seal`] made, whole, replacing any object of that key.
    /// Never a read-modify-write.
    async fn put(&self, key: &str, sealed: &[u8]) -> Result<(), PortError>;
    /// Writes a session-recording segment's JSON as it is, replacing any object of that key.
    async fn put_recording_segment(&self, key: &str, json: &[u8]) -> Result<(), PortError>;
    /// Writes an audit digest's file as it is (JSON), replacing any object of that key.
    async fn put_digest(&self, key: &str, json: &[u8]) -> Result<(), PortError>;
    /// Writes a usage export's NDJSON as it is (SPEC §22), replacing any object of that key.
    async fn put_usage(&self, key: &str, ndjson: &[u8]) -> Result<(), PortError>;
    /// Every object whose key starts with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<ArchiveObject>, PortError>;
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PortError>;
    /// An audit object read once: the SHA-256 of its bytes as stored (as [`Archive::put`] answers
    /// it) and its NDJSON decompressed (`None`: the bytes are not one gzip member).
    async fn read_stored(&self, key: &str) -> Result<Option<StoredObject>, PortError>;
    /// An audit object's NDJSON, decompressed.
    async fn read_ndjson(&self, key: &str) -> Result<Option<Vec<u8>>, PortError>;
}

/// See [`Archive::read_stored`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub sha256: String,
    pub ndjson: Option<Vec<u8>>,
}

/// A digest written (SPEC §22), as the project's audit database keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct DigestRecord {
    /// Whose (`None` where the project is implied).
    #[serde(default)]
    pub project_id: Option<String>,
    pub period_start: i64,
    /// The end of its span (one period, or a run of periods without objects: SPEC §23).
    pub period_end: i64,
    pub key: String,
    /// Hex SHA-256 of the digest file's bytes.
    pub sha256: String,
    pub objects: u32,
}

/// A digest to record, with the objects it lists (marked digested beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestWritten {
    pub project_id: String,
    pub record: DigestRecord,
    pub listed: Vec<String>,
    pub made_at: i64,
}

/// An archive object no digest lists yet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct UndigestedObject {
    pub project_id: String,
    pub key: String,
    /// The SHA-256 the roll-up stored it with (`None`: written before digests existed).
    pub sha256: Option<String>,
    pub rows: u64,
    pub first_id: String,
    pub last_id: String,
    pub first_ts: i64,
}

/// Where a project's chain starts (see [`DigestStore::chain_starts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainStart {
    pub project_id: String,
    pub last: Option<DigestRecord>,
    pub objects: Vec<UndigestedObject>,
}

/// A project with archived objects no digest lists, as D1 says (`digest_due`, written by the
/// roll-up with each object): a hint of where the digest job has work. What is signed comes from
/// the project's chain head ([`AuditHeads`]), never from here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct DigestDue {
    pub project_id: String,
    /// The start of its first period (its creation's): where a chain that never started starts.
    pub first_period: i64,
}

/// The audit digests' bookkeeping in D1 (SPEC §22, §23): which projects have objects no digest
/// lists (the job's hint), the digests written (what verifiers list) and which objects they list.
pub trait DigestStore {
    /// Up to `limit` projects with archived objects no digest lists whose first row is older than
    /// `before_ms`, the longest waiting first; with the start of each one's first period of
    /// `period_ms`. Projects without such objects (idle ones) cost nothing here.
    async fn projects_due_for_digest(
        &self,
        period_ms: i64,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<DigestDue>, PortError>;
    /// Of `projects`, those with rows older than `before_ms` still in the hot tier (the roll-up
    /// is behind: their objects are not final). One query per audit database.
    async fn projects_waiting(&self, projects: &[String], before_ms: i64) -> Result<Vec<String>, PortError>;
    /// For chains that never started in their heads (a project from before SPEC §23, or a new
    /// one): each project's latest digest and its objects no digest lists, as D1 has them — the
    /// one time a chain takes D1's word. One query per audit database for each.
    async fn chain_starts(&self, projects: &[String]) -> Result<Vec<ChainStart>, PortError>;
    /// Records the digests (again: replaced) and marks the objects each lists, in one batch per
    /// audit database.
    async fn record_digests(&self, digests: &[DigestWritten]) -> Result<(), PortError>;
    /// After the heads moved: each project's next period (`digest_next`) and when its oldest
    /// object no digest lists begins (`None`: none is left, it has no work); keeps each alert
    /// (project, what disagrees) and forgets those of projects settled without one.
    async fn settle_digests(
        &self,
        settled: &[Settled],
        alerts: &[(String, String)],
        now_ms: i64,
    ) -> Result<(), PortError>;
    /// What `GET /admin/v1/audit/health` shows: how many projects have objects no digest lists
    /// whose first row is older than `before_ms`, the oldest such row's time, and the alerts kept.
    async fn digest_health(&self, before_ms: i64) -> Result<DigestHealth, PortError>;
    /// The project's digests whose span overlaps `[from_ms, to_ms)`, oldest first, at most `limit`.
    async fn digests(&self, of: DigestsOf<'_>) -> Result<Vec<DigestRecord>, PortError>;
}

/// Where a project's chain stands after a run (see [`DigestStore::settle_digests`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub project_id: String,
    pub covered_to: i64,
    pub oldest_pending_ts: Option<i64>,
}

/// The digests' state across projects (see [`DigestStore::digest_health`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestHealth {
    pub projects_behind: u64,
    pub oldest_undigested_ts: Option<i64>,
    /// (project, when, what disagrees with its chain head).
    pub alerts: Vec<(String, i64, String)>,
}

/// What [`AuditStore::stats`] counts: one key's requests (`None`: every key's of the project) to
/// one endpoint (`(method, route)`; `None`: every one), per UTC day since `since_ms`.
#[derive(Debug, Clone, Copy)]
pub struct StatsOf<'a> {
    pub project_id: &'a str,
    pub key_id: Option<&'a str>,
    pub endpoint: Option<(&'a str, &'a str)>,
    pub since_ms: i64,
}

/// The periods [`UsageStore::usage_due`] looks for: up to `limit`, `period_ms` long, that ended by
/// `ended_by_ms`, none that started before `from_ms`.
#[derive(Debug, Clone, Copy)]
pub struct UsageDue {
    pub period_ms: i64,
    pub from_ms: i64,
    pub ended_by_ms: i64,
    pub limit: usize,
}

/// The digests [`DigestStore::digests`] answers: the project's whose span overlaps
/// `[from_ms, to_ms)`, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct DigestsOf<'a> {
    pub project_id: &'a str,
    pub from_ms: i64,
    pub to_ms: i64,
    pub limit: usize,
}

/// A project's chain head and the objects bound to it (SPEC §23, `crate::audit_chain`), where a D1
/// or R2 writer cannot reach: the project's Durable Object.
pub trait AuditHeads {
    /// Announces the puts of `objects` (see [`crate::audit_chain::BindObjects`]): answers the
    /// keys refused (not to be written).
    async fn bind_objects(&self, project_id: &str, bind: &BindObjects) -> Result<Vec<String>, PortError>;
    /// Their puts are done: bound (see [`crate::audit_chain::ConfirmObjects`]).
    async fn confirm_objects(&self, project_id: &str, objects: &[BoundObject]) -> Result<(), PortError>;
    async fn read_head(&self, project_id: &str, objects: usize) -> Result<HeadState, PortError>;
    async fn adopt_head(&self, project_id: &str, adopt: &AdoptHead) -> Result<HeadState, PortError>;
    async fn advance_head(&self, project_id: &str, advance: &AdvanceHead) -> Result<Advanced, PortError>;
}

/// Usage for billing (SPEC §22), in the audit databases beside the rows it counts: the counts the
/// row inserts keep (see [`AuditStore::insert_audit_rows`]), and the export's runs.
pub trait UsageStore {
    /// Up to `limit` periods (project, start) to export, oldest first: those that ended by
    /// `ended_by_ms` (periods `period_ms` long) with counts not exported yet, and those with a run
    /// taken but not sent; none that started before `from_ms` (they are pruned).
    async fn usage_due(&self, due: UsageDue) -> Result<Vec<(String, i64)>, PortError>;
    /// The period's run taken but not sent, if any.
    async fn unsent_usage_run(
        &self,
        project_id: &str,
        period_start: i64,
    ) -> Result<Option<UsageRun>, PortError>;
    /// Takes the period's next run in one transaction, unless a run of it is still unsent or
    /// nothing changed: records per subject the difference between the counts and what earlier
    /// runs exported, and marks the counts exported. `run_id` names this attempt.
    async fn take_usage_run(
        &self,
        project_id: &str,
        period_start: i64,
        period_ms: i64,
        run_id: &str,
        made_at: i64,
    ) -> Result<Option<UsageRun>, PortError>;
    /// Marks the run sent (its object written and its event recorded).
    async fn usage_run_sent(
        &self,
        project_id: &str,
        period_start: i64,
        seq: u32,
        sent_at: i64,
    ) -> Result<(), PortError>;
    /// Deletes at most `limit` rows of each usage table (counts, runs, records) of periods that
    /// started before `before_ms`, in every audit database; answers how many went.
    async fn prune_usage(&self, before_ms: i64, limit: usize) -> Result<usize, PortError>;
    /// The project's counts of `query`'s range, grouped: a page of groups (at most
    /// `query.limit + 1`) and the range's total.
    async fn usage(&self, project_id: &str, query: &UsageQuery) -> Result<(Vec<UsageGroup>, i64), PortError>;
    /// The project's export runs of the periods that start in `[from_ms, to_ms)`, newest first, at
    /// most `limit` (SPEC §26: the dashboard's usage view).
    async fn usage_runs(
        &self,
        project_id: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<RunSummary>, PortError>;
    /// One period of one project (`None`: every project) in one snapshot per audit database:
    /// what the sent runs exported, what is counted but not exported, the billable rows still hot,
    /// and the archive objects (keys) whose span overlaps the period — their billable rows of the
    /// period are the rest of the audited count.
    async fn usage_snapshot(
        &self,
        project_id: Option<&str>,
        period_start: i64,
        period_ms: i64,
    ) -> Result<UsageSnapshot, PortError>;
}

/// One export run, as [`UsageStore::usage_runs`] lists it: its period, its number (0: the
/// export, then the adjustments), when it was made and its event sent, its records and what they add.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct RunSummary {
    pub period_start: i64,
    pub seq: u32,
    pub made_at: i64,
    pub sent_at: Option<i64>,
    pub records: u32,
    pub requests: i64,
}

/// What [`UsageStore::usage_snapshot`] answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    pub exported: i64,
    pub pending: i64,
    pub hot_billable: i64,
    /// The keys of the archive objects whose span overlaps the period.
    pub objects: Vec<String>,
}
