//! The request pipeline of SPEC §3: route → read the body → authenticate + rate limit +
//! idempotency claim (one KeyGuard round trip) → execute → respond.

use serde_json::{json, Value};

use super::authentication::{Credentials, KeyCredentials, Presented};
use super::body_reading::BodyReading;
use super::responses::{preflight, respond, Answered, CORS_HEADERS};
use super::{random, unavailable, ApiRequest, ApiResponse, Call, Gateway, Ids, Reply, Settlement};
use gatehouse_core::api_key::{bearer_token, KeyRecord, Scope};
use gatehouse_core::audit::{clip_user_agent, redacted_path, AuditRow};
use gatehouse_core::budget;
use gatehouse_core::encoding::uuid_v7;
use gatehouse_core::error::{ApiError, ErrorCode};
use gatehouse_core::idempotency::{self, ClaimDecision, Entry, KeptResponse, StoredResponse};
use gatehouse_core::ports::{
    ClaimHolder, ClaimRequest, KeyGuard, Ports, RequestBody, ResponseStore, OPERATOR_GUARD,
};
use gatehouse_core::problem;
use gatehouse_core::rate_limit::{Usage, Window};
use gatehouse_core::route::{cors_path, match_route, Access, Miss, Route, RouteId};
use gatehouse_core::sealing::Keyring;
use gatehouse_core::time::rfc3339;
use gatehouse_core::trace::TraceContext;
use gatehouse_core::upstream::match_upstream;

/// What the pipeline answers before it becomes an [`ApiResponse`].
pub(super) enum Answer {
    Reply(Reply),
    /// A completed idempotent request, replayed (SPEC §5).
    Replay(StoredResponse),
}

/// What the audit row needs to know of how the request went, filled in as it goes.
#[derive(Default)]
pub(super) struct Trace {
    /// The W3C trace of the request (SPEC §25).
    pub(super) context: Option<TraceContext>,
    pub(super) route: Option<&'static Route>,
    /// The key the request was made with, when one was recognised (revoked ones included).
    pub(super) key: Option<KeyRecord>,
    pub(super) idempotency_key: Option<String>,
    /// Where a claim of this request may be whose taking went unanswered (a key's guard, or the
    /// object that holds the claim).
    pub(super) unanswered_claim: Option<ClaimHolder>,
    /// Refused from the isolate's memory of an address over its anonymous limit: no audit row,
    /// so a flood cannot make unlimited D1 writes (docs/api/rate-limits.md, "Abuse").
    pub(super) unaudited: bool,
    /// The key was accepted (its guard or lease admitted it, or refused it only by a limit):
    /// the request may bill (SPEC §22).
    pub(super) accepted: bool,
    /// Admitted, or refused by its window, under the dashboard budget (an owner key's read with
    /// `Gatehouse-Budget: dashboard`): its audit row says so. Never set for a request the budget
    /// did not count (a 401, a 403 for another key type, a 503).
    pub(super) dashboard: bool,
    /// The scope the key was asked for (the route's class: what it counts and bills under).
    pub(super) scope: Option<Scope>,
}

/// An admitted caller: the key (none on public and admin routes), its usage, its claim, and the
/// key its claim's response is sealed under.
pub(super) struct Caller {
    pub(super) key: Option<KeyRecord>,
    pub(super) key_hash: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) claim: Option<ClaimDecision>,
    pub(super) sealing: Option<Keyring>,
}

impl Caller {
    /// The object that holds the caller's claim of `idempotency_key`: one of its key's objects
    /// (SPEC §20), or the operator's guard.
    fn claim_object(&self, idempotency_key: &str) -> String {
        match (&self.key, &self.key_hash) {
            (Some(key), _) => key.claim_object(idempotency_key),
            (None, Some(guard)) => guard.clone(),
            (None, None) => unreachable!("claims have a guard"),
        }
    }
}

/// What `serve` hands back: the answer, the usage for the rate headers, and the claim this
/// request took (it must be settled) with the key its response is sealed under.
pub(super) struct Served {
    pub(super) usage: Option<Usage>,
    pub(super) answer: Result<Answer, ApiError>,
    pub(super) taken_claim: Option<(ClaimHolder, String, ClaimRequest)>,
    pub(super) sealing: Option<Keyring>,
}

impl Served {
    fn early(usage: Option<Usage>, e: ApiError) -> Self {
        Served { usage, answer: Err(e), taken_claim: None, sealing: None }
    }
}

impl<P: Ports> Gateway<'_, P> {
    pub async fn handle<B: RequestBody>(&self, req: ApiRequest<B>) -> ApiResponse {
        // UUIDv7 (SPEC §18): the id names the millisecond of the row, so a lookup finds its hour.
        let request_id = uuid_v7(req.now_ms, random());
        let mut audit = AuditRow::new(
            request_id.clone(),
            req.now_ms,
            req.method.clone(),
            redacted_path(&req.path, req.raw_query.as_deref()),
        );
        audit.ip = req.client_ip.clone();
        audit.user_agent = clip_user_agent(req.user_agent.as_deref());
        let context = TraceContext::of(req.traceparent.as_deref(), req.tracestate.as_deref(), random());
        audit.trace_id = Some(context.trace_id.clone());
        let mut trace = Trace { context: Some(context), ..Trace::default() };
        // SPEC §25: errors as problem details, typed under this gateway's error reference.
        let problem = problem::wanted(req.accept.as_deref()).then(|| req.origin.clone());
        if req.method == "OPTIONS" && cors_path(&req.path) {
            return preflight(request_id, audit);
        }
        let served = self.serve(req, &request_id, &mut trace).await;
        audit.route = trace.route.map(|r| r.template.to_owned());
        // SPEC §8: a release marker's replay answers 200 where the original said 201.
        let replays_created_as_ok = trace.route.is_some_and(|r| r.id == RouteId::DeployMarker);
        // SPEC §22, §23: a request bills when its key was accepted and its plan bills the status,
        // by what it calls, whatever the key's type: not a route class its plan exempts, nor a
        // dashboard read (its own budget).
        let exempt = |k: &KeyRecord| {
            trace.scope.is_some_and(|s| s.is_dashboard_read() || self.config.exempts(&k.plan, s))
        };
        let bills_under = trace.key.as_ref().filter(|k| trace.accepted && !exempt(k)).map(|k| k.plan.clone());
        // SPEC §25: `RateLimit-Policy` lists the project's monthly quota whether or not this
        // answer's usage came with the project's grant (a refusal before it, a lease).
        let mut usage = served.usage;
        if let (Some(usage), Some(key)) = (usage.as_mut(), &trace.key) {
            usage.quota_limit = usage.quota_limit.or(self.config.project_limits(&key.plan).monthly_quota);
        }
        if let Some(key) = trace.key {
            audit.identity_id = key.identity.map(|i| i.id);
            audit.project_id = Some(key.project_id);
            audit.key_id = Some(key.id);
            audit.key_prefix = Some(key.prefix);
        }
        audit.idempotency_key = trace.idempotency_key;
        audit.dashboard = trace.dashboard;
        audit.rate_limit_remaining = usage.map(|u| u.remaining());
        match &served.answer {
            Ok(Answer::Replay(stored)) => {
                audit.replayed = true;
                audit.original_request_id = Some(stored.request_id.clone());
            }
            Err(e) => audit.error_code = Some(e.code.as_str().to_owned()),
            Ok(Answer::Reply(_)) => {}
        }
        let head = audit.method == "HEAD";
        let answer = Answered { usage, answer: served.answer, replays_created_as_ok };
        let mut response = respond(request_id, answer, problem.as_deref(), audit);
        response.audited = !trace.unaudited;
        // Never billed: a replay or an idempotency conflict (answers about a request that billed
        // already) and the gateway's own failures.
        let never = response.audit.replayed
            || gatehouse_core::usage::never_bills(response.audit.error_code.as_deref());
        response.audit.billable =
            !never && bills_under.is_some_and(|plan| self.config.bills(&plan, response.status));
        if head {
            // The runtime sends a HEAD answer without its body.
            response.audit.response_bytes = 0;
        }
        if trace.route.is_some_and(|r| r.cors) {
            response.headers.extend(CORS_HEADERS.map(|(name, value)| (name, value.to_owned())));
        }
        if let Some((holder, api_key_id, claim)) = served.taken_claim {
            let proxied = trace.route.is_some_and(|r| r.id == RouteId::Proxy);
            response.settlements.push(match (served.sealing, holder) {
                (Some(sealing), ClaimHolder::Object(object)) if (200..300).contains(&response.status) => {
                    let stored = if response.passthrough.is_some() {
                        // SPEC §15: answered, not kept; the key stays completed, so the origin
                        // is never called twice for it.
                        StoredResponse {
                            status: response.status,
                            request_id: response.request_id.clone(),
                            not_stored: true,
                            ..StoredResponse::default()
                        }
                    } else if proxied {
                        StoredResponse {
                            status: response.status,
                            body: gatehouse_core::encoding::base64(&response.body),
                            request_id: response.request_id.clone(),
                            headers: response.origin_headers.clone(),
                            base64: true,
                            not_stored: false,
                        }
                    } else {
                        StoredResponse {
                            status: response.status,
                            body: String::from_utf8_lossy(&response.body).into_owned(),
                            request_id: response.request_id.clone(),
                            ..StoredResponse::default()
                        }
                    };
                    // Sealed before it leaves the worker: neither the guard nor KV sees it in clear.
                    let entry = Entry { api_key_id: &api_key_id, idempotency_key: &claim.idempotency_key };
                    let kept = KeptResponse::seal_to_keep(&sealing, entry, &stored, random());
                    Settlement::Complete { object, api_key_id, claim, response: kept }
                }
                (_, holder) => Settlement::Release { holder, claim },
            });
        }
        response
    }

    pub(super) async fn serve<B: RequestBody>(
        &self,
        req: ApiRequest<B>,
        request_id: &str,
        trace: &mut Trace,
    ) -> Served {
        let client_ip = req.client_ip.as_deref();
        // Built-in routes first; a path none of them knows may be under an `UPSTREAMS` prefix
        // (the two never overlap, SPEC §15).
        let (route, params, upstream) = match match_route(&req.method, &req.path) {
            Ok(m) => (m.route, m.params, None),
            Err(miss) => match (&miss, match_upstream(&self.config.upstreams, &req.path)) {
                (Miss::NotFound, Some(upstream)) => (upstream.route(&req.method), Vec::new(), Some(upstream)),
                _ => {
                    let e = route_miss(miss, &req);
                    trace.key = self.key_of_miss(&req.authorization, client_ip, req.now_ms).await;
                    return Served::early(None, self.refuse_anonymous(client_ip, e, req.now_ms, trace).await);
                }
            },
        };
        trace.route = Some(route);
        // The dashboard's reads may be counted under its own budget; a header that cannot apply is
        // answered only after authentication (SPEC §3 order), like a bad Idempotency-Key.
        let dashboard = budget::dashboard_read(req.budget.as_deref(), route);
        // Refusals that need neither the body nor the key's guard come first: their body is never read.
        let asks_budget = matches!(dashboard, Ok(true));
        let screened = self.screen(route, asks_budget, presented(&req), req.now_ms, trace).await;
        let credentials = match screened {
            Ok(credentials) => credentials,
            Err(e) => return Served::early(None, e),
        };
        // A bad header is answered only after authentication (SPEC §3 order), so keep the error.
        let idempotency_key = idempotency::parse_key(req.idempotency_key.as_deref(), route.idempotency);
        trace.idempotency_key = idempotency_key.as_ref().ok().cloned().flatten();
        let reading = BodyReading::of(route, upstream.is_some(), trace.idempotency_key.is_some());
        // A declared length over what the route takes is refused unread, after authentication (its
        // audit row names the key, a bad key is 401 first: SPEC §3 order).
        let declared = reading.admits(req.body.declared_len());
        // The origin receives the query too: for a proxied request it is part of "the same request".
        let path_and_query = match &req.raw_query {
            Some(q) if upstream.is_some() => format!("{}?{q}", req.path),
            _ => req.path.clone(),
        };
        // A request refused for its Gatehouse-Budget header takes no claim (its retry without it
        // must not find its key in use).
        let idempotency = trace.idempotency_key.clone().filter(|_| dashboard.is_ok());
        let fingerprint = |body: &[u8]| match upstream {
            // A proxied body is opaque: its bytes and its type (SPEC §19).
            Some(_) => {
                let content_type = req
                    .headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                    .map(|(_, v)| v.as_str());
                idempotency::opaque_fingerprint(&req.method, &path_and_query, content_type, body)
            }
            None => idempotency::fingerprint(&req.method, &path_and_query, body),
        };
        let claim_for = |body: &[u8]| {
            idempotency.clone().map(|key| ClaimRequest {
                fingerprint: fingerprint(body),
                idempotency_key: key,
                request_id: request_id.to_owned(),
            })
        };
        // SPEC §19 "Memory": no body is read before its key is authenticated. The admin token and
        // the origin secret were checked by the screen. An API key's claim needs the body's
        // fingerprint: when this isolate's guard calls admitted the key in the last minutes, the body
        // is read first and the guard asked once; any other key is authenticated (and counted)
        // first, and its claim taken after the body is read (`take_claim`).
        let (read_first, token) = match &credentials {
            Credentials::Key(KeyCredentials { key_hash, token, .. }) => (
                idempotency.is_some() && self.memory.borrow().is_recent_key(key_hash, req.now_ms),
                Some(token.clone()),
            ),
            Credentials::Open => (true, None),
        };
        let (body, claim, mut caller) = if read_first && declared.is_ok() {
            let body = match reading.read(req.body).await {
                Ok(body) => body,
                // Too large as it streamed: answered for the key that sent it (or 401 first).
                Err(e) => {
                    return match self.authenticate(credentials, client_ip, None, req.now_ms, trace).await {
                        Ok(caller) => Served::early(caller.usage, e),
                        Err((usage, refused)) => Served::early(usage, refused),
                    }
                }
            };
            let claim = claim_for(&body.bytes);
            let caller =
                match self.authenticate(credentials, client_ip, claim.as_ref(), req.now_ms, trace).await {
                    Ok(caller) => caller,
                    Err((usage, e)) => {
                        // A claim the guard may have taken is released after the 503, so the
                        // client's retry is not refused as IN_USE for the lease (the API key id
                        // is unknown: only a release can follow).
                        let lost =
                            trace.unanswered_claim.take().zip(claim).map(|(at, c)| (at, String::new(), c));
                        return Served { usage, answer: Err(e), taken_claim: lost, sealing: None };
                    }
                };
            (body, claim, caller)
        } else {
            let mut caller = match self.authenticate(credentials, client_ip, None, req.now_ms, trace).await {
                Ok(caller) => caller,
                Err((usage, e)) => return Served::early(usage, e),
            };
            if let Err(e) = declared {
                return Served::early(caller.usage, e);
            }
            let body = match reading.read(req.body).await {
                Ok(body) => body,
                Err(e) => return Served::early(caller.usage, e),
            };
            let claim = claim_for(&body.bytes);
            if let (Some(c), Some(token)) = (&claim, &token) {
                let object = caller.claim_object(&c.idempotency_key);
                match self.guard.take_claim(&object, c).await {
                    Ok(decision) => {
                        caller.claim = Some(decision);
                        caller.sealing = Some(self.config.response_keys(token));
                    }
                    Err(e) => {
                        let lost = Some((ClaimHolder::Object(object), String::new(), c.clone()));
                        return Served {
                            usage: caller.usage,
                            answer: Err(unavailable(e)),
                            taken_claim: lost,
                            sealing: None,
                        };
                    }
                }
            }
            (body, claim, caller)
        };
        let usage = caller.usage;
        if let Err(e) = idempotency_key.and(dashboard) {
            return Served::early(usage, e);
        }
        if let (Access::Admin, Some(c)) = (route.access, &claim) {
            caller = match self.operator_claim(c).await {
                Ok(caller) => caller,
                Err(e) => {
                    // As for a key's guard: a claim it may have taken is released after the 503.
                    let lost =
                        claim.map(|c| (ClaimHolder::Object(OPERATOR_GUARD.to_owned()), String::new(), c));
                    return Served { usage, answer: Err(e), taken_claim: lost, sealing: None };
                }
            };
        }
        let mut taken_claim = None;
        let mut operation = None;
        // Whose claim it is: the API key, or the operator (admin routes).
        let principal = caller.key.as_ref().map_or(OPERATOR_GUARD, |k| k.id.as_str()).to_owned();
        match (&caller.claim, claim) {
            (Some(ClaimDecision::Replay { response }), Some(claim)) => {
                let object = caller.claim_object(&claim.idempotency_key);
                let sealing = caller.sealing.as_ref().expect("claims have a sealing key");
                let answer =
                    self.replay(&principal, &object, sealing, response.clone(), &claim.idempotency_key).await;
                return Served { usage, answer, taken_claim: None, sealing: None };
            }
            (Some(ClaimDecision::Execute { operation: op }), Some(claim)) => {
                let object = caller.claim_object(&claim.idempotency_key);
                operation = Some(idempotency::operation_seed(&principal, &claim.idempotency_key, op));
                taken_claim = Some((ClaimHolder::Object(object), principal, claim));
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
            params,
            query: &req.query,
            body: body.bytes,
            rest: body.rest,
            client_ip,
            now_ms: req.now_ms,
            // An operation's secrets are keyed by the credential its requests carry (SPEC §19).
            ids: Ids::for_operation(operation, req.authorization.as_deref().and_then(bearer_token)),
            idempotency_key: trace.idempotency_key.clone(),
            trace: trace.context.take().expect("the trace is known before serving"),
        };
        let answer = match upstream {
            Some(upstream) => self.proxy(upstream, &req.method, &path_and_query, &req.headers, &call).await,
            // An unknown query parameter is refused as an unknown body field is: after the claim.
            None => match route.check_query(call.query) {
                Ok(()) => self.execute(route.id, &call).await,
                Err(e) => Err(e),
            },
        }
        .map(Answer::Reply);
        Served { usage, answer, taken_claim, sealing: caller.sealing }
    }

    /// The operator's claim (SPEC §19: admin creates honour `Idempotency-Key`), in the operator's
    /// guard; its response is sealed under the admin token, which only the operator's requests carry.
    async fn operator_claim(&self, claim: &ClaimRequest) -> Result<Caller, ApiError> {
        let decision = self.guard.take_claim(OPERATOR_GUARD, claim).await.map_err(unavailable)?;
        Ok(Caller {
            key: None,
            key_hash: Some(OPERATOR_GUARD.to_owned()),
            usage: None,
            claim: Some(decision),
            sealing: Some(self.config.response_keys(&self.config.admin_token)),
        })
    }

    /// The stored response of a completed key: inline from the guard while the response store may
    /// not show it yet, then from the store, and from the guard's own copy when the store misses.
    /// Each copy is opened with the caller's sealing key; one that does not open (changed at rest)
    /// counts as a miss.
    pub(super) async fn replay(
        &self,
        api_key_id: &str,
        claim_object: &str,
        sealing: &Keyring,
        held: Option<KeptResponse>,
        idempotency_key: &str,
    ) -> Result<Answer, ApiError> {
        let entry = Entry { api_key_id, idempotency_key };
        let open = |kept: KeptResponse| kept.open(sealing, entry);
        let response = 'found: {
            if let Some(response) = held.and_then(open) {
                break 'found response;
            }
            let stored = self.responses.get(entry).await;
            if let Ok(Some(response)) = stored.clone().map(|kept| kept.and_then(open)) {
                break 'found response;
            }
            match self.guard.held_response(claim_object, idempotency_key).await {
                Ok(Some(kept)) => open(kept).ok_or_else(|| {
                    ApiError::unavailable("the completed claim's stored response does not open")
                })?,
                Ok(None) => {
                    return Err(ApiError::unavailable(
                        "completed idempotency claim without a stored response",
                    ))
                }
                Err(e) => {
                    return Err(ApiError::unavailable(format!("response store: {stored:?}; key guard: {e}")))
                }
            }
        };
        if response.not_stored {
            return Err(ApiError::new(
                ErrorCode::IdempotencyResponseNotStored,
                "This key completed with a response too large to keep; it is not executed again.",
            )
            .with_detail("header", idempotency::HEADER)
            .with_detail("original_request_id", response.request_id));
        }
        Ok(Answer::Replay(response))
    }

    pub(super) async fn execute(&self, route: RouteId, call: &Call<'_>) -> Result<Reply, ApiError> {
        match route {
            RouteId::Health => Ok(Reply::ok(json!({ "status": "ok" }))),
            RouteId::DeepHealth => {
                self.guard.ping().await.map_err(unavailable)?;
                Ok(Reply::ok(json!({ "status": "ok", "key_guard": "ok" })))
            }
            RouteId::CreateProject => self.create_project(call).await,
            RouteId::UpdateProject => self.update_project(call).await,
            RouteId::CreateOwnerKey => self.create_owner_key(call).await,
            RouteId::CreateProjectKey => self.create_project_key(call).await,
            RouteId::Me => Ok(Reply::ok(me(call))),
            RouteId::CreateKey => self.create_key(call).await,
            RouteId::ListKeys => self.list_keys(call).await,
            RouteId::UpdateKey => self.update_key(call).await,
            RouteId::RevokeKey => self.revoke_key(call).await,
            RouteId::RollKey => self.roll_key(call).await,
            RouteId::CreateIdentity => self.create_identity(call).await,
            RouteId::ListIdentities => self.list_identities(call).await,
            RouteId::GetIdentity => self.get_identity(call).await,
            RouteId::UpdateIdentity => self.update_identity(call).await,
            RouteId::DeleteIdentity => self.delete_identity(call).await,
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
            RouteId::SessionSegment => self.session_segment(call).await,
            RouteId::ListLogs => self.list_logs(call).await,
            RouteId::ListEvents => self.list_events(call).await,
            RouteId::GetLog => self.get_log(call).await,
            RouteId::KeyStats => self.key_stats(call).await,
            RouteId::KeysLastUsed => self.keys_last_used(call).await,
            RouteId::ProjectStats => self.project_stats(call).await,
            RouteId::ListArchives => self.list_archives(call).await,
            RouteId::GetArchive => self.get_archive(call).await,
            RouteId::CreateWebhook => self.create_webhook(call).await,
            RouteId::ListWebhooks => self.list_webhooks(call).await,
            RouteId::DeleteWebhook => self.delete_webhook(call).await,
            RouteId::UpdateWebhook => self.update_webhook(call).await,
            RouteId::RotateWebhookSecret => self.rotate_webhook_secret(call).await,
            RouteId::WebhookPublicKey => self.webhook_public_key(call).await,
            RouteId::RecoverDeliveries => self.recover_deliveries(call).await,
            RouteId::ListDeliveries => self.list_deliveries(call).await,
            RouteId::RetryDelivery => self.retry_delivery(call).await,
            RouteId::AuditPublicKey => self.audit_public_key(call).await,
            RouteId::AuditHead => self.audit_head(call).await,
            RouteId::AuditHealth => self.audit_health(call).await,
            RouteId::ListAuditDigests => self.list_audit_digests(call).await,
            RouteId::ListAuditObjects => self.list_audit_objects(call).await,
            RouteId::AuditFile => self.audit_file(call).await,
            RouteId::Usage => self.usage(call).await,
            RouteId::UsageRuns => self.usage_runs(call).await,
            RouteId::UsageFile => self.usage_file(call).await,
            RouteId::ReconcileUsage => self.reconcile_usage(call).await,
            RouteId::KeysOnPreviousPepper => self.keys_on_previous_pepper(call).await,
            RouteId::SecretsOnPreviousKey => self.secrets_on_previous_key(call).await,
            RouteId::PullDeliveries => self.pull_deliveries(call).await,
            RouteId::ReportDelivery => self.report_delivery(call).await,
            RouteId::TriggerEvent => self.trigger_event(call).await,
            RouteId::ListDeadLetters => self.list_dead_letters(call).await,
            RouteId::RedriveDeadLetters => self.redrive_dead_letters(call).await,
            RouteId::OriginEvent => self.origin_event(call).await,
            // Proxied requests are forwarded by `serve`, which knows their upstream.
            RouteId::Proxy => Err(ApiError::not_found("route")),
        }
    }
}

pub(super) fn route_miss<B>(miss: Miss, req: &ApiRequest<B>) -> ApiError {
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

pub(super) fn me(call: &Call<'_>) -> Value {
    let key = call.key();
    let usage = call.usage.as_ref().expect("admitted keys have usage");
    json!({
        "key_id": key.id,
        "prefix": key.prefix,
        "type": key.key_type,
        "project_id": key.project_id,
        "plan": key.plan,
        "expires_at": key.expires_at.map(rfc3339),
        "rate_limit": {
            "window": usage.window_name(),
            "limit": usage.limit(),
            "remaining": usage.remaining(),
            "reset": rfc3339(usage.reset_ms()),
            "windows": Window::ALL.iter().filter_map(|&w| usage.windows[w as usize].map(|u| json!({
                "window": w.name(),
                "limit": u.limit,
                "remaining": u.remaining,
                "reset": rfc3339(u.reset_ms),
            }))).collect::<Vec<_>>(),
        },
        "quota": {
            "used": usage.quota_used,
            "limit": usage.quota_limit,
            "resets_at": rfc3339(usage.quota_resets_ms),
        },
    })
}

/// What `req` presents for authentication (SPEC §2, §24).
fn presented<B>(req: &ApiRequest<B>) -> Presented<'_> {
    Presented {
        authorization: req.authorization.as_deref(),
        query_key: gatehouse_core::browser::query_key(&req.query),
        origin: req.page_origin.as_deref(),
        client_ip: req.client_ip.as_deref(),
    }
}
