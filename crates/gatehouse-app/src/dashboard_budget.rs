//! The dashboard's own budget (`Gatehouse-Budget: dashboard`, docs/api/dashboard.md) through
//! `Gateway::handle` over the fakes: its reads take nothing of the owner key's API window or of a
//! lease of its credits, and its window takes nothing of theirs; only an owner key may use it, only
//! on the dashboard's reads; its audit rows say so.

use std::rc::Rc;
use std::sync::OnceLock;

use serde_json::Value;

use super::testing::{api_request, fake_gateway, FakePorts as Fakes, WholeBody as Body};
use super::{ApiResponse, Gateway};
use crate::fakes::gateway::Clock;
use crate::sim::{complete, Faults};
use gatehouse_core::api_key::KeyType;
use gatehouse_core::config::Config;

/// A minute's start.
const T0: i64 = 1_796_000_040_000;
const API_PER_MINUTE: usize = 5;
const DASHBOARD_PER_MINUTE: usize = 4;

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("dashboard-budget-pepper".into()),
            "WEBHOOK_SECRETS_KEY" => Some("dashboard-budget-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some("dashboard-budget-admin-token".into()),
            "PLANS" => Some(r#"{"trial":{"per_minute":5,"monthly_quota":1000}}"#.into()),
            "DASHBOARD_READS_PER_MINUTE" => Some(DASHBOARD_PER_MINUTE.to_string()),
            // Every key leases credits to the isolate: a dashboard read must not spend them.
            "LEASE_ABOVE_PER_SECOND" => Some("0".into()),
            _ => None,
        })
        .expect("the test configuration is valid")
    })
}

struct World {
    gateway: Gateway<'static, Fakes>,
    clock: Clock,
    owner: String,
    server: String,
}

impl World {
    fn new() -> Self {
        let faults = Rc::new(Faults::new(1, 0.0));
        let types = [KeyType::Owner, KeyType::Server];
        let (gateway, clock, secrets) = fake_gateway(config(), &faults, T0, "prj_budget", &types, 0.0);
        World { gateway, clock, owner: secrets[0].clone(), server: secrets[1].clone() }
    }

    fn send(&self, method: &str, path: &str, token: &str, budget: Option<&str>) -> ApiResponse {
        self.send_idempotent(method, path, token, budget, None)
    }

    /// One request (a POST creates a server key) and the work after its response.
    fn send_idempotent(
        &self,
        method: &str,
        path: &str,
        token: &str,
        budget: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> ApiResponse {
        let body = Body(Some(if method == "POST" { br#"{"type":"server"}"#.to_vec() } else { Vec::new() }));
        let mut request = api_request(method, path, token, idempotency_key, body, self.clock.get());
        request.budget = budget.map(str::to_owned);
        complete(async {
            let mut response = self.gateway.handle(request).await;
            let after = response.after_response();
            self.gateway.finish(after, |_| async {}).await;
            response
        })
    }

    fn dashboard(&self, path: &str, token: &str) -> ApiResponse {
        self.send("GET", path, token, Some("dashboard"))
    }
}

fn header<'a>(response: &'a ApiResponse, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn error(response: &ApiResponse) -> Value {
    serde_json::from_slice::<Value>(&response.body).expect("a JSON body")["error"].clone()
}

#[test]
fn dashboard_reads_and_api_requests_never_take_from_each_other() {
    let w = World::new();
    // The dashboard's minute used up first …
    for n in 0..DASHBOARD_PER_MINUTE {
        let read = w.dashboard("/public/v1/keys", &w.owner);
        assert_eq!(read.status, 200, "dashboard read {n}");
        assert_eq!(header(&read, "x-ratelimit-limit"), Some("4"));
        assert!(read.audit.dashboard, "its audit row says it was a dashboard read");
    }
    let refused = w.dashboard("/public/v1/logs", &w.owner);
    assert_eq!(refused.status, 429);
    assert_eq!(error(&refused)["code"], "RATE_LIMIT_EXCEEDED");
    assert!(
        error(&refused)["message"].as_str().is_some_and(|m| m.contains("dashboard budget")),
        "{:?}",
        error(&refused)
    );
    assert_eq!(error(&refused)["details"]["limit"], 4);
    // … takes nothing of the API window: all of it is still there, and then it runs out alone.
    for n in 0..API_PER_MINUTE {
        let call = w.send("GET", "/public/v1/keys", &w.owner, None);
        assert_eq!(call.status, 200, "API call {n}");
        assert_eq!(
            header(&call, "x-ratelimit-remaining"),
            Some((API_PER_MINUTE - n - 1).to_string().as_str())
        );
        assert!(!call.audit.dashboard);
    }
    assert_eq!(w.send("GET", "/public/v1/keys", &w.owner, None).status, 429);
    // The next minute, the API window is used up first: the dashboard still reads.
    w.clock.set(T0 + 60_000);
    for _ in 0..API_PER_MINUTE {
        assert_eq!(w.send("GET", "/public/v1/me", &w.owner, None).status, 200);
    }
    assert_eq!(w.send("GET", "/public/v1/me", &w.owner, None).status, 429);
    for path in ["/public/v1/keys", "/public/v1/keys/last-used", "/public/v1/stats", "/public/v1/webhooks"] {
        assert_eq!(w.dashboard(path, &w.owner).status, 200, "{path}");
    }
    assert_eq!(w.dashboard("/public/v1/logs", &w.owner).status, 429);
}

#[test]
fn only_an_owner_key_reads_under_the_dashboard_budget_and_only_the_dashboards_reads() {
    let w = World::new();
    let refused = w.dashboard("/public/v1/keys", &w.server);
    assert_eq!(refused.status, 403);
    assert!(error(&refused)["message"].as_str().is_some_and(|m| m.contains("Only an owner key")));
    // Its row is not marked as a dashboard read: the budget counted nothing, and the owner's
    // default log view (dashboard=false) must show the refusal.
    assert!(!refused.audit.dashboard && refused.audit.key_id.is_some());
    // A refusal for the key type takes nothing: the server key's window is whole.
    let me = w.send("GET", "/public/v1/me", &w.server, None);
    assert_eq!(header(&me, "x-ratelimit-remaining"), Some("4"));
    // A header that cannot apply is a 400 naming it, after authentication (counted in the API
    // window), and creates nothing.
    let keys_before = w.gateway.store.directory.keys.borrow().len();
    for (method, path, value) in [
        ("POST", "/public/v1/keys", "dashboard"),
        ("GET", "/public/v1/contacts", "dashboard"),
        ("GET", "/public/v1/logs", "api"),
    ] {
        let answer = w.send(method, path, &w.owner, Some(value));
        assert_eq!(answer.status, 400, "{method} {path} {value}");
        assert_eq!(error(&answer)["details"]["header"], "Gatehouse-Budget");
        assert!(!answer.audit.dashboard);
    }
    assert_eq!(w.gateway.store.directory.keys.borrow().len(), keys_before);
    let me = w.send("GET", "/public/v1/me", &w.owner, None);
    assert_eq!(header(&me, "x-ratelimit-remaining"), Some("1"), "the three 400s and this call counted");
    // /me describes the key's API window and quota: never under the budget.
    w.clock.set(T0 + 60_000);
    assert_eq!(w.dashboard("/public/v1/me", &w.owner).status, 400);
    // A server key's resource call with the header is refused too: it never gets a second window.
    assert_eq!(w.send("GET", "/public/v1/contacts", &w.server, Some("dashboard")).status, 400);
}

#[test]
fn a_change_refused_for_the_header_takes_no_idempotency_claim() {
    let w = World::new();
    let send = |budget| w.send_idempotent("POST", "/public/v1/keys", &w.owner, budget, Some("make-1"));
    assert_eq!(send(Some("dashboard")).status, 400);
    // The retry without the header executes: its key was never in use.
    let made = send(None);
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    assert_eq!(send(None).status, 201, "and replays");
}
