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

fn parse_origin(raw: &str) -> Result<OriginTarget, String> {
    if let Some(binding) = raw.strip_prefix("service:") {
        let ok = !binding.is_empty() && binding.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        return if ok {
            Ok(OriginTarget::Service(binding.to_owned()))
        } else {
            Err(format!("origin {raw:?}: a service binding is named service:BINDING (letters, digits, _)"))
        };
    }
    let url = url::Url::parse(raw).map_err(|e| format!("origin {raw:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("origin {raw:?} must be an http or https URL (or service:BINDING)"));
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(format!("origin {raw:?} may not carry a query, a fragment or credentials"));
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

/// The client's headers the origin receives: all but `Authorization`, hop-by-hop headers, any
/// `X-Gatehouse-*` (the identity headers are ours alone), the client's `X-Request-Id`, `Host`,
/// `Content-Length` (the runtime sets it) and the platform's `cf-*` headers.
pub fn forwarded_request_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    end_to_end(headers, |n| {
        matches!(n, "authorization" | "host" | "content-length" | "x-request-id")
            || n.starts_with("x-gatehouse-")
            || n.starts_with("cf-")
    })
    .cloned()
    .collect()
}

/// The origin's headers the client receives, names lowercase: all but hop-by-hop ones, the ones
/// we set ourselves, and `Content-Length`/`Content-Encoding` (the runtime hands us the decoded
/// body and frames it).
pub fn answered_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    end_to_end(headers, |n| OURS.contains(&n) || n == "content-length" || n == "content-encoding")
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// What `X-Gatehouse-Signature` signs: one forwarded request as the gateway admitted it.
#[derive(Debug, Clone, Copy)]
pub struct SignedRequest<'a> {
    pub timestamp: i64,
    pub method: &'a str,
    /// The path and query as the origin receives them (`/shop/v1/orders?limit=2`).
    pub path_and_query: &'a str,
    pub request_id: &'a str,
    pub project_id: &'a str,
    pub key_id: &'a str,
    pub body: &'a [u8],
}

impl SignedRequest<'_> {
    /// `{timestamp}.{method}.{path_and_query}.{request_id}.{project_id}.{key_id}.{hex SHA-256 of the body}`
    pub fn signed_text(&self) -> String {
        format!(
            "{}.{}.{}.{}.{}.{}.{}",
            self.timestamp,
            self.method,
            self.path_and_query,
            self.request_id,
            self.project_id,
            self.key_id,
            hex(&Sha256::digest(self.body))
        )
    }

    /// `v1=<hex HMAC-SHA256(ORIGIN_SECRET, signed text)>`.
    pub fn signature(&self, origin_secret: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(origin_secret).expect("HMAC takes any key length");
        mac.update(self.signed_text().as_bytes());
        format!("v1={}", hex(&mac.finalize().into_bytes()))
    }
}

/// The identity headers the origin receives with every forwarded request (SPEC §15).
pub fn identity_headers(
    signed: &SignedRequest<'_>,
    key_type: KeyType,
    origin_secret: &[u8],
) -> Vec<(String, String)> {
    vec![
        ("x-request-id".into(), signed.request_id.to_owned()),
        ("x-gatehouse-project-id".into(), signed.project_id.to_owned()),
        ("x-gatehouse-key-id".into(), signed.key_id.to_owned()),
        ("x-gatehouse-key-type".into(), key_type.as_str().to_owned()),
        ("x-gatehouse-timestamp".into(), signed.timestamp.to_string()),
        ("x-gatehouse-signature".into(), signed.signature(origin_secret)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Vec<Upstream>, String> {
        parse_upstreams(json)
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
            ("X-Trace", "abc"),
        ]);
        assert_eq!(
            forwarded_request_headers(&incoming),
            h(&[("Content-Type", "application/json"), ("Idempotency-Key", "k1"), ("X-Trace", "abc")])
        );
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

    /// The test vector of README "Put Gatehouse in front of your API": an origin that computes
    /// this signature from these inputs verifies the gateway correctly. (Checked independently:
    /// `printf '%s' "$TEXT" | openssl dgst -sha256 -hmac "$SECRET"`.)
    #[test]
    fn origin_signature_matches_the_readme_test_vector() {
        let signed = SignedRequest {
            timestamp: 1_796_000_000,
            method: "POST",
            path_and_query: "/shop/v1/orders?expand=items",
            request_id: "0195f1c2-7a00-7000-8000-000000000001",
            project_id: "prj_demo",
            key_id: "key_demo",
            body: br#"{"sku":"tea","qty":2}"#,
        };
        assert_eq!(
            signed.signed_text(),
            "1796000000.POST./shop/v1/orders?expand=items.0195f1c2-7a00-7000-8000-000000000001.prj_demo.key_demo.SHA"
                .replace("SHA", &hex(&Sha256::digest(br#"{"sku":"tea","qty":2}"#)))
        );
        assert_eq!(signed.signature(b"origin-secret-for-the-readme"), README_SIGNATURE);
        let headers = identity_headers(&signed, KeyType::Server, b"origin-secret-for-the-readme");
        assert_eq!(headers[3], ("x-gatehouse-key-type".into(), "server".into()));
        assert_eq!(headers[5].1, README_SIGNATURE);
    }

    const README_SIGNATURE: &str = "v1=3d99354b4ff0054cbf8ee4c3d929c1211c87c8d518ffe1821932f07f9ec6612d";
}
