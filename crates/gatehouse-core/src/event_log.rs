//! The events an integrator sent, as the events table keeps them (SPEC §24): the filter of
//! `GET /public/v1/events`, its order and cursor, a stored event as the API shows it, and how
//! long the table keeps one (`EVENT_RETENTION_DAYS`, purged by the minute cron).

use serde_json::Value;

use crate::audit::{bad, check_range, given, time_bound};
use crate::error::ApiError;
use crate::events::EventRecord;
use crate::page::Cursor;
use gatehouse_wire::events as wire;

/// Rows one purge deletes at most (a bounded D1 statement; the cron's next run goes on).
pub const PURGE_BATCH: u32 = 5_000;

/// What `GET /public/v1/events` filters on; every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Received at or after (Unix ms).
    pub from_ms: Option<i64>,
    /// Received at or before (Unix ms).
    pub to_ms: Option<i64>,
    pub event: Option<String>,
    pub user_id: Option<String>,
    pub anonymous_id: Option<String>,
}

impl EventFilter {
    /// Reads `from`, `to` (RFC 3339, `YYYY-MM-DD` or Unix ms, as the log's), `event`, `user_id`
    /// and `anonymous_id`; `limit` and `cursor` are the page's. Others are refused by the route.
    pub fn from_query(query: &[(String, String)]) -> Result<Self, ApiError> {
        let mut f = EventFilter::default();
        for (name, value) in given(query) {
            let text = |field: &str| match value.len() <= 200 {
                true => Ok(Some(value.to_owned())),
                false => Err(bad(field, format!("{field} is at most 200 characters"))),
            };
            match name {
                "from" => f.from_ms = Some(time_bound("from", value, false)?),
                "to" => f.to_ms = Some(time_bound("to", value, true)?),
                "event" => f.event = text("event")?,
                "user_id" => f.user_id = text("user_id")?,
                "anonymous_id" => f.anonymous_id = text("anonymous_id")?,
                _ => {}
            }
        }
        check_range(f.from_ms, f.to_ms)?;
        Ok(f)
    }

    /// Whether a stored event matches (what the D1 query checks, for the fakes).
    pub fn matches(&self, e: &EventRecord) -> bool {
        self.from_ms.is_none_or(|f| e.received_at >= f)
            && self.to_ms.is_none_or(|t| e.received_at <= t)
            && self.event.as_ref().is_none_or(|n| *n == e.event)
            && self.user_id.as_ref().is_none_or(|u| e.user_id.as_ref() == Some(u))
            && self.anonymous_id.as_ref().is_none_or(|a| e.anonymous_id.as_ref() == Some(a))
    }
}

/// The list's order, newest first: `(received_at, key_type, event_id)` descending.
pub fn position(e: &EventRecord) -> Cursor {
    Cursor { ts: e.received_at, id: format!("{} {}", e.key_type.as_str(), e.event_id) }
}

/// A cursor's `(received_at, key_type, event_id)`; `None` for one this list did not make.
pub fn after(c: &Cursor) -> Option<(i64, &str, &str)> {
    let (key_type, event_id) = c.id.split_once(' ')?;
    Some((c.ts, key_type, event_id))
}

/// Whether `e` comes after the cursor `c` in the list's order.
pub fn is_after(e: &EventRecord, c: &Cursor) -> bool {
    after(c).is_some_and(|(ts, key_type, id)| {
        (e.received_at, e.key_type.as_str(), e.event_id.as_str()) < (ts, key_type, id)
    })
}

/// Unix ms before which stored events are purged at `now_ms`.
pub fn retention_cutoff(now_ms: i64, retention_days: u32) -> i64 {
    now_ms - i64::from(retention_days) * 86_400_000
}

impl EventRecord {
    /// As `GET /public/v1/events` shows it.
    pub fn view(&self) -> Value {
        gatehouse_wire::to_json(&wire::StoredEvent {
            event_id: self.event_id.clone(),
            event: self.event.clone(),
            key_type: self.key_type.as_str().to_owned(),
            user_id: self.user_id.clone(),
            anonymous_id: self.anonymous_id.clone(),
            timestamp: self.timestamp.clone(),
            properties: Value::Object(self.properties.clone()),
            received_at: crate::time::rfc3339(self.received_at),
            generated_id: self.generated_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_key::KeyType;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn event(id: &str, at: i64, key_type: KeyType) -> EventRecord {
        EventRecord {
            project_id: "prj_1".into(),
            key_type,
            event_id: id.into(),
            event: "signup".into(),
            anonymous_id: Some("a1".into()),
            user_id: None,
            timestamp: None,
            properties: serde_json::Map::new(),
            received_at: at,
            generated_id: false,
        }
    }

    #[test]
    fn the_filter_reads_the_query_and_refuses_bad_values() {
        let f = EventFilter::from_query(&q(&[
            ("from", "2026-12-01"),
            ("to", "1796169600000"),
            ("event", "signup"),
            ("anonymous_id", "a1"),
            ("limit", "10"),
        ]))
        .unwrap();
        assert_eq!(f.from_ms, Some(1_796_083_200_000));
        assert!(f.matches(&event("e1", 1_796_100_000_000, KeyType::Browser)));
        assert!(!f.matches(&event("e1", 1_796_200_000_000, KeyType::Browser)));
        assert_eq!(EventFilter::from_query(&q(&[("from", "yesterday")])).unwrap_err().status(), 400);
        assert_eq!(EventFilter::from_query(&q(&[("to", "2026-02-31")])).unwrap_err().status(), 422);
        let reversed = EventFilter::from_query(&q(&[("from", "2026-12-02"), ("to", "2026-12-01")]));
        assert_eq!(reversed.unwrap_err().status(), 422);
        let long = "x".repeat(201);
        assert_eq!(EventFilter::from_query(&q(&[("event", &long)])).unwrap_err().status(), 400);
    }

    #[test]
    fn the_cursor_orders_by_time_then_key_type_then_id() {
        let newer = event("b", 2_000, KeyType::Server);
        let c = position(&newer);
        assert_eq!(after(&c), Some((2_000, "server", "b")));
        assert!(is_after(&event("a", 2_000, KeyType::Server), &c));
        assert!(is_after(&event("z", 2_000, KeyType::Browser), &c));
        assert!(!is_after(&event("c", 2_000, KeyType::Server), &c));
        assert!(is_after(&event("z", 1_999, KeyType::Server), &c));
        assert_eq!(after(&Cursor { ts: 1, id: "noseparator".into() }), None);
    }
}
