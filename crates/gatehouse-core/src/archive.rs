//! The cold tier's layout in R2 (SPEC §18, §9 and §12.1): where the roll-up puts the rows it moves
//! out of D1, and which rows go together. The objects are also the archive.
//!
//! A run moves the rows of one project and UTC hour in slices, in `(ts, request_id)` order. Each
//! slice becomes one object, written whole and named after the slice's first row:
//! `audit/{project}/{YYYY-MM-DD}/{ts:013}-{request_id}.ndjson.gz`. A slice never reaches past the
//! first row of an object the day already has ([`slice_end`]), so a slice whose object was written
//! but whose rows are still in D1 (the delete failed, or the run stopped) is chosen again with the
//! same first row and rewritten under the same key: no row lands in two objects.

use super::page::Cursor;
use super::time::{date_start, utc_date};

pub const DAY_MS: i64 = 86_400_000;
pub const HOUR_MS: i64 = 3_600_000;
/// The archive folder of rows that no project could be named for.
pub const UNATTRIBUTED: &str = "_unattributed";
const SUFFIX: &str = ".ndjson.gz";

/// Rows older than this leave the hot tier: the start of the UTC hour `hot_seconds` before now.
/// Only whole hours move, so a project's hour is one object (or one per 5,000 rows), not one per
/// run; D1 holds the hot window and at most one hour more.
pub fn hot_cutoff(now_ms: i64, hot_seconds: u32) -> i64 {
    let t = now_ms - i64::from(hot_seconds) * 1000;
    t - t.rem_euclid(HOUR_MS)
}

/// Rows older than this are past retention: 00:00 UTC today, minus `retention_days` whole days.
pub fn retention_cutoff(now_ms: i64, retention_days: u32) -> i64 {
    now_ms - now_ms.rem_euclid(DAY_MS) - i64::from(retention_days) * DAY_MS
}

/// `audit/{project}/`: every archived object of a project.
pub fn project_prefix(project_id: Option<&str>) -> String {
    format!("audit/{}/", project_id.unwrap_or(UNATTRIBUTED))
}

/// `audit/{project}/{day}/`: the slice objects of one project and day.
pub fn day_prefix(project_id: Option<&str>, day: &str) -> String {
    format!("{}{day}/", project_prefix(project_id))
}

/// The key of the slice whose first row is at `first`.
pub fn slice_key(project_id: Option<&str>, first: &Cursor) -> String {
    format!("{}{:013}-{}{SUFFIX}", day_prefix(project_id, &utc_date(first.ts)), first.ts, first.id)
}

/// The first row of the slice that `key` names, if it is a slice object under `day_prefix`.
pub fn slice_start(day_prefix: &str, key: &str) -> Option<Cursor> {
    let name = key.strip_prefix(day_prefix)?.strip_suffix(SUFFIX)?;
    let (ts, id) = name.split_once('-')?;
    if ts.len() != 13 || id.is_empty() {
        return None;
    }
    Some(Cursor { ts: ts.parse().ok()?, id: id.to_owned() })
}

/// A position as it sorts: by time, then by request id.
pub fn position(c: &Cursor) -> (i64, &str) {
    (c.ts, c.id.as_str())
}

/// The exclusive end of the slice that starts at `first`: the end of its UTC hour or `cutoff`,
/// whichever is earlier, or the first row of the next object the day already has (`starts`, the
/// first rows of the day's objects), so slices line up with the objects written before.
pub fn slice_end(first: &Cursor, cutoff: i64, starts: &[Cursor]) -> Cursor {
    let hour_end = first.ts - first.ts.rem_euclid(HOUR_MS) + HOUR_MS;
    // (t, "") sorts before every row at t: "rows with ts < t".
    let mut end = Cursor { ts: hour_end.min(cutoff), id: String::new() };
    for start in starts {
        if position(start) > position(first) && position(start) < position(&end) {
            end = start.clone();
        }
    }
    end
}

/// The UTC day an archived object of the project holds rows of: `{day}/…` (a slice) or
/// `{day}.ndjson.gz` (one object per day, as the first archive layout wrote them).
pub fn object_day<'a>(project_prefix: &str, key: &'a str) -> Option<&'a str> {
    let rest = key.strip_prefix(project_prefix)?;
    let day = rest.get(..10)?;
    let tail = &rest[10..];
    let known = tail == SUFFIX || tail.starts_with('/');
    (known && date_start(day).is_some()).then_some(day)
}

/// A day's objects in the order their gzip members make the day's download: the whole-day object
/// of the first layout (if any), then the slices by their first row. Keys of other days are dropped.
pub fn download_order(project_id: Option<&str>, day: &str, keys: &[String]) -> Vec<String> {
    let whole_day = format!("{}{day}{SUFFIX}", project_prefix(project_id));
    let slices = day_prefix(project_id, day);
    let mut starts: Vec<(Cursor, &String)> =
        keys.iter().filter_map(|k| slice_start(&slices, k).map(|c| (c, k))).collect();
    starts.sort_by(|a, b| position(&a.0).cmp(&position(&b.0)));
    keys.iter().filter(|k| **k == whole_day).chain(starts.into_iter().map(|(_, k)| k)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: i64, id: &str) -> Cursor {
        Cursor { ts, id: id.into() }
    }

    const JAN_15: i64 = 1_768_435_200_000; // 2026-01-15T00:00Z

    #[test]
    fn the_hot_cutoff_is_the_start_of_the_hour_the_window_ends_in() {
        assert_eq!(hot_cutoff(JAN_15 + 5 * HOUR_MS + 59_000, 3_600), JAN_15 + 4 * HOUR_MS);
        assert_eq!(hot_cutoff(JAN_15 + 5 * HOUR_MS, 3_600), JAN_15 + 4 * HOUR_MS);
        assert_eq!(hot_cutoff(JAN_15 + 5 * HOUR_MS - 1, 3_600), JAN_15 + 3 * HOUR_MS);
    }

    #[test]
    fn the_cutoff_is_midnight_utc_minus_whole_days() {
        assert_eq!(retention_cutoff(JAN_15 + 5 * DAY_MS + 123, 3), JAN_15 + 2 * DAY_MS);
        assert_eq!(retention_cutoff(JAN_15, 0), JAN_15);
    }

    #[test]
    fn a_slice_key_names_its_day_and_first_row_and_parses_back() {
        let first = at(JAN_15 + 36_000_000, "a-b-c");
        let key = slice_key(Some("prj_1"), &first);
        assert_eq!(key, "audit/prj_1/2026-01-15/1768471200000-a-b-c.ndjson.gz");
        assert_eq!(slice_start("audit/prj_1/2026-01-15/", &key), Some(first));
        assert_eq!(slice_start("audit/prj_1/2026-01-16/", &key), None);
        assert_eq!(slice_start("audit/prj_1/2026-01-15/", "audit/prj_1/2026-01-15/x.ndjson.gz"), None);
        assert!(slice_key(None, &at(JAN_15, "r")).starts_with("audit/_unattributed/2026-01-15/"));
    }

    #[test]
    fn a_slice_ends_at_the_hour_the_cutoff_or_the_next_existing_object() {
        let first = at(JAN_15 + 10, "m");
        assert_eq!(slice_end(&first, i64::MAX, &[]), at(JAN_15 + HOUR_MS, ""));
        assert_eq!(
            slice_end(&at(JAN_15 + 5 * HOUR_MS + 1, "m"), i64::MAX, &[]),
            at(JAN_15 + 6 * HOUR_MS, "")
        );
        assert_eq!(slice_end(&first, JAN_15 + 500, &[]), at(JAN_15 + 500, ""));
        let starts = [at(JAN_15 + 5, "z"), at(JAN_15 + 10, "m"), at(JAN_15 + 10, "n"), at(JAN_15 + 90, "a")];
        // Its own object (same first row) does not end it; the next one does, even at the same ts.
        assert_eq!(slice_end(&first, i64::MAX, &starts), at(JAN_15 + 10, "n"));
        assert_eq!(slice_end(&at(JAN_15 + 10, "n"), i64::MAX, &starts), at(JAN_15 + 90, "a"));
    }

    #[test]
    fn objects_group_by_day_in_both_layouts() {
        let p = "audit/prj_1/";
        assert_eq!(object_day(p, "audit/prj_1/2026-01-15.ndjson.gz"), Some("2026-01-15"));
        assert_eq!(object_day(p, "audit/prj_1/2026-01-15/1768435200000-r.ndjson.gz"), Some("2026-01-15"));
        assert_eq!(object_day(p, "audit/prj_1/2026-01-15x"), None);
        assert_eq!(object_day(p, "audit/prj_2/2026-01-15.ndjson.gz"), None);
        assert_eq!(object_day(p, "audit/prj_1/2026-13-15/x"), None);
    }

    #[test]
    fn a_download_takes_the_whole_day_object_first_then_slices_by_first_row() {
        let keys: Vec<String> = [
            "audit/p/2026-01-15/1768435200010-b.ndjson.gz",
            "audit/p/2026-01-15/1768435200010-a-z.ndjson.gz",
            "audit/p/2026-01-15/1768435200009-z.ndjson.gz",
            "audit/p/2026-01-15.ndjson.gz",
            "audit/p/2026-01-16/1768521600000-a.ndjson.gz",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            download_order(Some("p"), "2026-01-15", &keys),
            [
                "audit/p/2026-01-15.ndjson.gz",
                "audit/p/2026-01-15/1768435200009-z.ndjson.gz",
                "audit/p/2026-01-15/1768435200010-a-z.ndjson.gz",
                "audit/p/2026-01-15/1768435200010-b.ndjson.gz",
            ]
        );
    }
}
