//! The audit log (SPEC §9): one row per API request, its redaction rules, the log's filters and
//! the key statistics. No request or response body ever enters a row.

use gatehouse_wire::logs::LogEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ApiError;
use super::page::{Cursor, PageRequest};
use super::time::{parse_date, parse_rfc3339_checked, rfc3339, TimeError};

/// Query parameters whose names contain one of these (case-insensitive) have their values
/// replaced by `REDACTED` before the path is stored.
const SECRET_NAME_PARTS: [&str; 6] = ["key", "token", "secret", "password", "signature", "auth"];
/// Names that contain such a part but are Gatehouse's own filters, never secrets: kept, so a log
/// filter by `key_id` stays readable (an `Idempotency-Key` is kept in its own column anyway).
const NOT_SECRET_NAMES: [&str; 4] = ["key_id", "key_prefix", "key_type", "idempotency_key"];
pub const USER_AGENT_MAX: usize = 256;
/// The longest `path` glob of the log filter, in characters (SPEC §13).
pub const PATH_GLOB_MAX: usize = 200;
/// The longest path (with its query) a row keeps, in bytes (SPEC §13): longer ones are cut.
pub const PATH_MAX: usize = 2048;

/// One audit row. `project_id` is `None` for requests no project can be named for (an unknown key,
/// an unknown route without a key): they are kept for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    pub ts: i64,
    pub request_id: String,
    pub project_id: Option<String>,
    pub key_id: Option<String>,
    pub key_prefix: Option<String>,
    pub method: String,
    /// The path with its query, secret values redacted, cut to [`PATH_MAX`] bytes.
    pub path: String,
    /// The route template, e.g. `/public/v1/contacts/{id}`; `None` when no route matched.
    pub route: Option<String>,
    pub status: u16,
    pub response_bytes: u64,
    pub response_time_ms: i64,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub idempotency_key: Option<String>,
    #[serde(deserialize_with = "flag")]
    pub replayed: bool,
    pub original_request_id: Option<String>,
    pub rate_limit_remaining: Option<u32>,
    pub error_code: Option<String>,
    /// The identity the key belonged to when it was accepted (SPEC §20).
    #[serde(default)]
    pub identity_id: Option<String>,
    /// Whether the request bills (SPEC §22): a key was accepted and its plan bills the status.
    #[serde(default, deserialize_with = "flag")]
    pub billable: bool,
    /// Read under the dashboard budget (`Gatehouse-Budget: dashboard`, [`crate::budget`]).
    #[serde(default, deserialize_with = "flag")]
    pub dashboard: bool,
    /// The W3C trace the request belongs to (SPEC §25, [`crate::trace`]): the client's, or one
    /// the gateway started.
    #[serde(default)]
    pub trace_id: Option<String>,
}

/// A boolean as JSON writes it (`true`) or as SQLite returns it (`1`).
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct Flag;

    impl serde::de::Visitor<'_> for Flag {
        type Value = bool;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a boolean, or a number (0 is false)")
        }

        fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<bool, E> {
            Ok(b)
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<bool, E> {
            Ok(n != 0)
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<bool, E> {
            Ok(n != 0)
        }

        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<bool, E> {
            Ok(n != 0.0)
        }
    }

    d.deserialize_any(Flag)
}

/// What the audit queue carries: the rows of one send packed together ([`super::queue::pack`]),
/// or one row as versions before the packing sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditMessage {
    AuditRows { rows: Vec<AuditRow> },
    Audit(Box<AuditRow>),
}

impl AuditMessage {
    pub fn into_rows(self) -> Vec<AuditRow> {
        match self {
            AuditMessage::AuditRows { rows } => rows,
            AuditMessage::Audit(row) => vec![*row],
        }
    }
}

impl AuditRow {
    /// A row for a request, to be completed as its handling learns more. The path is cut to
    /// [`PATH_MAX`] bytes.
    pub fn new(request_id: String, ts: i64, method: String, mut path: String) -> Self {
        path.truncate(clipped_len(&path, PATH_MAX));
        AuditRow {
            ts,
            request_id,
            project_id: None,
            key_id: None,
            key_prefix: None,
            method,
            path,
            route: None,
            status: 0,
            response_bytes: 0,
            response_time_ms: 0,
            ip: None,
            user_agent: None,
            idempotency_key: None,
            replayed: false,
            original_request_id: None,
            rate_limit_remaining: None,
            error_code: None,
            identity_id: None,
            billable: false,
            dashboard: false,
            trace_id: None,
        }
    }

    pub fn view(&self) -> Value {
        let row = LogEntry {
            ts: rfc3339(self.ts),
            request_id: self.request_id.clone(),
            key_id: self.key_id.clone(),
            key_prefix: self.key_prefix.clone(),
            method: self.method.clone(),
            path: self.path.clone(),
            route: self.route.clone(),
            status: self.status,
            response_bytes: self.response_bytes,
            response_time_ms: self.response_time_ms.max(0) as u64,
            ip: self.ip.clone(),
            user_agent: self.user_agent.clone(),
            idempotency_key: self.idempotency_key.clone(),
            replayed: self.replayed,
            original_request_id: self.original_request_id.clone(),
            rate_limit_remaining: self.rate_limit_remaining.map(i64::from),
            error_code: self.error_code.clone(),
            dashboard: self.dashboard,
            trace_id: self.trace_id.clone(),
        };
        gatehouse_wire::to_json(&row)
    }
}

/// How many D1 databases the audit log may spread over (`AUDIT_DATABASES`, SPEC §20).
pub const MAX_AUDIT_DATABASES: u8 = 32;

/// The audit database a new project's rows go to, of `databases` (SPEC §20): by a hash of its id,
/// so projects spread evenly. It is recorded with the project (`projects.audit_db`), so adding
/// databases later moves no project: only new projects use them.
pub fn audit_database(project_id: &str, databases: u8) -> u8 {
    (super::encoding::fnv1a(project_id.as_bytes()) % u64::from(databases.max(1))) as u8
}

/// The binding of audit database `index`: `AUDIT_DB`, then `AUDIT_DB_1`, `AUDIT_DB_2`, …
pub fn audit_binding(index: u8) -> String {
    match index {
        0 => "AUDIT_DB".to_owned(),
        i => format!("AUDIT_DB_{i}"),
    }
}

/// The rows as JSON arrays for D1's `json_each`, in order, each within one D1 string (SPEC §19:
/// a batch of 100 rows of up to 60 KiB is ~6 MB as one array, three times what D1 binds).
pub fn packed_for_d1(rows: &[AuditRow]) -> Vec<String> {
    let each: Vec<String> =
        rows.iter().map(|r| serde_json::to_string(r).expect("an audit row serialises")).collect();
    super::platform::runs_within(&each, super::platform::D1_MAX_VALUE_BYTES, 2, 1, String::len)
        .into_iter()
        .map(|run| format!("[{}]", each[run].join(",")))
        .collect()
}

/// `path?query` with the values of secret-looking parameters replaced by `REDACTED`. The rest of
/// the query is kept as sent, names included: `?tok%65n=abc` is stored as `?tok%65n=REDACTED`.
pub fn redacted_path(path: &str, raw_query: Option<&str>) -> String {
    let Some(query) = raw_query.filter(|q| !q.is_empty()) else { return path.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if secret_name(name) => format!("{name}=REDACTED"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

/// Whether a raw query parameter name names a secret once decoded as the application would read
/// it (`%XX` and `+`). Decoding repeats until the name no longer changes (a few rounds at most), so
/// a name encoded twice is caught as well: redacting too much is harmless, too little is not.
fn secret_name(raw: &str) -> bool {
    let mut name = raw.to_owned();
    for _ in 0..4 {
        let lower = name.to_lowercase();
        if NOT_SECRET_NAMES.contains(&lower.as_str()) {
            return false;
        }
        if SECRET_NAME_PARTS.iter().any(|part| lower.contains(part)) {
            return true;
        }
        let decoded: String = url::form_urlencoded::parse(name.as_bytes())
            .map(|(k, v)| if v.is_empty() { k.into_owned() } else { format!("{k}={v}") })
            .collect::<Vec<_>>()
            .join("&");
        if decoded == name {
            return false;
        }
        name = decoded;
    }
    false
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn clipped_len(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}

/// The first [`USER_AGENT_MAX`] characters of a user agent.
pub fn clip_user_agent(ua: Option<&str>) -> Option<String> {
    ua.map(|u| u.chars().take(USER_AGENT_MAX).collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// `2xx`, `4xx`, `5xx`: a range of 100.
    Class(u16),
    Exact(u16),
}

impl StatusFilter {
    pub fn range(self) -> (u16, u16) {
        match self {
            StatusFilter::Class(c) => (c * 100, c * 100 + 99),
            StatusFilter::Exact(s) => (s, s),
        }
    }
}

/// The filters of `GET /public/v1/logs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    pub method: Option<String>,
    pub status: Option<StatusFilter>,
    /// The `path` glob.
    pub path: Option<PathGlob>,
    pub request_id: Option<String>,
    pub key_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    /// `dashboard=true`: only the dashboard's reads (`Gatehouse-Budget`); `false`: all but them.
    pub dashboard: Option<bool>,
    pub trace_id: Option<String>,
}

pub(crate) fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message).with_detail("field", field)
}

/// A date or time input that is well formed but names no real day or instant: 422.
fn nonexistent(field: &str, value: &str) -> ApiError {
    ApiError::unprocessable(format!("{field} is not a real date or time: {value}"))
        .with_detail("field", field)
}

/// A time bound: RFC 3339, a `YYYY-MM-DD` day (its first millisecond for `from`, its last for
/// `to`), or Unix milliseconds. Malformed → 400; well formed but nonexistent (`2026-02-31`) → 422.
pub(crate) fn time_bound(field: &str, value: &str, end_of_day: bool) -> Result<i64, ApiError> {
    let parsed = if value.len() == 10 {
        parse_date(value).map(|start| if end_of_day { start + 86_400_000 - 1 } else { start })
    } else {
        parse_rfc3339_checked(value)
    };
    match parsed {
        Ok(ms) => Ok(ms),
        Err(TimeError::Nonexistent) => Err(nonexistent(field, value)),
        Err(TimeError::Malformed) => value.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            bad(
                field,
                format!("{field} must be an RFC 3339 timestamp, a YYYY-MM-DD date or Unix milliseconds"),
            )
        }),
    }
}

/// The `{date}` of an archive download: a `YYYY-MM-DD` day that exists.
pub fn archive_date(value: &str) -> Result<&str, ApiError> {
    match parse_date(value) {
        Ok(_) => Ok(value),
        Err(TimeError::Nonexistent) => Err(nonexistent("date", value)),
        Err(TimeError::Malformed) => Err(bad("date", "date must be YYYY-MM-DD")),
    }
}

/// A log `path` glob: `*` matches any run of characters (none included), everything else matches
/// itself, case-sensitively, against the stored path with its query. Kept as its literal parts
/// so that the store can match it without a pattern operator: D1 caps `LIKE` and `GLOB` patterns
/// at 50 bytes, and a glob of 200 characters must still work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGlob {
    /// What the path starts with (the text before the first `*`; all of it without a `*`).
    pub prefix: String,
    /// What the path ends with (the text after the last `*`); `None` when the glob has no `*`,
    /// so the path must equal `prefix`.
    pub suffix: Option<String>,
    /// The non-empty parts between `*`s, which must appear in this order, without overlapping,
    /// between the prefix and the suffix.
    pub middle: Vec<String>,
}

impl PathGlob {
    /// At most [`PATH_GLOB_MAX`] characters (422 beyond).
    pub fn parse(glob: &str) -> Result<Self, ApiError> {
        if glob.chars().count() > PATH_GLOB_MAX {
            return Err(ApiError::unprocessable(format!("path must be at most {PATH_GLOB_MAX} characters"))
                .with_detail("field", "path"));
        }
        let mut parts: Vec<&str> = glob.split('*').collect();
        if parts.len() == 1 {
            return Ok(PathGlob { prefix: glob.to_owned(), suffix: None, middle: Vec::new() });
        }
        let suffix = parts.pop().unwrap_or_default().to_owned();
        let prefix = parts.remove(0).to_owned();
        let middle = parts.into_iter().filter(|p| !p.is_empty()).map(str::to_owned).collect();
        Ok(PathGlob { prefix, suffix: Some(suffix), middle })
    }

    /// The middle parts as a JSON array (one bound SQL parameter).
    pub fn middle_json(&self) -> String {
        Value::from(self.middle.clone()).to_string()
    }

    /// Whether `path` matches: the prefix, then each middle part at its first occurrence after the
    /// previous one (leftmost is always right when `*` is the only wildcard), then the suffix in
    /// what is left. The D1 query computes the same thing.
    pub fn matches(&self, path: &str) -> bool {
        let Some(suffix) = &self.suffix else { return path == self.prefix };
        let Some(rest) = path.strip_prefix(self.prefix.as_str()) else { return false };
        let Some(mut between) = rest.strip_suffix(suffix.as_str()) else { return false };
        for part in &self.middle {
            match between.find(part.as_str()) {
                Some(at) => between = &between[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

impl LogFilter {
    pub fn from_query(query: &[(String, String)]) -> Result<Self, ApiError> {
        let mut f = LogFilter::default();
        for (name, value) in given(query) {
            match name {
                "method" => {
                    let m = value.to_ascii_uppercase();
                    if !m.bytes().all(|b| b.is_ascii_uppercase()) || m.len() > 10 {
                        return Err(bad("method", "method must be an HTTP method such as GET or POST"));
                    }
                    f.method = Some(m);
                }
                "status" => {
                    f.status = Some(match value.to_ascii_lowercase().as_str() {
                        c @ ("1xx" | "2xx" | "3xx" | "4xx" | "5xx") => {
                            StatusFilter::Class(u16::from(c.as_bytes()[0] - b'0'))
                        }
                        exact => StatusFilter::Exact(
                            exact.parse().ok().filter(|s| (100..=599).contains(s)).ok_or_else(|| {
                                bad("status", "status must be 2xx, 4xx, 5xx or a status code such as 404")
                            })?,
                        ),
                    })
                }
                "path" => f.path = Some(PathGlob::parse(value)?),
                "request_id" => f.request_id = Some(value.to_owned()),
                "key_id" => f.key_id = Some(value.to_owned()),
                "idempotency_key" => f.idempotency_key = Some(value.to_owned()),
                "trace_id" if crate::trace::is_trace_id(value) => f.trace_id = Some(value.to_owned()),
                "trace_id" => {
                    return Err(bad("trace_id", "trace_id must be 32 lowercase hex digits, not all 0"))
                }
                "from" => f.from_ms = Some(time_bound("from", value, false)?),
                "to" => f.to_ms = Some(time_bound("to", value, true)?),
                "dashboard" => {
                    f.dashboard = Some(match value {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("dashboard", "dashboard must be true or false")),
                    })
                }
                _ => {}
            }
        }
        check_range(f.from_ms, f.to_ms)?;
        Ok(f)
    }
}

/// A `from` later than its `to`: 422 naming `from`.
pub(crate) fn check_range(from_ms: Option<i64>, to_ms: Option<i64>) -> Result<(), ApiError> {
    match (from_ms, to_ms) {
        (Some(from), Some(to)) if from > to => {
            Err(ApiError::unprocessable("from must not be later than to").with_detail("field", "from"))
        }
        _ => Ok(()),
    }
}

/// A query's parameters with their values trimmed, the empty ones left out (as not sent).
pub(crate) fn given(query: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    query.iter().map(|(name, value)| (name.as_str(), value.trim())).filter(|(_, value)| !value.is_empty())
}

/// A page of the log: newest first, keyset on `(ts, request_id)`.
pub fn log_page(query: &[(String, String)]) -> Result<(LogFilter, PageRequest), ApiError> {
    Ok((LogFilter::from_query(query)?, PageRequest::from_query(query, 50, 200)?))
}

pub fn log_position(row: &AuditRow) -> Cursor {
    Cursor { ts: row.ts, id: row.request_id.clone() }
}

pub use crate::stats::{
    latency_columns, latency_sums, stats_days, stats_view, DayCount, EndpointCount, LatencyBuckets,
    LATENCY_BOUNDS_MS,
};

#[cfg(test)]
mod tests {

    #[test]
    fn response_times_fall_in_buckets_whose_bounds_answer_the_percentiles() {
        assert_eq!(
            [0, 9, 10, 24, 99, 100, 4_999, 5_000, 90_000].map(LatencyBuckets::bucket),
            [0, 0, 1, 1, 3, 4, 8, 9, 9]
        );
        assert_eq!(LatencyBuckets::default().percentile(50), None);
        // 90 fast (< 10 ms), 9 at 100–250 ms, 1 over 5 s.
        let b = LatencyBuckets { l0: 90, l4: 9, l9: 1, ..Default::default() };
        assert_eq!(
            (b.percentile(50), b.percentile(95), b.percentile(99), b.percentile(100)),
            (Some(10), Some(250), Some(250), Some(10_000))
        );
        assert_eq!(b.plus(&b).counts().iter().sum::<u64>(), 200);
        assert_eq!(latency_sums("ms").split("), ").count(), 10, "one sum per bucket: {}", latency_sums("ms"));
        assert!(latency_sums("ms").starts_with("sum(ms >= 0 AND ms < 10), sum(ms >= 10 AND ms < 25)"));
        assert!(latency_sums("ms").ends_with("sum(ms >= 5000)"));
        assert_eq!(latency_columns(str::to_owned), "l0, l1, l2, l3, l4, l5, l6, l7, l8, l9");
    }

    #[test]
    fn projects_spread_evenly_over_the_audit_databases_and_stay_where_they_were_put() {
        let mut counts = [0u32; 4];
        for n in 0..4_000 {
            counts[usize::from(audit_database(&format!("prj_{n:026}"), 4))] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1_200).contains(&c)), "{counts:?}");
        assert_eq!(audit_database("prj_x", 1), 0);
        assert_eq!(audit_database("prj_x", 0), 0, "no databases counts as one");
        assert_eq!(audit_database("prj_x", 7), audit_database("prj_x", 7));
        assert_eq!(
            [audit_binding(0), audit_binding(1), audit_binding(12)],
            ["AUDIT_DB", "AUDIT_DB_1", "AUDIT_DB_12"]
        );
    }

    use super::*;

    #[test]
    fn a_batch_of_large_rows_packs_into_arrays_d1_can_bind() {
        // A consumer batch: 100 messages of up to 100 packed rows, each path up to PATH_MAX.
        let row = |i: usize| AuditRow::new(format!("req_{i}"), 0, "POST".into(), "/".repeat(PATH_MAX));
        let rows: Vec<AuditRow> = (0..2_000).map(row).collect();
        let packed = packed_for_d1(&rows);
        assert!(packed.len() >= 2, "{} arrays", packed.len());
        assert!(packed.iter().all(|a| crate::platform::fits_d1_value(a)));
        let back: Vec<AuditRow> =
            packed.iter().flat_map(|a| serde_json::from_str::<Vec<AuditRow>>(a).unwrap()).collect();
        assert_eq!(
            back.iter().map(|r| &r.request_id).collect::<Vec<_>>(),
            rows.iter().map(|r| &r.request_id).collect::<Vec<_>>()
        );
        // The single array of the previous version is refused by D1 (and by the fake).
        assert!(!crate::platform::fits_d1_value(&serde_json::to_string(&rows).unwrap()));
        assert_eq!(packed_for_d1(&rows[..2]).len(), 1);
    }

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn rows_read_the_replayed_flag_from_json_or_sqlite() {
        let mut row = AuditRow::new("r".into(), 1, "GET".into(), "/".into());
        row.replayed = true;
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(serde_json::from_value::<AuditRow>(json.clone()).unwrap(), row);
        let mut sqlite = json;
        sqlite["replayed"] = 1.into();
        assert!(serde_json::from_value::<AuditRow>(sqlite.clone()).unwrap().replayed);
        sqlite["replayed"] = 0.into();
        assert!(!serde_json::from_value::<AuditRow>(sqlite).unwrap().replayed);
    }

    #[test]
    fn a_row_keeps_the_path_cut_to_two_kib() {
        let long = format!("/{}", "a".repeat(60_000));
        let row = AuditRow::new("r".into(), 0, "GET".into(), redacted_path(&long, Some("token=x")));
        assert_eq!(row.path.len(), PATH_MAX);
        assert!(row.path.starts_with("/aaa"));
        // A cut never splits a character.
        let wide = format!("/{}", "é".repeat(2_000));
        let row = AuditRow::new("r".into(), 0, "GET".into(), wide);
        assert_eq!(row.path.len(), PATH_MAX - 1);
        assert!(row.path.ends_with('é'));
        let short = AuditRow::new("r".into(), 0, "GET".into(), "/public/v1/me?a=1".into());
        assert_eq!(short.path, "/public/v1/me?a=1");
    }

    #[test]
    fn redacts_secret_looking_query_values_and_keeps_the_rest() {
        assert_eq!(
            redacted_path("/public/v1/contacts", Some("api_key=abc&token=x&page=2")),
            "/public/v1/contacts?api_key=REDACTED&token=REDACTED&page=2"
        );
        assert_eq!(
            redacted_path("/x", Some("Password=p&Authorization=a&sig=1&signature=s&SECRET_thing=z&flag")),
            "/x?Password=REDACTED&Authorization=REDACTED&sig=1&signature=REDACTED&SECRET_thing=REDACTED&flag"
        );
        assert_eq!(redacted_path("/x", None), "/x");
        assert_eq!(redacted_path("/x", Some("")), "/x");
    }

    #[test]
    fn redacts_names_that_are_secret_once_percent_decoded() {
        assert_eq!(redacted_path("/x", Some("tok%65n=abc&page=2")), "/x?tok%65n=REDACTED&page=2");
        assert_eq!(redacted_path("/x", Some("%61pi%5Fkey=abc")), "/x?%61pi%5Fkey=REDACTED");
        assert_eq!(redacted_path("/x", Some("%53%45%43%52%45%54=s")), "/x?%53%45%43%52%45%54=REDACTED");
        assert_eq!(redacted_path("/x", Some("pass%2577ord=p")), "/x?pass%2577ord=REDACTED", "encoded twice");
        assert_eq!(redacted_path("/x", Some("x-auth+header=h")), "/x?x-auth+header=REDACTED");
        assert_eq!(redacted_path("/x", Some("sign%61ture=s&t%6Fken")), "/x?sign%61ture=REDACTED&t%6Fken");
    }

    #[test]
    fn gatehouse_filters_named_like_keys_stay_readable_and_nothing_else_does() {
        assert_eq!(
            redacted_path("/public/v1/logs", Some("key_id=key_1&idempotency_key=k&KEY_PREFIX=gh_s_ab")),
            "/public/v1/logs?key_id=key_1&idempotency_key=k&KEY_PREFIX=gh_s_ab"
        );
        for secret in ["key_id_secret=s", "api_key_id%26token=s", "key_idx=s", "my_key_id=s", "key=s"] {
            assert!(redacted_path("/x", Some(secret)).ends_with("=REDACTED"), "{secret}");
        }
        // Names that are not secret stay untouched, undecodable bytes included.
        assert_eq!(redacted_path("/x", Some("q=%74oken&n%FF=1&%=2")), "/x?q=%74oken&n%FF=1&%=2");
    }

    #[test]
    fn path_globs_match_by_literal_parts_of_any_length() {
        let m = |glob: &str, path: &str| PathGlob::parse(glob).unwrap().matches(path);
        assert!(m("/public/v1/contacts/*", "/public/v1/contacts/c_1"));
        assert!(m("*bulk*", "/public/v1/contacts/bulk"));
        assert!(m("/public/v1/me", "/public/v1/me") && !m("/public/v1/me", "/public/v1/me?x=1"));
        assert!(m("*", "") && m("**", "/a") && m("/a*", "/a"));
        assert!(m("/a_b%c\\*", "/a_b%c\\d") && !m("/a_b%c*", "/aXbYc"), "no LIKE metacharacters");
        assert!(!m("/Public/*", "/public/v1"), "case-sensitive");
        assert!(!m("ab*ba", "aba"), "prefix and suffix do not overlap");
        assert!(m("*a*b*", "xxbxaxb") && !m("*b*a", "ab"), "parts in order");
        assert!(m("/é*ü", "/éàü"));
        let long = format!("/public/v1/contacts/*{}*", "x".repeat(170));
        assert_eq!(long.chars().count(), 192);
        assert!(m(&long, &format!("/public/v1/contacts/c_1?q={}&z", "x".repeat(170))));
        assert!(!m(&long, &format!("/public/v1/contacts/c_1?q={}&z", "x".repeat(169))));
        let g = PathGlob::parse("/a*b**c*d").unwrap();
        assert_eq!(
            (g.prefix.as_str(), g.suffix.as_deref(), g.middle_json()),
            ("/a", Some("d"), r#"["b","c"]"#.into())
        );
        assert_eq!(PathGlob::parse(&"é".repeat(200)).unwrap().prefix.chars().count(), 200);
        let too_long = PathGlob::parse(&"*".repeat(201)).unwrap_err();
        assert_eq!(
            (too_long.status(), too_long.body("r")["error"]["details"]["field"].clone()),
            (422, "path".into())
        );
    }

    #[test]
    fn time_bounds_must_exist() {
        let f = LogFilter::from_query(&q(&[("from", "2028-02-29"), ("to", "2028-02-29")])).unwrap();
        assert_eq!(f.to_ms.unwrap() - f.from_ms.unwrap(), 86_400_000 - 1, "a day's first and last ms");
        for (name, value) in [
            ("from", "2026-02-31"),
            ("to", "2026-13-01"),
            ("from", "2027-02-29"),
            ("to", "2026-02-31T00:00:00Z"),
            ("from", "2026-11-29T24:00:00Z"),
        ] {
            let e = LogFilter::from_query(&q(&[(name, value)])).unwrap_err();
            assert_eq!(
                (e.status(), e.body("r")["error"]["details"]["field"].clone()),
                (422, name.into()),
                "{value}"
            );
        }
        let reversed = LogFilter::from_query(&q(&[("from", "2026-11-30"), ("to", "2026-11-29")]));
        assert_eq!(reversed.unwrap_err().status(), 422);
        assert_eq!(archive_date("2028-02-29").unwrap(), "2028-02-29");
        assert_eq!(archive_date("2026-02-31").unwrap_err().status(), 422);
        assert_eq!(archive_date("2026-2-3").unwrap_err().status(), 400);
    }

    #[test]
    fn parses_every_filter_and_refuses_bad_values() {
        let f = LogFilter::from_query(&q(&[
            ("method", "post"),
            ("status", "4xx"),
            ("path", "/public/*"),
            ("request_id", "r"),
            ("key_id", "k"),
            ("idempotency_key", "i"),
            ("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
            ("from", "2026-11-29T00:00:00Z"),
            ("to", "1795942112123"),
        ]))
        .unwrap();
        assert_eq!(f.method.as_deref(), Some("POST"));
        assert_eq!(f.status.unwrap().range(), (400, 499));
        assert_eq!(f.path, Some(PathGlob::parse("/public/*").unwrap()));
        assert_eq!((f.from_ms, f.to_ms), (Some(1_795_910_400_000), Some(1_795_942_112_123)));
        assert_eq!(
            LogFilter::from_query(&q(&[("status", "404")])).unwrap().status,
            Some(StatusFilter::Exact(404))
        );
        assert_eq!(f.trace_id.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for (name, value) in [
            ("status", "6xx"),
            ("status", "99"),
            ("from", "yesterday"),
            ("method", "GE T"),
            ("trace_id", "4BF92F3577B34DA6A3CE929D0E0E4736"),
            ("trace_id", "00000000000000000000000000000000"),
        ] {
            assert_eq!(
                LogFilter::from_query(&q(&[(name, value)])).unwrap_err().status(),
                400,
                "{name}={value}"
            );
        }
    }

    #[test]
    fn stats_fill_every_day_and_compute_the_error_share() {
        let today = 1_795_942_112_123; // 2026-11-29
        let latency = LatencyBuckets { l1: 9, l6: 1, ..Default::default() };
        let counted =
            [DayCount { day: "2026-11-28".into(), total: 10, client_errors: 2, server_errors: 1, latency }];
        let v = stats_view(Some("key_1"), 3, today, &counted, &[]);
        assert_eq!(
            (v["key_id"].as_str(), v["daily"][1]["p50_ms"].as_u64(), v["daily"][1]["p99_ms"].as_u64()),
            (Some("key_1"), Some(25), Some(1_000))
        );
        assert_eq!(v["daily"][0]["p95_ms"], Value::Null, "a day without requests has no percentile");
        assert_eq!(v["latency"]["p95_ms"], 1_000);
        assert!(stats_view(None, 3, today, &counted, &[]).get("key_id").is_none(), "a project's");
        let days: Vec<&str> =
            v["daily"].as_array().unwrap().iter().map(|d| d["date"].as_str().unwrap()).collect();
        assert_eq!(days, ["2026-11-27", "2026-11-28", "2026-11-29"]);
        assert_eq!(v["daily"][1]["4xx"], 2);
        assert_eq!(v["daily"][2]["total"], 0);
        assert_eq!(v["error_share"], 0.3);
        assert_eq!(stats_days(&q(&[("days", "91")])).unwrap_err().status(), 400);
        assert_eq!(stats_days(&[]).unwrap(), 30);
    }
}
