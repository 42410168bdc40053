//! Deliveries: an event on its way to each matching subscription, the payload a subscriber
//! receives, one delivery's attempts as recorded, and how the API shows them.

use gatehouse_wire::webhooks as wire;

use serde_json::{json, Value};

/// Attempts recorded in full: the first 1 KiB of a receiver's answer.
pub const RESPONSE_EXCERPT_BYTES: usize = 1024;
/// The error recorded for an attempt whose worker stopped before it recorded an outcome: the next
/// attempt writes it down when it finds the lease run out. Whether the receiver got it is unknown.
pub const INTERRUPTED_ATTEMPT: &str = "interrupted: the worker stopped before recording an outcome";

/// The payload a subscriber receives: `{id, type, created_at, data}`.
pub fn payload(event_id: &str, event_type: &str, created_at: &str, data: Value) -> Value {
    json!({ "id": event_id, "type": event_type, "created_at": created_at, "data": data })
}

/// What an attempt keeps of the receiver's answer: its first [`RESPONSE_EXCERPT_BYTES`] bytes
/// as text, never longer than that many bytes (invalid UTF-8, or a character cut by the limit,
/// becomes U+FFFD and the text is cut back to a character boundary within the limit).
pub fn response_excerpt(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(RESPONSE_EXCERPT_BYTES)];
    let mut text = String::from_utf8_lossy(head).into_owned();
    let mut end = text.len().min(RESPONSE_EXCERPT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// What the webhook queue carries: a delivery to attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeliveryMessage {
    Delivery { delivery_id: String },
}

/// An event a request emitted, on its way into delivery rows for every matching subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingEvent {
    pub event_id: String,
    pub event_type: &'static str,
    /// The id of the row the event is about: deliveries are written only if it was.
    pub subject_id: String,
    pub payload: String,
    pub request_id: String,
    /// The `traceparent` its deliveries carry: the request's trace, its span as the parent.
    pub traceparent: Option<String>,
    pub project_id: String,
    pub created_at: i64,
}

impl OutgoingEvent {
    pub fn new(
        event_id: String,
        event_type: &'static str,
        subject_id: &str,
        data: Value,
        request_id: &str,
        project_id: &str,
        now_ms: i64,
    ) -> Self {
        let body = payload(&event_id, event_type, &crate::time::rfc3339(now_ms), data).to_string();
        OutgoingEvent {
            event_id,
            event_type,
            subject_id: subject_id.to_owned(),
            payload: body,
            request_id: request_id.to_owned(),
            traceparent: None,
            project_id: project_id.to_owned(),
            created_at: now_ms,
        }
    }
}

/// A delivery of one event to one subscription.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Delivery {
    pub id: String,
    pub project_id: String,
    pub webhook_id: String,
    pub event_id: String,
    pub event: String,
    pub payload: String,
    pub request_id: String,
    /// The W3C `traceparent` of the request that caused it (SPEC §25), sent with each attempt.
    #[serde(default)]
    pub traceparent: Option<String>,
    pub status: String,
    pub attempts: u32,
    /// The attempts taken before the schedule last started over (a recovery, SPEC §17): the
    /// schedule's step after an attempt is the one of `attempts - schedule_from`.
    #[serde(default)]
    pub schedule_from: u32,
    pub scheduled_at: i64,
    pub last_response_code: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One attempt, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Attempt {
    pub delivery_id: String,
    pub attempt: u32,
    pub started_at: i64,
    pub duration_ms: i64,
    pub response_code: Option<u16>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
}

impl Delivery {
    pub fn view(&self, attempts: &[Attempt]) -> Value {
        use crate::time::rfc3339;
        let attempts = attempts.iter().filter(|a| a.delivery_id == self.id).map(|a| wire::DeliveryAttempt {
            attempt: a.attempt,
            started_at: rfc3339(a.started_at),
            duration_ms: a.duration_ms,
            response_code: a.response_code,
            response_body: a.response_excerpt.clone(),
            error: a.error.clone(),
            next_retry_at: a.next_retry_at.map(rfc3339),
        });
        let delivery = wire::Delivery {
            id: self.id.clone(),
            webhook_id: self.webhook_id.clone(),
            event_id: self.event_id.clone(),
            event: self.event.clone(),
            request_id: self.request_id.clone(),
            // D1 holds only the three names (a CHECK constraint).
            status: wire::DeliveryStatus::parse(&self.status).unwrap_or(wire::DeliveryStatus::Unknown),
            attempt: self.attempts,
            scheduled_at: (self.status == "pending").then(|| rfc3339(self.scheduled_at)),
            last_response_code: self.last_response_code,
            last_error: self.last_error.clone(),
            created_at: rfc3339(self.created_at),
            payload: serde_json::from_str::<Value>(&self.payload).unwrap_or(Value::Null),
            attempts: attempts.collect(),
        };
        gatehouse_wire::to_json(&delivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC §19: an origin event's `data` reaches the subscriber with its numbers as written.
    #[test]
    fn a_payload_keeps_the_numbers_of_its_data_as_written() {
        let data: Value = serde_json::from_str(r#"{"amount":123456789012345678901234567890.10}"#).unwrap();
        let body = payload("evt_1", "order.paid", "2026-12-01T00:00:00Z", data).to_string();
        assert!(body.contains(r#""amount":123456789012345678901234567890.10"#), "{body}");
    }

    #[test]
    fn excerpts_keep_at_most_1_kib_of_text() {
        assert_eq!(response_excerpt(b"ok"), "ok");
        assert_eq!(response_excerpt(&[b'a'; 5000]).len(), RESPONSE_EXCERPT_BYTES);
        // A 3-byte character straddling the limit is not kept whole, and the text stays ≤ 1 KiB.
        let mut body = vec![b'a'; RESPONSE_EXCERPT_BYTES - 1];
        body.extend("€€".as_bytes());
        let kept = response_excerpt(&body);
        assert!(kept.len() <= RESPONSE_EXCERPT_BYTES && kept.starts_with("aaa"), "{}", kept.len());
        // Invalid bytes grow into U+FFFD (3 bytes each); the text is cut back within the limit.
        let kept = response_excerpt(&[0xff; 2000]);
        assert!(kept.len() <= RESPONSE_EXCERPT_BYTES && kept.chars().all(|c| c == '\u{fffd}'));
        assert_eq!(response_excerpt(&[]), "");
    }
}
