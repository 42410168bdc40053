//! Lifecycles that must never lock a project out (SPEC §17, §19 "Operations that run twice"), over
//! the fakes of every port and through `Gateway::handle`: the last-owner-key rule under expiries,
//! rolls and revocations; the operator's owner-key route; and idempotent rolls and rotations whose
//! first execution landed but was never answered, executed again for the same operation.

use std::rc::Rc;
use std::sync::OnceLock;

use serde_json::Value;

use super::testing::{api_request, fake_gateway, FakePorts as Fakes};
use super::{ApiRequest, ApiResponse, Gateway};
use crate::fakes::gateway::Clock;
use crate::sim::{complete, Faults};
use gatehouse_core::api_key::KeyType;
use gatehouse_core::config::Config;
use gatehouse_core::idempotency::LEASE_MS;
use gatehouse_core::time;

use super::testing::WholeBody as Body;

const T0: i64 = 1_796_000_000_000;
const ADMIN_TOKEN: &str = "lifecycle-admin-token";
const PROJECT: &str = "prj_life";

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        Config::from_lookup(|name| match name {
            "KEY_PEPPER" => Some("lifecycle-pepper".into()),
            "WEBHOOK_SECRETS_KEY" => Some("lifecycle-webhook-secrets".into()),
            "ADMIN_TOKEN" => Some(ADMIN_TOKEN.into()),
            "PLANS" => Some(
                r#"{"trial":{"per_minute":100000,"monthly_quota":100000000},"pro":{"per_minute":200000,"monthly_quota":100000000}}"#
                    .into(),
            ),
            _ => None,
        })
        .expect("the test configuration is valid")
    })
}

/// A gateway over fault-free fakes with one project holding a key of each `types`.
struct World {
    gateway: Gateway<'static, Fakes>,
    clock: Clock,
    secrets: Vec<String>,
}

impl World {
    fn new(types: &[KeyType]) -> Self {
        let faults = Rc::new(Faults::new(1, 0.0));
        let (gateway, clock, secrets) = fake_gateway(config(), &faults, T0, PROJECT, types, 0.0);
        World { gateway, clock, secrets }
    }

    fn id(&self, n: usize) -> String {
        self.gateway.store.directory.keys.borrow()[n].id.clone()
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        token: &str,
        idem: Option<&str>,
        body: &str,
    ) -> ApiRequest<Body> {
        api_request(method, path, token, idem, Body(Some(body.as_bytes().to_vec())), self.clock.get())
    }

    /// One request and all the work after its response (the claim settled).
    fn send(&self, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
        self.sent(self.request(method, path, token, None, body))
    }

    /// One request and all the work after its response: its status and JSON body.
    fn sent(&self, request: ApiRequest<Body>) -> (u16, Value) {
        let response = self.answered(request);
        (response.status, serde_json::from_slice(&response.body).unwrap_or(Value::Null))
    }

    fn answered(&self, req: ApiRequest<Body>) -> ApiResponse {
        complete(async {
            let mut response = self.gateway.handle(req).await;
            let after = response.after_response();
            self.gateway.finish(after, |_| async {}).await;
            response
        })
    }

    /// An idempotent request whose execution landed but whose answer was lost: the worker died
    /// before answering or settling (a D1 write that timed out after it landed ends the same
    /// way), so its claim's lease runs out and the client's retry executes the same operation.
    fn lost(&self, method: &str, path: &str, token: &str, idem: &str, body: &str) -> u16 {
        let status =
            complete(self.gateway.handle(self.request(method, path, token, Some(idem), body))).status;
        self.clock.set(self.clock.get() + LEASE_MS + 1);
        status
    }

    fn me(&self, token: &str) -> (u16, Value) {
        self.send("GET", "/public/v1/me", token, "")
    }
}

fn expiry_in(ms: i64, now: i64) -> String {
    format!(r#"{{"expires_at":"{}"}}"#, time::rfc3339(now + ms))
}

/// Owner keys A and B: giving A an expiry, then B one, would leave no owner key once both lapse.
/// The second is refused, as revoking the last lasting owner key is.
#[test]
fn expiring_every_owner_key_one_after_the_other_is_refused() {
    let w = World::new(&[KeyType::Owner, KeyType::Owner]);
    let (a, b) = (w.id(0), w.id(1));
    let soon = expiry_in(60_000, T0);
    assert_eq!(w.send("PATCH", &format!("/public/v1/keys/{a}"), &w.secrets[1], &soon).0, 200);
    let (status, refused) = w.send("PATCH", &format!("/public/v1/keys/{b}"), &w.secrets[1], &soon);
    assert_eq!(status, 422, "the last owner key that does not expire took an expiry: {refused}");
    assert_eq!(refused["error"]["details"]["id"], b.as_str());
    // B cannot be revoked either while A only expires; a lasting owner key made first frees it.
    assert_eq!(w.send("DELETE", &format!("/public/v1/keys/{b}"), &w.secrets[1], "").0, 422);
    let (status, c) = w.send("POST", "/public/v1/keys", &w.secrets[1], r#"{"type":"owner"}"#);
    assert_eq!(status, 201, "{c}");
    assert_eq!(w.send("PATCH", &format!("/public/v1/keys/{b}"), &w.secrets[1], &soon).0, 200);
    // Long after every expiry the project still has a working owner key.
    w.clock.set(T0 + 86_400_000);
    assert_eq!(w.me(c["key"].as_str().unwrap()).0, 200);
    assert_eq!((w.me(&w.secrets[0]).0, w.me(&w.secrets[1]).0), (401, 401));
}

/// Rolling the only owner key and revoking its replacement would leave only the rolled key, which
/// is refused when its grace ends: the revocation is refused.
#[test]
fn revoking_the_replacement_of_the_only_owner_key_is_refused() {
    let w = World::new(&[KeyType::Owner]);
    let only = w.id(0);
    let (status, rolled) =
        w.send("POST", &format!("/public/v1/keys/{only}/roll"), &w.secrets[0], r#"{"grace_seconds":60}"#);
    assert_eq!(status, 201, "{rolled}");
    let replacement = rolled["id"].as_str().unwrap();
    let (status, refused) = w.send("DELETE", &format!("/public/v1/keys/{replacement}"), &w.secrets[0], "");
    assert_eq!(status, 422, "the replacement was revoked: {refused}");
    // Nor may the replacement take an expiry; the rolled key itself may go.
    let soon = expiry_in(120_000, T0);
    assert_eq!(w.send("PATCH", &format!("/public/v1/keys/{replacement}"), &w.secrets[0], &soon).0, 422);
    assert_eq!(w.send("DELETE", &format!("/public/v1/keys/{only}"), &w.secrets[0], "").0, 200);
    w.clock.set(T0 + 3_600_000);
    assert_eq!(w.me(rolled["key"].as_str().unwrap()).0, 200);
}

/// The operator issues an owner key for any project (`POST /admin/v1/projects/{id}/owner-keys`),
/// shown once, which manages the project from its first request on.
#[test]
fn the_operator_issues_an_owner_key_for_a_project() {
    let w = World::new(&[KeyType::Server]);
    let path = format!("/admin/v1/projects/{PROJECT}/owner-keys");
    let (status, created) = w.send("POST", &path, ADMIN_TOKEN, r#"{"name":"recovery"}"#);
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["type"].as_str(), created["name"].as_str()), (Some("owner"), Some("recovery")));
    assert_eq!(created["status"], "active");
    let key = created["key"].as_str().unwrap();
    assert_eq!(&key[..12], created["prefix"].as_str().unwrap());
    let (status, me) = w.me(key);
    assert_eq!((status, me["type"].as_str(), me["project_id"].as_str()), (200, Some("owner"), Some(PROJECT)));
    assert_eq!(w.send("GET", "/public/v1/keys", key, "").0, 200);
    // `{}` is an owner key without a name; unknown projects, bad bodies and other tokens are refused.
    assert_eq!(w.send("POST", &path, ADMIN_TOKEN, "{}").0, 201);
    let (status, missing) = w.send("POST", "/admin/v1/projects/prj_none/owner-keys", ADMIN_TOKEN, "{}");
    assert_eq!((status, missing["error"]["code"].as_str()), (404, Some("NOT_FOUND")));
    assert_eq!(w.send("POST", &path, ADMIN_TOKEN, r#"{"type":"server"}"#).0, 400);
    assert_eq!(w.send("POST", &path, &w.secrets[0], "{}").0, 401);
}

/// A roll with grace 0 whose first execution landed unanswered: the retry of the same operation
/// answers the same replacement, with the same working secret, instead of refusing a key that is
/// already rolled (which left no key the client could use).
#[test]
fn a_roll_executed_twice_for_one_operation_answers_the_same_replacement() {
    let w = World::new(&[KeyType::Owner, KeyType::Server]);
    let server = w.id(1);
    let path = format!("/public/v1/keys/{server}/roll");
    let body = r#"{"grace_seconds":0}"#;
    assert_eq!(w.lost("POST", &path, &w.secrets[0], "roll-1", body), 201);
    let (status, again) = w.sent(w.request("POST", &path, &w.secrets[0], Some("roll-1"), body));
    assert_eq!(status, 201, "the second execution of the roll: {again}");
    let keys = w.gateway.store.directory.keys.borrow().clone();
    assert_eq!(keys.len(), 3, "one replacement");
    assert_eq!(again["id"].as_str(), keys[1].rolled_to.as_deref());
    assert_eq!(again["rolled_from"], server.as_str());
    let (status, me) = w.me(again["key"].as_str().unwrap());
    assert_eq!((status, me["key_id"].as_str()), (200, again["id"].as_str()), "{me}");
    assert_eq!(w.me(&w.secrets[1]).0, 401);
    // The same key with another request rolls nothing more; the replacement can be rolled on.
    let replacement = again["id"].as_str().unwrap();
    let roll = format!("/public/v1/keys/{replacement}/roll");
    let (status, next) = w.sent(w.request("POST", &roll, &w.secrets[0], Some("roll-2"), "{}"));
    assert_eq!(status, 201, "{next}");
    assert_ne!(next["key"], again["key"]);
}

/// A key created twice for one operation is one key, answered with the same secret.
#[test]
fn a_key_created_twice_for_one_operation_is_one_key() {
    let w = World::new(&[KeyType::Owner]);
    assert_eq!(w.lost("POST", "/public/v1/keys", &w.secrets[0], "create-1", r#"{"type":"server"}"#), 201);
    let (status, again) =
        w.sent(w.request("POST", "/public/v1/keys", &w.secrets[0], Some("create-1"), r#"{"type":"server"}"#));
    assert_eq!(status, 201, "{again}");
    assert_eq!(w.gateway.store.directory.keys.borrow().len(), 2, "one new key");
    assert_eq!(w.me(again["key"].as_str().unwrap()).0, 200);
}

/// A rotation executed twice for one operation answers the same new secret and keeps the secret
/// from before the rotation as the previous one, signing through the grace.
#[test]
fn a_rotation_executed_twice_for_one_operation_keeps_the_original_secret() {
    let w = World::new(&[KeyType::Owner]);
    let owner = &w.secrets[0];
    let (status, hook) = w.send(
        "POST",
        "/public/v1/webhooks",
        owner,
        r#"{"url":"https://hooks.example.com/a","events":["*"]}"#,
    );
    assert_eq!(status, 201, "{hook}");
    let (id, original) = (hook["id"].as_str().unwrap(), hook["secret"].as_str().unwrap());
    let path = format!("/public/v1/webhooks/{id}/rotate-secret");
    assert_eq!(w.lost("POST", &path, owner, "rotate-1", "{}"), 200);
    let (status, rotated) = w.sent(w.request("POST", &path, owner, Some("rotate-1"), "{}"));
    assert_eq!(status, 200, "{rotated}");
    let secrets_key = config().webhook_secrets_keys();
    let stored = w.gateway.store.webhooks.borrow().webhooks[id].clone();
    let (previous, until) = stored.previous_secret.clone().expect("a previous secret");
    assert_eq!(
        previous.open(&secrets_key, id).as_deref(),
        Some(original),
        "the pre-rotation secret was dropped"
    );
    assert!(until > w.clock.get());
    assert_eq!(stored.secret.open(&secrets_key, id).as_deref(), rotated["secret"].as_str());
    // Another operation rotates again, from the secret the first one made.
    let (status, next) = w.sent(w.request("POST", &path, owner, Some("rotate-2"), "{}"));
    assert_eq!(status, 200);
    let stored = w.gateway.store.webhooks.borrow().webhooks[id].clone();
    assert_eq!(
        stored.previous_secret.unwrap().0.open(&secrets_key, id).as_deref(),
        rotated["secret"].as_str()
    );
    assert_ne!(next["secret"], rotated["secret"]);
}

/// SPEC §19, §25 (review M2): a switch of the signing scheme executed twice for one operation
/// answers the same new `v1` secret again (on 3b52c52 the retry found the subscription on `v1`
/// already and answered no secret: after the grace no receiver could verify), and a v1a key pair
/// is not shown, only its public key.
#[test]
fn a_scheme_switch_executed_twice_for_one_operation_answers_its_secret_again() {
    let w = World::new(&[KeyType::Owner]);
    let owner = &w.secrets[0];
    let body = r#"{"url":"https://hooks.example.com/a","events":["*"],"signature":"v1a"}"#;
    let (status, hook) = w.send("POST", "/public/v1/webhooks", owner, body);
    assert_eq!(status, 201, "{hook}");
    assert_eq!((hook["signature"].as_str(), hook.get("secret")), (Some("v1a"), None));
    let id = hook["id"].as_str().unwrap();
    let path = format!("/public/v1/webhooks/{id}");
    assert_eq!(w.lost("PATCH", &path, owner, "switch-1", r#"{"signature":"v1"}"#), 200);
    let (status, again) = w.sent(w.request("PATCH", &path, owner, Some("switch-1"), r#"{"signature":"v1"}"#));
    assert_eq!(status, 200, "{again}");
    let secret = again["secret"].as_str().expect("the new v1 secret, answered again");
    let stored = w.gateway.store.webhooks.borrow().webhooks[id].clone();
    assert_eq!(stored.secret.open(&config().webhook_secrets_keys(), id).as_deref(), Some(secret));
    let (previous, _) = stored.previous_secret.expect("the v1a key pair signs through the grace");
    let previous = previous.open(&config().webhook_secrets_keys(), id).unwrap();
    assert_eq!(gatehouse_core::webhook::public_key_of(&previous).as_deref(), hook["public_key"].as_str());
    // Another operation asking for v1 on a v1 subscription changes nothing and shows no secret.
    let (status, same) = w.sent(w.request("PATCH", &path, owner, Some("switch-2"), r#"{"signature":"v1"}"#));
    assert_eq!((status, same.get("secret")), (200, None), "{same}");
}

/// SPEC §5, §19: admin creates honour `Idempotency-Key` as key routes do — one project per key
/// (replayed with `Idempotent-Replayed`), 409 for the same key with another body — also when the
/// first execution landed but was never answered (then the retry makes the same project and
/// owner key again, found, not written twice).
#[test]
fn admin_creates_honour_idempotency_key() {
    let w = World::new(&[]);
    // Beside the world's own project.
    let projects = || w.gateway.store.directory.projects.borrow().len() - 1;
    let create =
        |key: &str, body: &str| w.request("POST", "/admin/v1/projects", ADMIN_TOKEN, Some(key), body);
    let body = r#"{"name":"acme"}"#;
    let first = w.answered(create("create-acme", body));
    assert_eq!(first.status, 201);
    let again = w.answered(create("create-acme", body));
    let text = |r: &ApiResponse| String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!((again.status, text(&again)), (201, text(&first)), "replayed");
    let replayed = again.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("Idempotent-Replayed"));
    assert_eq!(replayed.map(|(_, v)| v.as_str()), Some("1"));
    assert_eq!(projects(), 1, "one project per Idempotency-Key");
    let (status, reused) = w.sent(create("create-acme", r#"{"name":"other"}"#));
    assert_eq!((status, reused["error"]["code"].as_str()), (409, Some("IDEMPOTENCY_KEY_REUSED")));
    let (status, bad) = w.sent(create("a,b", body));
    assert_eq!((status, bad["error"]["details"]["header"].as_str()), (422, Some("Idempotency-Key")));

    // Executed twice for one operation: the same project and the same working owner key.
    assert_eq!(w.lost("POST", "/admin/v1/projects", ADMIN_TOKEN, "create-beta", r#"{"name":"beta"}"#), 201);
    let (status, beta) = w.sent(create("create-beta", r#"{"name":"beta"}"#));
    assert_eq!(status, 201, "{beta}");
    assert_eq!(projects(), 2);
    assert_eq!(w.gateway.store.directory.keys.borrow().len(), 2, "one owner key per project");
    let (status, me) = w.me(beta["owner_key"]["key"].as_str().unwrap());
    assert_eq!((status, me["project_id"].as_str()), (200, beta["project_id"].as_str()));

    // The owner-key route too.
    let path = format!("/admin/v1/projects/{}/owner-keys", beta["project_id"].as_str().unwrap());
    assert_eq!(w.lost("POST", &path, ADMIN_TOKEN, "owner-2", "{}"), 201);
    let (status, owner) = w.sent(w.request("POST", &path, ADMIN_TOKEN, Some("owner-2"), "{}"));
    assert_eq!(status, 201, "{owner}");
    assert_eq!(w.gateway.store.directory.keys.borrow().len(), 3, "one more owner key");
    assert_eq!(w.me(owner["key"].as_str().unwrap()).0, 200);
    let replay = w.answered(w.request("POST", &path, ADMIN_TOKEN, Some("owner-2"), "{}"));
    assert_eq!(serde_json::from_slice::<Value>(&replay.body).unwrap()["key"], owner["key"]);
}

/// SPEC §12.1: a plan change goes through every active key's guard first. One guard that cannot
/// be told fails the change with 503 and nothing changes in D1 (main wrote D1 first, answered 200
/// and left that key on the old limits for up to 10 minutes); reachable again, all are told.
#[test]
fn a_plan_change_tells_every_guard_first_and_changes_nothing_when_one_cannot_be_told() {
    let w = World::new(&[KeyType::Owner, KeyType::Server, KeyType::Browser]);
    let path = format!("/admin/v1/projects/{PROJECT}");
    let unreachable = w.gateway.store.directory.keys.borrow()[1].key_hash.clone();
    w.gateway.guard.unreachable.borrow_mut().insert(unreachable);
    let (status, body) = w.send("PATCH", &path, ADMIN_TOKEN, r#"{"plan":"pro"}"#);
    assert_eq!(status, 503, "{body}");
    let plans = || w.gateway.store.directory.keys.borrow().iter().map(|k| k.plan.clone()).collect::<Vec<_>>();
    assert_eq!(plans(), ["trial", "trial", "trial"], "nothing changed in D1");
    assert_eq!(w.gateway.store.directory.projects.borrow()[0].plan, "trial");
    let told = |n: usize| {
        let hash = w.gateway.store.directory.keys.borrow()[n].key_hash.clone();
        w.gateway.guard.applied.borrow().get(&hash).map(|(k, _)| k.plan.clone())
    };
    assert!(
        (0..3).all(|n| told(n).as_deref() != Some("pro")),
        "a guard told 'pro' was given its record back"
    );

    // The project's authority was told the new quota first and given the old one back.
    let authority = gatehouse_core::guard::protocol::project_authority(PROJECT);
    let quota = || w.gateway.guard.level_limits.borrow().get(&authority).map(|(l, _, _)| l.monthly_quota);
    assert_eq!(quota(), Some(w.gateway.config.project_limits("trial").monthly_quota));

    w.gateway.guard.unreachable.borrow_mut().clear();
    let (status, body) = w.send("PATCH", &path, ADMIN_TOKEN, r#"{"plan":"pro"}"#);
    assert_eq!((status, body["keys_told"].as_u64()), (200, Some(3)), "{body}");
    assert_eq!(plans(), ["pro", "pro", "pro"]);
    assert!((0..3).all(|n| told(n).as_deref() == Some("pro")));
    assert_eq!(quota(), Some(w.gateway.config.project_limits("pro").monthly_quota));

    // The authority cannot be told: 503 before any guard or D1 row changes.
    w.gateway.guard.unreachable.borrow_mut().insert(authority.clone());
    let (status, _) = w.send("PATCH", &path, ADMIN_TOKEN, r#"{"plan":"trial"}"#);
    assert_eq!(status, 503);
    assert_eq!(plans(), ["pro", "pro", "pro"]);
    assert!((0..3).all(|n| told(n).as_deref() == Some("pro")));
}

/// The fake guard keeps a record it read from D1 for 10 minutes, as the real guard does (it read
/// D1 on every call, so a change written to D1 without telling the guard looked immediate in every
/// test over the fakes): such a change shows only once the record is read again.
#[test]
fn a_change_written_to_d1_alone_reaches_the_guard_only_after_ten_minutes() {
    let w = World::new(&[KeyType::Owner]);
    let limit = |w: &World| w.me(&w.secrets[0]).1["rate_limit"]["limit"].as_u64();
    assert_eq!(limit(&w), Some(100_000));
    w.gateway.store.directory.keys.borrow_mut()[0].plan = "pro".into();
    assert_eq!(limit(&w), Some(100_000), "the guard still uses the record it read");
    w.clock.set(w.clock.get() + 600_001);
    assert_eq!(limit(&w), Some(200_000), "read again after 10 minutes");
}
