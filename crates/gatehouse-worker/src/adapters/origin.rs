//! The [`Origin`] port over outbound `fetch` (an `http(s)` origin) or a Workers service binding:
//! no redirects followed; one deadline of the route's `timeout_ms` for the answer and the first
//! [`STORED_ANSWER_LIMIT`] bytes of its body; a longer body streams on to the client untimed.
//! A request body over 1 MiB streams to the origin from the client's own stream (JavaScript
//! pulls it chunk by chunk; wasm memory never holds it), cut at the route's `max_body_bytes`.

use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either};
use futures_util::StreamExt;
use js_sys::Uint8Array;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{AbortController, ByteStream, Delay, Env, Fetch, Request, Response};

use super::body::BodyRest;
use super::clock::now_ms;
use gatehouse_core::ports::{
    AnswerBody, Meter, Origin, OriginAnswer, OriginOutcome, OriginRequest, OutgoingBody, PassThrough,
};
use gatehouse_core::upstream::{OriginTarget, STORED_ANSWER_LIMIT};

#[wasm_bindgen(inline_js = r#"
export function continued(head, source, limit, state) {
  const reader = source instanceof ReadableStream ? source.getReader() : source;
  let sent = head.byteLength;
  let first = head.byteLength > 0 ? head : null;
  return new ReadableStream({
    async pull(controller) {
      if (first) { controller.enqueue(first); first = null; return; }
      const next = reader ? await reader.read() : { done: true };
      if (next.done) { controller.close(); return; }
      sent += next.value.byteLength;
      if (sent > limit) {
        state.tooLarge = true;
        controller.error(new Error("the request body is over the route's max_body_bytes"));
        return;
      }
      controller.enqueue(next.value);
    },
  });
}
export function wentOver(state) {
  return state.tooLarge === true;
}"#)]
extern "C" {
    /// A stream of `head`, then the rest of `source` (a reader or an unread stream), that errors
    /// (and sets `state.tooLarge`) at the byte past `limit`.
    fn continued(head: &Uint8Array, source: &JsValue, limit: f64, state: &js_sys::Object) -> JsValue;
    #[wasm_bindgen(js_name = wentOver)]
    fn went_over(state: &js_sys::Object) -> bool;
}

/// The origins of `UPSTREAMS`; `env` holds the service bindings. The time waited on the origin
/// goes to the request's meter (`Server-Timing: origin;dur`).
pub struct OriginClient {
    env: Env,
    meter: Rc<Meter>,
}

impl OriginClient {
    pub fn new(env: Env, meter: Rc<Meter>) -> Self {
        OriginClient { env, meter }
    }
}

/// The rest of a large answer, as `http::response` takes it back from a [`PassThrough`].
pub type AnswerRest = ByteStream;

impl Origin for OriginClient {
    async fn forward(&self, request: OriginRequest<'_>) -> OriginOutcome {
        let started = now_ms();
        let outcome = self.exchange(request).await;
        self.meter.origin_ms.set(Some(now_ms() - started));
        outcome
    }
}

impl OriginClient {
    /// The request sent and its answer's head read (the whole answer, when it is small), within
    /// the route's timeout.
    async fn exchange(&self, request: OriginRequest<'_>) -> OriginOutcome {
        let controller = AbortController::default();
        let body_state = js_sys::Object::new();
        let outgoing = match build(&request, &controller, &body_state) {
            Ok(r) => r,
            Err(e) => return OriginOutcome::Unreachable(format!("the request could not be made: {e}")),
        };
        let mut deadline = Delay::from(Duration::from_millis(request.timeout_ms));
        let sent = async {
            match request.target {
                OriginTarget::Url(_) => Fetch::Request(outgoing).send().await,
                OriginTarget::Service(binding) => self.env.service(binding)?.fetch_request(outgoing).await,
            }
        };
        let mut response = match select(pin!(sent), &mut deadline).await {
            Either::Left((Ok(response), _)) => response,
            Either::Left((Err(_), _)) if went_over(&body_state) => return OriginOutcome::BodyTooLarge,
            Either::Left((Err(e), _)) => return OriginOutcome::Unreachable(e.to_string()),
            Either::Right(_) => {
                controller.abort();
                return OriginOutcome::TimedOut;
            }
        };
        let status = response.status_code();
        let headers: Vec<(String, String)> = response.headers().entries().collect();
        let declared_len =
            response.headers().get("content-length").ok().flatten().and_then(|n| n.parse().ok());
        let Ok(mut stream) = response.stream() else {
            return OriginOutcome::Answered(OriginAnswer {
                status,
                headers,
                body: AnswerBody::Whole(Vec::new()),
            });
        };
        let mut head = Vec::new();
        let read = async {
            while head.len() <= STORED_ANSWER_LIMIT {
                match stream.next().await {
                    Some(Ok(chunk)) => head.extend_from_slice(&chunk),
                    Some(Err(e)) => return Err(e),
                    None => return Ok(true),
                }
            }
            Ok(false)
        };
        let body = match select(pin!(read), &mut deadline).await {
            Either::Left((Ok(true), _)) => AnswerBody::Whole(head),
            Either::Left((Ok(false), _)) => {
                AnswerBody::Streaming { head, rest: PassThrough::new::<AnswerRest>(stream), declared_len }
            }
            Either::Left((Err(e), _)) => {
                return OriginOutcome::Unreachable(format!("the answer broke off: {e}"))
            }
            Either::Right(_) => {
                controller.abort();
                return OriginOutcome::TimedOut;
            }
        };
        OriginOutcome::Answered(OriginAnswer { status, headers, body })
    }
}

/// The outgoing request, made once: method, headers, no redirects, the body, and the controller's
/// signal (which ends the subrequest when the deadline passes first). A streamed body marks
/// `body_state` when it went over its limit.
fn build(
    request: &OriginRequest<'_>,
    controller: &AbortController,
    body_state: &js_sys::Object,
) -> worker::Result<Request> {
    let headers = worker::web_sys::Headers::new()?;
    for (name, value) in &request.headers {
        headers.append(name, value)?;
    }
    let init = worker::web_sys::RequestInit::new();
    init.set_method(request.method);
    init.set_headers(&headers);
    init.set_redirect(worker::web_sys::RequestRedirect::Manual);
    init.set_signal(Some(&controller.signal()));
    if !matches!(request.method, "GET" | "HEAD") {
        match &request.body {
            OutgoingBody::Held([]) => {}
            OutgoingBody::Held(bytes) => init.set_body(&Uint8Array::from(*bytes).into()),
            OutgoingBody::Streamed { head, rest, limit } => {
                let rest = rest.take::<BodyRest>().ok_or_else(|| {
                    worker::Error::RustError("the rest of the request body was taken already".into())
                })?;
                let source: JsValue = match (rest.reader, rest.stream) {
                    (Some(reader), _) => reader.into(),
                    (None, Some(stream)) => stream.into(),
                    (None, None) => JsValue::NULL,
                };
                init.set_body(&continued(&Uint8Array::from(*head), &source, *limit as f64, body_state));
            }
        }
    }
    Ok(Request::from(worker::web_sys::Request::new_with_str_and_init(&request.url, &init)?))
}

/// The response for an answer too large to hold: the head read, then the origin's stream.
pub fn streamed(head: Vec<u8>, rest: AnswerRest) -> worker::Result<Response> {
    let head = futures_util::stream::once(async move { Ok::<Vec<u8>, worker::Error>(head) });
    Response::from_stream(head.chain(rest))
}
