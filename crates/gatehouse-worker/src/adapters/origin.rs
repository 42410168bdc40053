//! The [`Origin`] port over outbound `fetch` (an `http(s)` origin) or a Workers service binding:
//! no redirects followed; one deadline of the route's `timeout_ms` for the answer and the first
//! [`STORED_ANSWER_LIMIT`] bytes of its body; a longer body streams on to the client untimed.
//! A request body over 1 MiB streams to the origin from the client's own stream (JavaScript
//! pulls it chunk by chunk; wasm memory never holds it), cut at the route's `max_body_bytes`:
//! past that byte, or when the client's stream breaks off, the origin's request is aborted (an
//! errored body alone would end it as if complete).

use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{select, Either};
use futures_util::StreamExt;
use js_sys::Uint8Array;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsCast;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use worker::web_sys::AbortController;
use worker::{ByteStream, Delay, Env, Response};

use super::body::BodyRest;
use super::clock::now_ms;
use gatehouse_core::ports::{
    AnswerBody, Meter, Origin, OriginAnswer, OriginOutcome, OriginRequest, OutgoingBody, PassThrough,
};
use gatehouse_core::upstream::{OriginTarget, STORED_ANSWER_LIMIT};

#[wasm_bindgen(inline_js = r#"
export function continued(head, source, limit, state, request) {
  const reader = source instanceof ReadableStream ? source.getReader() : source;
  let sent = head.byteLength;
  let first = head.byteLength > 0 ? head : null;
  return new ReadableStream({
    async pull(controller) {
      if (first) { controller.enqueue(first); first = null; return; }
      let next;
      try {
        next = reader ? await reader.read() : { done: true };
      } catch (e) {
        // The client's stream broke off: an errored body alone may end the origin's request as
        // if complete, so abort it.
        state.broken = String(e);
        request.abort();
        controller.error(e);
        return;
      }
      if (next.done) { controller.close(); return; }
      sent += next.value.byteLength;
      if (sent > limit) {
        // Abort the origin's request (as above), so the origin sees it break off, never a short body.
        state.tooLarge = true;
        request.abort();
        controller.error(new Error("the request body is over the route's max_body_bytes"));
        return;
      }
      controller.enqueue(next.value);
    },
  });
}
export function wentOver(state) {
  return state.tooLarge === true;
}
export function brokenOff(state) {
  return state.broken;
}
export async function fetchAnswer(request, service, limit) {
  const response = await (service ? service.fetch(request) : fetch(request));
  let head = "";
  for (const [name, value] of response.headers) head += name + "\n" + value + "\n";
  if (response.body === null) return [response.status, head, new Uint8Array(0), null];
  const reader = response.body.getReader();
  const chunks = [];
  let read = 0;
  try {
    while (read <= limit) {
      const next = await reader.read();
      if (next.done) return [response.status, head, joined(chunks, read), null];
      chunks.push(next.value);
      read += next.value.byteLength;
    }
  } catch (e) {
    throw new Error(`the answer broke off: ${e}`);
  }
  const rest = new ReadableStream({
    async pull(controller) {
      const next = await reader.read();
      if (next.done) controller.close(); else controller.enqueue(next.value);
    },
    cancel(reason) { return reader.cancel(reason); },
  });
  return [response.status, head, joined(chunks, read), new Response(rest)];
}
function joined(chunks, length) {
  if (chunks.length === 1) return chunks[0];
  const all = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) { all.set(chunk, at); at += chunk.byteLength; }
  return all;
}"#)]
extern "C" {
    /// A stream of `head`, then the rest of `source` (a reader or an unread stream). At the byte
    /// past `limit` it sets `state.tooLarge`, when `source` breaks off `state.broken` (the cause),
    /// and either way it errors and aborts the request it is the body of (through `request`, its
    /// `AbortController`).
    fn continued(
        head: &Uint8Array,
        source: &JsValue,
        limit: f64,
        state: &js_sys::Object,
        request: &AbortController,
    ) -> JsValue;
    #[wasm_bindgen(js_name = wentOver)]
    fn went_over(state: &js_sys::Object) -> bool;
    #[wasm_bindgen(js_name = brokenOff)]
    fn broken_off(state: &js_sys::Object) -> Option<String>;
    /// Sends `request` (through `service`, a service binding, when it is not undefined) and
    /// resolves, in one crossing, to `[status, head, bytes, rest]`: the answer's headers as
    /// `name\nvalue\n…` (neither may hold a line feed), its body's bytes up to the first chunk
    /// past `limit`, and `null` when that was all, else a `Response` whose body is the rest.
    #[wasm_bindgen(catch, js_name = fetchAnswer)]
    fn fetch_answer(
        request: &worker::web_sys::Request,
        service: &JsValue,
        limit: f64,
    ) -> Result<js_sys::Promise, JsValue>;
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
        let Ok(controller) = AbortController::new() else {
            return OriginOutcome::Unreachable("the request could not be made: no AbortController".into());
        };
        let body_state = js_sys::Object::new();
        let streamed = matches!(request.body, OutgoingBody::Streamed { .. });
        let sent = build(&request, &controller, &body_state).and_then(|outgoing| {
            let service = match request.target {
                OriginTarget::Url(_) => JsValue::UNDEFINED,
                OriginTarget::Service(binding) => self.env.service(binding)?.into_rpc(),
            };
            Ok(JsFuture::from(fetch_answer(&outgoing, &service, STORED_ANSWER_LIMIT as f64)?))
        });
        let sent = match sent {
            Ok(sent) => sent,
            Err(e) => return OriginOutcome::Unreachable(format!("the request could not be made: {e}")),
        };
        let deadline = Delay::from(Duration::from_millis(request.timeout_ms));
        let answer = match select(pin!(sent), deadline).await {
            Either::Left((answer, _)) => answer,
            Either::Right(_) => {
                controller.abort();
                return OriginOutcome::TimedOut;
            }
        };
        // A streamed body that went over its limit or broke off ends the call, even if the origin
        // answered what it got.
        if streamed {
            if went_over(&body_state) {
                return OriginOutcome::BodyTooLarge;
            }
            if let Some(cause) = broken_off(&body_state) {
                return OriginOutcome::BodyBroken(cause);
            }
        }
        let answer: js_sys::Array = match answer {
            Ok(answer) => answer.unchecked_into(),
            Err(e) => return OriginOutcome::Unreachable(message(e)),
        };
        let status = answer.get(0).as_f64().unwrap_or_default() as u16;
        let headers = header_pairs(&answer.get(1).as_string().unwrap_or_default());
        let head = answer.get(2).unchecked_into::<Uint8Array>().to_vec();
        let rest = answer.get(3);
        let body = if rest.is_null() {
            AnswerBody::Whole(head)
        } else {
            // Longer than is kept: the rest streams on to the client, untimed.
            let declared_len =
                headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok());
            match Response::from(rest.unchecked_into::<worker::web_sys::Response>()).stream() {
                Ok(stream) => {
                    AnswerBody::Streaming { head, rest: PassThrough::new::<AnswerRest>(stream), declared_len }
                }
                Err(e) => return OriginOutcome::Unreachable(format!("the answer's stream: {e}")),
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
) -> worker::Result<worker::web_sys::Request> {
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
                let body =
                    continued(&Uint8Array::from(*head), &source, *limit as f64, body_state, controller);
                init.set_body(&body);
            }
        }
    }
    Ok(worker::web_sys::Request::new_with_str_and_init(&request.url, &init)?)
}

/// The header pairs of `fetchAnswer`'s `name\nvalue\n…`.
fn header_pairs(head: &str) -> Vec<(String, String)> {
    let mut lines = head.split('\n');
    let mut pairs = Vec::new();
    while let (Some(name), Some(value)) = (lines.next(), lines.next()) {
        pairs.push((name.to_owned(), value.to_owned()));
    }
    pairs
}

/// A JavaScript exception's text, as `worker::Error` words it.
fn message(e: JsValue) -> String {
    worker::Error::from(e).to_string()
}

/// The response for an answer too large to hold: the head read, then the origin's stream.
pub fn streamed(head: Vec<u8>, rest: AnswerRest) -> worker::Result<Response> {
    let head = futures_util::stream::once(async move { Ok::<Vec<u8>, worker::Error>(head) });
    Response::from_stream(head.chain(rest))
}
