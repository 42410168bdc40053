//! The request pipeline of SPEC §3: route → read the body → authenticate + rate limit +
//! idempotency claim (one KeyGuard round trip) → execute → respond, then settle the claim after
//! the response. Generic over the ports, so it runs the same over Durable Objects, D1 and KV in
//! the worker and over in-memory fakes in native tests.

mod audit;
pub mod ingest;

pub use audit::{enforce_retention, store_rows as store_audit_rows, RetentionLimits};
pub use dead_letters::{redrive, RedriveReport};
pub use webhooks::{dispatch, retry, sweep, ManualRetry};
mod dead_letters;
mod keys;
mod projects;
pub mod queues;
mod resources;
#[cfg(test)]
mod simulation;
mod webhooks;

use std::future::Future;

use serde_json::{json, Value};

use crate::config::Config;
use crate::core::api_key::{self, KeyRecord};
use crate::core::audit::{clip_user_agent, redacted_path, AuditRow};
use crate::core::encoding::uuid_v4;
use crate::core::error::{ApiError, ErrorCode};
use crate::core::idempotency::{self, ClaimDecision, StoredResponse};
use crate::core::rate_limit::{Usage, Verdict};
use crate::core::route::{cors_path, match_route, Access, Miss, Route, RouteId};
use crate::core::time::rfc3339;
use crate::ports::{
    Admission, Authorization, ClaimRequest, KeyGuard, PortError, Ports, RequestBody, ResponseStore,
};

pub struct ApiRequest<B> {
    pub method: String,
    /// The path without the query string, as the client sent it.
    pub path: String,
    /// Decoded query pairs, in order.
    pub query: Vec<(String, String)>,
    /// The query string as sent (for the audit log, redacted there).
    pub raw_query: Option<String>,
    pub user_agent: Option<String>,
    pub authorization: Option<String>,
    /// The `Idempotency-Key` header as received (repeats joined with `, ` by the runtime).
    pub idempotency_key: Option<String>,
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
    /// What the log should say: the cause of a failure the client saw only as a generic error,
    /// or a problem behind a success.
    pub internal_error: Option<String>,
    /// Work to finish after the response is sent (`ctx.wait_until`).
    pub settlement: Option<Settlement>,
    /// The request's audit row; the caller adds the response time and sends it off the hot path.
    pub audit: AuditRow,
    /// Webhook deliveries to enqueue after the response (the minute sweep catches a lost send).
    pub webhook_deliveries: Vec<String>,
}

/// What a request finishes after its response (`wait_until`): the end of its idempotency claim
/// (complete and store on 2xx, release otherwise), or the confirmation of the event ids it reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    Complete { key_hash: String, api_key_id: String, claim: ClaimRequest, response: StoredResponse },
    Release { key_hash: String, claim: ClaimRequest },
    ConfirmEvents(ingest::Reservations),
}

/// A successful answer before it becomes bytes.
pub struct Reply {
    pub status: u16,
    pub body: Payload,
    /// Something the operator should see in the log although the request succeeded.
    pub log: Option<String>,
    /// Webhook deliveries the request wrote, to enqueue after the response.
    pub deliveries: Vec<String>,
    /// Work to finish after the response.
    pub after: Option<Box<Settlement>>,
}

pub enum Payload {
    Json(Value),
    /// A download, e.g. an audit archive.
    File {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply { status: 200, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
    pub fn created(body: Value) -> Self {
        Reply { status: 201, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
    pub fn accepted(body: Value) -> Self {
        Reply { status: 202, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
}

/// What the pipeline answers before it becomes an [`ApiResponse`].
enum Answer {
    Reply(Reply),
    /// A completed idempotent request, replayed (SPEC §5).
    Replay(StoredResponse),
}

/// Everything a handler may read about the request it serves.
pub struct Call<'a> {
    pub request_id: &'a str,
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

    fn project_id(&self) -> &str {
        &self.key().project_id
    }
}

/// The pipeline over its ports: key guards, the D1 store, the response store, the event ledger,
/// the events queue and the audit archive.
pub struct Gateway<'c, P: Ports> {
    pub config: &'c Config,
    pub guard: P::Guard,
    pub store: P::Store,
    pub responses: P::Responses,
    pub ledger: P::Ledger,
    pub events: P::Events,
    pub archive: P::Archive,
    pub deliveries: P::Deliveries,
    pub dead_letters: P::DeadLetters,
    pub redrive: P::Redrive,
}

/// A refusal during authentication, with the key's usage when the key itself was valid.
type Refusal = (Option<Usage>, ApiError);

/// What the audit row needs to know of how the request went, filled in as it goes.
#[derive(Default)]
struct Trace {
    route: Option<&'static Route>,
    /// The key the request was made with, when one was recognised (revoked ones included).
    key: Option<KeyRecord>,
    idempotency_key: Option<String>,
}

/// An admitted caller: the key (none on public and admin routes), its usage, and its claim.
struct Caller {
    key: Option<KeyRecord>,
    key_hash: Option<String>,
    usage: Option<Usage>,
    claim: Option<ClaimDecision>,
}

/// What `serve` hands back: the answer, the usage for the rate headers, and the claim this
/// request took (it must be settled).
struct Served {
    usage: Option<Usage>,
    answer: Result<Answer, ApiError>,
    taken_claim: Option<(String, String, ClaimRequest)>,
}

impl Served {
    fn early(usage: Option<Usage>, e: ApiError) -> Self {
        Served { usage, answer: Err(e), taken_claim: None }
    }
}

impl<P: Ports> Gateway<'_, P> {
    pub async fn handle<B: RequestBody>(&self, req: ApiRequest<B>) -> ApiResponse {
        let request_id = uuid_v4(random());
        let mut audit = AuditRow::new(
            request_id.clone(),
            req.now_ms,
            req.method.clone(),
            redacted_path(&req.path, req.raw_query.as_deref()),
        );
        audit.ip = req.client_ip.clone();
        audit.user_agent = clip_user_agent(req.user_agent.as_deref());
        let mut trace = Trace::default();
        if req.method == "OPTIONS" && cors_path(&req.path) {
            return preflight(request_id, audit);
        }
        let served = self.serve(req, &request_id, &mut trace).await;
        audit.route = trace.route.map(|r| r.template.to_owned());
        // SPEC §8: a release marker's replay answers 200 where the original said 201.
        let replays_created_as_ok = trace.route.is_some_and(|r| r.id == RouteId::DeployMarker);
        if let Some(key) = trace.key {
            audit.project_id = Some(key.project_id);
            audit.key_id = Some(key.id);
            audit.key_prefix = Some(key.prefix);
        }
        audit.idempotency_key = trace.idempotency_key;
        audit.rate_limit_remaining = served.usage.map(|u| u.remaining);
        match &served.answer {
            Ok(Answer::Replay(stored)) => {
                audit.replayed = true;
                audit.original_request_id = Some(stored.request_id.clone());
            }
            Err(e) => audit.error_code = Some(e.code.as_str().to_owned()),
            Ok(Answer::Reply(_)) => {}
        }
        let mut response = respond(request_id, served.usage, served.answer, replays_created_as_ok, audit);
        if trace.route.is_some_and(|r| r.cors) {
            response.headers.extend(CORS_HEADERS.map(|(name, value)| (name, value.to_owned())));
        }
        if let Some((key_hash, api_key_id, claim)) = served.taken_claim {
            response.settlement = Some(if (200..300).contains(&response.status) {
                let body = String::from_utf8_lossy(&response.body).into_owned();
                let stored =
                    StoredResponse { status: response.status, body, request_id: response.request_id.clone() };
                Settlement::Complete { key_hash, api_key_id, claim, response: stored }
            } else {
                Settlement::Release { key_hash, claim }
            });
        }
        response
    }

    /// Finishes a claim after the response. On success the guard learns first (it is the source of
    /// truth for "completed"), then the response store gets the copy replays read; each notice is
    /// retried with backoff (`pause` sleeps). A claim the guard never hears about runs out after its
    /// lease and the key may execute again: README "Guarantees under faults" says when.
    pub async fn settle<F: Future<Output = ()>>(
        &self,
        settlement: Settlement,
        pause: impl Fn(u64) -> F,
    ) -> Result<(), PortError> {
        match settlement {
            Settlement::Complete { key_hash, api_key_id, claim, response } => {
                retrying(&pause, || self.guard.complete_claim(&key_hash, &claim, &response)).await?;
                retrying(&pause, || self.responses.put(&api_key_id, &claim.idempotency_key, &response)).await
            }
            Settlement::Release { key_hash, claim } => {
                retrying(&pause, || self.guard.release_claim(&key_hash, &claim)).await
            }
            Settlement::ConfirmEvents(reservations) => {
                retrying(&pause, || reservations.confirm(&self.ledger)).await
            }
        }
    }

    async fn serve<B: RequestBody>(&self, req: ApiRequest<B>, request_id: &str, trace: &mut Trace) -> Served {
        let matched = match match_route(&req.method, &req.path) {
            Ok(m) => m,
            Err(miss) => return Served::early(None, route_miss(miss, &req)),
        };
        let route = matched.route;
        trace.route = Some(route);
        let body = match read_body(route, req.body).await {
            Ok(body) => body,
            Err(e) => return Served::early(None, e),
        };
        // A bad header is answered only after authentication (SPEC §3 order), so keep the error.
        let idempotency_key = idempotency::parse_key(req.idempotency_key.as_deref(), route.idempotency);
        trace.idempotency_key = idempotency_key.as_ref().ok().cloned().flatten();
        let claim = trace.idempotency_key.clone().map(|key| ClaimRequest {
            fingerprint: idempotency::fingerprint(&req.method, &req.path, &body),
            idempotency_key: key,
            request_id: request_id.to_owned(),
        });
        let caller = match self
            .authenticate(route, &req.authorization, req.client_ip.as_deref(), claim.as_ref(), trace)
            .await
        {
            Ok(caller) => caller,
            Err((usage, e)) => return Served::early(usage, e),
        };
        let usage = caller.usage;
        if let Err(e) = idempotency_key {
            return Served::early(usage, e);
        }
        let mut taken_claim = None;
        match (&caller.claim, claim) {
            (Some(ClaimDecision::Replay { response }), Some(claim)) => {
                let key = caller.key.as_ref().expect("claims need a key");
                let key_hash = caller.key_hash.as_deref().expect("claims need a key");
                let answer = self.replay(&key.id, key_hash, response.clone(), &claim.idempotency_key).await;
                return Served { usage, answer, taken_claim: None };
            }
            (Some(ClaimDecision::Execute), Some(claim)) => {
                let key = caller.key.as_ref().expect("claims need a key");
                let key_hash = caller.key_hash.clone().expect("claims need a key");
                taken_claim = Some((key_hash, key.id.clone(), claim));
            }
            (Some(decision), _) => {
                if let Some(e) = idempotency::refusal(decision) {
                    return Served::early(usage, e);
                }
            }
            (None, _) => {}
        }
        let call = Call {
            request_id,
            key: caller.key,
            usage,
            params: matched.params,
            query: &req.query,
            body,
            now_ms: req.now_ms,
        };
        let answer = self.execute(route.id, &call).await.map(Answer::Reply);
        Served { usage, answer, taken_claim }
    }

    /// The stored response of a completed key: inline from the guard while the response store may
    /// not show it yet, then from the store, and from the guard's own copy when the store misses.
    async fn replay(
        &self,
        api_key_id: &str,
        key_hash: &str,
        held: Option<StoredResponse>,
        idempotency_key: &str,
    ) -> Result<Answer, ApiError> {
        if let Some(response) = held {
            return Ok(Answer::Replay(response));
        }
        let stored = self.responses.get(api_key_id, idempotency_key).await;
        if let Ok(Some(response)) = stored {
            return Ok(Answer::Replay(response));
        }
        match self.guard.held_response(key_hash, idempotency_key).await {
            Ok(Some(response)) => Ok(Answer::Replay(response)),
            Ok(None) => Err(ApiError::unavailable("completed idempotency claim without a stored response")),
            Err(e) => Err(ApiError::unavailable(format!("response store: {stored:?}; key guard: {e}"))),
        }
    }

    /// SPEC §3 order: authenticate, then the rate decision and the idempotency claim (made by the
    /// key's guard in the same round trip), then the key type's scope.
    async fn authenticate(
        &self,
        route: &Route,
        authorization: &Option<String>,
        client_ip: Option<&str>,
        claim: Option<&ClaimRequest>,
        trace: &mut Trace,
    ) -> Result<Caller, Refusal> {
        let anonymous = Caller { key: None, key_hash: None, usage: None, claim: None };
        let token = authorization.as_deref().and_then(api_key::bearer_token);
        let scope = match route.access {
            Access::Public => return Ok(anonymous),
            Access::Admin => {
                let expected = self.config.admin_token.as_bytes();
                return match token {
                    Some(t) if api_key::constant_time_eq(t.as_bytes(), expected) => Ok(anonymous),
                    _ => {
                        let e =
                            ApiError::new(ErrorCode::InvalidApiKey, "The admin token is missing or wrong.");
                        Err((None, self.refuse(client_ip, e).await))
                    }
                };
            }
            Access::Key(scope) => scope,
        };
        let Some(token) = token.filter(|t| api_key::is_well_formed(t)) else {
            return Err((None, self.refuse(client_ip, ApiError::invalid_api_key()).await));
        };
        let key_hash = api_key::hash(self.config.key_pepper.as_bytes(), token);
        let Admission { key, verdict, usage, claim } =
            match self.guard.authorize(&key_hash, scope, claim).await {
                Ok(Authorization::Admitted(admission)) => {
                    trace.key = Some(admission.key.clone());
                    *admission
                }
                Ok(Authorization::Denied(revoked)) => {
                    trace.key = revoked.map(|k| *k);
                    return Err((None, self.refuse(client_ip, ApiError::invalid_api_key()).await));
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
            // The guard took no claim for it.
            let e = ApiError::forbidden(format!("A {} key may not call this route.", key.key_type.as_str()))
                .with_detail("key_type", key.key_type.as_str());
            return Err((Some(usage), e));
        }
        Ok(Caller { key: Some(key), key_hash: Some(key_hash), usage: Some(usage), claim })
    }

    /// A failed authentication: counted against the client address, and 429 instead of 401 once
    /// the address has failed too often this minute. If the count cannot be made, the 401 stands.
    async fn refuse(&self, client_ip: Option<&str>, unauthenticated: ApiError) -> ApiError {
        let Some(ip) = client_ip else {
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
            RouteId::DeepHealth => {
                self.guard.ping().await.map_err(unavailable)?;
                Ok(Reply::ok(json!({ "status": "ok", "key_guard": "ok" })))
            }
            RouteId::CreateProject => self.create_project(call).await,
            RouteId::Me => Ok(Reply::ok(me(call))),
            RouteId::CreateKey => self.create_key(call).await,
            RouteId::ListKeys => self.list_keys(call).await,
            RouteId::UpdateKey => self.update_key(call).await,
            RouteId::RevokeKey => self.revoke_key(call).await,
            RouteId::CreateContact => self.create_contact(call).await,
            RouteId::ListContacts => self.list_contacts(call).await,
            RouteId::GetContact => self.get_contact(call).await,
            RouteId::BulkContacts => self.bulk_contacts(call).await,
            RouteId::CreateMessage => self.create_message(call).await,
            RouteId::BulkMessages => self.bulk_messages(call).await,
            RouteId::CreateScenario => self.create_scenario(call).await,
            RouteId::RunScenario => self.run_scenario(call).await,
            RouteId::DeployMarker => self.deploy_marker(call).await,
            RouteId::Track => self.track(call).await,
            RouteId::Identify => self.identify(call).await,
            RouteId::Alias => self.alias(call).await,
            RouteId::SessionChunk => self.session_chunk(call).await,
            RouteId::ListLogs => self.list_logs(call).await,
            RouteId::GetLog => self.get_log(call).await,
            RouteId::KeyStats => self.key_stats(call).await,
            RouteId::ListArchives => self.list_archives(call).await,
            RouteId::GetArchive => self.get_archive(call).await,
            RouteId::CreateWebhook => self.create_webhook(call).await,
            RouteId::ListWebhooks => self.list_webhooks(call).await,
            RouteId::DeleteWebhook => self.delete_webhook(call).await,
            RouteId::ListDeliveries => self.list_deliveries(call).await,
            RouteId::RetryDelivery => self.retry_delivery(call).await,
            RouteId::ListDeadLetters => self.list_dead_letters(call).await,
            RouteId::RedriveDeadLetters => self.redrive_dead_letters(call).await,
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

/// What a web page's script may read of an ingestion answer (SPEC §7 routes, browser keys).
const CORS_HEADERS: [(&str, &str); 2] = [
    ("access-control-allow-origin", "*"),
    (
        "access-control-expose-headers",
        "x-request-id, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, ratelimit, ratelimit-policy",
    ),
];

/// The answer to a browser's CORS preflight for an ingestion route: any origin may POST with an
/// API key (keys travel in `Authorization`, never cookies, so no credentials mode is needed).
fn preflight(request_id: String, mut audit: AuditRow) -> ApiResponse {
    audit.status = 204;
    let mut headers = vec![("x-request-id", request_id.clone())];
    headers.extend(CORS_HEADERS.map(|(name, value)| (name, value.to_owned())));
    headers.push(("access-control-allow-methods", "POST".to_owned()));
    headers.push(("access-control-allow-headers", "authorization, content-type".to_owned()));
    headers.push(("access-control-max-age", "86400".to_owned()));
    ApiResponse {
        status: 204,
        headers,
        body: Vec::new(),
        request_id,
        internal_error: None,
        settlement: None,
        audit,
        webhook_deliveries: Vec::new(),
    }
}

/// The response for a failure before the pipeline could start (e.g. bad configuration).
pub fn failure(error: ApiError, method: &str, path: &str, now_ms: i64) -> ApiResponse {
    let request_id = uuid_v4(random());
    let mut audit = AuditRow::new(request_id.clone(), now_ms, method.to_owned(), path.to_owned());
    audit.error_code = Some(error.code.as_str().to_owned());
    respond(request_id, None, Err(error), false, audit)
}

fn respond(
    request_id: String,
    usage: Option<Usage>,
    answer: Result<Answer, ApiError>,
    replays_created_as_ok: bool,
    mut audit: AuditRow,
) -> ApiResponse {
    let mut content_type = "application/json";
    let mut headers = vec![("x-request-id", request_id.clone())];
    if let Some(usage) = usage {
        headers.extend(usage.headers());
    }
    let mut webhook_deliveries = Vec::new();
    let mut settlement = None;
    let (status, body, internal_error) = match answer {
        Ok(Answer::Reply(Reply { status, body, log, deliveries, after })) => {
            webhook_deliveries = deliveries;
            settlement = after.map(|s| *s);
            match body {
                Payload::Json(json) => (status, json.to_string().into_bytes(), log),
                Payload::File { content_type: file_type, bytes } => {
                    content_type = file_type;
                    (status, bytes, log)
                }
            }
        }
        Ok(Answer::Replay(stored)) => {
            headers.push(("idempotent-replayed", "1".to_owned()));
            headers.push(("idempotency-replayed", "true".to_owned()));
            headers.push(("x-original-request-id", stored.request_id));
            let status = if replays_created_as_ok && stored.status == 201 { 200 } else { stored.status };
            (status, stored.body.into_bytes(), None)
        }
        Err(e) => {
            if let Some(seconds) = e.retry_after {
                headers.push(("retry-after", seconds.to_string()));
            }
            if !e.allow.is_empty() {
                headers.push(("allow", e.allow.join(", ")));
            }
            (e.status(), e.body(&request_id).to_string().into_bytes(), e.internal.clone())
        }
    };
    headers.insert(0, ("content-type", content_type.to_owned()));
    audit.status = status;
    audit.response_bytes = body.len() as u64;
    ApiResponse { status, headers, body, request_id, internal_error, settlement, audit, webhook_deliveries }
}

/// Up to [`NOTICE_TRIES`] calls of `op`, pausing 100 ms, 200 ms, … (at most 5 s) between them.
async fn retrying<T, F: Future<Output = Result<T, PortError>>, P: Future<Output = ()>>(
    pause: &impl Fn(u64) -> P,
    mut op: impl FnMut() -> F,
) -> Result<T, PortError> {
    let mut delay_ms = 100;
    let mut tries = 1;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(e) if tries >= NOTICE_TRIES => return Err(e),
            Err(_) => {
                pause(delay_ms).await;
                delay_ms = (delay_ms * 2).min(5_000);
                tries += 1;
            }
        }
    }
}

/// How often a notice after the response (a claim's completion or release) is tried: about 11 s
/// in all, within the half minute `wait_until` grants.
const NOTICE_TRIES: u32 = 8;

/// `N` bytes from the platform's CSPRNG (Web Crypto in the worker).
pub fn random<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::getrandom(&mut buf).expect("the platform CSPRNG is available");
    buf
}
