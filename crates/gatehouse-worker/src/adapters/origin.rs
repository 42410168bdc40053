//! The [`Origin`] port over outbound `fetch` (an `http(s)` origin) or a Workers service binding:
//! no redirects followed; one deadline of the route's `timeout_ms` for the answer and the first
//! [`STORED_ANSWER_LIMIT`] bytes of its body; a longer body streams on to the client untimed.
//! A request body over 1 MiB streams to the origin from the client's own stream (JavaScript
//! pulls it chunk by chunk; wasm memory never holds it), cut at the route's `max_body_bytes`.

use std::rc::Rc;

use futures_util::StreamExt;
use js_sys::Uint8Array;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsCast;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;
use worker::{ByteStream, Env, Response};

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
        // An errored body alone may end the origin's request as if complete: abort it, so the
        // origin sees the connection break off, never a short body.
        state.tooLarge = true;
        state.abort?.();
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
export function forward(method, url, head, body, service, limit, timeoutMs, state) {
  const controller = new AbortController();
  state.abort = () => controller.abort();
  let timer;
  const deadline = new Promise((resolve) => {
    timer = setTimeout(() => { controller.abort(); resolve(null); }, timeoutMs);
  });
  const answer = exchange(method, url, head, body, service, limit, controller.signal);
  return Promise.race([answer, deadline]).finally(() => clearTimeout(timer));
}
async function exchange(method, url, head, body, service, limit, signal) {
  let request;
  try {
    const headers = new Headers();
    const lines = head.split("\n");
    for (let i = 0; i + 1 < lines.length; i += 2) headers.append(lines[i], lines[i + 1]);
    request = new Request(url, { method, headers, body, redirect: "manual", signal });
  } catch (e) {
    throw new Error(`the request could not be made: ${e}`);
  }
  const response = await (service ? service.fetch(request) : fetch(request));
  let answerHead = "";
  for (const [name, value] of response.headers) answerHead += name + "\n" + value + "\n";
  if (response.body === null) return [response.status, answerHead, new Uint8Array(0), null];
  const reader = response.body.getReader();
  const chunks = [];
  let read = 0;
  try {
    while (read <= limit) {
      const next = await reader.read();
      if (next.done) return [response.status, answerHead, joined(chunks, read), null];
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
  return [response.status, answerHead, joined(chunks, read), new Response(rest)];
}
function joined(chunks, length) {
  if (chunks.length === 1) return chunks[0];
  const all = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) { all.set(chunk, at); at += chunk.byteLength; }
  return all;
}"#)]
extern "C" {
    /// A stream of `head`, then the rest of `source` (a reader or an unread stream), that errors
    /// at the byte past `limit`, sets `state.tooLarge` and aborts the request it is the body of
    /// (`forward` puts that in `state.abort`).
    fn continued(head: &Uint8Array, source: &JsValue, limit: f64, state: &js_sys::Object) -> JsValue;
    #[wasm_bindgen(js_name = wentOver)]
    fn went_over(state: &js_sys::Object) -> bool;
    /// Sends the request (`head`: its headers as `name\nvalue\n…`; `body`: undefined, bytes or a
    /// stream; through `service`, a service binding, when it is not undefined), no redirects
    /// followed, and resolves, in one crossing, to `[status, head, bytes, rest]`: the answer's
    /// headers as `head` is, its body's bytes up to the first chunk past `limit`, and `null` when
    /// that was all, else a `Response` whose body is the rest. Resolves to `null` when that took
    /// longer than `timeout_ms` (the subrequest is then aborted); the rest streams on untimed.
    #[wasm_bindgen(catch)]
    #[allow(clippy::too_many_arguments)]
    fn forward(
        method: &str,
        url: &str,
        head: &str,
        body: &JsValue,
        service: &JsValue,
        limit: f64,
        timeout_ms: f64,
        state: &js_sys::Object,
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
    /// the route's timeout: one crossing each way.
    async fn exchange(&self, request: OriginRequest<'_>) -> OriginOutcome {
        let body_state = js_sys::Object::new();
        let sent = outgoing_body(&request, &body_state).and_then(|body| {
            let service = match request.target {
                OriginTarget::Url(_) => JsValue::UNDEFINED,
                OriginTarget::Service(binding) => self.env.service(binding)?.into_rpc(),
            };
            let promise = forward(
                request.method,
                &request.url,
                &header_lines(&request.headers),
                &body,
                &service,
                STORED_ANSWER_LIMIT as f64,
                request.timeout_ms as f64,
                &body_state,
            )?;
            Ok(JsFuture::from(promise))
        });
        let answer = match sent {
            Ok(sent) => sent.await,
            Err(e) => return OriginOutcome::Unreachable(format!("the request could not be made: {e}")),
        };
        let answer: js_sys::Array = match answer {
            _ if went_over(&body_state) => return OriginOutcome::BodyTooLarge,
            Ok(answer) if answer.is_null() => return OriginOutcome::TimedOut,
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

/// The outgoing request's body: none for GET and HEAD or an empty one, the bytes held, or the
/// client's stream continued (which marks `body_state` when it goes over its limit).
fn outgoing_body(request: &OriginRequest<'_>, body_state: &js_sys::Object) -> worker::Result<JsValue> {
    if matches!(request.method, "GET" | "HEAD") {
        return Ok(JsValue::UNDEFINED);
    }
    Ok(match &request.body {
        OutgoingBody::Held([]) => JsValue::UNDEFINED,
        OutgoingBody::Held(bytes) => Uint8Array::from(*bytes).into(),
        OutgoingBody::Streamed { head, rest, limit } => {
            let rest = rest.take::<BodyRest>().ok_or_else(|| {
                worker::Error::RustError("the rest of the request body was taken already".into())
            })?;
            let source: JsValue = match (rest.reader, rest.stream) {
                (Some(reader), _) => reader.into(),
                (None, Some(stream)) => stream.into(),
                (None, None) => JsValue::NULL,
            };
            continued(&Uint8Array::from(*head), &source, *limit as f64, body_state)
        }
    })
}

/// The request's headers as `forward` takes them, `name\nvalue\n…` (neither holds a line feed:
/// the runtime refuses one in a header).
fn header_lines(headers: &[(String, String)]) -> String {
    let mut lines = String::with_capacity(headers.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
    for (name, value) in headers {
        lines.push_str(name);
        lines.push('\n');
        lines.push_str(value);
        lines.push('\n');
    }
    lines
}

/// The header pairs of `forward`'s answer, `name\nvalue\n…`.
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
