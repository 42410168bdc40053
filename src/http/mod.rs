//! `worker::Request` → [`ApiRequest`], and [`ApiResponse`] → `worker::Response`. Nothing else.

use worker::{Headers, Request, Response, Result};

use crate::adapters::body::WorkerBody;
use crate::adapters::origin::{streamed, AnswerRest};
use crate::app::{ApiRequest, ApiResponse};

pub fn api_request(req: Request, now_ms: i64) -> Result<ApiRequest<WorkerBody>> {
    // The raw method string: `worker::Method` folds methods it does not know into GET.
    let method = req.inner().method();
    let url = req.url()?;
    let query = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let authorization = req.headers().get("authorization")?;
    let client_ip = req.headers().get("cf-connecting-ip")?;
    let idempotency_key = req.headers().get("idempotency-key")?;
    let user_agent = req.headers().get("user-agent")?;
    Ok(ApiRequest {
        method,
        path: url.path().to_owned(),
        query,
        raw_query: url.query().map(str::to_owned),
        user_agent,
        authorization,
        idempotency_key,
        client_ip,
        headers: req.headers().entries().collect(),
        body: WorkerBody::new(&req),
        now_ms,
    })
}

pub fn response(api: ApiResponse) -> Result<Response> {
    let headers = Headers::new();
    for (name, value) in &api.headers {
        headers.append(name, value)?;
    }
    // A proxied answer's own headers come after ours and never replace them (SPEC §15).
    for (name, value) in &api.origin_headers {
        headers.append(name, value)?;
    }
    let body = match api.passthrough.as_ref().and_then(|p| p.take::<AnswerRest>()) {
        Some(rest) => streamed(api.body, rest)?,
        // A null-body status (204, 304) takes no body, not even an empty one.
        None if matches!(api.status, 101 | 204 | 205 | 304) => Response::empty()?,
        None => Response::from_bytes(api.body)?,
    };
    Ok(body.with_status(api.status).with_headers(headers))
}
