//! Event ingestion (SPEC §7, §14): events get their `event_id` when they are made and keep it on
//! every retry and re-send; batches of up to 500; what still cannot be delivered goes to a local
//! NDJSON buffer that [`Client::flush_events`] sends again, dropping events older than 47 h (the
//! server de-duplicates within 48 h, so an older re-send could be recorded twice).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::call::Call;
use crate::client::{Client, Notice, Request};
use crate::error::Error;

/// Events per `/v1/track` call.
pub const MAX_BATCH: usize = 500;
/// Buffered events older than this are dropped instead of sent.
pub const MAX_BUFFERED_AGE: Duration = Duration::from_secs(47 * 3600);
/// How long an event another request is still sending (`EVENT_IN_FLIGHT`) is given.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(1);

/// Who did it: a known user or an anonymous visitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    User(String),
    Anonymous(String),
}

/// One event, with its `event_id` (a UUIDv4) and `timestamp` fixed when it is made.
///
/// ```
/// use gatehouse_client::{Actor, Event};
/// let event = Event::new("Order Completed", Actor::User("user_42".into()))
///     .property("total", 99.5)
///     .property("currency", "EUR");
/// assert_eq!(event.event_id.len(), 36);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: String,
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous_id: Option<String>,
    /// When it happened (RFC 3339, UTC, milliseconds).
    pub timestamp: String,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
}

impl Event {
    pub fn new(name: impl Into<String>, actor: Actor) -> Event {
        Event::at(name, actor, SystemTime::now())
    }

    /// An event that happened at `time`.
    pub fn at(name: impl Into<String>, actor: Actor, time: SystemTime) -> Event {
        let (user_id, anonymous_id) = match actor {
            Actor::User(id) => (Some(id), None),
            Actor::Anonymous(id) => (None, Some(id)),
        };
        Event {
            event_id: uuid::Uuid::new_v4().to_string(),
            event: name.into(),
            user_id,
            anonymous_id,
            timestamp: humantime::format_rfc3339_millis(time).to_string(),
            properties: Map::new(),
        }
    }

    pub fn property(mut self, name: impl Into<String>, value: impl Into<Value>) -> Event {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Every property of a JSON object (anything else is ignored).
    pub fn properties(mut self, properties: Value) -> Event {
        if let Value::Object(map) = properties {
            self.properties.extend(map);
        }
        self
    }

    fn age(&self, now: SystemTime) -> Option<Duration> {
        let at = humantime::parse_rfc3339_weak(&self.timestamp).ok()?;
        Some(now.duration_since(at).unwrap_or(Duration::ZERO))
    }
}

/// What became of the events of a [`Client::track`] or [`Client::flush_events`] call.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrackOutcome {
    /// `event_id`s stored by this call.
    pub accepted: Vec<String>,
    /// `event_id`s the server already had (an earlier send got through): not stored again.
    pub duplicates: Vec<String>,
    /// Events refused for their content; sending them again would get the same answer.
    pub rejected: Vec<RejectedEvent>,
    /// Events kept in the buffer file for a later [`Client::flush_events`].
    pub buffered: usize,
    /// Buffered events dropped for age (flush only).
    pub dropped: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RejectedEvent {
    pub event_id: String,
    pub code: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
struct TrackAnswer {
    accepted: Vec<Indexed>,
    duplicates: Vec<Indexed>,
    rejected: Vec<Rejection>,
}

#[derive(Debug, Deserialize)]
struct Indexed {
    index: usize,
}

#[derive(Debug, Deserialize)]
struct Rejection {
    index: usize,
    code: String,
    #[serde(default)]
    message: String,
}

/// The answer of `/v1/identify`: the id of the `identify` event the server recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identified {
    pub event_id: String,
}

/// The answer of `/v1/alias`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Linked {
    pub anonymous_id: String,
    pub user_id: String,
}

/// The answer of `/v1/replay`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayChunkStored {
    /// The server had this (session, chunk) already.
    pub duplicate: bool,
}

/// The NDJSON file of undelivered events, one [`Event`] per line.
pub(crate) struct EventBuffer {
    path: PathBuf,
    /// One writer at a time: a flush rewrites the file while `track` may append to it.
    lock: Mutex<()>,
}

impl EventBuffer {
    pub(crate) fn new(path: PathBuf) -> EventBuffer {
        EventBuffer { path, lock: Mutex::new(()) }
    }

    fn append(&self, events: &[Event]) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        let mut lines = Vec::new();
        for event in events {
            serde_json::to_writer(&mut lines, event)?;
            lines.push(b'\n');
        }
        file.write_all(&lines)?;
        file.sync_all()
    }

    fn read(&self) -> std::io::Result<Vec<Event>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).map_err(std::io::Error::other))
            .collect()
    }

    /// Replaces the file with `events` (written beside it, then renamed over it).
    fn replace(&self, events: &[Event]) -> std::io::Result<()> {
        let next = temporary(&self.path);
        let mut lines = Vec::new();
        for event in events {
            serde_json::to_writer(&mut lines, event)?;
            lines.push(b'\n');
        }
        std::fs::write(&next, lines)?;
        std::fs::rename(&next, &self.path)
    }
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".next");
    path.with_file_name(name)
}

impl Client {
    /// `POST /v1/track` in batches of up to 500, each retried by the rules of the crate; every
    /// event keeps its `event_id`, so a repeat is reported as a duplicate, never stored twice.
    /// Items another request is still sending (`EVENT_IN_FLIGHT`) are sent again a second later.
    /// When a batch still fails with a retryable error and the client has an
    /// [event buffer](crate::ClientBuilder::event_buffer), its events go there (see
    /// [`TrackOutcome::buffered`]); otherwise the error is returned.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::{Actor, Event};
    /// let signup = Event::new("Signed Up", Actor::Anonymous("anon-7f3a".into())).property("plan", "trial");
    /// let outcome = client.track(vec![signup]).await?;
    /// assert_eq!(outcome.accepted.len() + outcome.duplicates.len() + outcome.buffered, 1);
    /// # Ok(()) }
    /// ```
    pub async fn track(&self, events: Vec<Event>) -> Result<TrackOutcome, Error> {
        let mut outcome = TrackOutcome::default();
        let mut undelivered = Vec::new();
        let mut failure = None;
        for batch in events.chunks(MAX_BATCH) {
            match self.send_batch(batch, &mut outcome).await {
                Ok(()) => {}
                Err(error) if error.retryable() && self.event_buffer().is_some() => {
                    undelivered.extend_from_slice(batch);
                    failure = Some(error);
                }
                Err(error) => {
                    if let Some(earlier) = failure {
                        self.keep(&undelivered, &earlier).await?;
                    }
                    return Err(error);
                }
            }
        }
        if let Some(error) = failure {
            outcome.buffered = self.keep(&undelivered, &error).await?;
        }
        Ok(outcome)
    }

    /// Appends undelivered events to the buffer file and says so.
    async fn keep(&self, events: &[Event], error: &Error) -> Result<usize, Error> {
        let Some(buffer) = self.event_buffer() else { return Ok(0) };
        let _writer = buffer.lock.lock().await;
        buffer.append(events).map_err(Error::Buffer)?;
        self.notify(Notice::EventsBuffered {
            count: events.len(),
            path: buffer.path.clone(),
            error: error.to_string(),
        });
        Ok(events.len())
    }

    /// Sends the events of the buffer file again, with their original `event_id`s. Events older
    /// than 47 h are dropped with a warning ([`Notice::EventsDropped`]); events that still cannot
    /// be delivered stay in the file. Without a buffer configured there is nothing to flush.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), gatehouse_client::Error> {
    /// let client = gatehouse_client::Client::builder("http://127.0.0.1:8787")
    ///     .api_key("gh_s_…")
    ///     .event_buffer("events-buffer.ndjson")
    ///     .build()?;
    /// let outcome = client.flush_events().await?;
    /// println!("{} re-sent, {} still buffered", outcome.accepted.len(), outcome.buffered);
    /// # Ok(()) }
    /// ```
    pub async fn flush_events(&self) -> Result<TrackOutcome, Error> {
        let mut outcome = TrackOutcome::default();
        let Some(buffer) = self.event_buffer() else { return Ok(outcome) };
        let _writer = buffer.lock.lock().await;
        let now = SystemTime::now();
        let (fresh, expired): (Vec<Event>, Vec<Event>) = buffer
            .read()
            .map_err(Error::Buffer)?
            .into_iter()
            .partition(|event| event.age(now).is_none_or(|age| age <= MAX_BUFFERED_AGE));
        if !expired.is_empty() {
            outcome.dropped = expired.len();
            self.notify(Notice::EventsDropped { count: expired.len(), path: buffer.path.clone() });
        }
        let mut kept = Vec::new();
        let mut failure = None;
        for (index, batch) in fresh.chunks(MAX_BATCH).enumerate() {
            match self.send_batch(batch, &mut outcome).await {
                Ok(()) => {}
                Err(error) if error.retryable() => {
                    kept.extend_from_slice(batch);
                    failure = Some(error);
                }
                Err(error) => {
                    // Keep this batch and every later one before giving the error back.
                    kept.extend_from_slice(&fresh[index * MAX_BATCH..]);
                    buffer.replace(&kept).map_err(Error::Buffer)?;
                    return Err(error);
                }
            }
        }
        buffer.replace(&kept).map_err(Error::Buffer)?;
        outcome.buffered = kept.len();
        if let Some(error) = failure {
            self.notify(Notice::EventsBuffered {
                count: kept.len(),
                path: buffer.path.clone(),
                error: error.to_string(),
            });
        }
        Ok(outcome)
    }

    /// One batch: sent with retries; items in flight elsewhere sent again until settled.
    async fn send_batch(&self, batch: &[Event], outcome: &mut TrackOutcome) -> Result<(), Error> {
        let mut pending: Vec<&Event> = batch.iter().collect();
        for round in 1..=self.max_attempts() {
            let answer: TrackAnswer = self
                .call(Request::post("/v1/track", &serde_json::json!({ "batch": pending })).repeatable())
                .await?;
            let id = |index: usize| pending.get(index).map(|e| e.event_id.clone());
            outcome.accepted.extend(answer.accepted.iter().filter_map(|a| id(a.index)));
            outcome.duplicates.extend(answer.duplicates.iter().filter_map(|d| id(d.index)));
            let mut in_flight = Vec::new();
            for rejection in answer.rejected {
                let Some(event) = pending.get(rejection.index) else { continue };
                if rejection.code == "EVENT_IN_FLIGHT" && round < self.max_attempts() {
                    in_flight.push(*event);
                } else {
                    outcome.rejected.push(RejectedEvent {
                        event_id: event.event_id.clone(),
                        code: rejection.code,
                        message: rejection.message,
                    });
                }
            }
            if in_flight.is_empty() {
                break;
            }
            pending = in_flight;
            tokio::time::sleep(IN_FLIGHT_WAIT.mul_f64(1.0 + 0.1 * self.random())).await;
        }
        Ok(())
    }

    /// `POST /v1/identify`: links `anonymous_id` to `user_id` (the link is stored once) and records
    /// an `identify` event with a server-made id on every call — a retried call may record two.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let identified = client.identify("anon-7f3a", "user_42", Some(serde_json::json!({"plan": "pro"}))).await?;
    /// # Ok(()) }
    /// ```
    pub fn identify(&self, anonymous_id: &str, user_id: &str, traits: Option<Value>) -> Call<Identified> {
        let mut body = serde_json::json!({ "anonymous_id": anonymous_id, "user_id": user_id });
        if let Some(traits) = traits {
            body["traits"] = traits;
        }
        self.call(Request::post("/v1/identify", &body))
    }

    /// `POST /v1/alias` (server keys): links the ids without an event; repeating it changes nothing.
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// client.alias("anon-7f3a", "user_42").await?;
    /// # Ok(()) }
    /// ```
    pub fn alias(&self, anonymous_id: &str, user_id: &str) -> Call<Linked> {
        self.call(Request::post(
            "/v1/alias",
            &serde_json::json!({ "anonymous_id": anonymous_id, "user_id": user_id }),
        ))
    }

    /// `POST /v1/replay`: one session-replay chunk, stored once per (session, chunk).
    ///
    /// ```no_run
    /// # async fn run(client: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let stored = client.send_replay_chunk("session-1", 0, serde_json::json!([{"t": 0, "type": "dom"}])).await?;
    /// # Ok(()) }
    /// ```
    pub fn send_replay_chunk(&self, session_id: &str, chunk: u64, data: Value) -> Call<ReplayChunkStored> {
        let body = serde_json::json!({ "session_id": session_id, "chunk": chunk, "data": data });
        self.call(Request::post("/v1/replay", &body).repeatable())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_gets_its_id_and_time_when_made() {
        let time = humantime::parse_rfc3339("2026-11-30T16:00:00.250Z").unwrap();
        let a = Event::at("Signed Up", Actor::Anonymous("anon-1".into()), time).property("plan", "trial");
        let b = Event::at("Signed Up", Actor::Anonymous("anon-1".into()), time);
        assert_ne!(a.event_id, b.event_id);
        assert!(uuid::Uuid::parse_str(&a.event_id).is_ok_and(|id| id.get_version_num() == 4));
        assert_eq!(a.timestamp, "2026-11-30T16:00:00.250Z");
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["anonymous_id"], "anon-1");
        assert!(json.get("user_id").is_none());
        assert_eq!(json["properties"]["plan"], "trial");
        assert_eq!(a.age(time + Duration::from_secs(3600)), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn the_buffer_keeps_events_as_ndjson_and_replaces_them_whole() {
        let dir = std::env::temp_dir().join(format!("gatehouse-buffer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let buffer = EventBuffer::new(dir.join("events.ndjson"));
        assert!(buffer.read().unwrap().is_empty(), "no file yet: nothing buffered");
        let events: Vec<Event> =
            (0..3).map(|i| Event::new(format!("e{i}"), Actor::User("u".into()))).collect();
        buffer.append(&events[..2]).unwrap();
        buffer.append(&events[2..]).unwrap();
        assert_eq!(buffer.read().unwrap(), events);
        assert_eq!(std::fs::read_to_string(&buffer.path).unwrap().lines().count(), 3);
        buffer.replace(&events[1..2]).unwrap();
        assert_eq!(buffer.read().unwrap(), events[1..2]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
