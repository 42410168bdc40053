//! `worker::Request` → [`ApiRequest`], and [`ApiResponse`] → `worker::Response`. Nothing else.

use worker::{Headers, Result};

use crate::adapters::body::WorkerBody;
use crate::adapters::origin::{streamed, AnswerRest};
use crate::app::{ApiRequest, ApiResponse};

/// The request as the pipeline reads it. Only the headers it uses are copied out of the runtime,
/// unless `forwards` says the path is proxied: then every header (SPEC §15 forwards most).
pub fn api_request(
    req: &web_sys::Request,
    url: &url::Url,
    now_ms: i64,
    forwards: impl Fn(&str) -> bool,
) -> ApiRequest<WorkerBody> {
    let headers = req.headers();
    let get = |name: &str| headers.get(name).ok().flatten();
    let body = WorkerBody::new(req, get("content-length"));
    let path = url.path().to_owned();
    let all_headers = if forwards(&path) { Headers(headers.clone()).entries().collect() } else { Vec::new() };
    ApiRequest {
        // The raw method string: `worker::Method` folds methods it does not know into GET.
        method: req.method(),
        query: url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect(),
        raw_query: url.query().map(str::to_owned),
        user_agent: get("user-agent"),
        authorization: get("authorization"),
        idempotency_key: get("idempotency-key"),
        client_ip: get("cf-connecting-ip"),
        headers: all_headers,
        path,
        body,
        now_ms,
    }
}

/// The runtime's response, built directly: the headers once, the body copied once.
pub fn response(api: ApiResponse) -> Result<web_sys::Response> {
    let headers = web_sys::Headers::new()?;
    for (name, value) in &api.headers {
        headers.append(name, value)?;
    }
    // A proxied answer's own headers come after ours and never replace them (SPEC §15).
    for (name, value) in &api.origin_headers {
        headers.append(name, value)?;
    }
    let init = web_sys::ResponseInit::new();
    init.set_status(api.status);
    init.set_headers_headers(&headers);
    let mut body = api.body;
    let response = match api.passthrough.as_ref().and_then(|p| p.take::<AnswerRest>()) {
        Some(rest) => {
            return Ok(streamed(body, rest)?.with_status(api.status).with_headers(Headers(headers)).into())
        }
        // A null-body status (204, 304) takes no body, not even an empty one.
        None if matches!(api.status, 101 | 204 | 205 | 304) => {
            web_sys::Response::new_with_opt_str_and_init(None, &init)
        }
        None => web_sys::Response::new_with_opt_u8_array_and_init(Some(&mut body), &init),
    };
    Ok(response?)
}
