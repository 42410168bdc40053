//! The audit log's two tiers (SPEC §18): recent rows in D1 (the hot tier), older ones in R2 hour
//! objects (the cold tier), each object described by a summary row in D1. This module decides
//! which objects a log page must read, merges their rows with the hot ones in the log's order
//! (newest first by `(ts, request_id)`), and builds the summaries.
//!
//! A row is in exactly one tier at any instant: the roll-up writes an object, then in one D1
//! transaction inserts its summary and deletes its rows, and a page reads the hot rows and the
//! summaries in one D1 batch (one snapshot). Only a redelivered audit message can put a second
//! copy of a rolled-up row back into D1 until the next roll-up drops it; the merge shows a
//! position once, so no page shows a row twice.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::audit::{log_position, AuditRow, LogFilter};
use super::page::{Cursor, PageRequest};

/// Objects one page may read before it answers with what it has (and a cursor to go on).
pub const OBJECTS_PER_PAGE: usize = 16;
/// Summaries one page asks D1 for: more than it may read, so the order of those it reads is sure.
pub const SUMMARIES_PER_PAGE: usize = 64;
/// Key ids a summary lists; an object with more keys lists none (then it never skips by key).
const SUMMARY_KEYS_MAX: usize = 32;

/// What D1 keeps of one cold object: where it is, which rows it spans, and enough about them to
/// skip it for a filter that cannot match any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectSummary {
    pub key: String,
    pub project_id: Option<String>,
    pub first_ts: i64,
    pub first_id: String,
    pub last_ts: i64,
    pub last_id: String,
    pub rows: u32,
    /// Rows per status class: 1xx … 5xx.
    pub statuses: [u32; 5],
    /// The methods present, e.g. `["GET","POST"]`.
    pub methods: Vec<String>,
    /// The key ids present, when at most `SUMMARY_KEYS_MAX`; `None`: too many to list.
    pub key_ids: Option<Vec<String>>,
    /// Whether any row carries an idempotency key.
    pub idempotent: bool,
    /// Hex SHA-256 of the object's bytes as the roll-up stored them (SPEC §22: its digest pins
    /// these, not what the bucket holds when the digest is made). `None` for objects written
    /// before digests existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl ObjectSummary {
    /// The summary of the rows of one object, given in `(ts, request_id)` order (at least one).
    pub fn of(key: &str, rows: &[AuditRow]) -> Self {
        let (first, last) = (&rows[0], &rows[rows.len() - 1]);
        let mut statuses = [0u32; 5];
        let (mut methods, mut keys) = (BTreeSet::new(), BTreeSet::new());
        for r in rows {
            let class = usize::from(r.status / 100).clamp(1, 5) - 1;
            statuses[class] += 1;
            methods.insert(r.method.clone());
            if let Some(k) = &r.key_id {
                keys.insert(k.clone());
            }
        }
        ObjectSummary {
            key: key.to_owned(),
            project_id: first.project_id.clone(),
            first_ts: first.ts,
            first_id: first.request_id.clone(),
            last_ts: last.ts,
            last_id: last.request_id.clone(),
            rows: rows.len() as u32,
            statuses,
            methods: methods.into_iter().collect(),
            key_ids: (keys.len() <= SUMMARY_KEYS_MAX).then(|| keys.into_iter().collect()),
            idempotent: rows.iter().any(|r| r.idempotency_key.is_some()),
            sha256: None,
        }
    }

    pub fn first(&self) -> Cursor {
        Cursor { ts: self.first_ts, id: self.first_id.clone() }
    }

    pub fn last(&self) -> Cursor {
        Cursor { ts: self.last_ts, id: self.last_id.clone() }
    }

    /// Whether some row of the object could match `filter` (false: the page skips it unread).
    pub fn may_match(&self, filter: &LogFilter) -> bool {
        let status = match filter.status {
            None => true,
            Some(s) => {
                let (lo, hi) = s.range();
                (lo / 100..=hi / 100).any(|c| (1..=5).contains(&c) && self.statuses[usize::from(c) - 1] > 0)
            }
        };
        let method = filter.method.as_ref().is_none_or(|m| self.methods.contains(m));
        let key = match (&filter.key_id, &self.key_ids) {
            (Some(k), Some(keys)) => keys.contains(k),
            _ => true,
        };
        let idempotent = filter.idempotency_key.is_none() || self.idempotent;
        let time = filter.from_ms.is_none_or(|f| self.last_ts >= f)
            && filter.to_ms.is_none_or(|t| self.first_ts <= t);
        status && method && key && idempotent && time
    }
}

impl LogFilter {
    /// Whether a row matches every filter: what the D1 query of the hot tier checks, for rows read
    /// from cold objects.
    pub fn matches(&self, row: &AuditRow) -> bool {
        let status = self.status.is_none_or(|s| {
            let (lo, hi) = s.range();
            (lo..=hi).contains(&row.status)
        });
        status
            && self.method.as_ref().is_none_or(|m| *m == row.method)
            && self.path.as_ref().is_none_or(|g| g.matches(&row.path))
            && self.request_id.as_ref().is_none_or(|id| *id == row.request_id)
            && self.key_id.as_ref().is_none_or(|k| row.key_id.as_ref() == Some(k))
            && self.idempotency_key.as_ref().is_none_or(|k| row.idempotency_key.as_ref() == Some(k))
            && self.from_ms.is_none_or(|f| row.ts >= f)
            && self.to_ms.is_none_or(|t| row.ts <= t)
            && self.dashboard.is_none_or(|d| row.dashboard == d)
            && self.trace_id.as_ref().is_none_or(|t| row.trace_id.as_ref() == Some(t))
    }
}

fn position(c: &Cursor) -> (i64, &str) {
    (c.ts, c.id.as_str())
}

/// The cursor whose page starts *at* `c` (rows `≤ c`): request ids are fixed-length UUIDs of
/// `[0-9a-f-]`, so `id~` sorts after `id` and before every longer-or-greater id at the same ts.
pub fn through(c: &Cursor) -> Cursor {
    Cursor { ts: c.ts, id: format!("{}~", c.id) }
}

/// One page of the log across both tiers, read step by step: the caller asks [`wanted`] for the
/// next object, reads it and hands its rows to [`add`], until `wanted` answers `None` or the
/// page has read [`OBJECTS_PER_PAGE`] objects; then [`finish`] answers the page body.
///
/// [`wanted`]: PageMerge::wanted
/// [`add`]: PageMerge::add
/// [`finish`]: PageMerge::finish
pub struct PageMerge {
    filter: LogFilter,
    page: PageRequest,
    /// Rows known to belong to the page's range (hot rows and rows of the objects read).
    pool: Vec<AuditRow>,
    /// Objects still to read, greatest `last` first.
    objects: Vec<ObjectSummary>,
    /// Rows below this position never make the page: the hot tier alone has a full page above it.
    floor: Option<Cursor>,
    /// When D1 had more summaries than it answered: the `last` of the least one answered, below
    /// which objects are unknown.
    unlisted_below: Option<Cursor>,
    read: usize,
}

impl PageMerge {
    /// `hot`: the hot tier's rows matching the filter after the cursor, newest first, at most
    /// `page.fetch_len()`; `summaries`: the objects overlapping the range, at most
    /// [`SUMMARIES_PER_PAGE`] in any order (a full list means more may exist).
    pub fn new(
        filter: LogFilter,
        page: PageRequest,
        hot: Vec<AuditRow>,
        mut summaries: Vec<ObjectSummary>,
    ) -> Self {
        let floor = (hot.len() >= page.fetch_len()).then(|| log_position(&hot[hot.len() - 1]));
        summaries.sort_by(|a, b| (b.last_ts, &b.last_id).cmp(&(a.last_ts, &a.last_id)));
        let unlisted_below =
            (summaries.len() >= SUMMARIES_PER_PAGE).then(|| summaries[summaries.len() - 1].last());
        let after = page.after.clone();
        summaries.retain(|s| {
            s.may_match(&filter)
                && after.as_ref().is_none_or(|c| position(&s.first()) < position(c))
                && floor.as_ref().is_none_or(|f| position(&s.last()) >= position(f))
        });
        summaries.reverse(); // popped from the end: greatest `last` first
        PageMerge { filter, page, pool: hot, objects: summaries, floor, unlisted_below, read: 0 }
    }

    /// Rows in the pool above `bound`.
    fn settled_above(&self, bound: &Cursor) -> usize {
        self.pool.iter().filter(|r| position(&log_position(r)) > position(bound)).count()
    }

    /// The next object the page must read, if any: one whose rows could still be among the page's.
    pub fn wanted(&self) -> Option<&ObjectSummary> {
        let next = self.objects.last()?;
        if self.read >= OBJECTS_PER_PAGE {
            return None;
        }
        // The page is full of rows above everything this object (and every later one) holds.
        (self.settled_above(&next.last()) < self.page.fetch_len()).then_some(next)
    }

    /// The rows of the object [`wanted`](Self::wanted) answered, as read.
    pub fn add(&mut self, rows: Vec<AuditRow>) {
        self.objects.pop();
        self.read += 1;
        let after = self.page.after.clone();
        self.pool.extend(rows.into_iter().filter(|r| {
            self.filter.matches(r) && after.as_ref().is_none_or(|c| position(&log_position(r)) < position(c))
        }));
    }

    /// The page: its rows newest first (each position once) and the cursor of the next page.
    /// When objects remain that the page did not read, only rows above the greatest of them are
    /// shown, and the next page starts at it.
    pub fn finish(mut self) -> (Vec<AuditRow>, Option<Cursor>) {
        self.pool.sort_by(|a, b| (b.ts, &b.request_id).cmp(&(a.ts, &a.request_id)));
        self.pool.dedup_by(|a, b| a.ts == b.ts && a.request_id == b.request_id);
        if let Some(f) = &self.floor {
            self.pool.retain(|r| position(&log_position(r)) >= position(f));
        }
        // Objects not read (or not listed) may hold rows of this page below the greatest `last`
        // among them: rows above it are certain; when they fill the page, it is complete anyway.
        let fetch = self.page.fetch_len();
        let bound = match self.objects.last() {
            Some(next) => Some(next.last()),
            None => self.unlisted_below.clone(),
        }
        .filter(|b| self.settled_above(b) < fetch);
        let limit = self.page.limit;
        if let Some(bound) = &bound {
            self.pool.retain(|r| position(&log_position(r)) > position(bound));
        }
        if self.pool.len() > limit {
            self.pool.truncate(limit);
            let next = self.pool.last().map(log_position);
            return (self.pool, next);
        }
        (self.pool, bound.as_ref().map(through))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{PathGlob, StatusFilter};

    fn row(ts: i64, id: &str, status: u16) -> AuditRow {
        let mut r = AuditRow::new(id.into(), ts, "GET".into(), format!("/p/{id}"));
        r.project_id = Some("prj".into());
        r.status = status;
        r.key_id = Some("key_1".into());
        r
    }

    fn object(rows: &[AuditRow]) -> ObjectSummary {
        ObjectSummary::of(&format!("obj-{}", rows[0].request_id), rows)
    }

    fn page(limit: usize, after: Option<Cursor>) -> PageRequest {
        PageRequest { limit, after }
    }

    /// Runs a page to the end with `objects` as the cold tier.
    fn run(
        filter: &LogFilter,
        p: PageRequest,
        hot: &[AuditRow],
        objects: &[Vec<AuditRow>],
    ) -> (Vec<String>, Option<Cursor>, usize) {
        let hot: Vec<AuditRow> = {
            let mut h: Vec<AuditRow> = hot
                .iter()
                .filter(|r| filter.matches(r))
                .filter(|r| {
                    p.after.as_ref().is_none_or(|c| (r.ts, r.request_id.as_str()) < (c.ts, c.id.as_str()))
                })
                .cloned()
                .collect();
            h.sort_by(|a, b| (b.ts, &b.request_id).cmp(&(a.ts, &a.request_id)));
            h.truncate(p.fetch_len());
            h
        };
        let summaries = objects.iter().map(|o| object(o)).collect();
        let mut merge = PageMerge::new(filter.clone(), p, hot, summaries);
        let mut reads = 0;
        while let Some(next) = merge.wanted() {
            let rows = objects.iter().find(|o| object(o).key == next.key).unwrap().clone();
            merge.add(rows);
            reads += 1;
        }
        let (rows, next) = merge.finish();
        (rows.into_iter().map(|r| r.request_id).collect(), next, reads)
    }

    /// Every row exactly once, newest first, following cursors page by page.
    fn all_pages(
        filter: &LogFilter,
        limit: usize,
        hot: &[AuditRow],
        objects: &[Vec<AuditRow>],
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut after = None;
        for _ in 0..1000 {
            let (ids, next, _) = run(filter, page(limit, after.clone()), hot, objects);
            out.extend(ids);
            match next {
                Some(c) => after = Some(c),
                None => return out,
            }
        }
        panic!("pages never ended");
    }

    #[test]
    fn pages_merge_the_tiers_newest_first_without_a_gap_or_a_repeat() {
        // Three hour objects, a late object overlapping the second, and hot rows.
        let cold = vec![
            (0..10).map(|i| row(1_000 + i, &format!("a{i:02}"), 200)).collect::<Vec<_>>(),
            (0..10).map(|i| row(2_000 + i * 2, &format!("b{i:02}"), 404)).collect(),
            vec![row(2_003, "late1", 500), row(2_005, "late2", 200)],
            (0..10).map(|i| row(3_000 + i, &format!("c{i:02}"), 201)).collect(),
        ];
        let hot: Vec<AuditRow> = (0..7).map(|i| row(4_000 + i, &format!("h{i:02}"), 200)).collect();
        let mut expected: Vec<AuditRow> = cold.iter().flatten().chain(&hot).cloned().collect();
        expected.sort_by(|a, b| (b.ts, &b.request_id).cmp(&(a.ts, &a.request_id)));
        let expected: Vec<String> = expected.into_iter().map(|r| r.request_id).collect();
        for limit in [1, 2, 3, 5, 7, 11, 50] {
            assert_eq!(all_pages(&LogFilter::default(), limit, &hot, &cold), expected, "limit {limit}");
        }
        // A filter that only cold rows match, and one that skips whole objects by summary.
        let errors = LogFilter { status: Some(StatusFilter::Class(5)), ..Default::default() };
        assert_eq!(all_pages(&errors, 1, &hot, &cold), ["late1"]);
        let (_, _, reads) = run(&errors, page(10, None), &hot, &cold);
        assert_eq!(reads, 1, "only the object with a 5xx row is read");
        let glob = LogFilter { path: Some(PathGlob::parse("/p/b0*").unwrap()), ..Default::default() };
        assert_eq!(all_pages(&glob, 3, &hot, &cold).len(), 10);
    }

    #[test]
    fn a_page_reads_only_the_objects_it_needs() {
        let cold: Vec<Vec<AuditRow>> =
            (0..5).map(|h| (0..10).map(|i| row(h * 100 + i, &format!("r{h}{i}"), 200)).collect()).collect();
        let (ids, next, reads) = run(&LogFilter::default(), page(5, None), &[], &cold);
        assert_eq!(ids, ["r49", "r48", "r47", "r46", "r45"]);
        assert_eq!(next, Some(Cursor { ts: 405, id: "r45".into() }));
        assert_eq!(reads, 1);
        // A full page of hot rows above every object reads none.
        let hot: Vec<AuditRow> = (0..6).map(|i| row(1_000 + i, &format!("h{i}"), 200)).collect();
        assert_eq!(run(&LogFilter::default(), page(5, None), &hot, &cold).2, 0);
    }

    #[test]
    fn a_page_that_runs_out_of_reads_continues_where_it_stopped() {
        // Many objects with no matching row: the page answers empty with a cursor that goes on.
        let mut cold: Vec<Vec<AuditRow>> =
            (0..40).map(|h| (0..3).map(|i| row(h * 10 + i, &format!("x{h:02}{i}"), 200)).collect()).collect();
        cold[0][0].path = "/needle".into();
        let filter = LogFilter { path: Some(PathGlob::parse("/needle").unwrap()), ..Default::default() };
        let (ids, next, reads) = run(&filter, page(10, None), &[], &cold);
        assert!(ids.is_empty());
        assert_eq!(reads, OBJECTS_PER_PAGE);
        assert!(next.is_some());
        assert_eq!(all_pages(&filter, 10, &[], &cold), ["x000"]);
    }

    #[test]
    fn a_rolled_up_row_sent_again_shows_once() {
        let cold = vec![vec![row(10, "a", 200), row(11, "b", 200)]];
        let hot = vec![row(11, "b", 200), row(12, "c", 200)];
        assert_eq!(all_pages(&LogFilter::default(), 1, &hot, &cold), ["c", "b", "a"]);
        assert_eq!(all_pages(&LogFilter::default(), 10, &hot, &cold), ["c", "b", "a"]);
    }

    #[test]
    fn through_sorts_right_after_its_position() {
        let c = Cursor { ts: 5, id: "0190a3b4-0000-7000-8000-000000000000".into() };
        let t = through(&c);
        assert!(position(&c) < position(&t));
        assert!(
            position(&t) < position(&Cursor { ts: 5, id: "0190a3b4-0000-7000-8000-000000000001".into() })
        );
        assert!(position(&t) < position(&Cursor { ts: 6, id: String::new() }));
    }

    #[test]
    fn summaries_skip_objects_no_filter_can_match() {
        let mut rows = vec![row(1, "a", 200), row(2, "b", 404)];
        rows[1].method = "POST".into();
        let s = ObjectSummary::of("k", &rows);
        assert_eq!(s.statuses, [0, 1, 0, 1, 0]);
        assert_eq!(s.methods, ["GET", "POST"]);
        assert!(s.may_match(&LogFilter { status: Some(StatusFilter::Exact(404)), ..Default::default() }));
        assert!(!s.may_match(&LogFilter { status: Some(StatusFilter::Class(5)), ..Default::default() }));
        assert!(!s.may_match(&LogFilter { method: Some("DELETE".into()), ..Default::default() }));
        assert!(!s.may_match(&LogFilter { key_id: Some("key_2".into()), ..Default::default() }));
        assert!(!s.may_match(&LogFilter { idempotency_key: Some("k".into()), ..Default::default() }));
        assert!(!s.may_match(&LogFilter { from_ms: Some(3), ..Default::default() }));
        assert!(s.may_match(&LogFilter { to_ms: Some(1), ..Default::default() }));
    }
}
