//! `GET /public/v1/usage/runs?from&to` (owner, SPEC §26): the project's usage export runs of the
//! periods that start in the range (default the last 30 days, as `GET /public/v1/usage`), newest
//! first, at most [`RUNS`]: each run's period, whether it is the export or an adjustment, the
//! object it wrote (`GET /public/v1/usage/file?key=…` reads it), its records and what they add,
//! and when its `usage.hourly` / `usage.adjustment` event was recorded as sent.

use serde_json::{json, Value};

use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::{Ports, RunSummary, UsageStore};
use gatehouse_core::time::rfc3339;
use gatehouse_core::usage::{object_key, UsageQuery};

/// The most runs one answer lists (a 31-day range of hourly periods holds 744 exports).
pub const RUNS: usize = 1_000;

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn usage_runs(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let range = UsageQuery::parse(call.query, call.now_ms)?;
        let project = call.project_id();
        let runs =
            self.store.usage_runs(project, range.from_ms, range.to_ms, RUNS).await.map_err(unavailable)?;
        let data: Vec<Value> = runs.iter().map(|run| view(project, run)).collect();
        Ok(Reply::ok(json!({ "from": rfc3339(range.from_ms), "to": rfc3339(range.to_ms), "data": data })))
    }
}

fn view(project_id: &str, run: &RunSummary) -> Value {
    json!({
        "period_start": rfc3339(run.period_start),
        "seq": run.seq,
        "kind": if run.seq == 0 { "export" } else { "adjustment" },
        "object": object_key(project_id, run.period_start, run.seq),
        "records": run.records,
        "requests": run.requests,
        "made_at": rfc3339(run.made_at),
        "sent_at": run.sent_at.map(rfc3339),
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::super::testing::{api_request, fake_gateway, WholeBody};
    use crate::fakes::usage::StoredRun;
    use crate::sim::{complete, Faults};
    use gatehouse_core::api_key::KeyType;
    use gatehouse_core::config::Config;
    use gatehouse_core::usage::UsageRecord;

    const HOUR: i64 = 3_600_000;
    const T0: i64 = 1_796_000_000_000 - 1_796_000_000_000 % HOUR;

    #[test]
    fn the_runs_of_the_range_newest_first_with_their_objects_and_what_they_add() {
        let config = Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("usage-runs-pepper".into()),
            "WEBHOOK_SECRETS_KEY" => Some("usage-runs-webhooks".into()),
            "ADMIN_TOKEN" => Some("usage-runs-admin-token".into()),
            _ => None,
        });
        let config = Box::leak(Box::new(config.expect("valid")));
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, _, secrets) = fake_gateway(config, &faults, T0, "prj_runs", &[KeyType::Owner], 0.0);
        let record = |value, total| UsageRecord {
            key_id: "key_1".into(),
            identity_id: None,
            value,
            total,
            previous_seq: None,
        };
        let run = |records, sent_at| StoredRun { period_ms: HOUR, made_at: T0, sent_at, records };
        {
            let mut usage = gateway.store.audit.usage.borrow_mut();
            usage.runs.insert(("prj_runs".into(), T0 - 2 * HOUR, 0), run(vec![record(5, 5)], Some(T0)));
            usage.runs.insert(("prj_runs".into(), T0 - 2 * HOUR, 1), run(vec![record(-1, 4)], None));
            usage
                .runs
                .insert(("prj_runs".into(), T0 - HOUR, 0), run(vec![record(3, 3), record(2, 2)], Some(T0)));
            usage.runs.insert(("prj_other".into(), T0 - HOUR, 0), run(vec![record(9, 9)], Some(T0)));
        }
        let request = api_request("GET", "/public/v1/usage/runs", &secrets[0], None, WholeBody(None), T0);
        let response = complete(gateway.handle(request));
        assert_eq!(response.status, 200);
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        let runs: Vec<(&str, &str, i64, bool)> = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["kind"].as_str().unwrap(),
                    r["object"].as_str().unwrap(),
                    r["requests"].as_i64().unwrap(),
                    r["sent_at"].is_null(),
                )
            })
            .collect();
        let hour = |h: i64| gatehouse_core::time::rfc3339(T0 - h * HOUR).replace(".000", "");
        assert_eq!(
            runs,
            [
                ("export", format!("usage/prj_runs/{}.ndjson", hour(1)).as_str(), 5, false),
                ("adjustment", format!("usage/prj_runs/{}.adjustment-1.ndjson", hour(2)).as_str(), -1, true),
                ("export", format!("usage/prj_runs/{}.ndjson", hour(2)).as_str(), 5, false),
            ]
        );
    }
}
