//! The statistics of the audit log (SPEC §11): a day's counts, latency buckets, a project's
//! or one endpoint's view over days.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::audit::bad;
use crate::error::ApiError;

/// One day of a key's traffic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DayCount {
    pub day: String,
    pub total: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    /// The day's requests by response time (rows counted before the buckets existed are in none).
    #[serde(flatten)]
    pub latency: LatencyBuckets,
}

/// The upper bounds (exclusive, ms) of the response-time buckets the aggregates keep; the last
/// bucket holds everything from 5 s on.
pub const LATENCY_BOUNDS_MS: [u64; 9] = [10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000];

/// Requests per response-time bucket, as the aggregates' columns `l0` … `l9` hold them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct LatencyBuckets {
    #[serde(default)]
    pub l0: u64,
    #[serde(default)]
    pub l1: u64,
    #[serde(default)]
    pub l2: u64,
    #[serde(default)]
    pub l3: u64,
    #[serde(default)]
    pub l4: u64,
    #[serde(default)]
    pub l5: u64,
    #[serde(default)]
    pub l6: u64,
    #[serde(default)]
    pub l7: u64,
    #[serde(default)]
    pub l8: u64,
    #[serde(default)]
    pub l9: u64,
}

impl LatencyBuckets {
    /// The bucket of a response time.
    pub fn bucket(ms: i64) -> usize {
        let ms = ms.max(0) as u64;
        LATENCY_BOUNDS_MS.iter().position(|&bound| ms < bound).unwrap_or(LATENCY_BOUNDS_MS.len())
    }

    pub fn counts(&self) -> [u64; 10] {
        [self.l0, self.l1, self.l2, self.l3, self.l4, self.l5, self.l6, self.l7, self.l8, self.l9]
    }

    pub fn from_counts(c: [u64; 10]) -> Self {
        let [l0, l1, l2, l3, l4, l5, l6, l7, l8, l9] = c;
        LatencyBuckets { l0, l1, l2, l3, l4, l5, l6, l7, l8, l9 }
    }

    /// The buckets of both.
    pub fn plus(&self, other: &Self) -> Self {
        let (a, b) = (self.counts(), other.counts());
        Self::from_counts(std::array::from_fn(|i| a[i] + b[i]))
    }

    /// The `p`-th percentile (0–100) as the upper bound of the bucket that holds it, in ms (the
    /// last bucket, 5 s and more, answers 10,000); `None` without any request.
    pub fn percentile(&self, p: u64) -> Option<u64> {
        let counts = self.counts();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (total * p).div_ceil(100).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(LATENCY_BOUNDS_MS.get(i).copied().unwrap_or(10_000));
            }
        }
        None
    }

    /// `"p50_ms"`, `"p95_ms"`, `"p99_ms"` (each `null` without requests).
    pub fn view(&self) -> Value {
        json!({ "p50_ms": self.percentile(50), "p95_ms": self.percentile(95), "p99_ms": self.percentile(99) })
    }
}

/// The SQL of the bucket columns for the aggregates: `sum(<ms> < 10) AS l0, …` over `ms` (a
/// column or expression).
pub fn latency_sums(ms: &str) -> String {
    let lows = std::iter::once(0).chain(LATENCY_BOUNDS_MS);
    let highs = LATENCY_BOUNDS_MS.iter().map(|h| format!(" AND {ms} < {h}")).chain([String::new()]);
    lows.zip(highs).map(|(low, high)| format!("sum({ms} >= {low}{high})")).collect::<Vec<_>>().join(", ")
}

/// Each bucket column `l0` … `l9` through `each` (e.g. `|c| format!("sum({c}) AS {c}")`), joined.
pub fn latency_columns(each: impl Fn(&str) -> String) -> String {
    (0..=LATENCY_BOUNDS_MS.len()).map(|i| each(&format!("l{i}"))).collect::<Vec<_>>().join(", ")
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EndpointCount {
    pub method: String,
    pub route: String,
    pub total: u64,
    pub errors: u64,
    #[serde(flatten)]
    pub latency: LatencyBuckets,
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
/// The statistics of a key (`key_id`) or, without one, of the whole project: per UTC day the
/// requests, 4xx, 5xx and p50/p95/p99 response times, the top endpoints, and the range's totals.
pub fn stats_view(
    key_id: Option<&str>,
    days: u32,
    today_ms: i64,
    counted: &[DayCount],
    endpoints: &[EndpointCount],
) -> Value {
    let with = |mut a: Value, b: Value| {
        if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
            a.extend(b);
        }
        a
    };
    let daily: Vec<Value> = (0..days)
        .rev()
        .map(|back| {
            let day = super::time::utc_date(today_ms - i64::from(back) * 86_400_000);
            let c = counted.iter().find(|c| c.day == day);
            let counts = json!({
                "date": day,
                "total": c.map_or(0, |c| c.total),
                "4xx": c.map_or(0, |c| c.client_errors),
                "5xx": c.map_or(0, |c| c.server_errors),
            });
            with(counts, c.map(|c| c.latency).unwrap_or_default().view())
        })
        .collect();
    let total: u64 = counted.iter().map(|c| c.total).sum();
    let errors: u64 = counted.iter().map(|c| c.client_errors + c.server_errors).sum();
    let latency = counted.iter().fold(LatencyBuckets::default(), |sum, c| sum.plus(&c.latency));
    let mut view = json!({
        "days": days,
        "total": total,
        "error_share": if total == 0 { 0.0 } else { errors as f64 / total as f64 },
        "latency": latency.view(),
        "daily": daily,
        "top_endpoints": endpoints.iter().map(|e| with(json!({
            "method": e.method, "route": e.route, "total": e.total, "errors": e.errors,
        }), e.latency.view())).collect::<Vec<_>>(),
    });
    if let Some(key_id) = key_id {
        view["key_id"] = Value::String(key_id.to_owned());
    }
    view
}
