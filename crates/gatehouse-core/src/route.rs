//! The route table: every served (method, path template) pair, who may call it, and its body
//! limit. Matching is pure so that the router, the audit log (route templates) and the API
//! description all read the same table.

use super::api_key::Scope;
use super::error::ApiError;
use super::events::INGEST_BODY_LIMIT;
use super::idempotency::KeyPolicy;

/// Default body limit of SPEC §3.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteId {
    Health,
    DeepHealth,
    CreateProject,
    UpdateProject,
    /// The operator issues an owner key for a project (SPEC §19).
    CreateOwnerKey,
    /// The operator issues a key of any type for a project (the test kit's setup, SPEC §21).
    CreateProjectKey,
    Me,
    CreateKey,
    ListKeys,
    UpdateKey,
    RevokeKey,
    RollKey,
    /// Identities (SPEC §20): keys that share limits and a quota.
    CreateIdentity,
    ListIdentities,
    GetIdentity,
    UpdateIdentity,
    DeleteIdentity,
    CreateContact,
    ListContacts,
    GetContact,
    BulkContacts,
    CreateMessage,
    BulkMessages,
    CreateScenario,
    RunScenario,
    DeployMarker,
    Track,
    Identify,
    Alias,
    SessionSegment,
    ListLogs,
    ListEvents,
    ListArchives,
    GetArchive,
    GetLog,
    KeyStats,
    KeysLastUsed,
    ProjectStats,
    CreateWebhook,
    ListWebhooks,
    DeleteWebhook,
    UpdateWebhook,
    RotateWebhookSecret,
    WebhookPublicKey,
    RecoverDeliveries,
    ListDeliveries,
    RetryDelivery,
    /// The audit digests (SPEC §22).
    AuditPublicKey,
    /// The chain head, signed (SPEC §23), and the digests' health across projects.
    AuditHead,
    AuditHealth,
    ListAuditDigests,
    ListAuditObjects,
    AuditFile,
    /// Usage for billing (SPEC §22).
    Usage,
    UsageFile,
    /// The export runs of the usage view (SPEC §26).
    UsageRuns,
    ReconcileUsage,
    /// What a rotation of `KEY_PEPPER` or `WEBHOOK_SECRETS_KEY` has not reached yet (SPEC §26).
    KeysOnPreviousPepper,
    SecretsOnPreviousKey,
    /// A listener's long poll on a `cli` subscription, and its report of an attempt (SPEC §21).
    PullDeliveries,
    ReportDelivery,
    /// A sample event to the project's subscriptions (SPEC §21).
    TriggerEvent,
    ListDeadLetters,
    RedriveDeadLetters,
    /// An origin's event for a project's subscribers (SPEC §15).
    OriginEvent,
    /// A request under an `UPSTREAMS` prefix, forwarded to its origin (SPEC §15).
    Proxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No credentials.
    Public,
    /// `Authorization: Bearer $ADMIN_TOKEN`.
    Admin,
    /// `Authorization: Bearer $EVENTS_SECRET`: the provider's origin sending events (SPEC §15, §19).
    Origin,
    /// An API key whose type allows the scope.
    Key(Scope),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub id: RouteId,
    pub method: &'static str,
    pub template: &'static str,
    pub access: Access,
    pub body_limit: usize,
    pub idempotency: KeyPolicy,
    /// Callable from web pages on any origin (browser keys ingest from them): CORS headers and an
    /// `OPTIONS` preflight.
    pub cors: bool,
    /// The query parameters it takes; any other is refused like an unknown body field.
    pub query: &'static [&'static str],
}

impl Route {
    /// 400 `VALIDATION_ERROR` naming the first query parameter the route does not take, as an
    /// unknown field of a body is refused (a typo must not widen a list or change nothing
    /// silently). A proxied route's query is the origin's and is never checked.
    pub fn check_query(&self, query: &[(String, String)]) -> Result<(), ApiError> {
        let Some((name, _)) = query.iter().find(|(name, _)| !self.query.contains(&name.as_str())) else {
            return Ok(());
        };
        let expected = match self.query {
            [] => "this route takes no query parameters".to_owned(),
            names => format!("expected one of `{}`", names.join("`, `")),
        };
        Err(ApiError::bad_request(format!("Invalid query: unknown parameter `{name}`, {expected}"))
            .with_detail("field", name.as_str()))
    }
}

/// Idempotency is honoured on every mutating method of a route called with an API key or the
/// admin token (SPEC §5, §19: the operator's claims live in a guard of their own).
const fn route(id: RouteId, method: &'static str, template: &'static str, access: Access) -> Route {
    let mutating = matches!(method.as_bytes()[0], b'P' | b'D'); // POST, PUT, PATCH, DELETE
    let keyed = matches!(access, Access::Key(_) | Access::Admin);
    let idempotency = if mutating && keyed { KeyPolicy::Optional } else { KeyPolicy::Ignored };
    Route {
        id,
        method,
        template,
        access,
        body_limit: DEFAULT_BODY_LIMIT,
        idempotency,
        cors: false,
        query: &[],
    }
}

const fn with_query(mut r: Route, query: &'static [&'static str]) -> Route {
    r.query = query;
    r
}

/// A list's page (SPEC §3).
const PAGE: &[&str] = &["limit", "cursor"];

const fn required_key(mut r: Route, min: usize, max: usize) -> Route {
    r.idempotency = KeyPolicy::Required { min, max };
    r
}

/// Ingestion routes de-duplicate by `event_id` or chunk instead of `Idempotency-Key` (SPEC §5),
/// and take bodies up to 512 KiB.
const fn ingestion(id: RouteId, template: &'static str, scope: Scope) -> Route {
    let mut r = route(id, "POST", template, Access::Key(scope));
    r.idempotency = KeyPolicy::Ignored;
    r.body_limit = INGEST_BODY_LIMIT;
    r.cors = true;
    r
}

/// Origin events honour `Idempotency-Key` through their event id, not a key's guard (SPEC §15).
const fn origin_events() -> Route {
    let mut r = route(RouteId::OriginEvent, "POST", "/admin/v1/projects/{project_id}/events", Access::Origin);
    r.idempotency = KeyPolicy::Optional;
    r
}

const OWNER: Access = Access::Key(Scope::ManageProject);
const RESOURCES: Access = Access::Key(Scope::Resources);

pub const ROUTES: &[Route] = &[
    route(RouteId::Health, "GET", "/health", Access::Public),
    route(RouteId::DeepHealth, "GET", "/admin/v1/health", Access::Admin),
    route(RouteId::CreateProject, "POST", "/admin/v1/projects", Access::Admin),
    route(RouteId::UpdateProject, "PATCH", "/admin/v1/projects/{id}", Access::Admin),
    route(RouteId::CreateOwnerKey, "POST", "/admin/v1/projects/{id}/owner-keys", Access::Admin),
    route(RouteId::CreateProjectKey, "POST", "/admin/v1/projects/{id}/keys", Access::Admin),
    with_query(
        route(RouteId::ListDeadLetters, "GET", "/admin/v1/dead-letters", Access::Admin),
        &["queue", "limit", "cursor"],
    ),
    route(RouteId::RedriveDeadLetters, "POST", "/admin/v1/dead-letters/redrive", Access::Admin),
    with_query(
        route(RouteId::ReconcileUsage, "GET", "/admin/v1/usage/reconcile", Access::Admin),
        &["hour", "project_id"],
    ),
    route(RouteId::AuditHealth, "GET", "/admin/v1/audit/health", Access::Admin),
    with_query(
        route(RouteId::KeysOnPreviousPepper, "GET", "/admin/v1/keys/previous-pepper", Access::Admin),
        PAGE,
    ),
    with_query(
        route(RouteId::SecretsOnPreviousKey, "GET", "/admin/v1/webhooks/previous-secret-key", Access::Admin),
        PAGE,
    ),
    origin_events(),
    route(RouteId::Me, "GET", "/public/v1/me", Access::Key(Scope::SelfInfo)),
    route(RouteId::CreateKey, "POST", "/public/v1/keys", OWNER),
    with_query(route(RouteId::ListKeys, "GET", "/public/v1/keys", OWNER), PAGE),
    route(RouteId::KeysLastUsed, "GET", "/public/v1/keys/last-used", OWNER),
    with_query(route(RouteId::ProjectStats, "GET", "/public/v1/stats", OWNER), &["days", "endpoint"]),
    route(RouteId::UpdateKey, "PATCH", "/public/v1/keys/{id}", OWNER),
    route(RouteId::RevokeKey, "DELETE", "/public/v1/keys/{id}", OWNER),
    route(RouteId::RollKey, "POST", "/public/v1/keys/{id}/roll", OWNER),
    with_query(route(RouteId::KeyStats, "GET", "/public/v1/keys/{id}/stats", OWNER), &["days"]),
    route(RouteId::CreateIdentity, "POST", "/public/v1/identities", OWNER),
    with_query(route(RouteId::ListIdentities, "GET", "/public/v1/identities", OWNER), PAGE),
    route(RouteId::GetIdentity, "GET", "/public/v1/identities/{id}", OWNER),
    route(RouteId::UpdateIdentity, "PATCH", "/public/v1/identities/{id}", OWNER),
    route(RouteId::DeleteIdentity, "DELETE", "/public/v1/identities/{id}", OWNER),
    with_query(
        route(RouteId::ListLogs, "GET", "/public/v1/logs", OWNER),
        &[
            "method",
            "status",
            "path",
            "request_id",
            "key_id",
            "idempotency_key",
            "trace_id",
            "from",
            "to",
            "dashboard",
            "limit",
            "cursor",
        ],
    ),
    with_query(
        route(RouteId::ListEvents, "GET", "/public/v1/events", OWNER),
        &["from", "to", "event", "user_id", "anonymous_id", "limit", "cursor"],
    ),
    route(RouteId::ListArchives, "GET", "/public/v1/logs/archives", OWNER),
    route(RouteId::GetArchive, "GET", "/public/v1/logs/archives/{date}", OWNER),
    route(RouteId::GetLog, "GET", "/public/v1/logs/{request_id}", OWNER),
    with_query(
        route(RouteId::Usage, "GET", "/public/v1/usage", OWNER),
        &["from", "to", "group_by", "limit", "cursor"],
    ),
    with_query(route(RouteId::UsageFile, "GET", "/public/v1/usage/file", OWNER), &["key"]),
    with_query(route(RouteId::UsageRuns, "GET", "/public/v1/usage/runs", OWNER), &["from", "to"]),
    route(RouteId::AuditPublicKey, "GET", "/public/v1/audit/public-key", OWNER),
    route(RouteId::AuditHead, "GET", "/public/v1/audit/head", OWNER),
    with_query(route(RouteId::ListAuditDigests, "GET", "/public/v1/audit/digests", OWNER), &["from", "to"]),
    with_query(route(RouteId::ListAuditObjects, "GET", "/public/v1/audit/objects", OWNER), &["from", "to"]),
    with_query(route(RouteId::AuditFile, "GET", "/public/v1/audit/file", OWNER), &["key"]),
    route(RouteId::CreateWebhook, "POST", "/public/v1/webhooks", OWNER),
    route(RouteId::TriggerEvent, "POST", "/public/v1/webhooks/trigger", OWNER),
    with_query(route(RouteId::ListWebhooks, "GET", "/public/v1/webhooks", OWNER), PAGE),
    route(RouteId::DeleteWebhook, "DELETE", "/public/v1/webhooks/{id}", OWNER),
    route(RouteId::UpdateWebhook, "PATCH", "/public/v1/webhooks/{id}", OWNER),
    route(RouteId::RotateWebhookSecret, "POST", "/public/v1/webhooks/{id}/rotate-secret", OWNER),
    route(RouteId::WebhookPublicKey, "GET", "/public/v1/webhooks/{id}/public-key", OWNER),
    route(RouteId::RecoverDeliveries, "POST", "/public/v1/webhooks/{id}/recover", OWNER),
    with_query(
        route(RouteId::ListDeliveries, "GET", "/public/v1/webhooks/{id}/deliveries", OWNER),
        &["status", "limit", "cursor"],
    ),
    route(RouteId::RetryDelivery, "POST", "/public/v1/webhooks/deliveries/{id}/retry", OWNER),
    with_query(
        route(RouteId::PullDeliveries, "GET", "/public/v1/webhooks/{id}/pull", OWNER),
        &["wait", "resume"],
    ),
    route(RouteId::ReportDelivery, "POST", "/public/v1/webhooks/{id}/deliveries/{delivery_id}/report", OWNER),
    route(RouteId::CreateContact, "POST", "/public/v1/contacts", RESOURCES),
    with_query(route(RouteId::ListContacts, "GET", "/public/v1/contacts", RESOURCES), PAGE),
    route(RouteId::BulkContacts, "POST", "/public/v1/contacts/bulk", RESOURCES),
    route(RouteId::GetContact, "GET", "/public/v1/contacts/{id}", RESOURCES),
    route(RouteId::CreateMessage, "POST", "/public/v1/messages", RESOURCES),
    route(RouteId::BulkMessages, "POST", "/public/v1/messages/bulk", RESOURCES),
    route(RouteId::CreateScenario, "POST", "/public/v1/scenarios", RESOURCES),
    route(RouteId::RunScenario, "POST", "/public/v1/scenarios/{id}/run", RESOURCES),
    required_key(
        route(
            RouteId::DeployMarker,
            "POST",
            "/api/v1/projects/{project_id}/release-markers/deploy",
            Access::Key(Scope::ReleaseMarkers),
        ),
        8,
        128,
    ),
    // `?key=`: a browser key for a page's navigator.sendBeacon (SPEC §24).
    with_query(ingestion(RouteId::Track, "/v1/track", Scope::Ingest), &["key"]),
    ingestion(RouteId::Identify, "/v1/identify", Scope::Ingest),
    ingestion(RouteId::Alias, "/v1/alias", Scope::Alias),
    ingestion(RouteId::SessionSegment, "/v1/replay", Scope::Ingest),
];

/// A request matched to a route, with the values of its `{…}` segments in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched<'p> {
    pub route: &'static Route,
    pub params: Vec<&'p str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    NotFound,
    /// The path exists under other methods, listed for the `Allow` header.
    MethodNotAllowed(Vec<&'static str>),
}

/// The path and query of a request URL as the WHATWG URL parser (the `url` crate) reads them.
pub fn path_and_query(url: &str) -> Result<(String, Option<String>), url::ParseError> {
    if let Some((path, query)) = plain_path_and_query(url) {
        return Ok((path.to_owned(), query.map(str::to_owned)));
    }
    let url = url::Url::parse(url)?;
    Ok((url.path().to_owned(), url.query().map(str::to_owned)))
}

/// `scheme://host[:port]` of an absolute URL (the gateway's own origin as the client reached it);
/// empty for anything else.
pub fn origin_of(url: &str) -> &str {
    let Some((scheme, rest)) = url.split_once("://") else { return "" };
    let authority = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    &url[..scheme.len() + 3 + authority]
}

/// [`path_and_query`] by splitting, when the URL is plain (`scheme://authority/path?query` of
/// characters that parser keeps as they are, and no `.` or `..` segment, written or
/// percent-encoded, for it to resolve), or `None`: then it must be parsed. A full parse costs
/// about 40 µs of a request in the worker, a split next to nothing, and the runtime's request URLs
/// are nearly always plain.
fn plain_path_and_query(url: &str) -> Option<(&str, Option<&str>)> {
    let (_, rest) = url.split_once("://")?;
    let start = rest.find('/')?;
    let (authority, target) = rest.split_at(start);
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    let target_char = |c: char| c.is_ascii_alphanumeric() || "-._~!$&()*+,;=:@/?%".contains(c);
    if !authority.chars().all(host_char)
        || !target.chars().all(target_char)
        || target.to_ascii_lowercase().contains("%2e")
    {
        return None;
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    if path.split('/').any(|segment| segment == "." || segment == "..") {
        return None;
    }
    Some((path, query))
}

/// Whether `path` is a route web pages may call, so that an `OPTIONS` preflight is answered.
pub fn cors_path(path: &str) -> bool {
    ROUTES.iter().any(|r| r.cors && match_template(r.template, path).is_some())
}

/// Finds the route for `method` and `path` (no query string). A trailing slash is not the same path.
/// `HEAD` is served wherever `GET` is, by the `GET` route (RFC 9110 §9.3.2: same status and
/// headers, no body — the Workers runtime never sends a body in answer to a HEAD), so it is
/// authenticated, rate limited and audited (method `HEAD`) like any request; `Allow` lists it next
/// to `GET`.
pub fn match_route<'p>(method: &str, path: &'p str) -> Result<Matched<'p>, Miss> {
    // The path's resource is its most specific template: a literal segment wins over a parameter
    // (`/contacts/bulk` is not the contact `bulk`), so `Allow` lists that resource's methods only.
    let Some(template) = ROUTES
        .iter()
        .filter(|r| match_template(r.template, path).is_some())
        .map(|r| r.template)
        .max_by_key(|t| t.split('/').map(|s| !s.starts_with('{')).collect::<Vec<_>>())
    else {
        return Err(Miss::NotFound);
    };
    let params = match_template(template, path).unwrap_or_default();
    let mut allow = Vec::new();
    for route in ROUTES.iter().filter(|r| r.template == template) {
        if route.method == method || (method == "HEAD" && route.method == "GET") {
            return Ok(Matched { route, params });
        }
        allow.push(route.method);
        if route.method == "GET" {
            allow.push("HEAD");
        }
    }
    Err(Miss::MethodNotAllowed(allow))
}

fn match_template<'p>(template: &str, path: &'p str) -> Option<Vec<&'p str>> {
    let mut params = Vec::new();
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return Some(params),
            (Some(ts), Some(ps)) if ts.starts_with('{') => {
                if ps.is_empty() {
                    return None;
                }
                params.push(ps);
            }
            (Some(ts), Some(ps)) if ts == ps => {}
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever the split answers, it answers what the `url` crate does, over URLs made of the
    /// characters that matter to it (dots, slashes, percent signs, a backslash, spaces, `?`, `#`).
    #[test]
    fn a_plain_url_splits_as_the_url_parser_reads_it() {
        let alphabet: Vec<char> = "a/.?#%2eE\\ \"'<>{}|^`&=@:-_~é".chars().collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut split, mut total) = (0, 0);
        for _ in 0..20_000 {
            let len = next(12);
            let tail: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
            // In the authority too (no uppercase or non-ASCII there: the host's IDNA stub
            // asserts in debug builds that it was lowercased first).
            let authority_tail = tail.replace(['E', 'é'], "");
            for url in
                [format!("http://127.0.0.1:8787/{tail}"), format!("https://api.example.com{authority_tail}")]
            {
                let Ok(parsed) = url::Url::parse(&url) else { continue };
                total += 1;
                if let Some(found) = plain_path_and_query(&url) {
                    split += 1;
                    assert_eq!(found, (parsed.path(), parsed.query()), "{url}");
                }
                let read = path_and_query(&url).unwrap();
                assert_eq!((read.0.as_str(), read.1.as_deref()), (parsed.path(), parsed.query()), "{url}");
            }
        }
        // The test means something only if both ways are taken often.
        assert!(split > total / 10 && split < total, "{split} of {total} split");
        assert_eq!(
            plain_path_and_query("http://127.0.0.1:8787/public/v1/logs?status=4xx&limit=20"),
            Some(("/public/v1/logs", Some("status=4xx&limit=20")))
        );
        assert_eq!(plain_path_and_query("http://h/a/../admin"), None);
        assert_eq!(plain_path_and_query("http://h/a/%2E%2e/admin"), None);
        assert_eq!(path_and_query("http://h/a/%2E%2e/admin?x").unwrap(), ("/admin".into(), Some("x".into())));
    }

    #[test]
    fn matches_static_and_parameterised_routes() {
        let m = match_route("GET", "/public/v1/me").unwrap();
        assert_eq!(m.route.id, RouteId::Me);
        let m = match_route("DELETE", "/public/v1/keys/key_123").unwrap();
        assert_eq!((m.route.id, m.params), (RouteId::RevokeKey, vec!["key_123"]));
    }

    #[test]
    fn unknown_path_is_not_found_and_wrong_method_lists_allowed() {
        assert_eq!(match_route("GET", "/nope"), Err(Miss::NotFound));
        assert_eq!(match_route("GET", "/public/v1/keys/"), Err(Miss::NotFound));
        assert_eq!(match_route("GET", "/public/v1/me/"), Err(Miss::NotFound));
        assert_eq!(
            match_route("PUT", "/public/v1/keys"),
            Err(Miss::MethodNotAllowed(vec!["POST", "GET", "HEAD"]))
        );
        assert_eq!(match_route("HEAD", "/public/v1/contacts"), match_route("GET", "/public/v1/contacts"));
    }

    #[test]
    fn a_literal_segment_is_its_own_resource_for_every_method() {
        // `/contacts/bulk` only takes POST: GET is not the contact `bulk`, and Allow says so.
        assert_eq!(match_route("GET", "/public/v1/contacts/bulk"), Err(Miss::MethodNotAllowed(vec!["POST"])));
        assert_eq!(match_route("PUT", "/public/v1/contacts/bulk"), Err(Miss::MethodNotAllowed(vec!["POST"])));
        assert_eq!(match_route("POST", "/public/v1/messages/x"), Err(Miss::NotFound));
        // `/logs/archives` is listed once, not also as the log entry `archives`.
        assert_eq!(
            match_route("DELETE", "/public/v1/logs/archives"),
            Err(Miss::MethodNotAllowed(vec!["GET", "HEAD"]))
        );
        assert_eq!(match_route("GET", "/public/v1/logs/archives").unwrap().route.id, RouteId::ListArchives);
        assert_eq!(match_route("GET", "/public/v1/logs/req_1").unwrap().route.id, RouteId::GetLog);
        assert_eq!(
            match_route("POST", "/public/v1/webhooks/deliveries/d_1/retry").unwrap().params,
            vec!["d_1"]
        );
    }

    #[test]
    fn head_is_served_wherever_get_is_and_nowhere_else() {
        for route in ROUTES {
            let path =
                route.template.replace("{id}", "x").replace("{request_id}", "x").replace("{date}", "x");
            let path = path.replace("{project_id}", "x");
            match (route.method, match_route("HEAD", &path)) {
                ("GET", Ok(m)) => assert_eq!((m.route.method, m.route.template), ("GET", route.template)),
                ("GET", Err(miss)) => panic!("HEAD {path}: {miss:?}"),
                (_, head) => assert!(
                    head.as_ref().is_ok_and(|m| m.route.method == "GET")
                        || matches!(&head, Err(Miss::MethodNotAllowed(allow)) if !allow.contains(&"HEAD")),
                    "HEAD {path}: {head:?}"
                ),
            }
        }
        let Err(Miss::MethodNotAllowed(allow)) = match_route("HEAD", "/v1/track") else { panic!() };
        assert_eq!(allow, ["POST"]);
    }

    #[test]
    fn idempotency_applies_to_mutations_by_api_keys_and_the_operator() {
        let policy = |m, p| match_route(m, p).unwrap().route.idempotency;
        assert_eq!(policy("POST", "/public/v1/contacts"), KeyPolicy::Optional);
        assert_eq!(policy("DELETE", "/public/v1/keys/k"), KeyPolicy::Optional);
        assert_eq!(policy("GET", "/public/v1/contacts"), KeyPolicy::Ignored);
        assert_eq!(policy("POST", "/admin/v1/projects"), KeyPolicy::Optional);
        assert_eq!(policy("POST", "/admin/v1/projects/p/owner-keys"), KeyPolicy::Optional);
        assert_eq!(policy("POST", "/admin/v1/projects/p/keys"), KeyPolicy::Optional);
        assert_eq!(policy("GET", "/admin/v1/health"), KeyPolicy::Ignored);
        assert_eq!(policy("POST", "/v1/track"), KeyPolicy::Ignored);
        assert_eq!(match_route("POST", "/v1/track").unwrap().route.body_limit, 512 * 1024);
        assert_eq!(
            policy("POST", "/api/v1/projects/p/release-markers/deploy"),
            KeyPolicy::Required { min: 8, max: 128 }
        );
        // A literal segment wins over a parameter registered after it.
        assert_eq!(match_route("POST", "/public/v1/contacts/bulk").unwrap().route.id, RouteId::BulkContacts);
        assert_eq!(match_route("GET", "/public/v1/contacts/c_1").unwrap().route.id, RouteId::GetContact);
    }

    /// `public/openapi.json` (made by `scripts/openapi.mjs`) documents every served route and
    /// nothing else.
    #[test]
    fn the_api_description_matches_the_router() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../public/openapi.json")).unwrap();
        let mut documented: Vec<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, ops)| {
                ops.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let mut served: Vec<(String, String)> =
            ROUTES.iter().map(|r| (r.method.to_owned(), r.template.to_owned())).collect();
        documented.sort();
        served.sort();
        assert_eq!(documented, served);
    }

    /// Each route's query parameters are the ones `public/openapi.json` documents for it.
    #[test]
    fn the_api_description_documents_each_routes_query_parameters() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../public/openapi.json")).unwrap();
        for r in ROUTES {
            let op = &doc["paths"][r.template][r.method.to_lowercase()];
            let documented: Vec<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter().filter(|p| p["in"] == "query").filter_map(|p| p["name"].as_str()).collect()
                })
                .unwrap_or_default();
            assert_eq!(documented, r.query, "{} {}", r.method, r.template);
        }
    }

    /// The `Gatehouse-Budget` header is documented on exactly the routes that take it.
    #[test]
    fn the_api_description_documents_the_budget_header_where_the_router_takes_it() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../public/openapi.json")).unwrap();
        for r in ROUTES {
            let op = &doc["paths"][r.template][r.method.to_lowercase()];
            let documented = op["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["$ref"] == "#/components/parameters/GatehouseBudget"));
            assert_eq!(documented, r.id.is_dashboard_read(), "{} {}", r.method, r.template);
            if documented {
                assert!(
                    op["responses"]["403"].is_object(),
                    "{} {}: 403 for other key types",
                    r.method,
                    r.template
                );
            }
        }
    }

    /// An unknown query parameter is refused as an unknown body field is (it was ignored, so
    /// `GET /public/v1/contacts?email=x` listed every contact: fails on main before this commit).
    #[test]
    fn an_unknown_query_parameter_is_400_naming_it() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let contacts = match_route("GET", "/public/v1/contacts").unwrap().route;
        let e = contacts.check_query(&q(&[("limit", "5"), ("email", "x")])).unwrap_err();
        assert_eq!(
            (e.status(), e.code.as_str(), e.details["field"].as_str()),
            (400, "VALIDATION_ERROR", Some("email"))
        );
        assert!(e.message.contains("`email`") && e.message.contains("`limit`, `cursor`"), "{}", e.message);
        assert!(contacts.check_query(&q(&[("limit", "5"), ("cursor", "")])).is_ok());
        let me = match_route("GET", "/public/v1/me").unwrap().route;
        assert!(me.check_query(&q(&[("note", "x")])).unwrap_err().message.contains("takes no query"));
        assert!(me.check_query(&[]).is_ok());
        // Names are exact: `Limit` is not `limit`.
        assert!(contacts.check_query(&q(&[("Limit", "5")])).is_err());
    }

    #[test]
    fn only_ingestion_is_open_to_web_pages() {
        assert!(cors_path("/v1/track") && cors_path("/v1/identify") && cors_path("/v1/replay"));
        assert!(!cors_path("/public/v1/keys") && !cors_path("/admin/v1/projects") && !cors_path("/nope"));
    }

    #[test]
    fn templates_are_unique_per_method() {
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!(!(a.method == b.method && a.template == b.template), "{} {}", a.method, a.template);
            }
        }
    }

    #[test]
    fn the_origin_of_a_url_is_its_scheme_and_authority() {
        assert_eq!(origin_of("https://api.example.com/public/v1/me?x=1"), "https://api.example.com");
        assert_eq!(origin_of("http://127.0.0.1:8787/health"), "http://127.0.0.1:8787");
        assert_eq!(origin_of("http://[::1]:8787?q"), "http://[::1]:8787");
        assert_eq!(origin_of("https://h"), "https://h");
        assert_eq!(origin_of("/relative"), "");
    }
}
