//! Our queues' messages and the rules for a message that fails (SPEC §12.1): what any queue
//! carries, how long a failed message waits before its next try, which queue a dead-letter queue
//! serves, and the dead letters the operator lists and re-drives.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Value};

use super::audit::{AuditMessage, AuditRow};
use super::error::ApiError;
use super::events::EventBatch;
use super::page::{Cursor, PageRequest};
use super::tagged::{deserialize_tagged, field, unknown, Tagged};
use super::time::rfc3339;
use super::webhook::DeliveryMessage;

/// What any of our queues carries: messages say their kind, so one consumer serves every queue
/// whatever its name in an environment.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueMessage {
    Events(EventBatch),
    Audit(Box<AuditMessage>),
    Delivery(DeliveryMessage),
}

/// Each message type writes its kind first (serde's tag; [`pack`]).
impl Tagged for QueueMessage {
    const TAG: &'static str = "kind";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        Ok(match tag {
            "events" => Self::Events(EventBatch::Events { items: field(fields, "items")? }),
            "audit_rows" => Self::Audit(Box::new(AuditMessage::AuditRows { rows: field(fields, "rows")? })),
            "audit" => Self::Audit(Box::new(AuditMessage::Audit(Box::new(AuditRow::deserialize(fields)?)))),
            "delivery" => {
                Self::Delivery(DeliveryMessage::Delivery { delivery_id: field(fields, "delivery_id")? })
            }
            other => return Err(unknown(other, &["events", "audit_rows", "audit", "delivery"])),
        })
    }
}

deserialize_tagged!(QueueMessage);

impl QueueMessage {
    /// Reads a message body; the error says why no version of this worker can read it.
    pub fn parse(body: &str) -> Result<Self, String> {
        serde_json::from_str(body).map_err(|_| {
            let start: String = body.chars().take(80).collect();
            format!("unreadable message (not an events, audit or delivery message): {start}")
        })
    }
}

/// The most JSON one packed message carries: a queue message holds at most 128 KB, and 60 KiB
/// leaves room for the encoding's overhead (an event of up to 64 KiB travels alone).
pub const MESSAGE_MAX_BYTES: usize = 60 * 1024;
/// Packed messages per `sendBatch`, which takes at most 256 KB.
pub const MESSAGES_PER_SEND: usize = 2;

/// Packs items into message bodies `{"kind":kind,field:[item,…]}` of at most `max_bytes` each (an
/// item larger than that alone gets its own), in order: a message per item would cost one queue
/// operation, and one consumer message, per item. Each item is written once.
pub fn pack<T: Serialize>(items: &[T], kind: &str, field: &str, max_bytes: usize) -> Vec<String> {
    let head = format!(r#"{{"kind":"{kind}","{field}":["#);
    let mut packed = Vec::new();
    let mut body = String::new();
    for item in items {
        let json = serde_json::to_string(item).expect("our messages are JSON");
        if !body.is_empty() && body.len() + json.len() + 3 > max_bytes {
            body.push_str("]}");
            packed.push(std::mem::take(&mut body));
        }
        body.push_str(if body.is_empty() { &head } else { "," });
        body.push_str(&json);
    }
    if !body.is_empty() {
        body.push_str("]}");
        packed.push(body);
    }
    packed
}

/// The wait before a failed message's next try: `base · 2^(failures − 1)` seconds, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base_seconds: u32,
    pub max_seconds: u32,
}

impl RetryPolicy {
    /// The delay after the message's `failures`-th failure (1 for the first).
    pub fn delay_seconds(&self, failures: u32) -> u32 {
        let doublings = failures.saturating_sub(1).min(31);
        u64::from(self.base_seconds).saturating_mul(1 << doublings).min(u64::from(self.max_seconds)) as u32
    }

    /// How many times a message sent `age_seconds` ago has failed, judged from its age alone: each
    /// wait doubles, so a message that has waited `base · (2^n − 1)` seconds has failed `n` times.
    /// Used when the failure count cannot be read (D1 is what fails).
    pub fn failures_by_age(&self, age_seconds: u64) -> u32 {
        let base = u64::from(self.base_seconds.max(1));
        let mut failures = 1;
        while failures < 32 && base * ((1u64 << failures) - 1) <= age_seconds {
            failures += 1;
        }
        failures
    }
}

/// A short fingerprint of a message body (hex SHA-256), to find the failures counted for a message
/// that reached the dead-letter queue under another id.
pub fn body_digest(body: &str) -> String {
    use sha2::{Digest, Sha256};
    super::encoding::hex(&Sha256::digest(body.as_bytes()))
}

/// The marker in a dead-letter queue's name: `gatehouse-audit-dlq` (or `gatehouse-audit-dlq-staging`)
/// serves `gatehouse-audit` (`gatehouse-audit-staging`).
pub const DEAD_LETTER_MARK: &str = "-dlq";

/// For a dead-letter queue, the name of the queue it serves; `None` for any other queue.
pub fn served_queue(queue: &str) -> Option<String> {
    let at = queue.find(DEAD_LETTER_MARK)?;
    let rest = &queue[at + DEAD_LETTER_MARK.len()..];
    (rest.is_empty() || rest.starts_with('-')).then(|| format!("{}{rest}", &queue[..at]))
}

/// Which of our three queues a queue name is (its producer binding re-drives to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Audit,
    Events,
    Webhooks,
}

impl QueueKind {
    /// By the name's second segment: `gatehouse-audit`, `gatehouse-events-staging`, ….
    pub fn of(queue: &str) -> Option<Self> {
        match queue.split('-').nth(1)? {
            "audit" => Some(QueueKind::Audit),
            "events" => Some(QueueKind::Events),
            "webhooks" => Some(QueueKind::Webhooks),
            _ => None,
        }
    }
}

/// A message a consumer gave up on, kept in D1 (`dead_letters`) until the operator re-drives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The queue message id it arrived with (the dead-letter queue's, or the original queue's for
    /// a message no version can read), so a redelivered letter is kept once.
    pub id: String,
    /// The queue it came from and is re-driven to.
    pub queue: String,
    pub body: String,
    pub first_failed_at: i64,
    /// When it was kept.
    pub dead_at: i64,
    pub last_error: Option<String>,
    /// Failed tries counted by the consumer (0 when none could be counted).
    pub attempts: u32,
    pub redriven_at: Option<i64>,
}

impl DeadLetter {
    pub fn view(&self) -> Value {
        json!({
            "id": self.id,
            "queue": self.queue,
            "body": self.body,
            "first_failed_at": rfc3339(self.first_failed_at),
            "dead_at": rfc3339(self.dead_at),
            "last_error": self.last_error,
            "attempts": self.attempts,
            "status": if self.redriven_at.is_some() { "redriven" } else { "dead" },
            "redriven_at": self.redriven_at.map(rfc3339),
        })
    }

    /// Its place in the list (newest first by `dead_at`).
    pub fn position(&self) -> Cursor {
        Cursor { ts: self.dead_at, id: self.id.clone() }
    }
}

/// `GET /admin/v1/dead-letters`: the optional `queue` filter and the page.
pub fn dead_letter_page(query: &[(String, String)]) -> Result<(Option<String>, PageRequest), ApiError> {
    let page = PageRequest::from_query(query, 50, 200)?;
    let queue = query.iter().find(|(k, _)| k == "queue").map(|(_, v)| v.clone()).filter(|q| !q.is_empty());
    if queue.as_ref().is_some_and(|q| q.len() > 128) {
        return Err(ApiError::bad_request("queue is at most 128 characters").with_detail("field", "queue"));
    }
    Ok((queue, page))
}

/// The largest `ids` list one re-drive takes, and how many letters one re-drive of "all" sends.
pub const REDRIVE_MAX: usize = 500;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedriveBody {
    ids: Option<Vec<String>>,
}

/// `POST /admin/v1/dead-letters/redrive` `{ids?}`: the letters asked for, or `None` for all that
/// are not re-driven yet. An empty body means all.
pub fn redrive_request(body: &[u8]) -> Result<Option<Vec<String>>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let input: RedriveBody = super::json_body::parse(body)?;
    match input.ids {
        Some(ids) if ids.is_empty() || ids.len() > REDRIVE_MAX => {
            Err(ApiError::bad_request(format!("ids must list 1 to {REDRIVE_MAX} dead-letter ids"))
                .with_detail("field", "ids"))
        }
        ids => Ok(ids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_from_the_base_up_to_the_cap() {
        let policy = RetryPolicy { base_seconds: 5, max_seconds: 3600 };
        let delays: Vec<u32> = (1..=11).map(|n| policy.delay_seconds(n)).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600]);
        assert_eq!(policy.delay_seconds(0), 5);
        assert_eq!(policy.delay_seconds(u32::MAX), 3600);
        assert_eq!(RetryPolicy { base_seconds: 0, max_seconds: 10 }.delay_seconds(4), 0);
    }

    #[test]
    fn failures_are_judged_from_age_when_they_cannot_be_counted() {
        let policy = RetryPolicy { base_seconds: 5, max_seconds: 3600 };
        // Waits 5, 10, 20: a message 0-4 s old failed once, 5-14 s twice, 15-34 s three times.
        assert_eq!([0, 4, 5, 14, 15, 35].map(|age| policy.failures_by_age(age)), [1, 1, 2, 2, 3, 4]);
        assert_eq!(policy.failures_by_age(u64::MAX), 32);
    }

    #[test]
    fn a_dead_letter_queue_names_the_queue_it_serves() {
        assert_eq!(served_queue("gatehouse-audit-dlq").as_deref(), Some("gatehouse-audit"));
        assert_eq!(
            served_queue("gatehouse-webhooks-dlq-staging").as_deref(),
            Some("gatehouse-webhooks-staging")
        );
        assert_eq!(served_queue("gatehouse-events"), None);
        assert_eq!(served_queue("gatehouse-dlqx"), None);
        assert_eq!(QueueKind::of("gatehouse-events-staging"), Some(QueueKind::Events));
        assert_eq!(QueueKind::of("gatehouse-audit"), Some(QueueKind::Audit));
        assert_eq!(QueueKind::of("gatehouse-webhooks"), Some(QueueKind::Webhooks));
        assert_eq!(QueueKind::of("other"), None);
    }

    #[test]
    fn packed_rows_parse_back_in_order_and_no_message_outgrows_its_limit() {
        use crate::audit::AuditRow;
        let rows: Vec<AuditRow> = (0..50)
            .map(|i| AuditRow::new(format!("req-{i}"), i, "GET".into(), "/x".repeat(i as usize)))
            .collect();
        let unpack = |bodies: Vec<String>| -> Vec<AuditRow> {
            bodies
                .iter()
                .flat_map(|b| match QueueMessage::parse(b) {
                    Ok(QueueMessage::Audit(audit)) => audit.into_rows(),
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(pack(&rows, "audit_rows", "rows", MESSAGE_MAX_BYTES).len(), 1);
        assert_eq!(unpack(pack(&rows, "audit_rows", "rows", MESSAGE_MAX_BYTES)), rows);
        let small = pack(&rows, "audit_rows", "rows", 1_000);
        assert!(small.len() > 5 && small.iter().all(|b| b.len() <= 1_000), "{small:?}");
        assert_eq!(unpack(small), rows);
        // A row larger than the limit travels alone.
        let big = pack(&rows, "audit_rows", "rows", 10);
        assert_eq!(big.len(), rows.len());
        assert!(pack::<AuditRow>(&[], "audit_rows", "rows", 10).is_empty());
    }

    #[test]
    fn every_kind_of_message_parses_and_anything_else_is_unreadable() {
        let audit = r#"{"kind":"audit","ts":1,"request_id":"r","method":"GET","path":"/","status":200,
            "response_bytes":0,"response_time_ms":0,"replayed":false}"#;
        assert!(matches!(QueueMessage::parse(audit), Ok(QueueMessage::Audit(_))));
        let delivery = r#"{"kind":"delivery","delivery_id":"dlv_1"}"#;
        assert!(matches!(QueueMessage::parse(delivery), Ok(QueueMessage::Delivery(_))));
        assert!(matches!(
            QueueMessage::parse(r#"{"kind":"events","items":[]}"#),
            Ok(QueueMessage::Events(_))
        ));
        for bad in ["", "null", r#"{"kind":"v9"}"#, "not json"] {
            assert!(QueueMessage::parse(bad).unwrap_err().starts_with("unreadable message"), "{bad}");
        }
    }

    #[test]
    fn redrive_takes_all_or_a_bounded_list_of_ids() {
        assert_eq!(redrive_request(b"").unwrap(), None);
        assert_eq!(redrive_request(b"{}").unwrap(), None);
        assert_eq!(redrive_request(br#"{"ids":["a","b"]}"#).unwrap(), Some(vec!["a".into(), "b".into()]));
        assert_eq!(redrive_request(br#"{"ids":[]}"#).unwrap_err().status(), 400);
        assert_eq!(redrive_request(br#"{"ids":"a"}"#).unwrap_err().status(), 400);
        assert_eq!(redrive_request(br#"{"id":["a"]}"#).unwrap_err().status(), 400);
    }

    #[test]
    fn dead_letter_lists_filter_by_queue_and_page() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let (queue, page) = dead_letter_page(&q(&[("queue", "gatehouse-audit"), ("limit", "10")])).unwrap();
        assert_eq!((queue.as_deref(), page.limit), (Some("gatehouse-audit"), 10));
        assert_eq!(dead_letter_page(&q(&[("queue", "")])).unwrap().0, None);
        assert_eq!(dead_letter_page(&q(&[("limit", "0")])).unwrap_err().status(), 400);
    }
}
