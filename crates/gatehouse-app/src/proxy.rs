//! Proxy mode (SPEC §15): a request under an `UPSTREAMS` prefix, admitted by the same pipeline
//! as a built-in route, forwarded to its origin with the identity headers and the gateway's
//! signature; and the origin's events, fanned out to the project's webhook subscriptions.

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{random, unavailable, Call, Gateway, Payload, Reply};
use gatehouse_core::encoding::object_id;
use gatehouse_core::error::{ApiError, ErrorCode};
use gatehouse_core::idempotency::{self, ClaimDecision};
use gatehouse_core::json_body;
use gatehouse_core::ports::{
    Origin, OriginEvent, OriginEventRecord, OriginOutcome, OriginRequest, OutgoingBody, Ports, WebhookStore,
};
use gatehouse_core::time::rfc3339;
use gatehouse_core::upstream::{
    answered_headers, forwarded_request_headers, identity_headers, SignedBody, SignedRequest, Upstream,
};
use gatehouse_core::webhook::{is_event_type, payload};

/// The methods a proxied route forwards (the runtime's `fetch` takes no others as they are).
const FORWARDED_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OriginEventInput {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    data: Value,
}

impl<P: Ports> Gateway<'_, P> {
    /// Forwards the admitted request to the upstream's origin and answers what it answered:
    /// 504 `UPSTREAM_TIMEOUT` without an answer in time, 502 `UPSTREAM_UNAVAILABLE` when it
    /// cannot be reached.
    pub(super) async fn proxy(
        &self,
        upstream: &Upstream,
        method: &str,
        path_and_query: &str,
        client_headers: &[(String, String)],
        call: &Call<'_>,
    ) -> Result<Reply, ApiError> {
        if !FORWARDED_METHODS.contains(&method) {
            let mut e = ApiError::new(ErrorCode::MethodNotAllowed, format!("{method} is not forwarded."))
                .with_detail("allow", FORWARDED_METHODS.to_vec());
            e.allow = FORWARDED_METHODS.to_vec();
            return Err(e);
        }
        let key = call.key();
        // `Config` refuses `UPSTREAMS` without an `ORIGIN_SECRET`.
        let secret = self.config.origin_secret.as_deref().unwrap_or_default();
        // What the origin receives, base path included, is what is signed (SPEC §19).
        let origin_path = upstream.origin_path(path_and_query);
        let (signed_body, body) = match &call.rest {
            // The runtime's fetch sends no body with a GET or HEAD: none is signed either.
            _ if matches!(method, "GET" | "HEAD") => (SignedBody::Held(&[]), OutgoingBody::Held(&[])),
            None => (SignedBody::Held(&call.body), OutgoingBody::Held(&call.body)),
            Some(rest) => (
                SignedBody::Streamed,
                OutgoingBody::Streamed {
                    head: &call.body,
                    rest: rest.clone(),
                    limit: upstream.max_body_bytes,
                },
            ),
        };
        let signed = SignedRequest {
            timestamp: call.now_ms.div_euclid(1000),
            method,
            path_and_query: &origin_path,
            request_id: call.request_id,
            project_id: &key.project_id,
            key_id: &key.id,
            key_type: key.key_type,
            client_ip: call.client_ip.unwrap_or_default(),
            body: signed_body,
        };
        let mut headers = forwarded_request_headers(client_headers, &call.trace);
        headers.extend(identity_headers(&signed, secret.as_bytes()));
        let request = OriginRequest {
            target: &upstream.origin,
            url: upstream.url(path_and_query),
            method,
            headers,
            body,
            timeout_ms: upstream.timeout_ms,
        };
        match self.origin.forward(request).await {
            OriginOutcome::Answered(answer) => Ok(Reply {
                status: answer.status,
                body: Payload::Origin { headers: answered_headers(&answer.headers), body: answer.body },
                log: None,
                deliveries: Vec::new(),
                after: None,
            }),
            OriginOutcome::TimedOut => Err(ApiError::new(
                ErrorCode::UpstreamTimeout,
                format!("The origin did not answer within {} ms.", upstream.timeout_ms),
            )
            .with_detail("timeout_ms", upstream.timeout_ms)),
            OriginOutcome::BodyTooLarge => Err(ApiError::payload_too_large(upstream.max_body_bytes)),
            OriginOutcome::BodyBroken(cause) => {
                Err(ApiError::bad_request("The request body could not be read.").with_detail("cause", cause))
            }
            OriginOutcome::Unreachable(cause) => {
                let mut e = ApiError::new(ErrorCode::UpstreamUnavailable, "The origin could not be reached.");
                e.internal = Some(format!("origin {}: {cause}", upstream.prefix));
                Err(e)
            }
        }
    }

    /// `POST /admin/v1/projects/{project_id}/events` `{type, data}` (EVENTS_SECRET, for the
    /// projects of `EVENTS_PROJECTS` if set): one delivery per matching active subscription,
    /// through the webhook engine. With an `Idempotency-Key` the event id derives from it, so a
    /// retried call writes no second delivery, and the key with another body is 409
    /// `IDEMPOTENCY_KEY_REUSED`.
    pub(super) async fn origin_event(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let project_id = call.params[0];
        if let Some(allowed) = &self.config.events_projects {
            if !allowed.iter().any(|p| p == project_id) {
                return Err(ApiError::forbidden(
                    "EVENTS_SECRET may not send events to this project (EVENTS_PROJECTS).",
                ));
            }
        }
        let input: OriginEventInput = json_body::parse(&call.body)?;
        if !is_event_type(&input.event_type) {
            return Err(ApiError::unprocessable("type must be 1–64 characters of a-z, 0-9, _ and .")
                .with_detail("field", "type"));
        }
        if input.event_type.starts_with(gatehouse_core::usage::RESERVED_EVENT_PREFIX) {
            return Err(ApiError::unprocessable("types starting usage. are the gateway's own (SPEC §22)")
                .with_detail("field", "type"));
        }
        let request = call.idempotency_key.as_ref().map(|_| {
            idempotency::fingerprint("POST", &format!("/admin/v1/projects/{project_id}/events"), &call.body)
        });
        let event_id = match &call.idempotency_key {
            Some(key) => {
                let digest = Sha256::digest(format!("{project_id}\n{key}").as_bytes());
                let mut bytes = [0u8; 16];
                bytes.copy_from_slice(&digest[..16]);
                object_id("evt", &bytes)
            }
            None => object_id("evt", &random()),
        };
        let deliveries =
            self.record_event(call, project_id, &event_id, &input.event_type, input.data, request).await?;
        let mut reply = Reply::accepted(json!({ "event_id": event_id, "deliveries": deliveries.len() }));
        reply.deliveries = deliveries;
        Ok(reply)
    }

    /// Writes one delivery of event `event_id` of `event_type` (`{id, type, created_at, data}`)
    /// per matching active subscription of the project, through the webhook engine: an origin's
    /// event, or a sample one (`POST /public/v1/webhooks/trigger`). `request`: the fingerprint of
    /// the request whose `Idempotency-Key` named the event id. Answers the deliveries to queue.
    pub(super) async fn record_event(
        &self,
        call: &Call<'_>,
        project_id: &str,
        event_id: &str,
        event_type: &str,
        data: Value,
        request: Option<String>,
    ) -> Result<Vec<String>, ApiError> {
        let event = OriginEvent {
            project_id: project_id.to_owned(),
            event_id: event_id.to_owned(),
            event_type: event_type.to_owned(),
            payload: payload(event_id, event_type, &rfc3339(call.now_ms), data).to_string(),
            request_id: call.request_id.to_owned(),
            traceparent: Some(call.trace.traceparent()),
            created_at: call.now_ms,
            request,
        };
        match self.store.record_origin_event(&event).await.map_err(unavailable)? {
            OriginEventRecord::Recorded(deliveries) => Ok(deliveries),
            OriginEventRecord::NoSuchProject => Err(ApiError::not_found("project")),
            // The key named another request: 409 as on every route (SPEC §5), not the first event.
            OriginEventRecord::Reused => {
                Err(idempotency::refusal(&ClaimDecision::Reused).expect("reused is refused"))
            }
        }
    }
}
