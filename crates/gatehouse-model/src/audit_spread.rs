//! The audit half of `big-project`: rows of many projects, each project on the D1 database the
//! real `gatehouse_core::audit::audit_database` puts it on; how big each database grows over the
//! hot window, and how often the queue consumer inserts into each.

use gatehouse_core::audit::{audit_database, AuditRow, MAX_AUDIT_DATABASES};
use gatehouse_core::encoding::{object_id, uuid_v4, uuid_v7};

use crate::platform::{Rng, T0_MS};

/// The audit load's parameters.
pub struct AuditLoad {
    pub rows_per_second: f64,
    pub projects: usize,
    /// Project `k` (from 1) sends a share proportional to `1 / k^zipf`.
    pub zipf: f64,
    /// `AUDIT_HOT_SECONDS` (its default): rows stay in D1 this long; the roll-up then moves whole
    /// UTC hours, so a database holds up to this plus an hour of rows.
    pub hot_seconds: f64,
    /// What a row's three index entries (the primary key on `request_id`, `audit_by_project_time`,
    /// `audit_by_time`) and page slack add to its JSON length, bytes.
    pub index_bytes: usize,
    /// Rows one consumer batch carries at most (`max_batch_size`, one row a message).
    pub batch_rows: usize,
    /// No database may grow past this (SPEC §20; D1 allows 10 GB).
    pub max_gb: f64,
}

impl AuditLoad {
    pub fn full() -> Self {
        AuditLoad {
            rows_per_second: 10_000.0,
            projects: 2_000,
            zipf: 0.8,
            hot_seconds: 3_600.0,
            index_bytes: 160,
            batch_rows: 100,
            max_gb: 5.0,
        }
    }
}

pub struct AuditReport {
    pub rows_per_second: f64,
    pub biggest_rows_per_second: f64,
    pub row_bytes: usize,
    /// The fewest databases (`AUDIT_DATABASES`) that keep every one within `max_gb`.
    pub databases: u8,
    /// Each database's size at the hot window's fullest (GB), `AUDIT_DB` first.
    pub gb: Vec<f64>,
    pub max_d1_gb: f64,
    /// The most inserts (consumer batches) and rows one database took in a second.
    pub max_inserts_per_second: u64,
    pub max_rows_per_second: u64,
}

/// A typical row, as the gateway writes it for an idempotent update with a server key (one of the
/// larger common rows): its JSON's length.
pub fn typical_row_bytes(rng: &mut Rng) -> usize {
    let ts = T0_MS + 12_345;
    let contact = object_id("con", &rng.bytes());
    let mut row =
        AuditRow::new(uuid_v7(ts, rng.bytes()), ts, "PATCH".into(), format!("/public/v1/contacts/{contact}"));
    row.project_id = Some(object_id("prj", &rng.bytes()));
    row.key_id = Some(object_id("key", &rng.bytes()));
    row.key_prefix = Some("gh_s_h0WbisH".into());
    row.route = Some("/public/v1/contacts/{id}".into());
    row.status = 200;
    row.response_bytes = 1_834;
    row.response_time_ms = 23;
    row.ip = Some("2001:db8:85a3::8a2e:370:7334".into());
    row.user_agent = Some("gatehouse-client/0.1 (rust; reqwest)".into());
    row.idempotency_key = Some(uuid_v4(rng.bytes()));
    row.rate_limit_remaining = Some(1_873);
    serde_json::to_string(&row).expect("an audit row serialises").len()
}

pub fn audit_spread(load: &AuditLoad, seed: u64, seconds: i64) -> AuditReport {
    // Its own stream of chance, so the ledger's half does not move the audit's.
    let mut rng = Rng(seed ^ 0xA0D1_7000_0000_0000);
    let row_bytes = typical_row_bytes(&mut rng) + load.index_bytes;
    let projects: Vec<String> = (0..load.projects).map(|_| object_id("prj", &rng.bytes())).collect();
    let weights: Vec<f64> = (1..=load.projects).map(|k| 1.0 / (k as f64).powf(load.zipf)).collect();
    let total: f64 = weights.iter().sum();
    let cumulative: Vec<f64> = weights
        .iter()
        .scan(0.0, |sum, w| {
            *sum += w / total;
            Some(*sum)
        })
        .collect();
    // Every row of the run: its project, in the order the queue delivers them.
    let per_second = load.rows_per_second as usize;
    let rows: Vec<u16> = (0..per_second * seconds as usize)
        .map(|_| {
            let u = rng.unit();
            cumulative.partition_point(|&c| c < u).min(load.projects - 1) as u16
        })
        .collect();
    let mut per_project = vec![0u64; load.projects];
    for &r in &rows {
        per_project[usize::from(r)] += 1;
    }
    let hot_window_rows = |count: u64| count as f64 / seconds as f64 * (load.hot_seconds + 3_600.0);
    let gb_of = |databases: u8| -> Vec<f64> {
        let mut per_db = vec![0u64; usize::from(databases)];
        for (project, &count) in projects.iter().zip(&per_project) {
            per_db[usize::from(audit_database(project, databases))] += count;
        }
        per_db.into_iter().map(|n| hot_window_rows(n) * row_bytes as f64 / 1e9).collect()
    };
    let fits = |gb: &[f64]| gb.iter().all(|&g| g <= load.max_gb);
    let databases = (1..=MAX_AUDIT_DATABASES).find(|&d| fits(&gb_of(d))).unwrap_or(MAX_AUDIT_DATABASES);
    let gb = gb_of(databases);
    // The consumer: one insert per database a batch has rows for, the databases side by side.
    let db_of: Vec<usize> = projects.iter().map(|p| usize::from(audit_database(p, databases))).collect();
    let mut inserts = vec![vec![0u64; seconds as usize]; usize::from(databases)];
    let mut db_rows = vec![vec![0u64; seconds as usize]; usize::from(databases)];
    for (b, batch) in rows.chunks(load.batch_rows).enumerate() {
        let second = b * load.batch_rows / per_second;
        let mut touched = vec![false; usize::from(databases)];
        for &r in batch {
            let db = db_of[usize::from(r)];
            touched[db] = true;
            db_rows[db][second] += 1;
        }
        for (db, hit) in touched.into_iter().enumerate() {
            inserts[db][second] += u64::from(hit);
        }
    }
    let busiest = |per_db: &[Vec<u64>]| per_db.iter().flatten().copied().max().unwrap_or(0);
    AuditReport {
        rows_per_second: rows.len() as f64 / seconds as f64,
        biggest_rows_per_second: per_project.iter().copied().max().unwrap_or(0) as f64 / seconds as f64,
        row_bytes,
        databases,
        max_d1_gb: gb.iter().copied().fold(0.0, f64::max),
        gb,
        max_inserts_per_second: busiest(&inserts),
        max_rows_per_second: busiest(&db_rows),
    }
}
