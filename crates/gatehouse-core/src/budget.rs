//! The dashboard's own budget (docs/api/dashboard.md): the owner dashboard's reads are counted in a
//! window of their own per owner key, so a page left open, or reloaded with many keys, never takes
//! from what the key may spend on the API; and the request log can leave them out.
//!
//! A request asks for it with `Gatehouse-Budget: dashboard`. Only reads of the project that the
//! dashboard makes qualify ([`RouteId::is_dashboard_read`]); only an owner key may use it (403
//! otherwise); it is counted in the key's dashboard window alone — not in its API windows, its
//! monthly quota, its identity's or its project's (SPEC §20) — and never bills.

use crate::error::ApiError;
use crate::route::{Access, Route, RouteId};

/// The one value it takes.
pub const DASHBOARD: &str = "dashboard";
/// Reads a minute an owner key makes under the dashboard budget by default
/// (`DASHBOARD_READS_PER_MINUTE`): the dashboard makes 2–4 reads a tab and one every 5 s while the
/// live log runs, so 120 leave room for a few tabs open at once.
pub const DEFAULT_READS_PER_MINUTE: u32 = 120;

/// Whether a request is read under the dashboard budget. Without the header, or on a route no API
/// key calls, `false`. With it, the value must be `dashboard` (any case) and the route one of the
/// dashboard's reads, else 400 (answered after authentication, SPEC §3 order): a header that does
/// nothing must not look as if it did.
pub fn dashboard_read(value: Option<&str>, route: &Route) -> Result<bool, ApiError> {
    let Some(value) = value else { return Ok(false) };
    if !matches!(route.access, Access::Key(_)) {
        return Ok(false);
    }
    if !value.trim().eq_ignore_ascii_case(DASHBOARD) {
        return Err(bad_header(format!("Gatehouse-Budget must be `{DASHBOARD}` or left out.")));
    }
    if !route.id.is_dashboard_read() {
        return Err(bad_header(
            "Gatehouse-Budget: dashboard applies only to the dashboard's reads (GET or HEAD of keys, stats, \
             identities, logs, usage, webhooks and their deliveries)."
                .to_owned(),
        ));
    }
    Ok(true)
}

fn bad_header(message: String) -> ApiError {
    ApiError::bad_request(message).with_detail("header", "Gatehouse-Budget")
}

impl RouteId {
    /// The reads the dashboard makes, which may be counted under its budget: reads of the project
    /// answered from D1 (mostly from its daily aggregates), not downloads of archives or exports,
    /// not the pull of webhook deliveries (a consumer's work, not a look), and not `/me`, which
    /// describes the key's API window and quota and so is asked under them.
    pub fn is_dashboard_read(self) -> bool {
        use RouteId::*;
        matches!(
            self,
            ListKeys
                | KeysLastUsed
                | ProjectStats
                | KeyStats
                | ListIdentities
                | GetIdentity
                | ListLogs
                | GetLog
                | ListEvents
                | Usage
                | UsageRuns
                | ListWebhooks
                | ListDeliveries
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::match_route;

    fn route(method: &str, path: &str) -> Route {
        *match_route(method, path).map_err(|_| path.to_owned()).expect("a route").route
    }

    #[test]
    fn only_the_dashboard_reads_take_the_header() {
        let logs = route("GET", "/public/v1/logs");
        assert_eq!(dashboard_read(None, &logs), Ok(false));
        assert_eq!(dashboard_read(Some("dashboard"), &logs), Ok(true));
        assert_eq!(dashboard_read(Some(" Dashboard "), &route("HEAD", "/public/v1/keys")), Ok(true));
        assert_eq!(dashboard_read(Some("dashboard"), &route("GET", "/public/v1/keys/k1/stats")), Ok(true));
        for (method, path) in [
            ("POST", "/public/v1/keys"),
            ("DELETE", "/public/v1/keys/k1"),
            ("GET", "/public/v1/contacts"),
            ("GET", "/public/v1/me"),
            ("GET", "/public/v1/webhooks/w1/pull"),
            ("GET", "/public/v1/logs/archives/2026-11-30"),
            ("GET", "/public/v1/usage/file"),
        ] {
            let refused = dashboard_read(Some("dashboard"), &route(method, path)).expect_err(path);
            assert_eq!(refused.status(), 400, "{method} {path}");
        }
        assert_eq!(dashboard_read(Some("api"), &logs).expect_err("a wrong value").status(), 400);
        assert_eq!(dashboard_read(Some(""), &logs).expect_err("an empty value").status(), 400);
        // A route no API key calls ignores it.
        assert_eq!(dashboard_read(Some("anything"), &route("GET", "/health")), Ok(false));
    }
}
