//! Webhook delivery over Cloudflare: the [`DeliveryQueue`] port over `WEBHOOK_QUEUE`, and the
//! [`WebhookClient`] port over outbound `fetch` (no redirects followed, aborted at the timeout).

use wasm_bindgen::JsValue;
use worker::{
    web_sys, AbortSignal, Fetch, Headers, MessageBuilder, Method, Queue, Request, RequestInit,
    RequestRedirect,
};

use crate::core::webhook::{DeliveryMessage, Reply, RESPONSE_EXCERPT_BYTES};
use crate::ports::{DeliveryQueue, PortError, WebhookClient};

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

pub struct FetchClient;

impl WebhookClient for FetchClient {
    async fn post(&self, url: &str, headers: &[(String, String)], body: &str, timeout_ms: u64) -> Reply {
        let sent = async {
            let h = Headers::new();
            for (name, value) in headers {
                h.set(name, value)?;
            }
            let mut init = RequestInit::new();
            init.with_method(Method::Post)
                .with_headers(h)
                .with_body(Some(JsValue::from_str(body)))
                .with_redirect(RequestRedirect::Manual);
            let signal: AbortSignal = web_sys::AbortSignal::timeout_with_u32(timeout_ms as u32).into();
            let mut response =
                Fetch::Request(Request::new_with_init(url, &init)?).send_with_signal(&signal).await?;
            let status = response.status_code();
            let retry_after = response.headers().get("retry-after")?;
            let bytes = response.bytes().await.unwrap_or_default();
            let excerpt =
                String::from_utf8_lossy(&bytes[..bytes.len().min(RESPONSE_EXCERPT_BYTES)]).into_owned();
            Ok::<_, worker::Error>(Reply::Answered { status, retry_after, excerpt })
        };
        match sent.await {
            Ok(reply) => reply,
            Err(e) => {
                let text = e.to_string();
                let timed_out = text.contains("TimeoutError") || text.contains("abort");
                Reply::Unreachable(if timed_out { format!("no answer within {timeout_ms} ms") } else { text })
            }
        }
    }
}
