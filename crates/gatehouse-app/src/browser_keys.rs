//! Browser keys in the browser (SPEC §24, docs/api/ingestion.md "From a browser") through
//! `Gateway::handle` over the fakes, with and without leases of the key's credits: a visitor over
//! its window is refused before the key's window is counted and other visitors pass; `?key=` is
//! taken from a browser key on `/v1/track` only; a page of an origin the key does not list is 403
//! with nothing counted.

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

fn config(leases: bool) -> &'static Config {
    static LEASING: OnceLock<Config> = OnceLock::new();
    static PLAIN: OnceLock<Config> = OnceLock::new();
    (if leases { &LEASING } else { &PLAIN }).get_or_init(|| {
        Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("browser-keys-pepper-pepper".into()),
            "WEBHOOK_SECRETS_KEY" => Some("browser-keys-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some("browser-keys-admin-token".into()),
            "PLANS" => Some(r#"{"trial":{"per_minute":30,"monthly_quota":1000}}"#.into()),
            "LEASE_ABOVE_PER_SECOND" => Some(if leases { "0" } else { "off" }.into()),
            _ => None,
        })
        .expect("the test configuration is valid")
    })
}

struct World {
    gateway: Gateway<'static, Fakes>,
    clock: Clock,
    browser: String,
    server: String,
}

impl World {
    fn new(leases: bool) -> Self {
        let faults = Rc::new(Faults::new(1, 0.0));
        let types = [KeyType::Browser, KeyType::Server];
        let (gateway, clock, secrets) = fake_gateway(config(leases), &faults, T0, "prj_web", &types, 0.0);
        World { gateway, clock, browser: secrets[0].clone(), server: secrets[1].clone() }
    }

    /// One `/v1/track` of one event from `ip` (with `Origin: origin`), its key in `Authorization`
    /// or, with `in_query`, as `?key=`.
    fn track(&self, token: &str, ip: &str, origin: Option<&str>, in_query: bool) -> ApiResponse {
        let body = br#"{"batch":[{"event":"Page Viewed","anonymous_id":"a"}]}"#.to_vec();
        let mut request = api_request("POST", "/v1/track", token, None, Body(Some(body)), self.clock.get());
        request.client_ip = Some(ip.into());
        request.page_origin = origin.map(str::to_owned);
        if in_query {
            request.authorization = None;
            request.query = vec![("key".into(), token.into())];
            request.raw_query = Some(format!("key={token}"));
        }
        complete(async {
            let mut response = self.gateway.handle(request).await;
            let after = response.after_response();
            self.gateway.finish(after, |_| async {}).await;
            response
        })
    }
}

fn header<'a>(response: &'a ApiResponse, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn error(response: &ApiResponse) -> Value {
    serde_json::from_slice::<Value>(&response.body).expect("a JSON body")["error"].clone()
}

#[test]
fn a_visitor_over_its_window_spends_nothing_of_the_keys_and_others_pass() {
    for leases in [false, true] {
        let w = World::new(leases);
        for n in 0..10 {
            assert_eq!(
                w.track(&w.browser, "203.0.113.7", None, false).status,
                202,
                "request {n}, leases {leases}"
            );
        }
        for ip in ["203.0.113.7", "203.0.113.7"] {
            let over = w.track(&w.browser, ip, None, false);
            assert_eq!(over.status, 429, "leases {leases}");
            assert_eq!(error(&over)["details"]["per"], "address");
            assert_eq!(header(&over, "x-ratelimit-limit"), Some("10"));
        }
        let other = w.track(&w.browser, "198.51.100.9", None, false);
        assert_eq!(other.status, 202, "leases {leases}");
        if !leases {
            // A lease's window is the isolate's share, not the key's count: exact only at the guard.
            assert_eq!(header(&other, "x-ratelimit-remaining"), Some("19"), "the refusals took nothing");
        }
        for _ in 0..12 {
            assert_eq!(
                w.track(&w.server, "203.0.113.7", None, false).status,
                202,
                "a server key has no visitor window"
            );
        }
    }
}

#[test]
fn the_query_key_is_a_browser_keys_on_track_only() {
    let w = World::new(false);
    assert_eq!(w.track(&w.browser, "203.0.113.7", None, true).status, 202);
    let server = w.track(&w.server, "203.0.113.7", None, true);
    assert_eq!((server.status, error(&server)["code"].as_str()), (401, Some("INVALID_API_KEY")));
    assert!(server.audit.path.contains("key=REDACTED"), "{}", server.audit.path);
}

#[test]
fn a_page_of_an_unlisted_origin_is_refused_before_anything_is_counted() {
    for leases in [false, true] {
        let w = World::new(leases);
        w.gateway.store.directory.keys.borrow_mut()[0].allowed_origins = vec!["https://shop.example".into()];
        assert_eq!(w.track(&w.browser, "203.0.113.7", Some("https://shop.example"), false).status, 202);
        let refused = w.track(&w.browser, "203.0.113.7", Some("https://evil.example"), false);
        assert_eq!(refused.status, 403, "leases {leases}");
        assert_eq!(error(&refused)["details"]["origin"], "https://evil.example");
        assert_eq!(w.track(&w.browser, "203.0.113.7", None, false).status, 202, "no Origin: not a page");
    }
}

#[test]
fn what_the_guard_refused_a_visitor_or_an_origin_for_is_answered_from_memory() {
    let w = World::new(false);
    w.gateway.store.directory.keys.borrow_mut()[0].allowed_origins = vec!["https://shop.example".into()];
    let asked = || w.gateway.guard.asked.borrow().len();
    for _ in 0..10 {
        assert_eq!(w.track(&w.browser, "203.0.113.7", None, false).status, 202);
    }
    let first = w.track(&w.browser, "203.0.113.7", None, false);
    assert_eq!((first.status, first.audited), (429, true), "the guard's refusal has its audit row");
    let before = asked();
    let again = w.track(&w.browser, "203.0.113.7", None, false);
    assert_eq!((again.status, again.audited), (429, false), "from memory: no audit row");
    assert_eq!(asked(), before, "and no guard call");
    assert!(
        header(&again, "retry-after").is_some_and(|s| s.parse::<u32>().is_ok_and(|s| (1..=60).contains(&s)))
    );
    assert_eq!(error(&again)["details"]["per"], "address");

    let evil = w.track(&w.browser, "198.51.100.9", Some("https://evil.example"), false);
    assert_eq!((evil.status, evil.audited), (403, true));
    let before = asked();
    let evil = w.track(&w.browser, "198.51.100.10", Some("https://evil.example"), false);
    assert_eq!((evil.status, evil.audited, asked()), (403, false, before), "the origin from memory");
    assert_eq!(w.track(&w.browser, "198.51.100.9", Some("https://shop.example"), false).status, 202);

    // The next minute: the visitor's window starts afresh.
    w.clock.set(T0 + 60_000);
    assert_eq!(w.track(&w.browser, "203.0.113.7", None, false).status, 202);
}
