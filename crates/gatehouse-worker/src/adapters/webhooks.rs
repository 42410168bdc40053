//! Webhook delivery over Cloudflare: the [`DeliveryQueue`] port over `WEBHOOK_QUEUE`, and the
//! [`WebhookClient`] port over outbound `fetch` (no redirects followed, one deadline for the answer
//! and its body, at most 1 KiB of the body read).

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{select, Either};
use futures_util::StreamExt;
use wasm_bindgen::JsValue;
use worker::{
    web_sys, AbortSignal, ByteStream, Delay, Fetch, Headers, MessageBuilder, Method, Queue, Request,
    RequestInit, RequestRedirect,
};

use gatehouse_core::ports::{DeliveryQueue, PortError, WebhookClient, WebhookPost};
use gatehouse_core::webhook::{response_excerpt, DeliveryMessage, ReceiverOutcome, RESPONSE_EXCERPT_BYTES};

pub const QUEUE_BINDING: &str = "WEBHOOK_QUEUE";

pub struct WebhookQueue {
    queue: Queue,
}

impl WebhookQueue {
    pub fn new(queue: Queue) -> Self {
        Self { queue }
    }
}

impl DeliveryQueue for WebhookQueue {
    async fn enqueue(&self, delivery_ids: &[String], delay_seconds: u32) -> Result<(), PortError> {
        for chunk in delivery_ids.chunks(100) {
            let messages = chunk
                .iter()
                .map(|id| {
                    let body = serde_json::to_string(&DeliveryMessage::Delivery { delivery_id: id.clone() })
                        .map_err(PortError::from_display)?;
                    Ok(MessageBuilder::new(body).delay_seconds(delay_seconds).build())
                })
                .collect::<Result<Vec<_>, PortError>>()?;
            self.queue.send_batch(messages).await.map_err(PortError::from_display)?;
        }
        Ok(())
    }
}

/// Outbound `fetch` to receivers. Whatever a receiver does (refuses, hangs, resets, redirects,
/// streams an endless body) becomes a [`ReceiverOutcome`]: this never fails and never panics. One deadline
/// of `timeout_ms` covers the request and the reading of the body; the body is read chunk by chunk
/// only up to [`RESPONSE_EXCERPT_BYTES`], then its stream is cancelled.
pub struct FetchClient;

impl WebhookClient for FetchClient {
    async fn post(&self, attempt: &WebhookPost<'_>) -> ReceiverOutcome {
        let WebhookPost { url, headers, body, timeout_ms } = *attempt;
        let no_answer = || ReceiverOutcome::Unreachable(format!("no answer within {timeout_ms} ms"));
        let request = match request(url, headers, body) {
            Ok(request) => request,
            Err(e) => return ReceiverOutcome::Unreachable(format!("the request could not be made: {e}")),
        };
        // The signal aborts the fetch and its body in the runtime; the timer bounds our awaits.
        let mut deadline = Delay::from(Duration::from_millis(timeout_ms));
        let signal: AbortSignal =
            web_sys::AbortSignal::timeout_with_u32(timeout_ms.min(u64::from(u32::MAX)) as u32).into();
        let fetch = Fetch::Request(request);
        let mut response = match select(pin!(fetch.send_with_signal(&signal)), &mut deadline).await {
            Either::Left((Ok(response), _)) => response,
            Either::Left((Err(e), _)) => {
                let text = e.to_string();
                let timed_out = text.contains("TimeoutError") || text.contains("abort");
                return if timed_out { no_answer() } else { ReceiverOutcome::Unreachable(text) };
            }
            Either::Right(_) => return no_answer(),
        };
        let status = response.status_code();
        let retry_after = response.headers().get("retry-after").ok().flatten();
        let mut head = Vec::new();
        if let Ok(stream) = response.stream() {
            // Up to the deadline; dropping the stream (here or on timeout) cancels the rest.
            let _ = select(pin!(read_head(stream, &mut head)), &mut deadline).await;
        }
        ReceiverOutcome::Answered { status, retry_after, excerpt: response_excerpt(&head) }
    }
}

fn request(url: &str, headers: &[(String, String)], body: &str) -> worker::Result<Request> {
    let h = Headers::new();
    for (name, value) in headers {
        h.set(name, value)?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(h)
        .with_body(Some(JsValue::from_str(body)))
        .with_redirect(RequestRedirect::Manual);
    Request::new_with_init(url, &init)
}

/// Reads chunks into `head` until it holds [`RESPONSE_EXCERPT_BYTES`] or the body ends or fails;
/// the stream is dropped, and so cancelled, when this returns or is dropped.
async fn read_head(mut stream: ByteStream, head: &mut Vec<u8>) {
    while head.len() < RESPONSE_EXCERPT_BYTES {
        match stream.next().await {
            Some(Ok(chunk)) => {
                let room = RESPONSE_EXCERPT_BYTES - head.len();
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Some(Err(_)) | None => break,
        }
    }
}
