//! What one object keeps, counted as the platform counts it (SPEC §23): rows grouped by table and
//! by the time they may go, with their bytes; a write past the platform's 10 GB is refused, as
//! Durable Objects refuse it. The soak model drives months of rows through it with the purge rule
//! of [`super`] — at most [`PURGE_BATCH_ROWS`] rows of a table per pass. (The fake guard counts
//! the rows it holds itself: `fakes/guard_storage.rs` in gatehouse-app.)

use std::collections::BTreeMap;

use super::PURGE_BATCH_ROWS;
use crate::platform::DO_MAX_OBJECT_BYTES;

/// One object's rows.
#[derive(Debug, Default, Clone)]
pub struct StoredRows {
    tables: BTreeMap<&'static str, Table>,
    bytes: u64,
    /// When the last purge pass ran, and whether it left rows that were due.
    last_pass: Option<(i64, bool)>,
}

#[derive(Debug, Default, Clone)]
struct Table {
    /// Rows by keep-until: (rows, bytes).
    due: BTreeMap<i64, (u64, u64)>,
    rows: u64,
}

/// The platform refused a write: the object is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectFull {
    pub bytes: u64,
}

impl std::fmt::Display for ObjectFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the Durable Object's storage is full ({} bytes of {DO_MAX_OBJECT_BYTES})", self.bytes)
    }
}

impl StoredRows {
    /// Keeps `rows` rows of `bytes_each` bytes in `table` until `keep_until`, unless the object
    /// would pass the platform's limit.
    pub fn keep(
        &mut self,
        table: &'static str,
        rows: u64,
        bytes_each: u64,
        keep_until: i64,
    ) -> Result<(), ObjectFull> {
        let bytes = rows * bytes_each;
        if self.bytes + bytes > DO_MAX_OBJECT_BYTES {
            return Err(ObjectFull { bytes: self.bytes });
        }
        let t = self.tables.entry(table).or_default();
        let group = t.due.entry(keep_until).or_default();
        group.0 += rows;
        group.1 += bytes;
        t.rows += rows;
        self.bytes += bytes;
        Ok(())
    }

    /// Whether a purge pass is due at `now_ms` (`super::purge_due`; the first one always).
    pub fn purge_due(&self, now_ms: i64) -> bool {
        self.last_pass.is_none_or(|(at, behind)| super::purge_due(now_ms, at, behind))
    }

    /// One purge pass: at most [`PURGE_BATCH_ROWS`] due rows of each table go, oldest first.
    /// Answers how many rows went.
    pub fn purge_pass(&mut self, now_ms: i64) -> u64 {
        let mut gone = 0;
        let mut behind = false;
        for t in self.tables.values_mut() {
            let mut budget = u64::from(PURGE_BATCH_ROWS);
            while budget > 0 {
                let Some(mut entry) = t.due.first_entry() else { break };
                if *entry.key() > now_ms {
                    break;
                }
                let (rows, bytes) = *entry.get();
                let take = rows.min(budget);
                let take_bytes = if take == rows { bytes } else { bytes / rows * take };
                if take == rows {
                    entry.remove();
                } else {
                    *entry.get_mut() = (rows - take, bytes - take_bytes);
                }
                t.rows -= take;
                self.bytes -= take_bytes;
                budget -= take;
                gone += take;
            }
            behind |= budget == 0 && t.due.first_key_value().is_some_and(|(&at, _)| at <= now_ms);
        }
        self.last_pass = Some((now_ms, behind));
        gone
    }

    /// When this object wakes to purge, if it keeps anything: its alarm (`super::next_alarm`).
    pub fn next_alarm(&self, now_ms: i64) -> Option<i64> {
        let due = self.tables.values().filter_map(|t| t.due.first_key_value().map(|(&at, _)| at)).min();
        super::next_alarm(now_ms, due)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn rows(&self, table: &str) -> u64 {
        self.tables.get(table).map_or(0, |t| t.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_deletes_at_most_a_batch_per_table_and_says_it_left_rows() {
        let mut rows = StoredRows::default();
        rows.keep("t", 2_500, 100, 10).unwrap();
        rows.keep("t", 1, 100, 1_000_000).unwrap();
        assert_eq!(rows.purge_pass(20), 1_000);
        assert!(rows.purge_due(21), "a pass that left due rows is due again at once");
        assert_eq!(rows.purge_pass(21), 1_000);
        assert_eq!(rows.purge_pass(22), 500);
        assert_eq!(rows.rows("t"), 1);
        assert_eq!(rows.bytes(), 100);
        assert!(!rows.purge_due(23));
        assert_eq!(rows.next_alarm(23), Some(1_000_000));
    }

    #[test]
    fn the_object_refuses_a_write_past_ten_gigabytes() {
        let mut rows = StoredRows::default();
        rows.keep("t", 10, DO_MAX_OBJECT_BYTES / 10, 0).unwrap();
        assert_eq!(rows.keep("t", 1, 1, 0), Err(ObjectFull { bytes: DO_MAX_OBJECT_BYTES }));
        rows.purge_pass(1);
        assert_eq!(rows.bytes(), 0);
        rows.keep("t", 1, 1, 0).unwrap();
    }
}
