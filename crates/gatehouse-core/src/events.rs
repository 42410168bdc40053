//! Event ingestion rules (SPEC §7): `event_id` normalisation, item validation, the de-duplication
//! namespace, and the messages that carry accepted events to the events queue.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};

use super::api_key::KeyType;
use super::error::ApiError;
use super::tagged::{deserialize_tagged, unknown, Tagged};

/// Items in one `/v1/track` call.
pub const TRACK_MAX_ITEMS: usize = 500;
/// Body limit of the ingestion routes.
pub const INGEST_BODY_LIMIT: usize = 512 * 1024;
/// One event's serialised size at most: it must fit a queue message with room to spare.
pub const EVENT_MAX_BYTES: usize = 64 * 1024;

/// The lowercase hyphenated form of an `event_id` given as a UUID in any case, with braces, as a
/// `urn:uuid:` or as 32 hex digits; `None` when it is not a UUID.
pub fn normalize_event_id(raw: &str) -> Option<String> {
    uuid::Uuid::try_parse(raw.trim()).ok().map(|u| u.hyphenated().to_string())
}

/// The namespace duplicates are judged in: one project, one key type (SPEC §7: browser and server
/// events never collide). It names the de-duplication object.
pub fn dedup_namespace(project_id: &str, key_type: KeyType) -> String {
    format!("events:{project_id}:{}", key_type.as_str())
}

/// The longest id that becomes part of a storage key (`anonymous_id`, `user_id`, `session_id`), in
/// UTF-8 bytes: percent-encoded (at most 3 bytes each) it stays far inside R2's 1,024-byte keys
/// and D1's index entries (SPEC §19: a 4xx, never a write the platform refuses).
pub const ID_MAX_BYTES: usize = 200;

/// A 422 unless `value` is 1 to [`ID_MAX_BYTES`] bytes and not blank.
pub fn check_id(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() || value.len() > ID_MAX_BYTES {
        return Err(ApiError::unprocessable(format!("{field} must be 1 to {ID_MAX_BYTES} bytes (UTF-8)"))
            .with_detail("field", field)
            .with_detail("max_bytes", ID_MAX_BYTES));
    }
    Ok(())
}

/// A 413 unless `traits` of an `identify` serialise to at most [`EVENT_MAX_BYTES`]: they travel as
/// one event in one queue message (SPEC §19: a queue message is at most 128 KB).
pub fn check_traits(traits: &Map<String, Value>) -> Result<(), ApiError> {
    let bytes = serde_json::to_string(traits).map_or(usize::MAX, |s| s.len());
    if bytes > EVENT_MAX_BYTES {
        return Err(ApiError::new(
            super::error::ErrorCode::PayloadTooLarge,
            format!("traits may be at most {EVENT_MAX_BYTES} bytes as JSON"),
        )
        .with_detail("field", "traits")
        .with_detail("limit_bytes", EVENT_MAX_BYTES));
    }
    Ok(())
}

/// Where a session-recording segment is kept in R2 (SPEC §13): `replay/{project_id}/{session_id}/{chunk}`,
/// the session id as one path segment (`/` and `%` percent-encoded), so ids never collide.
pub fn recording_object_key(project_id: &str, session_id: &str, chunk: u32) -> String {
    format!("replay/{project_id}/{}/{chunk}", super::encoding::path_segment(session_id))
}

/// How long a reservation holds before its request confirms it (its events are queued): a
/// request that died in between frees its ids after this.
pub const RESERVATION_LEASE_MS: i64 = 60_000;

/// What the ledger holds for one id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub owner: String,
    pub confirmed: bool,
    /// When it was reserved (pending) or confirmed.
    pub at_ms: i64,
}

/// The ledger's answer for one id of a reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reserved {
    /// Reserved for this request now (or already by it): send it, then confirm.
    Fresh,
    /// Accepted by a request within the window.
    Duplicate,
    /// Reserved by another request that has not confirmed yet: retry shortly.
    InFlight,
}

/// The atomic reserve's decision for one id, given what the ledger holds for it.
pub fn reserve(existing: Option<&Reservation>, owner: &str, now_ms: i64, window_ms: i64) -> Reserved {
    match existing {
        Some(r) if r.confirmed && r.at_ms > now_ms - window_ms => Reserved::Duplicate,
        Some(r) if !r.confirmed && r.owner != owner && r.at_ms > now_ms - RESERVATION_LEASE_MS => {
            Reserved::InFlight
        }
        _ => Reserved::Fresh,
    }
}

/// An id another request is sending right now.
pub fn in_flight() -> Rejection {
    Rejection {
        code: "EVENT_IN_FLIGHT",
        message: "another request with this event_id is being accepted; retry this event shortly".into(),
    }
}

/// One item of a track batch, as the client may send it (all loose: each field is checked so
/// that one bad item is rejected alone).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TrackItem {
    pub event_id: Option<Value>,
    pub event: Option<Value>,
    pub anonymous_id: Option<Value>,
    pub user_id: Option<Value>,
    pub timestamp: Option<Value>,
    pub properties: Option<Value>,
}

/// An accepted event on its way to D1 through the events queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub project_id: String,
    pub key_type: KeyType,
    pub event_id: String,
    pub event: String,
    pub anonymous_id: Option<String>,
    pub user_id: Option<String>,
    /// When the client says it happened, as sent.
    pub timestamp: Option<Value>,
    pub properties: Map<String, Value>,
    pub received_at: i64,
    /// Whether the server made the id (no de-duplication was possible).
    pub generated_id: bool,
}

/// What the events queue carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventMessage {
    Event(EventRecord),
    Link(Link),
}

/// `anonymous_id` and `user_id` are the same person (identify, alias).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub project_id: String,
    pub anonymous_id: String,
    pub user_id: String,
    pub linked_at: i64,
}

impl Tagged for EventMessage {
    const TAG: &'static str = "kind";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        match tag {
            "event" => EventRecord::deserialize(fields).map(Self::Event),
            "link" => Link::deserialize(fields).map(Self::Link),
            other => Err(unknown(other, &["event", "link"])),
        }
    }
}

deserialize_tagged!(EventMessage);

/// One queue message: events packed together ([`super::queue::pack`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBatch {
    Events { items: Vec<EventMessage> },
}

/// An item refused alone, as `rejected[i]` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub code: &'static str,
    pub message: String,
}

impl Rejection {
    fn invalid(message: impl Into<String>) -> Self {
        Rejection { code: "VALIDATION_ERROR", message: message.into() }
    }
}

/// The context an item is validated in.
pub struct Source<'a> {
    pub project_id: &'a str,
    pub key_type: KeyType,
    pub now_ms: i64,
}

fn short_string(field: &str, value: Option<Value>, required: bool) -> Result<Option<String>, Rejection> {
    match value {
        None | Some(Value::Null) if !required => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= 200 => Ok(Some(s)),
        _ => Err(Rejection::invalid(format!(
            "{field} must be a non-empty string of at most 200 characters{}",
            if required { "" } else { " when present" }
        ))),
    }
}

impl TrackItem {
    /// The event this item describes. `generated_id` is used when the item has no `event_id`.
    pub fn validate(self, source: &Source<'_>, generated_id: String) -> Result<EventRecord, Rejection> {
        let (event_id, generated) = match self.event_id {
            None | Some(Value::Null) => (generated_id, true),
            Some(Value::String(s)) => match normalize_event_id(&s) {
                Some(id) => (id, false),
                None => return Err(invalid_event_id()),
            },
            Some(_) => return Err(invalid_event_id()),
        };
        let event = short_string("event", self.event, true)?.expect("required");
        let anonymous_id = short_string("anonymous_id", self.anonymous_id, false)?;
        let user_id = short_string("user_id", self.user_id, false)?;
        if anonymous_id.is_none() && user_id.is_none() {
            return Err(Rejection::invalid("an event needs anonymous_id or user_id"));
        }
        let timestamp = match self.timestamp {
            None | Some(Value::Null) => None,
            Some(t @ Value::String(_)) => Some(t),
            Some(Value::Number(n)) if n.as_u64().is_some() => Some(Value::Number(n)),
            Some(_) => {
                return Err(Rejection::invalid("timestamp must be an RFC 3339 string or Unix seconds"))
            }
        };
        let properties = match self.properties {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(Rejection::invalid("properties must be an object")),
        };
        let record = EventRecord {
            project_id: source.project_id.to_owned(),
            key_type: source.key_type,
            event_id,
            event,
            anonymous_id,
            user_id,
            timestamp,
            properties,
            received_at: source.now_ms,
            generated_id: generated,
        };
        if serde_json::to_string(&record).map_or(0, |s| s.len()) > EVENT_MAX_BYTES {
            return Err(Rejection::invalid(format!("an event may be at most {EVENT_MAX_BYTES} bytes")));
        }
        Ok(record)
    }
}

fn invalid_event_id() -> Rejection {
    Rejection {
        code: "INVALID_EVENT_ID",
        message: "event_id must be a UUID (any case, braces, urn:uuid: or 32 hex digits)".into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackBatch {
    pub batch: Vec<Value>,
}

impl TrackBatch {
    pub fn check_size(&self) -> Result<(), ApiError> {
        if (1..=TRACK_MAX_ITEMS).contains(&self.batch.len()) {
            Ok(())
        } else {
            Err(ApiError::unprocessable(format!("batch must hold 1 to {TRACK_MAX_ITEMS} events"))
                .with_detail("field", "batch")
                .with_detail("count", self.batch.len()))
        }
    }
}

/// The answer of `/v1/track` (SPEC §7).
#[derive(Debug, Default)]
pub struct TrackOutcome {
    pub accepted: Vec<(usize, String)>,
    pub duplicates: Vec<(usize, String)>,
    pub rejected: Vec<(usize, Rejection)>,
}

impl TrackOutcome {
    pub fn view(&self) -> Value {
        let pairs = |list: &[(usize, String)]| -> Vec<Value> {
            list.iter().map(|(index, id)| json!({ "index": index, "event_id": id })).collect()
        };
        json!({
            "accepted": pairs(&self.accepted),
            "duplicates": pairs(&self.duplicates),
            "rejected": self.rejected.iter()
                .map(|(index, r)| json!({ "index": index, "code": r.code, "message": r.message }))
                .collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    #[test]
    fn the_reserve_decision() {
        let r = |owner: &str, confirmed, at_ms| Reservation { owner: owner.into(), confirmed, at_ms };
        let (now, window) = (1_000_000, 500_000);
        assert_eq!(reserve(None, "a", now, window), Reserved::Fresh);
        assert_eq!(reserve(Some(&r("b", true, now - 10)), "a", now, window), Reserved::Duplicate);
        assert_eq!(reserve(Some(&r("a", true, now - 10)), "a", now, window), Reserved::Duplicate);
        assert_eq!(reserve(Some(&r("b", true, now - window)), "a", now, window), Reserved::Fresh);
        assert_eq!(reserve(Some(&r("b", false, now - 10)), "a", now, window), Reserved::InFlight);
        assert_eq!(reserve(Some(&r("a", false, now - 10)), "a", now, window), Reserved::Fresh);
        let expired = now - RESERVATION_LEASE_MS;
        assert_eq!(reserve(Some(&r("b", false, expired)), "a", now, window), Reserved::Fresh);
    }

    #[test]
    fn event_ids_normalise_from_every_uuid_form() {
        for form in [
            ID,
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
            "0f8fad5bd9cb469fa16570867728950e",
            " 0f8fad5bd9cb469fa16570867728950e ",
        ] {
            assert_eq!(normalize_event_id(form).as_deref(), Some(ID), "{form}");
        }
        for bad in
            ["", "not-a-uuid", "0f8fad5b-d9cb-469f-a165-70867728950", "0f8fad5bd9cb469fa16570867728950g"]
        {
            assert_eq!(normalize_event_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn namespaces_separate_projects_and_key_types() {
        assert_eq!(dedup_namespace("prj_1", KeyType::Browser), "events:prj_1:browser");
        assert_ne!(dedup_namespace("prj_1", KeyType::Browser), dedup_namespace("prj_1", KeyType::Server));
        assert_ne!(dedup_namespace("prj_1", KeyType::Server), dedup_namespace("prj_2", KeyType::Server));
    }

    fn item(v: Value) -> TrackItem {
        serde_json::from_value(v).unwrap()
    }

    const SOURCE: Source<'static> = Source { project_id: "prj_1", key_type: KeyType::Server, now_ms: 5 };

    #[test]
    fn items_validate_alone_with_their_own_code() {
        let ok = item(json!({"event_id": "{0F8FAD5B-D9CB-469F-A165-70867728950E}", "event": "Signed Up", "user_id": "u1"}))
            .validate(&SOURCE, "gen".into())
            .unwrap();
        assert_eq!((ok.event_id.as_str(), ok.generated_id), (ID, false));
        let generated =
            item(json!({"event": "x", "anonymous_id": "a"})).validate(&SOURCE, "gen".into()).unwrap();
        assert_eq!((generated.event_id.as_str(), generated.generated_id), ("gen", true));

        let code = |v: Value| item(v).validate(&SOURCE, "g".into()).unwrap_err().code;
        assert_eq!(code(json!({"event_id": "nope", "event": "x", "user_id": "u"})), "INVALID_EVENT_ID");
        assert_eq!(code(json!({"event_id": 7, "event": "x", "user_id": "u"})), "INVALID_EVENT_ID");
        assert_eq!(code(json!({"user_id": "u"})), "VALIDATION_ERROR");
        assert_eq!(code(json!({"event": "x"})), "VALIDATION_ERROR");
        assert_eq!(code(json!({"event": "x", "user_id": "u", "properties": [1]})), "VALIDATION_ERROR");
        assert_eq!(code(json!({"event": "x", "user_id": "u", "timestamp": true})), "VALIDATION_ERROR");
        let huge = json!({"event": "x", "user_id": "u", "properties": {"blob": "x".repeat(EVENT_MAX_BYTES)}});
        assert_eq!(code(huge), "VALIDATION_ERROR");
    }

    /// SPEC §19: a number in `properties` reaches the queue (and so D1) as it was written, not
    /// as the nearest `f64` (before `arbitrary_precision`, both of these were rounded).
    #[test]
    fn properties_keep_their_numbers_as_written() {
        let text = r#"{"event":"x","user_id":"u","properties":{"big":18446744073709551617,"fine":0.1000000000000000000001,"e":1E+2}}"#;
        let record = serde_json::from_str::<TrackItem>(text).unwrap().validate(&SOURCE, "g".into()).unwrap();
        let queued = serde_json::to_string(&EventMessage::Event(record)).unwrap();
        // (serde_json writes an exponent's `E` as `e`: the same number.)
        for written in ["18446744073709551617", "0.1000000000000000000001", "1e+2"] {
            assert!(queued.contains(written), "{written} in {queued}");
        }
        let EventMessage::Event(back) = serde_json::from_str(&queued).unwrap() else { panic!() };
        assert_eq!(
            Value::Object(back.properties).to_string(),
            r#"{"big":18446744073709551617,"e":1e+2,"fine":0.1000000000000000000001}"#
        );
    }

    /// SPEC §19: an identify's traits over a queue message's share are a 413, not a retryable 503
    /// for ever; an id is bounded in bytes, so 200 non-ASCII characters (2,400 bytes once
    /// percent-encoded into an R2 key) are a 422.
    #[test]
    fn traits_and_ids_that_would_exceed_a_platform_limit_are_refused_with_a_4xx() {
        let traits = |n: usize| json!({"blob": "x".repeat(n)}).as_object().unwrap().clone();
        assert!(check_traits(&traits(EVENT_MAX_BYTES - 20)).is_ok());
        let e = check_traits(&traits(EVENT_MAX_BYTES)).unwrap_err();
        assert_eq!((e.code.status(), e.code.retryable()), (413, false));
        assert!(check_id("session_id", &"s".repeat(ID_MAX_BYTES)).is_ok());
        let wide = "ж".repeat(200);
        assert_eq!(check_id("session_id", &wide).unwrap_err().code.status(), 422);
        assert!(
            recording_object_key("prj_1", &"ж".repeat(ID_MAX_BYTES / 2), 9).len()
                <= crate::platform::R2_MAX_KEY_BYTES
        );
        assert!(check_id("user_id", " ").is_err());
    }

    #[test]
    fn packs_events_into_few_messages_in_order() {
        let link = |i: usize| {
            EventMessage::Link(Link {
                project_id: "p".into(),
                anonymous_id: format!("a{i}"),
                user_id: "u".into(),
                linked_at: 0,
            })
        };
        let messages: Vec<_> = (0..100).map(link).collect();
        let packed = |max| crate::queue::pack(&messages, "events", "items", max);
        let one = packed(100_000);
        assert_eq!(one.len(), 1);
        let small = packed(1_000);
        assert!(small.len() > 5 && small.iter().all(|m| m.len() <= 1_000));
        let back: Vec<EventMessage> = small
            .iter()
            .flat_map(|m| match crate::queue::QueueMessage::parse(m).unwrap() {
                crate::queue::QueueMessage::Events(EventBatch::Events { items }) => items,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, messages);
    }

    #[test]
    fn batch_holds_1_to_500_items() {
        assert!(TrackBatch { batch: vec![Value::Null; 500] }.check_size().is_ok());
        assert_eq!(TrackBatch { batch: vec![] }.check_size().unwrap_err().status(), 422);
        assert_eq!(TrackBatch { batch: vec![Value::Null; 501] }.check_size().unwrap_err().status(), 422);
    }
}
