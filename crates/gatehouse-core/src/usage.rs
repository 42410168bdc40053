//! Usage for billing (SPEC §22): which requests bill, the periods they are counted and exported
//! in, and the records an export writes — CloudEvents 1.0, one per subject (a key, with its
//! identity when it has one) and period, whose `id` is a hash of project, subject, meter, period
//! and run, so writing a run again overwrites instead of adding.
//!
//! A period's first run exports what its aggregates counted; a row that arrives after that (or a
//! redelivered copy the roll-up takes back out) changes the aggregates, and the next run exports
//! the difference per subject as an adjustment. What was exported therefore always sums to the
//! billable rows of the period once its runs are sent.

use serde_json::{json, Map, Value};

use crate::digest::sha256_hex;
use crate::error::ApiError;
use crate::page::{Cursor, PageRequest};
use crate::time::{parse_rfc3339_checked, rfc3339};

/// The one meter: billable requests.
pub const METER: &str = "requests";
/// The event of a period's first run.
pub const PERIOD_EVENT: &str = "usage.hourly";
/// The event of a later run of the same period.
pub const ADJUSTMENT_EVENT: &str = "usage.adjustment";
/// Event types the gateway keeps for itself: an origin may not send them, and `"*"` does not
/// subscribe to them (a subscription names them).
pub const RESERVED_EVENT_PREFIX: &str = "usage.";
/// Records an event carries at most; the object has them all.
pub const EVENT_RECORDS_MAX: usize = 100;
/// Runs one export writes at most, and how long it goes on starting them.
pub const RUNS_PER_EXPORT: usize = 100;
pub const EXPORT_TIME_BOX_MS: i64 = 10_000;
/// Archive objects one reconciliation reads at most (more: it asks for a `project_id`).
pub const RECONCILE_OBJECTS_MAX: usize = 200;
/// The longest range `GET /public/v1/usage` sums over, in days.
pub const RANGE_DAYS_MAX: i64 = 31;

/// Which statuses of an authenticated request bill under a plan (`PLANS.<plan>.billable`: a list
/// of `"2xx"`-style classes and exact codes). A request no key was accepted for never bills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Billable(Option<Vec<(u16, u16)>>);

impl Default for Billable {
    /// Every authenticated request that no limit refused: every status but 429.
    fn default() -> Self {
        Billable(None)
    }
}

impl Billable {
    /// From `PLANS`' value, e.g. `["2xx", "4xx", "503"]`.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let list = value.as_array().ok_or("billable must be a list of statuses, e.g. [\"2xx\", \"404\"]")?;
        let mut ranges = Vec::with_capacity(list.len());
        for item in list {
            let s = item.as_str().unwrap_or_default();
            let range = match s.as_bytes() {
                [c @ b'1'..=b'5', b'x', b'x'] => {
                    let base = u16::from(c - b'0') * 100;
                    (base, base + 99)
                }
                [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
                    let code = s.parse().expect("three digits");
                    (code, code)
                }
                _ => return Err(format!("billable: {item} is not a status (\"404\") nor a class (\"2xx\")")),
            };
            ranges.push(range);
        }
        Ok(Billable(Some(ranges)))
    }

    /// Whether an authenticated request answered `status` bills. A limit's refusal (429) bills
    /// only when the plan lists `"429"` itself: the class `"4xx"` leaves it out.
    pub fn bills(&self, status: u16) -> bool {
        match &self.0 {
            None => status != 429,
            Some(ranges) => ranges
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&status) && (status != 429 || (lo, hi) == (429, 429))),
        }
    }
}

/// Whether an answer with this error code never bills, whatever the plan says: an answer about an
/// earlier request with the same `Idempotency-Key` (it billed, or will) and the gateway's own
/// failures (nothing was served; a retry bills once it is).
pub fn never_bills(error_code: Option<&str>) -> bool {
    use crate::error::ErrorCode::*;
    let Some(code) = error_code else { return false };
    [IdempotencyKeyInUse, IdempotencyResponseNotStored, Internal, ServiceUnavailable]
        .iter()
        .any(|c| c.as_str() == code)
}

/// Whether `USAGE_PERIOD_SECONDS` may be `seconds`: whole minutes that divide an hour, so hours
/// and days are sums of periods.
pub fn valid_period_seconds(seconds: u64) -> bool {
    seconds >= 60 && seconds.is_multiple_of(60) && 3600_u64.is_multiple_of(seconds)
}

/// The start of the period holding `ts_ms`.
pub fn period_start(ts_ms: i64, period_ms: i64) -> i64 {
    ts_ms.div_euclid(period_ms) * period_ms
}

/// How long after its end a period is exported: rows on their way through the audit queue
/// arrive first (a twelfth of the period, 5 s to 5 minutes). Later ones make an adjustment.
pub fn grace_ms(period_ms: i64) -> i64 {
    (period_ms / 12).clamp(5_000, 300_000)
}

/// One subject's line of a run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsageRecord {
    pub key_id: String,
    /// `None` (stored as `""`): the key belonged to no identity.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub identity_id: Option<String>,
    /// What this run adds to the subject's period: its count in a first run, the change since
    /// (either sign) in an adjustment.
    pub value: i64,
    /// The subject's count for the period after this run.
    pub total: i64,
    /// The run of this period that last had a record of the subject (`None`: none did): this
    /// record replaces that one.
    #[serde(default)]
    pub previous_seq: Option<u32>,
}

impl UsageRecord {
    /// Its CloudEvents subject.
    pub fn subject(&self) -> String {
        subject(&self.key_id, self.identity_id.as_deref())
    }
}

fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s: Option<String> = serde::Deserialize::deserialize(d)?;
    Ok(s.filter(|s| !s.is_empty()))
}

/// One run of a project's period: what it exports (taken from the aggregates in one transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRun {
    pub project_id: String,
    pub period_start: i64,
    pub period_ms: i64,
    /// 0: the period's export; 1, 2, …: its adjustments.
    pub seq: u32,
    pub made_at: i64,
    pub records: Vec<UsageRecord>,
}

/// The CloudEvents subject of a record.
pub fn subject(key_id: &str, identity_id: Option<&str>) -> String {
    match identity_id {
        Some(identity) => format!("identities/{identity}/keys/{key_id}"),
        None => format!("keys/{key_id}"),
    }
}

/// `usage/{project}/{period}.ndjson`, and `….adjustment-{n}.ndjson` for later runs.
pub fn object_key(project_id: &str, period_start: i64, seq: u32) -> String {
    let period = rfc3339_seconds(period_start);
    match seq {
        0 => format!("usage/{project_id}/{period}.ndjson"),
        n => format!("usage/{project_id}/{period}.adjustment-{n}.ndjson"),
    }
}

/// `2026-12-02T14:00:00Z`: periods are whole minutes.
fn rfc3339_seconds(ms: i64) -> String {
    let full = rfc3339(ms);
    match full.strip_suffix(".000Z") {
        Some(seconds) => format!("{seconds}Z"),
        None => full,
    }
}

impl UsageRun {
    pub fn period_end(&self) -> i64 {
        self.period_start + self.period_ms
    }

    pub fn object_key(&self) -> String {
        object_key(&self.project_id, self.period_start, self.seq)
    }

    pub fn event_type(&self) -> &'static str {
        if self.seq == 0 {
            PERIOD_EVENT
        } else {
            ADJUSTMENT_EVENT
        }
    }

    /// The run's webhook event id: the same on every try of the run, so it is delivered once.
    pub fn event_id(&self) -> String {
        let digest =
            sha256_hex(format!("{}\n{}\n{}", self.project_id, self.period_start, self.seq).as_bytes());
        format!("evt_usage_{}", &digest[..32])
    }

    /// The record's CloudEvents `id` (Stripe's `identifier`): a hash of project, subject, meter,
    /// period and run.
    pub fn record_id(&self, record: &UsageRecord) -> String {
        self.record_id_at(record, self.seq)
    }

    /// The id of the subject's record in run `seq` of this period.
    fn record_id_at(&self, record: &UsageRecord, seq: u32) -> String {
        let text =
            format!("{}\n{}\n{METER}\n{}\n{seq}", self.project_id, record.subject(), self.period_start);
        sha256_hex(text.as_bytes())[..32].to_owned()
    }

    /// The id of the record this one replaces (the subject's record of an earlier run), if any.
    pub fn replaced_id(&self, record: &UsageRecord) -> Option<String> {
        record.previous_seq.map(|seq| self.record_id_at(record, seq))
    }

    /// A record as a CloudEvent.
    pub fn cloud_event(&self, record: &UsageRecord) -> Value {
        let data = json!({
            "project_id": self.project_id,
            "meter": METER,
            "period_start": rfc3339(self.period_start),
            "period_end": rfc3339(self.period_end()),
            "key_id": record.key_id,
            "identity_id": record.identity_id,
            "value": record.value,
            "total": record.total,
            "sequence": self.seq,
            "replaces": self.replaced_id(record),
        });
        json!({
            "specversion": "1.0",
            "id": self.record_id(record),
            "source": format!("gatehouse/projects/{}", self.project_id),
            "type": if self.seq == 0 { "dev.gatehouse.usage.period" } else { "dev.gatehouse.usage.adjustment" },
            "subject": record.subject(),
            "time": rfc3339(self.period_end()),
            "datacontenttype": "application/json",
            "data": data,
        })
    }

    /// The run's object: one CloudEvent per line.
    pub fn ndjson(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for record in &self.records {
            out.extend(self.cloud_event(record).to_string().as_bytes());
            out.push(b'\n');
        }
        out
    }

    /// The `data` of the run's webhook event: the period, the object, and its records (the first
    /// [`EVENT_RECORDS_MAX`]; `records_complete` says whether that is all).
    pub fn event_data(&self) -> Value {
        let records: Vec<Value> = self
            .records
            .iter()
            .take(EVENT_RECORDS_MAX)
            .map(|r| {
                json!({
                    "id": self.record_id(r),
                    "subject": r.subject(),
                    "key_id": r.key_id,
                    "identity_id": r.identity_id,
                    "value": r.value,
                    "total": r.total,
                    "replaces": self.replaced_id(r),
                })
            })
            .collect();
        json!({
            "project_id": self.project_id,
            "meter": METER,
            "period_start": rfc3339(self.period_start),
            "period_end": rfc3339(self.period_end()),
            "sequence": self.seq,
            "object": self.object_key(),
            "value": self.records.iter().map(|r| r.value).sum::<i64>(),
            "records": records,
            "records_complete": self.records.len() <= EVENT_RECORDS_MAX,
        })
    }
}

/// How `GET /public/v1/usage` groups its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Key,
    Identity,
    Route,
    Day,
    Hour,
}

impl GroupBy {
    pub const ALL: [(&'static str, GroupBy); 5] = [
        ("key", GroupBy::Key),
        ("identity", GroupBy::Identity),
        ("route", GroupBy::Route),
        ("day", GroupBy::Day),
        ("hour", GroupBy::Hour),
    ];

    pub fn as_str(self) -> &'static str {
        GroupBy::ALL.iter().find(|(_, g)| *g == self).expect("listed").0
    }
}

/// A usage query: billable requests of periods starting in `[from_ms, to_ms)`, grouped, a page of
/// groups after `after` (groups sort by their name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    pub from_ms: i64,
    pub to_ms: i64,
    pub group_by: GroupBy,
    pub limit: usize,
    pub after: Option<String>,
}

/// One group's count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct UsageGroup {
    /// The key id, identity id (`""`: none), `METHOD route`, day (`YYYY-MM-DD`) or hour
    /// (`YYYY-MM-DDTHH:00:00Z`).
    pub name: String,
    pub requests: i64,
}

impl UsageQuery {
    /// From the query string: `from`/`to` (RFC 3339; default the 30 days to now), `group_by`
    /// (default `key`), `limit` (1–1000, default 100), `cursor` (a page's `next_cursor`: the last
    /// group's name).
    pub fn parse(query: &[(String, String)], now_ms: i64) -> Result<Self, ApiError> {
        let get = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let time = |name: &str, default: i64| -> Result<i64, ApiError> {
            match get(name) {
                None => Ok(default),
                Some(v) => parse_rfc3339_checked(v).map_err(|_| {
                    ApiError::bad_request(format!(
                        "{name} must be an RFC 3339 time, e.g. 2026-12-01T00:00:00Z"
                    ))
                    .with_detail("field", name.to_owned())
                }),
            }
        };
        let to_ms = time("to", now_ms)?;
        let from_ms = time("from", to_ms - 30 * 86_400_000)?;
        if from_ms >= to_ms {
            return Err(ApiError::bad_request("from must be before to").with_detail("field", "from"));
        }
        if to_ms - from_ms > RANGE_DAYS_MAX * 86_400_000 {
            return Err(ApiError::bad_request(format!(
                "from and to may be at most {RANGE_DAYS_MAX} days apart"
            ))
            .with_detail("field", "to"));
        }
        let group_by = match get("group_by") {
            None => GroupBy::Key,
            Some(g) => {
                GroupBy::ALL.iter().find(|(name, _)| *name == g).map(|(_, g)| *g).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "group_by must be one of key, identity, route, day, hour (got {g:?})"
                    ))
                    .with_detail("field", "group_by")
                })?
            }
        };
        let page = PageRequest::from_query(query, 100, 1000)?;
        let (limit, after) = (page.limit, page.after.map(|c| c.id));
        Ok(UsageQuery { from_ms, to_ms, group_by, limit, after })
    }

    /// The answer: the page of groups (at most `limit + 1` were read) and the range's total.
    pub fn view(&self, mut groups: Vec<UsageGroup>, total: i64, period_seconds: u32) -> Value {
        let has_more = groups.len() > self.limit;
        groups.truncate(self.limit);
        let field = match self.group_by {
            GroupBy::Key => "key_id",
            GroupBy::Identity => "identity_id",
            GroupBy::Route => "route",
            GroupBy::Day => "day",
            GroupBy::Hour => "hour",
        };
        let next_cursor =
            has_more.then(|| groups.last().map(|g| Cursor { ts: 0, id: g.name.clone() }.encode())).flatten();
        let data: Vec<Value> = groups
            .into_iter()
            .map(|g| {
                let mut row = Map::new();
                let name = match (self.group_by, g.name.is_empty()) {
                    (GroupBy::Identity, true) => Value::Null,
                    _ => Value::String(g.name),
                };
                row.insert(field.to_owned(), name);
                row.insert("requests".to_owned(), g.requests.into());
                Value::Object(row)
            })
            .collect();
        json!({
            "from": rfc3339(self.from_ms),
            "to": rfc3339(self.to_ms),
            "group_by": self.group_by.as_str(),
            "meter": METER,
            "period_seconds": period_seconds,
            "total": total,
            "data": data,
            "has_more": has_more,
            "next_cursor": next_cursor,
        })
    }
}

/// A period's export against its audit rows (`GET /admin/v1/usage/reconcile`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Billable requests in the records of the period's sent runs.
    pub exported: i64,
    /// Billable audit rows of the period, hot and archived, counted row by row.
    pub audited: i64,
    /// Counted in the aggregates but not exported yet (an open period, or a run not yet sent).
    pub pending: i64,
}

impl Reconciliation {
    pub fn view(&self, period_start: i64, period_seconds: u32, project_id: Option<&str>) -> Value {
        json!({
            "hour": rfc3339(period_start),
            "period_seconds": period_seconds,
            "project_id": project_id,
            "exported": self.exported,
            "audited": self.audited,
            "difference": self.audited - self.exported,
            "pending": self.pending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_every_status_but_a_limits_refusal_bills() {
        let b = Billable::default();
        assert!(b.bills(200) && b.bills(404) && b.bills(500) && b.bills(403));
        assert!(!b.bills(429));
    }

    #[test]
    fn a_plan_lists_classes_and_codes() {
        let b = Billable::parse(&json!(["2xx", "404"])).unwrap();
        assert!(b.bills(200) && b.bills(299) && b.bills(404));
        assert!(!b.bills(400) && !b.bills(500) && !b.bills(429) && !b.bills(300));
        for bad in [json!("2xx"), json!(["6xx"]), json!(["20"]), json!([200]), json!(["2XX"])] {
            assert!(Billable::parse(&bad).is_err(), "{bad}");
        }
        assert!(!Billable::parse(&json!([])).unwrap().bills(200), "an empty list bills nothing");
        let four = Billable::parse(&json!(["4xx"])).unwrap();
        assert!(four.bills(404) && !four.bills(429), "a class leaves a limit's refusal out");
        assert!(Billable::parse(&json!(["4xx", "429"])).unwrap().bills(429), "named, it bills");
    }

    #[test]
    fn periods_are_whole_minutes_dividing_an_hour() {
        assert!(valid_period_seconds(60) && valid_period_seconds(900) && valid_period_seconds(3600));
        assert!(!valid_period_seconds(30) && !valid_period_seconds(7200) && !valid_period_seconds(420));
        assert_eq!(period_start(3_599_999, 3_600_000), 0);
        assert_eq!(period_start(3_600_000, 3_600_000), 3_600_000);
        assert_eq!((grace_ms(60_000), grace_ms(3_600_000)), (5_000, 300_000));
    }

    fn run(seq: u32) -> UsageRun {
        UsageRun {
            project_id: "prj_1".into(),
            period_start: 1_764_684_000_000,
            period_ms: 3_600_000,
            seq,
            made_at: 1_764_687_900_000,
            records: vec![
                UsageRecord {
                    key_id: "key_a".into(),
                    identity_id: None,
                    value: 3,
                    total: 3,
                    previous_seq: None,
                },
                UsageRecord {
                    key_id: "key_b".into(),
                    identity_id: Some("idn_1".into()),
                    value: -1,
                    total: 4,
                    previous_seq: Some(0),
                },
            ],
        }
    }

    #[test]
    fn record_ids_name_project_subject_meter_period_and_run() {
        let (first, again) = (run(0), run(0));
        let a = &first.records[0];
        assert_eq!(first.record_id(a), again.record_id(a), "a re-run overwrites");
        assert_eq!(first.record_id(a).len(), 32);
        assert_ne!(first.record_id(a), first.record_id(&first.records[1]));
        assert_ne!(first.record_id(a), run(1).record_id(a), "an adjustment is a new record");
        let other_period = UsageRun { period_start: first.period_start + 3_600_000, ..run(0) };
        assert_ne!(first.record_id(a), other_period.record_id(a));
        let other_identity = UsageRecord { identity_id: Some("idn_2".into()), ..first.records[1].clone() };
        assert_ne!(first.record_id(&first.records[1]), first.record_id(&other_identity));
        assert_eq!(first.event_id(), run(0).event_id());
        assert_ne!(first.event_id(), run(1).event_id());
    }

    #[test]
    fn a_run_is_cloud_events_one_per_line() {
        let r = run(1);
        assert_eq!(r.object_key(), "usage/prj_1/2025-12-02T14:00:00Z.adjustment-1.ndjson");
        assert_eq!(run(0).object_key(), "usage/prj_1/2025-12-02T14:00:00Z.ndjson");
        let text = String::from_utf8(r.ndjson()).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["specversion"], "1.0");
        assert_eq!(lines[1]["subject"], "identities/idn_1/keys/key_b");
        assert_eq!(lines[1]["data"]["value"], -1);
        assert_eq!(lines[1]["data"]["replaces"], run(0).record_id(&r.records[1]));
        assert_eq!(lines[0]["data"]["replaces"], Value::Null);
        assert_eq!(lines[0]["time"], "2025-12-02T15:00:00.000Z");
        assert_eq!(r.event_type(), ADJUSTMENT_EVENT);
        assert_eq!(r.event_data()["value"], 2);
    }

    fn q(pairs: &[(&str, &str)]) -> Result<UsageQuery, ApiError> {
        let query: Vec<(String, String)> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        UsageQuery::parse(&query, 1_764_684_000_000)
    }

    #[test]
    fn a_query_is_bounded_and_its_errors_name_the_field() {
        let d = q(&[]).unwrap();
        assert_eq!((d.group_by, d.limit, d.to_ms - d.from_ms), (GroupBy::Key, 100, 30 * 86_400_000));
        assert!(never_bills(Some("SERVICE_UNAVAILABLE")) && never_bills(Some("IDEMPOTENCY_KEY_IN_USE")));
        assert!(
            !never_bills(Some("NOT_FOUND")) && !never_bills(Some("UPSTREAM_TIMEOUT")) && !never_bills(None)
        );
        assert_eq!(q(&[("group_by", "hour")]).unwrap().group_by, GroupBy::Hour);
        for (bad, field) in [
            (vec![("group_by", "week")], "group_by"),
            (vec![("from", "yesterday")], "from"),
            (vec![("from", "2025-12-02T00:00:00Z"), ("to", "2025-12-01T00:00:00Z")], "from"),
            (vec![("from", "2000-01-01T00:00:00Z")], "to"),
            (vec![("limit", "0")], "limit"),
            (vec![("cursor", "!")], "cursor"),
        ] {
            let e = q(&bad).unwrap_err();
            assert_eq!(e.status(), 400, "{bad:?}");
            assert_eq!(e.details.get("field").and_then(Value::as_str), Some(field), "{bad:?}");
        }
    }

    #[test]
    fn a_page_names_its_groups_and_the_next_cursor() {
        let query = UsageQuery { limit: 1, ..q(&[("group_by", "identity")]).unwrap() };
        let groups = vec![
            UsageGroup { name: String::new(), requests: 2 },
            UsageGroup { name: "idn_1".into(), requests: 5 },
        ];
        let v = query.view(groups, 7, 60);
        assert_eq!(v["data"], json!([{"identity_id": null, "requests": 2}]));
        assert_eq!(
            (v["has_more"].clone(), v["next_cursor"].clone(), v["total"].clone()),
            (json!(true), json!(Cursor { ts: 0, id: String::new() }.encode()), json!(7))
        );
        let next = q(&[("group_by", "identity"), ("cursor", v["next_cursor"].as_str().unwrap())]).unwrap();
        assert_eq!(next.after.as_deref(), Some(""));
    }
}
