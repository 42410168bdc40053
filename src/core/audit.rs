//! The audit log (SPEC §9): one row per API request, its redaction rules, the log's filters and
//! the key statistics. No request or response body ever enters a row.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::ApiError;
use super::page::{Cursor, PageRequest};
use super::time::{parse_rfc3339, rfc3339};

/// Query parameters whose names contain one of these (case-insensitive) have their values
/// replaced by `REDACTED` before the path is stored.
const SECRET_NAME_PARTS: [&str; 6] = ["key", "token", "secret", "password", "signature", "auth"];
pub const USER_AGENT_MAX: usize = 256;

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
    /// The path with its query, secret values redacted.
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
}

/// A boolean as JSON writes it (`true`) or as SQLite returns it (`1`).
fn flag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Number(f64),
    }
    Ok(match Flag::deserialize(d)? {
        Flag::Bool(b) => b,
        Flag::Number(n) => n != 0.0,
    })
}

/// What the audit queue carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditMessage {
    Audit(AuditRow),
}

impl AuditRow {
    /// A row for a request, to be completed as its handling learns more.
    pub fn new(request_id: String, ts: i64, method: String, path: String) -> Self {
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
        }
    }

    pub fn view(&self) -> Value {
        json!({
            "ts": rfc3339(self.ts),
            "request_id": self.request_id,
            "key_id": self.key_id,
            "key_prefix": self.key_prefix,
            "method": self.method,
            "path": self.path,
            "route": self.route,
            "status": self.status,
            "response_bytes": self.response_bytes,
            "response_time_ms": self.response_time_ms,
            "ip": self.ip,
            "user_agent": self.user_agent,
            "idempotency_key": self.idempotency_key,
            "replayed": self.replayed,
            "original_request_id": self.original_request_id,
            "rate_limit_remaining": self.rate_limit_remaining,
            "error_code": self.error_code,
        })
    }
}

/// `path?query` with the values of secret-looking parameters replaced by `REDACTED`. The rest of
/// the query is kept as sent.
pub fn redacted_path(path: &str, raw_query: Option<&str>) -> String {
    let Some(query) = raw_query.filter(|q| !q.is_empty()) else { return path.to_owned() };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| {
            let name = pair.split('=').next().unwrap_or_default().to_ascii_lowercase();
            if pair.contains('=') && SECRET_NAME_PARTS.iter().any(|part| name.contains(part)) {
                format!("{}=REDACTED", pair.split('=').next().unwrap_or_default())
            } else {
                pair.to_owned()
            }
        })
        .collect();
    format!("{path}?{}", pairs.join("&"))
}

/// The first 256 characters of a user agent.
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
    /// A SQL `LIKE` pattern (escape `\`) made from the `path` glob.
    pub path_like: Option<String>,
    pub request_id: Option<String>,
    pub key_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message).with_detail("field", field)
}

/// A time bound: RFC 3339, or Unix milliseconds.
fn time_bound(field: &str, value: &str) -> Result<i64, ApiError> {
    parse_rfc3339(value)
        .or_else(|| value.parse::<i64>().ok().filter(|n| *n >= 0))
        .ok_or_else(|| bad(field, format!("{field} must be an RFC 3339 timestamp or Unix milliseconds")))
}

/// A path glob where `*` matches anything, as a `LIKE` pattern with `\` escaping `%`, `_`, `\`.
pub fn glob_to_like(glob: &str) -> String {
    let mut like = String::with_capacity(glob.len() + 2);
    for c in glob.chars() {
        match c {
            '*' => like.push('%'),
            '%' | '_' | '\\' => {
                like.push('\\');
                like.push(c);
            }
            c => like.push(c),
        }
    }
    like
}

impl LogFilter {
    pub fn from_query(query: &[(String, String)]) -> Result<Self, ApiError> {
        let mut f = LogFilter::default();
        for (name, value) in query {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match name.as_str() {
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
                "path" => f.path_like = Some(glob_to_like(value)),
                "request_id" => f.request_id = Some(value.to_owned()),
                "key_id" => f.key_id = Some(value.to_owned()),
                "idempotency_key" => f.idempotency_key = Some(value.to_owned()),
                "from" => f.from_ms = Some(time_bound("from", value)?),
                "to" => f.to_ms = Some(time_bound("to", value)?),
                _ => {}
            }
        }
        Ok(f)
    }
}

/// A page of the log: newest first, keyset on `(ts, request_id)`.
pub fn log_page(query: &[(String, String)]) -> Result<(LogFilter, PageRequest), ApiError> {
    Ok((LogFilter::from_query(query)?, PageRequest::from_query(query, 50, 200)?))
}

pub fn log_position(row: &AuditRow) -> Cursor {
    Cursor { ts: row.ts, id: row.request_id.clone() }
}

/// One day of a key's traffic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DayCount {
    pub day: String,
    pub total: u64,
    pub client_errors: u64,
    pub server_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EndpointCount {
    pub method: String,
    pub route: String,
    pub total: u64,
    pub errors: u64,
}

/// `days` of `GET /public/v1/keys/{id}/stats`: 1 to 90, default 30.
pub fn stats_days(query: &[(String, String)]) -> Result<u32, ApiError> {
    match query.iter().find(|(k, _)| k == "days") {
        None => Ok(30),
        Some((_, v)) => {
            v.parse().ok().filter(|d| (1..=90).contains(d)).ok_or_else(|| bad("days", "days must be 1 to 90"))
        }
    }
}

/// The statistics body: every day of the period (zeros included, oldest first), the top endpoints
/// and the error share.
pub fn stats_view(
    key_id: &str,
    days: u32,
    today_ms: i64,
    counted: &[DayCount],
    endpoints: &[EndpointCount],
) -> Value {
    let daily: Vec<Value> = (0..days)
        .rev()
        .map(|back| {
            let day = super::time::utc_date(today_ms - i64::from(back) * 86_400_000);
            let c = counted.iter().find(|c| c.day == day);
            json!({
                "date": day,
                "total": c.map_or(0, |c| c.total),
                "4xx": c.map_or(0, |c| c.client_errors),
                "5xx": c.map_or(0, |c| c.server_errors),
            })
        })
        .collect();
    let total: u64 = counted.iter().map(|c| c.total).sum();
    let errors: u64 = counted.iter().map(|c| c.client_errors + c.server_errors).sum();
    json!({
        "key_id": key_id,
        "days": days,
        "total": total,
        "error_share": if total == 0 { 0.0 } else { errors as f64 / total as f64 },
        "daily": daily,
        "top_endpoints": endpoints.iter().map(|e| json!({
            "method": e.method, "route": e.route, "total": e.total, "errors": e.errors,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn globs_become_escaped_like_patterns() {
        assert_eq!(glob_to_like("/public/v1/contacts/*"), "/public/v1/contacts/%");
        assert_eq!(glob_to_like("*bulk*"), "%bulk%");
        assert_eq!(glob_to_like("/a_b%c\\"), "/a\\_b\\%c\\\\");
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
            ("from", "2026-11-29T00:00:00Z"),
            ("to", "1795942112123"),
        ]))
        .unwrap();
        assert_eq!(f.method.as_deref(), Some("POST"));
        assert_eq!(f.status.unwrap().range(), (400, 499));
        assert_eq!(f.path_like.as_deref(), Some("/public/%"));
        assert_eq!((f.from_ms, f.to_ms), (Some(1_795_910_400_000), Some(1_795_942_112_123)));
        assert_eq!(
            LogFilter::from_query(&q(&[("status", "404")])).unwrap().status,
            Some(StatusFilter::Exact(404))
        );
        for (name, value) in [("status", "6xx"), ("status", "99"), ("from", "yesterday"), ("method", "GE T")]
        {
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
        let counted = [DayCount { day: "2026-11-28".into(), total: 10, client_errors: 2, server_errors: 1 }];
        let v = stats_view("key_1", 3, today, &counted, &[]);
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
