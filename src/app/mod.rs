//! The request pipeline (SPEC §3): route → authenticate → read the body → execute → respond.
//! Generic over the ports, so it runs the same over Durable Objects and D1 in the worker and over
//! in-memory fakes in native tests.

mod keys;
mod projects;

use serde_json::{json, Value};

use crate::config::Config;
use crate::core::api_key::{self, KeyRecord};
use crate::core::encoding::uuid_v4;
use crate::core::error::{ApiError, ErrorCode};
use crate::core::rate_limit::{Usage, Verdict};
use crate::core::route::{match_route, Access, Miss, Route, RouteId};
use crate::core::time::rfc3339;
use crate::ports::{Admission, Authorization, Directory, KeyGuard, PortError, RequestBody};

pub struct ApiRequest<B> {
    pub method: String,
    /// The path without the query string, as the client sent it.
    pub path: String,
    /// Decoded query pairs, in order.
    pub query: Vec<(String, String)>,
    pub authorization: Option<String>,
    /// `CF-Connecting-IP`: failed authentications are limited per client address.
    pub client_ip: Option<String>,
    pub body: B,
    pub now_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResponse {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub request_id: String,
    /// What the log should say of a failure the client saw only as a generic error.
    pub internal_error: Option<String>,
}

/// A successful answer before it becomes bytes.
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply { status: 200, body }
    }
    pub fn created(body: Value) -> Self {
        Reply { status: 201, body }
    }
}

/// Everything a handler may read about the request it serves.
pub struct Call<'a> {
    pub key: Option<KeyRecord>,
    /// The key's limits after this request was admitted.
    pub usage: Option<Usage>,
    pub params: Vec<&'a str>,
    pub query: &'a [(String, String)],
    pub body: Vec<u8>,
    pub now_ms: i64,
}

impl Call<'_> {
    /// The authenticated key; routes with `Access::Key` always have one.
    fn key(&self) -> &KeyRecord {
        self.key.as_ref().expect("route requires an API key")
    }
}

pub struct Gateway<'c, G, D> {
    pub config: &'c Config,
    pub guard: G,
    pub directory: D,
}

/// A refusal during authentication, with the key's usage when the key itself was valid.
type Refusal = (Option<Usage>, ApiError);

impl<G: KeyGuard, D: Directory> Gateway<'_, G, D> {
    pub async fn handle<B: RequestBody>(&self, req: ApiRequest<B>) -> ApiResponse {
        let request_id = uuid_v4(random());
        let (usage, outcome) = self.serve(req).await;
        respond(request_id, usage, outcome)
    }

    async fn serve<B: RequestBody>(&self, req: ApiRequest<B>) -> (Option<Usage>, Result<Reply, ApiError>) {
        let matched = match match_route(&req.method, &req.path) {
            Ok(m) => m,
            Err(miss) => return (None, Err(route_miss(miss, &req))),
        };
        let route = matched.route;
        let (key, usage) = match self.authenticate(route, &req).await {
            Ok(admitted) => admitted,
            Err((usage, e)) => return (usage, Err(e)),
        };
        let outcome = async {
            let body = read_body(route, req.body).await?;
            let call = Call {
                key,
                usage,
                params: matched.params,
                query: &req.query,
                body,
                now_ms: req.now_ms,
            };
            self.execute(route.id, &call).await
        }
        .await;
        (usage, outcome)
    }

    /// SPEC §3 order: authenticate, then the rate decision (made by the key's guard in the same
    /// round trip), then the key type's scope.
    async fn authenticate<B>(
        &self,
        route: &Route,
        req: &ApiRequest<B>,
    ) -> Result<(Option<KeyRecord>, Option<Usage>), Refusal> {
        let token = req.authorization.as_deref().and_then(api_key::bearer_token);
        let scope = match route.access {
            Access::Public => return Ok((None, None)),
            Access::Admin => {
                let expected = self.config.admin_token.as_bytes();
                return match token {
                    Some(t) if api_key::constant_time_eq(t.as_bytes(), expected) => Ok((None, None)),
                    _ => Err((
                        None,
                        self.refuse(
                            req,
                            ApiError::new(ErrorCode::InvalidApiKey, "The admin token is missing or wrong."),
                        )
                        .await,
                    )),
                };
            }
            Access::Key(scope) => scope,
        };
        let Some(token) = token.filter(|t| api_key::is_well_formed(t)) else {
            return Err((None, self.refuse(req, ApiError::invalid_api_key()).await));
        };
        let key_hash = api_key::hash(self.config.key_pepper.as_bytes(), token);
        let Admission { key, verdict, usage } = match self.guard.authorize(&key_hash).await {
            Ok(Authorization::Admitted(admission)) => *admission,
            Ok(Authorization::Denied) => {
                return Err((None, self.refuse(req, ApiError::invalid_api_key()).await))
            }
            Err(e) => return Err((None, unavailable(e))),
        };
        let refusal = match verdict {
            Verdict::Allowed => None,
            Verdict::RateLimited => Some(
                ApiError::new(
                    ErrorCode::RateLimitExceeded,
                    format!("Rate limit of {} requests per minute exceeded.", usage.limit),
                )
                .with_retry_after(usage.seconds_to_reset()),
            ),
            Verdict::QuotaExceeded => {
                let code = if key.plan == crate::config::DEFAULT_PLAN {
                    ErrorCode::TrialQuotaExceeded
                } else {
                    ErrorCode::QuotaExceeded
                };
                Some(
                    ApiError::new(
                        code,
                        format!("The monthly quota of {} requests is used up.", usage.quota_limit),
                    )
                    .with_detail("resets_at", rfc3339(usage.quota_resets_ms))
                    .with_detail("plan", key.plan.as_str()),
                )
            }
        };
        if let Some(e) = refusal {
            return Err((Some(usage), e));
        }
        if !key.key_type.allows(scope) {
            let e = ApiError::forbidden(format!(
                "A {} key may not call this route.",
                key.key_type.as_str()
            ))
            .with_detail("key_type", key.key_type.as_str());
            return Err((Some(usage), e));
        }
        Ok((Some(key), Some(usage)))
    }

    /// A failed authentication: counted against the client address, and 429 instead of 401 once
    /// the address has failed too often this minute. If the count cannot be made, the 401 stands.
    async fn refuse<B>(&self, req: &ApiRequest<B>, unauthenticated: ApiError) -> ApiError {
        let Some(ip) = req.client_ip.as_deref() else {
            return unauthenticated;
        };
        match self.guard.record_auth_failure(ip).await {
            Ok((Verdict::RateLimited, usage)) => ApiError::new(
                ErrorCode::RateLimitExceeded,
                "Too many failed authentications from this address. Retry after the window ends.",
            )
            .with_retry_after(usage.seconds_to_reset()),
            Ok(_) => unauthenticated,
            Err(e) => {
                let mut e401 = unauthenticated;
                e401.internal = Some(format!("failed-authentication counter unavailable: {e}"));
                e401
            }
        }
    }

    async fn execute(&self, route: RouteId, call: &Call<'_>) -> Result<Reply, ApiError> {
        match route {
            RouteId::Health => Ok(Reply::ok(json!({ "status": "ok" }))),
            RouteId::CreateProject => projects::create(self, call).await,
            RouteId::Me => Ok(Reply::ok(me(call))),
            RouteId::CreateKey => keys::create(self, call).await,
            RouteId::ListKeys => keys::list(self, call).await,
            RouteId::UpdateKey => keys::update(self, call).await,
            RouteId::RevokeKey => keys::revoke(self, call).await,
        }
    }
}

fn route_miss<B>(miss: Miss, req: &ApiRequest<B>) -> ApiError {
    match miss {
        Miss::NotFound => ApiError::not_found("route").with_detail("path", req.path.as_str()),
        Miss::MethodNotAllowed(allow) => {
            let mut e = ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{} is not allowed on this path.", req.method),
            )
            .with_detail("allow", allow.clone());
            e.allow = allow;
            e
        }
    }
}

fn me(call: &Call<'_>) -> Value {
    let key = call.key();
    let usage = call.usage.as_ref().expect("admitted keys have usage");
    json!({
        "key_id": key.id,
        "prefix": key.prefix,
        "type": key.key_type,
        "project_id": key.project_id,
        "plan": key.plan,
        "rate_limit": {
            "limit": usage.limit,
            "remaining": usage.remaining,
            "reset": rfc3339(usage.reset_ms),
        },
        "quota": {
            "used": usage.quota_used,
            "limit": usage.quota_limit,
            "resets_at": rfc3339(usage.quota_resets_ms),
        },
    })
}

/// Reads the body within the route's limit: 413 before reading when the declared length is over,
/// and again after reading when a body without a length turned out larger.
async fn read_body<B: RequestBody>(route: &Route, body: B) -> Result<Vec<u8>, ApiError> {
    let limit = route.body_limit;
    if body.declared_len().is_some_and(|n| n > limit as u64) {
        return Err(ApiError::payload_too_large(limit));
    }
    let bytes = body.read().await.map_err(|e| {
        ApiError::bad_request("The request body could not be read.").with_detail("cause", e.0)
    })?;
    if bytes.len() > limit {
        return Err(ApiError::payload_too_large(limit));
    }
    Ok(bytes)
}

fn unavailable(e: PortError) -> ApiError {
    ApiError::unavailable(e.0)
}

/// The response for a failure before the pipeline could start (e.g. bad configuration).
pub fn failure(error: ApiError) -> ApiResponse {
    respond(uuid_v4(random()), None, Err(error))
}

fn respond(request_id: String, usage: Option<Usage>, outcome: Result<Reply, ApiError>) -> ApiResponse {
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("x-request-id", request_id.clone()),
    ];
    if let Some(usage) = usage {
        headers.extend(usage.headers());
    }
    let (status, body, internal_error) = match outcome {
        Ok(reply) => (reply.status, reply.body, None),
        Err(e) => {
            if let Some(seconds) = e.retry_after {
                headers.push(("retry-after", seconds.to_string()));
            }
            if !e.allow.is_empty() {
                headers.push(("allow", e.allow.join(", ")));
            }
            (e.status(), e.body(&request_id), e.internal.clone())
        }
    };
    ApiResponse {
        status,
        headers,
        body: body.to_string().into_bytes(),
        request_id,
        internal_error,
    }
}

/// `N` bytes from the platform's CSPRNG (Web Crypto in the worker).
pub fn random<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::getrandom(&mut buf).expect("the platform CSPRNG is available");
    buf
}
