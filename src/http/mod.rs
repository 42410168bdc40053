//! `worker::Request` → [`ApiRequest`], and [`ApiResponse`] → `worker::Response`. Nothing else.

use worker::{Headers, Request, Response, Result};

use crate::adapters::body::WorkerBody;
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
        body: WorkerBody::new(&req),
        now_ms,
    })
}

pub fn response(api: ApiResponse) -> Result<Response> {
    let headers = Headers::new();
    for (name, value) in &api.headers {
        headers.append(name, value)?;
    }
    Ok(Response::from_bytes(api.body)?.with_status(api.status).with_headers(headers))
}
