//! The runtime's `Request` → [`ApiRequest`], and [`ApiResponse`] → the runtime's `Response`.
//! Nothing else. Each string that crosses between wasm and JS costs a conversion of its own, so
//! the headers cross together: one text for the request's head, one for the response's.

use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{Headers, Result};

use crate::adapters::body::WorkerBody;
use crate::adapters::origin::{streamed, AnswerRest};
use gatehouse_app::{ApiRequest, ApiResponse};

#[wasm_bindgen(inline_js = r#"
const READ = ["content-length", "user-agent", "authorization", "idempotency-key", "cf-connecting-ip", "gatehouse-budget", "accept", "traceparent", "tracestate", "origin"];
export function requestHead(req) {
  let head = req.method + "\n" + req.url;
  for (const name of READ) {
    const value = req.headers.get(name);
    head += value === null ? "\n\0" : "\n" + value;
  }
  return head;
}
export function allHeaders(req) {
  let all = "";
  for (const [name, value] of req.headers) all += name + ":" + value + "\n";
  return all;
}
export function respond(status, head, body, nullBody) {
  const headers = [];
  for (const line of head.split("\n")) {
    if (line) {
      const colon = line.indexOf(":");
      headers.push([line.slice(0, colon), line.slice(colon + 1)]);
    }
  }
  return new Response(nullBody ? null : body, { status, headers });
}"#)]
extern "C" {
    /// Method, URL and the values of `READ` (`\0` for an absent one), one per line.
    #[wasm_bindgen(js_name = requestHead)]
    fn request_head(req: &web_sys::Request) -> String;
    /// Every header as `name:value` lines.
    #[wasm_bindgen(js_name = allHeaders)]
    fn all_headers(req: &web_sys::Request) -> String;
    #[wasm_bindgen(catch)]
    fn respond(
        status: u16,
        head: &str,
        body: &[u8],
        null_body: bool,
    ) -> std::result::Result<web_sys::Response, JsValue>;
}

/// What the entry reads of a request before the pipeline: its method and URL, and the headers
/// the pipeline uses.
pub struct RequestHead {
    pub method: String,
    pub url: String,
    content_length: Option<String>,
    user_agent: Option<String>,
    authorization: Option<String>,
    idempotency_key: Option<String>,
    client_ip: Option<String>,
    budget: Option<String>,
    accept: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    page_origin: Option<String>,
}

impl RequestHead {
    pub fn of(req: &web_sys::Request) -> Self {
        let head = request_head(req);
        let mut lines = head.split('\n').map(str::to_owned);
        let (method, url) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
        let mut header = || lines.next().filter(|v| v != "\0");
        RequestHead {
            method,
            url,
            content_length: header(),
            user_agent: header(),
            authorization: header(),
            idempotency_key: header(),
            client_ip: header(),
            budget: header(),
            accept: header(),
            traceparent: header(),
            tracestate: header(),
            page_origin: header(),
        }
    }
}

/// The request as the pipeline reads it. Only the headers it uses are copied out of the runtime,
/// unless `forwards` says the path is proxied: then every header (SPEC §15 forwards most).
pub fn api_request(
    req: &web_sys::Request,
    head: RequestHead,
    path: String,
    raw_query: Option<String>,
    now_ms: i64,
    forwards: impl Fn(&str) -> bool,
) -> ApiRequest<WorkerBody> {
    let body = WorkerBody::new(req, head.content_length);
    let headers = if forwards(&path) {
        all_headers(req)
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    } else {
        Vec::new()
    };
    let origin = gatehouse_core::route::origin_of(&head.url).to_owned();
    ApiRequest {
        // The raw method string: `worker::Method` folds methods it does not know into GET.
        method: head.method,
        origin,
        accept: head.accept,
        traceparent: head.traceparent,
        tracestate: head.tracestate,
        page_origin: head.page_origin,
        query: url::form_urlencoded::parse(raw_query.as_deref().unwrap_or("").as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        raw_query,
        user_agent: head.user_agent,
        authorization: head.authorization,
        idempotency_key: head.idempotency_key,
        client_ip: head.client_ip,
        budget: head.budget,
        headers,
        path,
        body,
        now_ms,
    }
}

/// The runtime's response, built directly: the headers in one text, the body copied once.
pub fn response(api: ApiResponse) -> Result<web_sys::Response> {
    // A proxied answer's own headers come after ours and never replace them (SPEC §15).
    let all = || {
        api.headers
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .chain(api.origin_headers.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    };
    if let Some(rest) = api.passthrough.as_ref().and_then(|p| p.take::<AnswerRest>()) {
        let headers = web_sys::Headers::new()?;
        for (name, value) in all() {
            headers.append(name, value)?;
        }
        return Ok(streamed(api.body, rest)?.with_status(api.status).with_headers(Headers(headers)).into());
    }
    // A null-body status (204, 304) takes no body, not even an empty one.
    let null_body = matches!(api.status, 101 | 204 | 205 | 304);
    built(api.status, all(), &api.body, null_body)
}

/// A response of `status`, `headers` and `body` (none when `null_body`), in one call.
pub fn built<'a>(
    status: u16,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    body: &[u8],
    null_body: bool,
) -> Result<web_sys::Response> {
    let mut head = String::with_capacity(512);
    for (name, value) in headers {
        // A line break would split a header in two, a colon in a name would move the split: the
        // runtime refuses both anyway.
        if name.contains(['\n', '\r', ':']) || value.contains(['\n', '\r']) {
            return Err(worker::Error::RustError(format!(
                "header {name:?}: a line break, or a colon in its name"
            )));
        }
        head.push_str(name);
        head.push(':');
        head.push_str(value);
        head.push('\n');
    }
    Ok(respond(status, &head, body, null_body)?)
}
