//! Webhooks (SPEC §10): subscription secrets, Standard Webhooks signatures, the retry schedule
//! with jitter, the receiver's `Retry-After`, and the rules a target URL must meet.

use std::net::{Ipv4Addr, Ipv6Addr};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use super::encoding::{base64, from_base64, hex};
use super::error::ApiError;

const SECRET_PREFIX: &str = "whsec_";
/// Attempts recorded in full: the first 1 KiB of a receiver's answer.
pub const RESPONSE_EXCERPT_BYTES: usize = 1024;
/// The error recorded for an attempt whose worker stopped before it recorded an outcome: the next
/// attempt writes it down when it finds the hold run out. Whether the receiver got it is unknown.
pub const INTERRUPTED_ATTEMPT: &str = "interrupted: the worker stopped before recording an outcome";
/// The event types the gateway emits.
pub const EVENT_TYPES: [&str; 4] =
    ["contact.created", "message.created", "scenario.run.started", "release_marker.created"];

/// `whsec_` + base64 of 24 random bytes.
pub fn new_secret(random: &[u8; 24]) -> String {
    format!("{SECRET_PREFIX}{}", base64(random))
}

/// The HMAC key of a secret: the base64-decoded part after `whsec_`.
pub fn signing_key(secret: &str) -> Option<Vec<u8>> {
    from_base64(secret.strip_prefix(SECRET_PREFIX)?)
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    parts.iter().for_each(|p| mac.update(p));
    mac.finalize().into_bytes().to_vec()
}

/// `webhook-signature` of Standard Webhooks: `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let ts = timestamp.to_string();
    format!("v1,{}", base64(&hmac(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()])))
}

/// `{prefix}-Signature`: `sha256=` + hex HMAC-SHA256 over the body.
pub fn body_signature(key: &[u8], body: &str) -> String {
    format!("sha256={}", hex(&hmac(key, &[body.as_bytes()])))
}

/// The headers of one attempt (SPEC §10), in order.
pub fn headers(
    prefix: &str,
    key: &[u8],
    delivery_id: &str,
    timestamp: i64,
    event: &str,
    request_id: &str,
    body: &str,
) -> Vec<(String, String)> {
    vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), delivery_id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), standard_signature(key, delivery_id, timestamp, body)),
        (format!("{prefix}-Event"), event.into()),
        (format!("{prefix}-Request-Id"), request_id.into()),
        (format!("{prefix}-Signature"), body_signature(key, body)),
    ]
}

/// The payload a subscriber receives: `{id, type, created_at, data}`.
pub fn payload(event_id: &str, event_type: &str, created_at: &str, data: Value) -> Value {
    json!({ "id": event_id, "type": event_type, "created_at": created_at, "data": data })
}

/// The longest receiver `Retry-After` honoured (SPEC §12.1): 24 hours.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 86_400;

/// Seconds to wait after the `failed_attempts`-th failed attempt, or `None` when the schedule is
/// used up and the delivery fails. `jitter` in [-1, 1] moves the delay by up to ±10 %; a longer
/// `Retry-After` from the receiver wins, up to [`MAX_RETRY_AFTER_SECONDS`].
pub fn retry_delay(
    failed_attempts: u32,
    schedule: &[u64],
    jitter: f64,
    retry_after: Option<u64>,
) -> Option<u64> {
    let base = *schedule.get(failed_attempts.checked_sub(1)? as usize)?;
    let jittered = (base as f64 * (1.0 + 0.1 * jitter.clamp(-1.0, 1.0))).round() as u64;
    Some(jittered.max(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECONDS)).max(1))
}

/// A receiver's `Retry-After`: delay-seconds, or an IMF-fixdate relative to `now_ms`; at most
/// [`MAX_RETRY_AFTER_SECONDS`] however far away it points (`99999999999`, a date in year 99999).
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<u64> {
    let v = value.trim();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(v) {
        // Too many digits for a u64 is still "later than the cap".
        return Some(v.parse::<u64>().unwrap_or(u64::MAX).min(MAX_RETRY_AFTER_SECONDS));
    }
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
    let parts: Vec<&str> = v.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" || !digits(parts[3]) {
        return None;
    }
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == parts[2])? + 1;
    let year = parts[3].trim_start_matches('0');
    if year.len() > 4 {
        return Some(MAX_RETRY_AFTER_SECONDS); // after the year 9999
    }
    let iso = format!("{year:0>4}-{month:02}-{:0>2}T{}Z", parts[1], parts[4]);
    let at = super::time::parse_rfc3339(&iso)?;
    let seconds = at.saturating_sub(now_ms).max(0) / 1000;
    Some((seconds as u64).min(MAX_RETRY_AFTER_SECONDS))
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

/// Checks a subscription URL: `https` only, and no loopback, private, link-local or metadata
/// target, unless `allow_private` (local development and tests).
pub fn check_url(raw: &str, allow_private: bool) -> Result<url::Url, ApiError> {
    let invalid = |why: &str| ApiError::unprocessable(format!("url {why}")).with_detail("field", "url");
    let url = url::Url::parse(raw).map_err(|_| invalid("is not an absolute URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(invalid("must use https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not contain credentials"));
    }
    let forbidden = match url.host() {
        None => return Err(invalid("has no host")),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            d == "localhost"
                || d.ends_with(".localhost")
                || d.ends_with(".internal")
                || d.ends_with(".local")
                || !d.contains('.')
        }
        Some(url::Host::Ipv4(ip)) => !public_v4(ip),
        Some(url::Host::Ipv6(ip)) => !public_v6(ip),
    };
    if forbidden && !allow_private {
        return Err(invalid("must not point to a loopback, private, link-local or metadata address"));
    }
    Ok(url)
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16, the cloud metadata range
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (RFC 6598)
        || a >= 224)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xff00) == 0xff00 // multicast
        || first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
}

/// `events` of a subscription: known types or `"*"`, at least one, no repeats.
pub fn check_events(events: &[String]) -> Result<(), ApiError> {
    let invalid = |why: String| ApiError::unprocessable(why).with_detail("field", "events");
    if events.is_empty() {
        return Err(invalid(r#"events must name at least one event type, or "*""#.into()));
    }
    for (i, e) in events.iter().enumerate() {
        if e != "*" && !EVENT_TYPES.contains(&e.as_str()) {
            return Err(invalid(format!("unknown event type {e:?}; known: {}", EVENT_TYPES.join(", ")))
                .with_detail("known", EVENT_TYPES.to_vec()));
        }
        if events[..i].contains(e) {
            return Err(invalid(format!("{e:?} is listed twice")));
        }
    }
    Ok(())
}

/// What the webhook queue carries: a delivery to attempt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeliveryMessage {
    Delivery { delivery_id: String },
}

/// A subscription.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Webhook {
    pub id: String,
    pub project_id: String,
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
    pub status: String,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
}

impl Webhook {
    /// As the API shows it; the secret only at creation.
    pub fn view(&self, with_secret: bool) -> Value {
        let mut v = json!({
            "id": self.id,
            "url": self.url,
            "events": self.events,
            "status": self.status,
            "disabled_reason": self.disabled_reason,
            "created_at": super::time::rfc3339(self.created_at),
        });
        if with_secret {
            v["secret"] = Value::String(self.secret.clone());
        }
        v
    }
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
        let body = payload(&event_id, event_type, &super::time::rfc3339(now_ms), data).to_string();
        OutgoingEvent {
            event_id,
            event_type,
            subject_id: subject_id.to_owned(),
            payload: body,
            request_id: request_id.to_owned(),
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
    pub status: String,
    pub attempts: u32,
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
        use super::time::rfc3339;
        json!({
            "id": self.id,
            "webhook_id": self.webhook_id,
            "event_id": self.event_id,
            "event": self.event,
            "request_id": self.request_id,
            "status": self.status,
            "attempt": self.attempts,
            "scheduled_at": if self.status == "pending" { Some(rfc3339(self.scheduled_at)) } else { None },
            "last_response_code": self.last_response_code,
            "last_error": self.last_error,
            "created_at": rfc3339(self.created_at),
            "payload": serde_json::from_str::<Value>(&self.payload).unwrap_or(Value::Null),
            "attempts": attempts.iter().filter(|a| a.delivery_id == self.id).map(|a| json!({
                "attempt": a.attempt,
                "started_at": rfc3339(a.started_at),
                "duration_ms": a.duration_ms,
                "response_code": a.response_code,
                "response_body": a.response_excerpt,
                "error": a.error,
                "next_retry_at": a.next_retry_at.map(rfc3339),
            })).collect::<Vec<_>>(),
        })
    }
}

/// What a receiver answered, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverOutcome {
    Answered {
        status: u16,
        retry_after: Option<String>,
        excerpt: String,
    },
    /// A timeout or a network error.
    Unreachable(String),
}

/// What one attempt decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub status: &'static str,
    pub next_attempt_ms: Option<i64>,
    pub response_code: Option<u16>,
    pub error: Option<String>,
    /// 410 Gone: the subscription is disabled and its pending deliveries fail.
    pub disable_subscription: bool,
}

/// Judges the `attempt`-th attempt (1-based): 2xx delivered; 410 fails and disables; anything
/// else is retried on the schedule, and fails when the schedule is used up.
pub fn judge(attempt: u32, reply: &ReceiverOutcome, schedule: &[u64], jitter: f64, now_ms: i64) -> Judgement {
    let (code, error, retry_after) = match reply {
        ReceiverOutcome::Answered { status, .. } if (200..300).contains(status) => {
            return Judgement {
                status: "delivered",
                next_attempt_ms: None,
                response_code: Some(*status),
                error: None,
                disable_subscription: false,
            };
        }
        ReceiverOutcome::Answered { status: 410, .. } => {
            return Judgement {
                status: "failed",
                next_attempt_ms: None,
                response_code: Some(410),
                error: Some("410 Gone: the subscription was disabled".into()),
                disable_subscription: true,
            };
        }
        ReceiverOutcome::Answered { status, retry_after, .. } => {
            let honoured = matches!(status, 429 | 503)
                .then(|| retry_after.as_deref().and_then(|v| parse_retry_after(v, now_ms)))
                .flatten();
            (Some(*status), Some(format!("receiver answered {status}")), honoured)
        }
        ReceiverOutcome::Unreachable(e) => (None, Some(e.clone()), None),
    };
    match retry_delay(attempt, schedule, jitter, retry_after) {
        Some(delay) => Judgement {
            status: "pending",
            next_attempt_ms: Some(
                now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX).saturating_mul(1000)),
            ),
            response_code: code,
            error,
            disable_subscription: false,
        },
        None => Judgement {
            status: "failed",
            next_attempt_ms: None,
            response_code: code,
            error,
            disable_subscription: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector published in the README, computed with Python's `hmac` module.
    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX";
    const ID: &str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W";
    const TS: i64 = 1_674_087_231;
    const BODY: &str = r#"{"id":"evt_1","type":"contact.created","created_at":"2026-11-29T08:48:32.123Z","data":{"id":"con_1"}}"#;

    #[test]
    fn signs_the_published_test_vector() {
        let key = signing_key(SECRET).unwrap();
        assert_eq!(key, (0u8..24).collect::<Vec<_>>());
        assert_eq!(standard_signature(&key, ID, TS, BODY), "v1,8rNxPiX2gpBK2xBV2nEJe+ZsU5vvmR2uJ17KtxQRURY=");
        assert_eq!(
            body_signature(&key, BODY),
            "sha256=ecc8ca8aaeedd26fe81e1b60575d0af93f999d134ec87c72fbcf94d367a673a0"
        );
        assert_eq!(new_secret(&std::array::from_fn(|i| i as u8)), SECRET);
        assert_eq!(signing_key("sk_nope"), None);
    }

    #[test]
    fn attempt_headers_carry_both_signatures_and_the_prefix() {
        let key = signing_key(SECRET).unwrap();
        let h = headers("X-Gatehouse", &key, ID, TS, "contact.created", "req-1", BODY);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("webhook-id"), Some(ID));
        assert_eq!(get("webhook-timestamp"), Some("1674087231"));
        assert_eq!(get("X-Gatehouse-Event"), Some("contact.created"));
        assert_eq!(get("X-Gatehouse-Request-Id"), Some("req-1"));
        assert!(get("X-Gatehouse-Signature").unwrap().starts_with("sha256="));
    }

    #[test]
    fn schedule_is_30s_5m_30m_2h_6h_then_none() {
        let s = [30, 300, 1800, 7200, 21600];
        let delays: Vec<_> = (1..=6).map(|n| retry_delay(n, &s, 0.0, None)).collect();
        assert_eq!(delays, [Some(30), Some(300), Some(1800), Some(7200), Some(21600), None]);
        assert_eq!(retry_delay(0, &s, 0.0, None), None);
        assert_eq!(retry_delay(1, &s, 1.0, None), Some(33));
        assert_eq!(retry_delay(1, &s, -1.0, None), Some(27));
        assert_eq!(retry_delay(2, &s, -5.0, None), Some(270), "jitter is clamped to ±10 %");
        assert_eq!(retry_delay(1, &s, 0.0, Some(120)), Some(120), "a longer Retry-After wins");
        assert_eq!(retry_delay(2, &s, 0.0, Some(120)), Some(300), "a shorter one does not");
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = super::super::time::parse_rfc3339("1994-11-06T08:49:00Z").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(120));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(37));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:48:00 GMT", now), Some(0), "a past date: now");
    }

    #[test]
    fn retry_after_is_honoured_up_to_24_hours_without_overflow() {
        let now = super::super::time::parse_rfc3339("2026-11-29T08:00:00Z").unwrap();
        assert_eq!(parse_retry_after("86400", now), Some(86_400));
        assert_eq!(parse_retry_after("86401", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("99999999999", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("184467440737095516150000", now), Some(86_400), "beyond u64");
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 08:00:00 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 99999999999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Sun, 29 Nov 2026 09:00:00 GMT", now), Some(3600));
        let s = [30, 300];
        assert_eq!(retry_delay(1, &s, 0.0, Some(u64::MAX)), Some(86_400), "capped even if unparsed");
        let answered = ReceiverOutcome::Answered {
            status: 429,
            retry_after: Some("99999999999".into()),
            excerpt: String::new(),
        };
        let j = judge(1, &answered, &s, 0.0, now);
        assert_eq!(j.next_attempt_ms, Some(now + 86_400_000));
        let far = judge(1, &answered, &[u64::MAX / 2], 1.0, i64::MAX - 5);
        assert_eq!(far.next_attempt_ms, Some(i64::MAX), "saturates instead of overflowing");
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

    #[test]
    fn urls_must_be_https_and_public() {
        assert!(check_url("https://hooks.example.com/in", false).is_ok());
        for bad in [
            "http://hooks.example.com/in",
            "ftp://example.com",
            "https://localhost/x",
            "https://api.localhost/x",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://172.16.0.1/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://metadata.google.internal/",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://[fe80::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://user:pw@example.com/",
            "https://intranet/",
            "not a url",
        ] {
            let e = check_url(bad, false).unwrap_err();
            assert_eq!((e.status(), e.details["field"].as_str()), (422, Some("url")), "{bad}");
        }
        assert!(check_url("http://127.0.0.1:9000/hook", true).is_ok(), "local development");
    }

    #[test]
    fn judges_attempts_by_status_and_schedule() {
        let s = [30, 300];
        let answered = |status, retry_after: Option<&str>| ReceiverOutcome::Answered {
            status,
            retry_after: retry_after.map(String::from),
            excerpt: String::new(),
        };
        assert_eq!(judge(1, &answered(204, None), &s, 0.0, 0).status, "delivered");
        let j = judge(1, &answered(500, None), &s, 0.0, 1000);
        assert_eq!((j.status, j.next_attempt_ms, j.response_code), ("pending", Some(31_000), Some(500)));
        assert_eq!(judge(3, &answered(500, None), &s, 0.0, 0).status, "failed");
        let gone = judge(1, &answered(410, None), &s, 0.0, 0);
        assert!(gone.disable_subscription && gone.status == "failed");
        assert_eq!(judge(1, &answered(503, Some("600")), &s, 0.0, 0).next_attempt_ms, Some(600_000));
        assert_eq!(
            judge(1, &answered(500, Some("600")), &s, 0.0, 0).next_attempt_ms,
            Some(30_000),
            "only 429/503"
        );
        let down = judge(2, &ReceiverOutcome::Unreachable("timed out".into()), &s, 0.0, 0);
        assert_eq!(
            (down.status, down.response_code, down.error.as_deref()),
            ("pending", None, Some("timed out"))
        );
    }

    #[test]
    fn events_are_known_types_or_star() {
        assert!(check_events(&["*".into()]).is_ok());
        assert!(check_events(&["contact.created".into(), "message.created".into()]).is_ok());
        assert!(check_events(&[]).is_err());
        assert!(check_events(&["contact.deleted".into()]).is_err());
        assert!(check_events(&["*".into(), "*".into()]).is_err());
    }
}
