//! Proxy mode (SPEC §15): the `UPSTREAMS` routes, their validation against the built-in routes,
//! longest-prefix matching, the headers a forwarded request and its answer keep, and the
//! `X-Gatehouse-Signature` an origin checks to refuse requests that did not come through us.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::api_key::{KeyType, KeyTypes, Scope};
use super::encoding::hex;
use super::idempotency::KeyPolicy;
use super::route::{Access, Route, RouteId, DEFAULT_BODY_LIMIT, ROUTES};
use super::trace::TraceContext;

/// A 2xx origin answer up to this size is kept for idempotent replay; a larger one is answered
/// but not kept (SPEC §15).
pub const STORED_ANSWER_LIMIT: usize = 1 << 20;
/// The route template of an upstream in the audit log and the key statistics: `{prefix}*`.
pub const TEMPLATE_SUFFIX: &str = "*";
/// Paths the platform or the static assets own: no prefix may start with them.
const RESERVED: [&str; 4] = ["/cdn-cgi/", "/dashboard", "/openapi.json", "/vendor/"];
/// Workers cannot wait longer than this for a subrequest's answer anyway.
const MAX_TIMEOUT_MS: u64 = 300_000;
/// The platform's request body limit (100 MB on the paid plans).
const MAX_BODY_BYTES: usize = 100_000_000;
/// A proxied body up to this size is held and its SHA-256 signed; a larger one streams to the
/// origin unheld and is signed as [`UNSIGNED_PAYLOAD`] (SPEC §19 "Memory").
pub const SIGNED_BODY_LIMIT: usize = 1 << 20;
/// The body hash of a streamed body (as AWS Signature Version 4 names it): the origin sees that
/// the body is not covered and may refuse it.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// The version tag of the signed text and of `X-Gatehouse-Signature`.
pub const SIGNATURE_VERSION: &str = "v2";

/// Where a proxied route forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginTarget {
    /// An `http(s)` base URL without a trailing slash; the request's path and query follow it.
    Url(String),
    /// A Workers service binding (`"service:BINDING"`); the URL's host is never resolved.
    Service(String),
}

/// What the idempotency of an upstream asks (`optional` | `required` | `off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamIdempotency {
    Optional,
    Required,
    Off,
}

/// One parsed `UPSTREAMS` entry, with the two routes the pipeline runs it as: `reads` for GET,
/// HEAD and OPTIONS (the header is ignored there, SPEC §5) and `writes` for every other method
/// (the configured policy). Both are made once per isolate and live as long as it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub prefix: String,
    pub origin: OriginTarget,
    pub key_types: Vec<KeyType>,
    pub idempotency: UpstreamIdempotency,
    pub cost: u32,
    pub timeout_ms: u64,
    pub max_body_bytes: usize,
    pub reads: &'static Route,
    pub writes: &'static Route,
}

impl Upstream {
    /// The route a request of `method` runs as.
    pub fn route(&self, method: &str) -> &'static Route {
        if matches!(method, "GET" | "HEAD" | "OPTIONS") {
            self.reads
        } else {
            self.writes
        }
    }

    /// The URL a request for `path_and_query` goes to (`Service`: any host, the binding routes it).
    pub fn url(&self, path_and_query: &str) -> String {
        match &self.origin {
            OriginTarget::Url(base) => format!("{base}{path_and_query}"),
            OriginTarget::Service(_) => format!("https://origin{path_and_query}"),
        }
    }

    /// The path and query the origin receives for `path_and_query`: the origin's base path
    /// (`https://api.example/base` → `/base`) in front. This is what the signature covers.
    pub fn origin_path(&self, path_and_query: &str) -> String {
        match &self.origin {
            OriginTarget::Url(base) => {
                let after_scheme = base.split_once("://").map_or(base.as_str(), |(_, rest)| rest);
                let base_path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
                format!("{base_path}{path_and_query}")
            }
            OriginTarget::Service(_) => path_and_query.to_owned(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpstreamSpec {
    prefix: String,
    origin: String,
    #[serde(default = "default_key_types")]
    key_types: Vec<String>,
    #[serde(default = "default_idempotency")]
    idempotency: UpstreamIdempotency,
    #[serde(default = "one")]
    cost: u32,
    #[serde(default = "default_timeout")]
    timeout_ms: u64,
    #[serde(default = "default_body")]
    max_body_bytes: usize,
}

fn default_key_types() -> Vec<String> {
    vec!["server".into(), "owner".into()]
}
fn default_idempotency() -> UpstreamIdempotency {
    UpstreamIdempotency::Optional
}
fn one() -> u32 {
    1
}
fn default_timeout() -> u64 {
    30_000
}
fn default_body() -> usize {
    DEFAULT_BODY_LIMIT
}

/// Parses and checks `UPSTREAMS`; the error names the entry and what is wrong with it. The routes
/// come out longest prefix first, so the first match is the longest.
pub fn parse_upstreams(json: &str) -> Result<Vec<Upstream>, String> {
    let specs: Vec<UpstreamSpec> =
        serde_json::from_str(json).map_err(|e| format!("UPSTREAMS is not a JSON array of routes: {e}"))?;
    let mut upstreams = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let upstream = check(spec).map_err(|why| format!("UPSTREAMS[{i}]: {why}"))?;
        if upstreams.iter().any(|u: &Upstream| u.prefix == upstream.prefix) {
            return Err(format!("UPSTREAMS[{i}]: prefix {:?} is listed twice", upstream.prefix));
        }
        upstreams.push(upstream);
    }
    upstreams.sort_by_key(|u| std::cmp::Reverse(u.prefix.len()));
    Ok(upstreams)
}

fn check(spec: UpstreamSpec) -> Result<Upstream, String> {
    let prefix = spec.prefix;
    check_prefix(&prefix)?;
    let origin = parse_origin(&spec.origin)?;
    let mut key_types = Vec::new();
    for name in &spec.key_types {
        let t = KeyType::parse(name)
            .ok_or_else(|| format!("key type {name:?} is not one of owner, server, browser, cicd"))?;
        if !key_types.contains(&t) {
            key_types.push(t);
        }
    }
    if key_types.is_empty() {
        return Err("key_types must name at least one key type".into());
    }
    if spec.cost == 0 {
        return Err("cost must be at least 1".into());
    }
    if !(1..=MAX_TIMEOUT_MS).contains(&spec.timeout_ms) {
        return Err(format!("timeout_ms must be 1 to {MAX_TIMEOUT_MS}"));
    }
    if !(1..=MAX_BODY_BYTES).contains(&spec.max_body_bytes) {
        return Err(format!("max_body_bytes must be 1 to {MAX_BODY_BYTES}"));
    }
    let scope = Scope::Upstream { key_types: KeyTypes::of(&key_types), cost: spec.cost };
    // Leaked once per isolate (the configuration is parsed once), so routes stay `&'static`.
    let template: &'static str = Box::leak(format!("{prefix}{TEMPLATE_SUFFIX}").into_boxed_str());
    let route = |idempotency| -> &'static Route {
        Box::leak(Box::new(Route {
            id: RouteId::Proxy,
            method: "*",
            template,
            access: Access::Key(scope),
            body_limit: spec.max_body_bytes,
            idempotency,
            cors: false,
            // The query is the origin's: passed through, never checked.
            query: &[],
        }))
    };
    let policy = match spec.idempotency {
        UpstreamIdempotency::Optional => KeyPolicy::Optional,
        UpstreamIdempotency::Required => KeyPolicy::Required { min: 1, max: 255 },
        UpstreamIdempotency::Off => KeyPolicy::Ignored,
    };
    Ok(Upstream {
        reads: route(KeyPolicy::Ignored),
        writes: route(policy),
        prefix,
        origin,
        key_types,
        idempotency: spec.idempotency,
        cost: spec.cost,
        timeout_ms: spec.timeout_ms,
        max_body_bytes: spec.max_body_bytes,
    })
}

fn check_prefix(prefix: &str) -> Result<(), String> {
    let shape = |why: &str| Err(format!("prefix {prefix:?} {why}"));
    if !prefix.starts_with('/') || !prefix.ends_with('/') || prefix.len() < 3 {
        return shape("must start and end with / and name at least one segment (e.g. \"/shop/v1/\")");
    }
    if prefix.len() > 200 {
        return shape("is longer than 200 characters");
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"/-._~".contains(&b);
    if !prefix.bytes().all(allowed) {
        return shape("may hold only letters, digits, / - . _ ~");
    }
    let segments: Vec<&str> = prefix[1..prefix.len() - 1].split('/').collect();
    if segments.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return shape("has an empty, . or .. segment");
    }
    if let Some(reserved) = RESERVED.iter().find(|r| prefix.starts_with(*r) || r.starts_with(prefix)) {
        return shape(&format!("overlaps {reserved}, which the gateway serves itself"));
    }
    if let Some(route) = ROUTES.iter().find(|r| overlaps(&segments, r.template)) {
        return shape(&format!("overlaps the built-in route {} {}", route.method, route.template));
    }
    Ok(())
}

/// Whether some path under the prefix (its `segments`, then at least one more) could match
/// `template`.
fn overlaps(segments: &[&str], template: &str) -> bool {
    let t: Vec<&str> = template[1..].split('/').collect();
    t.len() > segments.len() && segments.iter().zip(&t).all(|(s, t)| t.starts_with('{') || s == t)
}

/// An origin as an error may show it (SPEC §26: a broken configuration's message is public on
/// `/health`): its scheme, host and path, never credentials, a query or a fragment (a token).
fn shown(raw: &str) -> String {
    let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let rest = match rest.split_once('/') {
        Some((authority, path)) => format!("{}/{path}", authority.rsplit('@').next().unwrap_or_default()),
        None => rest.rsplit('@').next().unwrap_or_default().to_owned(),
    };
    let shown = if scheme.is_empty() { rest } else { format!("{scheme}://{rest}") };
    let hidden = raw.contains(['?', '#', '@']);
    format!(
        "{}{}",
        shown.chars().take(80).collect::<String>(),
        if hidden { " (credentials, query or fragment not shown)" } else { "" }
    )
}

fn parse_origin(raw: &str) -> Result<OriginTarget, String> {
    let raw_shown = shown(raw);
    if let Some(binding) = raw.strip_prefix("service:") {
        let ok = !binding.is_empty() && binding.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        return if ok {
            Ok(OriginTarget::Service(binding.to_owned()))
        } else {
            Err(format!(
                "origin {raw_shown:?}: a service binding is named service:BINDING (letters, digits, _)"
            ))
        };
    }
    let url = url::Url::parse(raw).map_err(|e| format!("origin {raw_shown:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("origin {raw_shown:?} must be an http or https URL (or service:BINDING)"));
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(format!("origin {raw_shown:?} may not carry a query, a fragment or credentials"));
    }
    Ok(OriginTarget::Url(url.as_str().trim_end_matches('/').to_owned()))
}

/// The upstream whose prefix is the longest one `path` starts with (`upstreams` as parsed:
/// longest first).
pub fn match_upstream<'u>(upstreams: &'u [Upstream], path: &str) -> Option<&'u Upstream> {
    upstreams.iter().find(|u| path.starts_with(&u.prefix))
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded in either direction.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers the answer gets from us, so the origin's copies are dropped (ours win, SPEC §15).
const OURS: [&str; 10] = [
    "x-request-id",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "idempotent-replayed",
    "idempotency-replayed",
    "x-original-request-id",
];

fn hop_by_hop(name: &str, listed_in_connection: &[String]) -> bool {
    HOP_BY_HOP.contains(&name) || listed_in_connection.iter().any(|c| c == name)
}

fn connection_tokens(headers: &[(String, String)]) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .flat_map(|(_, v)| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect()
}

/// The end-to-end headers (not hop-by-hop, nor named in `Connection`: RFC 9110 §7.6.1) whose
/// lowercase name `dropped` does not refuse.
fn end_to_end<'h>(
    headers: &'h [(String, String)],
    dropped: impl Fn(&str) -> bool + 'h,
) -> impl Iterator<Item = &'h (String, String)> + 'h {
    let listed = connection_tokens(headers);
    headers.iter().filter(move |(name, _)| {
        let n = name.to_ascii_lowercase();
        !(hop_by_hop(&n, &listed) || dropped(&n))
    })
}

/// Headers in which a client could claim another client address; the origin receives ours
/// instead (`X-Forwarded-For` and the signed `X-Gatehouse-Client-Ip`).
const CLIENT_ADDRESS: [&str; 4] = ["forwarded", "x-real-ip", "true-client-ip", "x-client-ip"];

/// The client's headers the origin receives: all but `Authorization`, hop-by-hop headers, any
/// `X-Gatehouse-*` (the identity headers are ours alone), the client's `X-Request-Id`, `Host`,
/// `Content-Length` (the runtime sets it), the platform's `cf-*` headers, and every header in which
/// the client could name an address or a host for itself (`Forwarded`, `X-Forwarded-*`,
/// `X-Real-IP`, `True-Client-IP`, `X-Client-IP`). The trace context is the request's own
/// (SPEC §25): `traceparent` names Gatehouse's span as the parent, and `tracestate` is the
/// client's only when its `traceparent` was valid.
pub fn forwarded_request_headers(
    headers: &[(String, String)],
    trace: &TraceContext,
) -> Vec<(String, String)> {
    let mut forwarded: Vec<(String, String)> = end_to_end(headers, |n| {
        matches!(
            n,
            "authorization"
                | "host"
                | "content-length"
                | "expect"
                | "x-request-id"
                | "traceparent"
                | "tracestate"
        ) || n.starts_with("x-gatehouse-")
            || n.starts_with("cf-")
            || n.starts_with("x-forwarded-")
            || CLIENT_ADDRESS.contains(&n)
    })
    .cloned()
    .collect();
    forwarded.push(("traceparent".into(), trace.traceparent()));
    forwarded.extend(trace.tracestate.clone().map(|state| ("tracestate".into(), state)));
    forwarded
}

/// The origin's headers the client receives, names lowercase: all but hop-by-hop ones, the ones
/// we set ourselves, and `Content-Length`/`Content-Encoding` (the runtime hands us the decoded
/// body and frames it).
pub fn answered_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    end_to_end(headers, |n| OURS.contains(&n) || n == "content-length" || n == "content-encoding")
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// The body a signature covers: held (its SHA-256 is signed) or streamed ([`UNSIGNED_PAYLOAD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedBody<'a> {
    Held(&'a [u8]),
    Streamed,
}

impl SignedBody<'_> {
    /// Hex SHA-256 of a held body, `UNSIGNED-PAYLOAD` for a streamed one.
    pub fn hash(&self) -> String {
        match self {
            SignedBody::Held(bytes) => hex(&Sha256::digest(bytes)),
            SignedBody::Streamed => UNSIGNED_PAYLOAD.to_owned(),
        }
    }
}

/// What `X-Gatehouse-Signature` signs: one forwarded request as the origin receives it, and every
/// identity header it receives with it (SPEC §19 "Contract details").
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub timestamp: i64,
    pub method: &'a str,
    /// The path and query exactly as the origin receives them, its base path included
    /// (`/base/shop/v1/orders?limit=2`): [`Upstream::origin_path`].
    pub path_and_query: &'a str,
    pub request_id: &'a str,
    pub project_id: &'a str,
    pub key_id: &'a str,
    pub key_type: KeyType,
    /// The client's address as the platform saw it (`CF-Connecting-IP`); empty when unknown.
    pub client_ip: &'a str,
    pub body: SignedBody<'a>,
}

impl SignedRequest<'_> {
    /// The lines `v2`, timestamp, method, path and query, request id, project id, key id, key
    /// type, client address and body hash, joined by `\n` (no field can hold a line break, so
    /// no two requests share a text).
    pub fn signed_text(&self) -> String {
        [
            SIGNATURE_VERSION,
            &self.timestamp.to_string(),
            self.method,
            self.path_and_query,
            self.request_id,
            self.project_id,
            self.key_id,
            self.key_type.as_str(),
            self.client_ip,
            &self.body.hash(),
        ]
        .join("\n")
    }

    /// `v2=<hex HMAC-SHA256(ORIGIN_SECRET, signed text)>`.
    pub fn signature(&self, origin_secret: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(origin_secret).expect("HMAC takes any key length");
        mac.update(self.signed_text().as_bytes());
        format!("{SIGNATURE_VERSION}={}", hex(&mac.finalize().into_bytes()))
    }
}

/// The identity headers the origin receives with every forwarded request (SPEC §15), each one
/// covered by the signature; `X-Forwarded-For` is the client address alone (the client's own
/// copies are dropped by [`forwarded_request_headers`]).
pub fn identity_headers(signed: &SignedRequest<'_>, origin_secret: &[u8]) -> Vec<(String, String)> {
    let mut headers = vec![
        ("x-request-id".into(), signed.request_id.to_owned()),
        ("x-gatehouse-project-id".into(), signed.project_id.to_owned()),
        ("x-gatehouse-key-id".into(), signed.key_id.to_owned()),
        ("x-gatehouse-key-type".into(), signed.key_type.as_str().to_owned()),
        ("x-gatehouse-client-ip".into(), signed.client_ip.to_owned()),
        ("x-gatehouse-timestamp".into(), signed.timestamp.to_string()),
        ("x-gatehouse-content-sha256".into(), signed.body.hash()),
        ("x-gatehouse-signature".into(), signed.signature(origin_secret)),
    ];
    if !signed.client_ip.is_empty() {
        headers.push(("x-forwarded-for".into(), signed.client_ip.to_owned()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<Upstream>, String> {
        parse_upstreams(json)
    }

    /// SPEC §26: the message of a broken `UPSTREAMS` is public on `/health`; a token in an
    /// origin's credentials, query or fragment never appears in it.
    #[test]
    fn an_origin_error_shows_no_credentials_query_or_fragment() {
        for origin in [
            "https://user:TOKEN@api.example.com/v1",
            "https://api.example.com/v1?key=TOKEN",
            "ftp://TOKEN@x/?TOKEN",
            "https://x/#TOKEN",
            "not a url TOKEN@x",
        ] {
            let entry = format!(r#"[{{"prefix":"/a/","origin":"{origin}"}}]"#);
            let e = parse_upstreams(&entry).unwrap_err();
            assert!(!e.contains("TOKEN"), "{e}");
        }
        let e = parse_upstreams(r#"[{"prefix":"/a/","origin":"https://user:TOKEN@api.example.com/v1"}]"#)
            .unwrap_err();
        assert!(e.contains("https://api.example.com/v1 (credentials, query or fragment not shown)"), "{e}");
    }

    #[test]
    fn parses_a_route_with_the_defaults_of_spec_section_15() {
        let u = &parse(r#"[{"prefix":"/shop/v1/","origin":"http://127.0.0.1:9000/"}]"#).unwrap()[0];
        assert_eq!(u.origin, OriginTarget::Url("http://127.0.0.1:9000".into()));
        assert_eq!(u.key_types, [KeyType::Server, KeyType::Owner]);
        assert_eq!(
            (u.idempotency, u.cost, u.timeout_ms, u.max_body_bytes),
            (UpstreamIdempotency::Optional, 1, 30_000, 1 << 20)
        );
        assert_eq!(u.route("POST").template, "/shop/v1/*");
        assert_eq!(u.route("POST").idempotency, KeyPolicy::Optional);
        assert_eq!(u.route("GET").idempotency, KeyPolicy::Ignored);
        assert_eq!(u.url("/shop/v1/orders?x=1"), "http://127.0.0.1:9000/shop/v1/orders?x=1");
        let s = &parse(r#"[{"prefix":"/b/","origin":"service:BILLING","idempotency":"required","cost":5}]"#)
            .unwrap()[0];
        assert_eq!(s.origin, OriginTarget::Service("BILLING".into()));
        assert_eq!(s.route("PATCH").idempotency, KeyPolicy::Required { min: 1, max: 255 });
        assert_eq!(
            s.route("PATCH").access,
            Access::Key(Scope::Upstream {
                key_types: KeyTypes::of(&[KeyType::Server, KeyType::Owner]),
                cost: 5
            })
        );
    }

    #[test]
    fn the_longest_prefix_wins() {
        let ups = parse(
            r#"[{"prefix":"/shop/","origin":"https://a.example"},{"prefix":"/shop/v2/","origin":"https://b.example"}]"#,
        )
        .unwrap();
        assert_eq!(match_upstream(&ups, "/shop/v2/orders").unwrap().prefix, "/shop/v2/");
        assert_eq!(match_upstream(&ups, "/shop/v1/orders").unwrap().prefix, "/shop/");
        assert!(match_upstream(&ups, "/shop").is_none() && match_upstream(&ups, "/other/").is_none());
    }

    #[test]
    fn refuses_prefixes_that_overlap_built_in_routes_or_assets() {
        for prefix in [
            "/",
            "/public/",
            "/public/v1/",
            "/v1/",
            "/api/",
            "/api/v1/projects/p/",
            "/admin/",
            "/dashboard/",
            "/cdn-cgi/x/",
        ] {
            let e = parse(&format!(r#"[{{"prefix":"{prefix}","origin":"https://a.example"}}]"#)).unwrap_err();
            assert!(e.contains("overlaps") || e.contains("must start"), "{prefix}: {e}");
        }
        // Beside the built-in routes, not under them.
        assert!(parse(r#"[{"prefix":"/v2/","origin":"https://a.example"}]"#).is_ok());
        assert!(parse(r#"[{"prefix":"/public/v2/","origin":"https://a.example"}]"#).is_ok());
        assert!(parse(r#"[{"prefix":"/health/x/","origin":"https://a.example"}]"#).is_ok());
    }

    #[test]
    fn bad_entries_are_named_with_what_is_wrong() {
        let cases = [
            (r#"{"prefix":"shop/","origin":"https://a.example"}"#, "must start"),
            (r#"{"prefix":"/shop","origin":"https://a.example"}"#, "must start"),
            (r#"{"prefix":"/s//x/","origin":"https://a.example"}"#, "empty"),
            (r#"{"prefix":"/s/../","origin":"https://a.example"}"#, ".."),
            (r#"{"prefix":"/s*/","origin":"https://a.example"}"#, "may hold only"),
            (r#"{"prefix":"/s/","origin":"ftp://a.example"}"#, "http or https"),
            (r#"{"prefix":"/s/","origin":"not a url"}"#, "not a URL"),
            (r#"{"prefix":"/s/","origin":"https://a.example/?q=1"}"#, "query"),
            (r#"{"prefix":"/s/","origin":"service:"}"#, "service:BINDING"),
            (r#"{"prefix":"/s/","origin":"https://a.example","key_types":["admin"]}"#, "admin"),
            (r#"{"prefix":"/s/","origin":"https://a.example","key_types":[]}"#, "at least one"),
            (r#"{"prefix":"/s/","origin":"https://a.example","cost":0}"#, "cost"),
            (r#"{"prefix":"/s/","origin":"https://a.example","timeout_ms":0}"#, "timeout_ms"),
            (r#"{"prefix":"/s/","origin":"https://a.example","max_body_bytes":0}"#, "max_body_bytes"),
            (r#"{"prefix":"/s/","origin":"https://a.example","idempotency":"sometimes"}"#, "sometimes"),
            (r#"{"prefix":"/s/","origin":"https://a.example","retries":3}"#, "retries"),
        ];
        for (entry, expected) in cases {
            let e = parse(&format!("[{entry}]")).unwrap_err();
            assert!(e.contains("UPSTREAMS") && e.contains(expected), "{entry}: {e}");
        }
        let twice = r#"[{"prefix":"/s/","origin":"https://a.example"},{"prefix":"/s/","origin":"https://b.example"}]"#;
        assert!(parse(twice).unwrap_err().contains("listed twice"));
        assert!(parse("{}").unwrap_err().contains("JSON array"));
        assert_eq!(parse("[]").unwrap(), Vec::new());
    }

    #[test]
    fn the_origin_never_sees_credentials_hop_by_hop_or_spoofed_identity_headers() {
        let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        let incoming = h(&[
            ("Authorization", "Bearer gh_s_secret"),
            ("Connection", "keep-alive, X-Custom-Hop"),
            ("X-Custom-Hop", "1"),
            ("Transfer-Encoding", "chunked"),
            ("X-Gatehouse-Project-Id", "prj_spoofed"),
            ("x-gatehouse-signature", "v1=forged"),
            ("X-Request-Id", "client-chosen"),
            ("CF-Connecting-IP", "203.0.113.9"),
            ("Content-Type", "application/json"),
            ("Idempotency-Key", "k1"),
            ("Expect", "100-continue"),
            ("X-Trace", "abc"),
        ]);
        let client_trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let trace = TraceContext::of(Some(client_trace), Some("congo=t61rcWkgMzE"), [7; 24]);
        assert_eq!(
            forwarded_request_headers(&incoming, &trace),
            h(&[
                ("Content-Type", "application/json"),
                ("Idempotency-Key", "k1"),
                ("X-Trace", "abc"),
                ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-0707070707070707-01"),
                ("tracestate", "congo=t61rcWkgMzE"),
            ])
        );
        // The client's own trace headers never reach the origin as they came.
        let mut traced = incoming.clone();
        traced.extend(h(&[("TraceParent", client_trace), ("tracestate", "congo=t61rcWkgMzE")]));
        let forwarded = forwarded_request_headers(&traced, &trace);
        let named = |n: &str| forwarded.iter().filter(|(k, _)| k.eq_ignore_ascii_case(n)).count();
        assert_eq!((named("traceparent"), named("tracestate")), (1, 1));
        let answered = h(&[
            ("Content-Type", "text/plain"),
            ("X-RateLimit-Remaining", "999"),
            ("X-Request-Id", "origin-id"),
            ("Keep-Alive", "timeout=5"),
            ("Content-Length", "12"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
        ]);
        assert_eq!(
            answered_headers(&answered),
            h(&[("content-type", "text/plain"), ("set-cookie", "a=1"), ("set-cookie", "b=2")])
        );
    }

    /// What the verifier of docs/api/proxy.md does, over the headers and request line the origin receives.
    fn origin_verifies(
        headers: &[(String, String)],
        method: &str,
        path: &str,
        body: &[u8],
        secret: &[u8],
    ) -> bool {
        let h =
            |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default();
        // The body's hash as the gateway states it: UNSIGNED-PAYLOAD (a streamed body, which an
        // origin may refuse) or the SHA-256 of exactly the bytes received.
        let body_hash = h("x-gatehouse-content-sha256");
        if body_hash != UNSIGNED_PAYLOAD && body_hash != hex(&Sha256::digest(body)) {
            return false;
        }
        let text = [
            "v2".to_owned(),
            h("x-gatehouse-timestamp"),
            method.to_owned(),
            path.to_owned(),
            h("x-request-id"),
            h("x-gatehouse-project-id"),
            h("x-gatehouse-key-id"),
            h("x-gatehouse-key-type"),
            h("x-gatehouse-client-ip"),
            body_hash,
        ]
        .join("\n");
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(text.as_bytes());
        h("x-gatehouse-signature") == format!("v2={}", hex(&mac.finalize().into_bytes()))
    }

    fn example(path_and_query: &str, body: SignedBody<'_>) -> Vec<(String, String)> {
        let signed = SignedRequest {
            timestamp: 1_796_000_000,
            method: "POST",
            path_and_query,
            request_id: "0195f1c2-7a00-7000-8000-000000000001",
            project_id: "prj_demo",
            key_id: "key_demo",
            key_type: KeyType::Server,
            client_ip: "203.0.113.9",
            body,
        };
        identity_headers(&signed, SECRET)
    }

    const SECRET: &[u8] = b"origin-secret-for-the-readme";

    #[test]
    fn the_signature_covers_the_path_an_origin_with_a_base_path_receives() {
        let u = &parse(r#"[{"prefix":"/shop/v1/","origin":"https://api.example/base/"}]"#).unwrap()[0];
        let pq = "/shop/v1/orders?x=1";
        assert_eq!(u.url(pq), "https://api.example/base/shop/v1/orders?x=1");
        assert_eq!(u.origin_path(pq), "/base/shop/v1/orders?x=1");
        let root = &parse(r#"[{"prefix":"/shop/v1/","origin":"http://127.0.0.1:9000"}]"#).unwrap()[0];
        assert_eq!(root.origin_path(pq), pq);
        let service = &parse(r#"[{"prefix":"/shop/v1/","origin":"service:SHOP"}]"#).unwrap()[0];
        assert_eq!(service.origin_path(pq), pq);
        // The origin verifies with the path it received; the path the client sent fails.
        let headers = example(&u.origin_path(pq), SignedBody::Held(b"{}"));
        assert!(origin_verifies(&headers, "POST", "/base/shop/v1/orders?x=1", b"{}", SECRET));
        assert!(!origin_verifies(&headers, "POST", pq, b"{}", SECRET));
    }

    #[test]
    fn every_identity_header_the_origin_receives_is_signed() {
        let headers = example("/shop/v1/orders", SignedBody::Held(b"{}"));
        assert!(origin_verifies(&headers, "POST", "/shop/v1/orders", b"{}", SECRET));
        for (i, (name, _)) in headers.iter().enumerate() {
            if name == "x-gatehouse-signature" || name == "x-forwarded-for" {
                continue;
            }
            let mut changed = headers.clone();
            changed[i].1.push('0');
            assert!(
                !origin_verifies(&changed, "POST", "/shop/v1/orders", b"{}", SECRET),
                "{name} is not covered by the signature"
            );
        }
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"x-gatehouse-key-type") && names.contains(&"x-gatehouse-client-ip"));
        assert!(!origin_verifies(&headers, "POST", "/shop/v1/orders", b"{ }", SECRET), "another body");
    }

    #[test]
    fn a_streamed_body_is_signed_as_unsigned_payload_which_the_origin_sees() {
        let headers = example("/shop/v1/upload", SignedBody::Streamed);
        let hash = headers.iter().find(|(n, _)| n == "x-gatehouse-content-sha256").unwrap();
        assert_eq!(hash.1, "UNSIGNED-PAYLOAD");
        assert!(origin_verifies(&headers, "POST", "/shop/v1/upload", b"any body at all", SECRET));
        // Claiming a held body's hash instead breaks the signature.
        let mut forged = headers.clone();
        let at = forged.iter().position(|(n, _)| n == "x-gatehouse-content-sha256").unwrap();
        forged[at].1 = hex(&Sha256::digest(b"x"));
        assert!(!origin_verifies(&forged, "POST", "/shop/v1/upload", b"x", SECRET));
    }

    #[test]
    fn the_client_cannot_claim_an_address_and_the_origin_gets_the_real_one() {
        let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        let incoming = h(&[
            ("X-Forwarded-For", "10.0.0.1"),
            ("Forwarded", "for=10.0.0.1"),
            ("X-Real-IP", "10.0.0.1"),
            ("True-Client-IP", "10.0.0.1"),
            ("X-Forwarded-Host", "evil.example"),
            ("X-Forwarded-Proto", "http"),
            ("CF-Connecting-IP", "203.0.113.9"),
            ("Accept", "*/*"),
        ]);
        let trace = TraceContext::of(None, None, [1; 24]);
        let forwarded = forwarded_request_headers(&incoming, &trace);
        assert_eq!(forwarded, h(&[("Accept", "*/*"), ("traceparent", &trace.traceparent())]));
        let headers = example("/shop/v1/orders", SignedBody::Held(b""));
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("x-forwarded-for"), Some("203.0.113.9"));
        assert_eq!(get("x-gatehouse-client-ip"), Some("203.0.113.9"));
    }

    /// The test vector of docs/api/proxy.md: an origin that computes
    /// this signature from these inputs verifies the gateway correctly. (Checked independently:
    /// `printf '%s' "$SIGNED_TEXT" | openssl dgst -sha256 -hmac "$SECRET"`.)
    #[test]
    fn origin_signature_matches_the_readme_test_vector() {
        let body = br#"{"sku":"tea","qty":2}"#;
        let signed = SignedRequest {
            timestamp: 1_796_000_000,
            method: "POST",
            path_and_query: "/base/shop/v1/orders?expand=items",
            request_id: "0195f1c2-7a00-7000-8000-000000000001",
            project_id: "prj_demo",
            key_id: "key_demo",
            key_type: KeyType::Server,
            client_ip: "203.0.113.9",
            body: SignedBody::Held(body),
        };
        assert_eq!(
            signed.signed_text(),
            "v2\n1796000000\nPOST\n/base/shop/v1/orders?expand=items\n0195f1c2-7a00-7000-8000-000000000001\nprj_demo\nkey_demo\nserver\n203.0.113.9\nSHA"
                .replace("SHA", &hex(&Sha256::digest(body)))
        );
        assert_eq!(signed.signature(SECRET), DOCUMENTED_SIGNATURE);
        let headers = identity_headers(&signed, SECRET);
        assert!(headers.contains(&("x-gatehouse-key-type".into(), "server".into())));
        assert!(headers.contains(&("x-gatehouse-signature".into(), DOCUMENTED_SIGNATURE.into())));
        assert!(origin_verifies(&headers, "POST", "/base/shop/v1/orders?expand=items", body, SECRET));
    }

    const DOCUMENTED_SIGNATURE: &str = "v2=910d00f4b3a2735de5241dc97f76ff0939697f910564f2d7b69eb282ba215e18";
}
