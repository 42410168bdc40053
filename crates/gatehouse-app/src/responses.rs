//! Responses: an answer becomes status, headers and body (SPEC §3 error shape, §4 rate
//! headers, §5 replay headers), the CORS preflight of the ingestion routes, and the failure
//! before the pipeline could start.

use super::pipeline::Answer;
use super::{random, ApiResponse, Payload, Reply};
use gatehouse_core::audit::AuditRow;
use gatehouse_core::encoding::uuid_v7;
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::AnswerBody;
use gatehouse_core::problem;
use gatehouse_core::rate_limit::Usage;

/// What a web page's script may read of an ingestion answer (SPEC §7 routes, browser keys).
pub(super) const CORS_HEADERS: [(&str, &str); 2] = [
    ("access-control-allow-origin", "*"),
    (
        "access-control-expose-headers",
        "x-request-id, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, ratelimit, ratelimit-policy, server-timing",
    ),
];

/// The answer to a browser's CORS preflight for an ingestion route: any origin may POST with an
/// API key (keys travel in `Authorization`, never cookies, so no credentials mode is needed),
/// with the `Idempotency-Key` a browser may add and the trace context of SPEC §25.
pub(super) fn preflight(request_id: String, mut audit: AuditRow) -> ApiResponse {
    audit.status = 204;
    let mut headers = vec![("x-request-id", request_id.clone())];
    headers.extend(CORS_HEADERS.map(|(name, value)| (name, value.to_owned())));
    headers.push(("access-control-allow-methods", "POST".to_owned()));
    headers.push((
        "access-control-allow-headers",
        "authorization, content-type, idempotency-key, traceparent, tracestate".to_owned(),
    ));
    headers.push(("access-control-max-age", "86400".to_owned()));
    ApiResponse {
        status: 204,
        headers,
        body: Vec::new(),
        request_id,
        internal_error: None,
        settlements: Vec::new(),
        audit,
        audited: true,
        webhook_deliveries: Vec::new(),
        origin_headers: Vec::new(),
        passthrough: None,
    }
}

/// The response for a failure before the pipeline could start (e.g. bad configuration).
pub fn failure(error: ApiError, method: &str, path: &str, now_ms: i64) -> ApiResponse {
    let request_id = uuid_v7(now_ms, random());
    let mut audit = AuditRow::new(request_id.clone(), now_ms, method.to_owned(), path.to_owned());
    audit.error_code = Some(error.code.as_str().to_owned());
    let answer = Answered { usage: None, answer: Err(error), replays_created_as_ok: false };
    respond(request_id, answer, None, audit)
}

/// What the pipeline answered, with the usage its rate headers show.
pub(super) struct Answered {
    pub(super) usage: Option<Usage>,
    pub(super) answer: Result<Answer, ApiError>,
    /// SPEC §8: a release marker's replay answers 200 where the original said 201.
    pub(super) replays_created_as_ok: bool,
}

/// The response to `answered`; an error as problem details (SPEC §25) typed under `problem`,
/// the gateway's origin, when the client asked for them.
pub(super) fn respond(
    request_id: String,
    answered: Answered,
    problem: Option<&str>,
    mut audit: AuditRow,
) -> ApiResponse {
    let Answered { usage, answer, replays_created_as_ok } = answered;
    let mut content_type = "application/json";
    let mut headers = vec![("x-request-id", request_id.clone())];
    if let Some(usage) = usage {
        headers.extend(usage.headers());
    }
    let mut webhook_deliveries = Vec::new();
    let mut settlements = Vec::new();
    let mut origin_headers = Vec::new();
    let mut passthrough = None;
    let mut response_bytes = None;
    let mut proxied = false;
    let (status, body, internal_error) = match answer {
        Ok(Answer::Reply(Reply { status, body, log, deliveries, after })) => {
            webhook_deliveries = deliveries;
            settlements.extend(after.map(|s| *s));
            match body {
                Payload::Json(json) => (status, json.to_string().into_bytes(), log),
                Payload::File { content_type: file_type, bytes } => {
                    content_type = file_type;
                    (status, bytes, log)
                }
                Payload::Origin { headers, body } => {
                    proxied = true;
                    origin_headers = headers;
                    match body {
                        AnswerBody::Whole(bytes) => (status, bytes, log),
                        AnswerBody::Streaming { head, rest, declared_len } => {
                            response_bytes = declared_len;
                            passthrough = Some(rest);
                            (status, head, log)
                        }
                    }
                }
            }
        }
        Ok(Answer::Replay(stored)) => {
            headers.push(("idempotent-replayed", "1".to_owned()));
            headers.push(("idempotency-replayed", "true".to_owned()));
            let body = stored.body_bytes();
            headers.push(("x-original-request-id", stored.request_id));
            let status = if replays_created_as_ok && stored.status == 201 { 200 } else { stored.status };
            // Proxied answers are kept as base64 with their headers.
            proxied = stored.base64;
            origin_headers = stored.headers;
            (status, body, None)
        }
        Err(e) => {
            if let Some(seconds) = e.retry_after {
                headers.push(("retry-after", seconds.to_string()));
            }
            if !e.allow.is_empty() {
                headers.push(("allow", e.allow.join(", ")));
            }
            // Its shape follows `Accept` (SPEC §25): a cache keeps the two apart.
            headers.push(("vary", "Accept".to_owned()));
            let body = match problem {
                Some(origin) => {
                    content_type = problem::MEDIA_TYPE;
                    problem::document(&e, &request_id, origin)
                }
                None => e.body(&request_id),
            };
            (e.status(), body.to_string().into_bytes(), e.internal.clone())
        }
    };
    // A proxied answer carries the origin's content type, or none when the origin sent none.
    if !proxied {
        headers.insert(0, ("content-type", content_type.to_owned()));
    }
    audit.status = status;
    audit.response_bytes = response_bytes.unwrap_or(body.len() as u64);
    ApiResponse {
        status,
        headers,
        body,
        request_id,
        internal_error,
        settlements,
        audit,
        audited: true,
        webhook_deliveries,
        origin_headers,
        passthrough,
    }
}
