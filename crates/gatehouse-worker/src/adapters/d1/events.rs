//! Ingested events, identity links and the index of session-recording segments: the [`EventStore`] port.

use super::{int, opt_int, opt_text, text, D1Store};
use gatehouse_core::api_key::KeyType;
use gatehouse_core::event_log::{self, EventFilter};
use gatehouse_core::events::{EventMessage, EventRecord, Link};
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{EventStore, PortError, SessionSegment};

/// Statements per D1 batch when storing queued events.
const STORE_BATCH: usize = 500;

impl EventStore for D1Store {
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError> {
        let statements = messages
            .iter()
            .map(|m| match m {
                EventMessage::Event(e) => self.statement(
                    "INSERT OR IGNORE INTO events (project_id, key_type, event_id, event, anonymous_id, user_id,
                       timestamp, properties, received_at, generated_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    &[
                        text(&e.project_id),
                        text(e.key_type.as_str()),
                        text(&e.event_id),
                        text(&e.event),
                        opt_text(e.anonymous_id.as_deref()),
                        opt_text(e.user_id.as_deref()),
                        opt_text(e.timestamp.as_ref().map(|t| t.to_string()).as_deref()),
                        text(&serde_json::Value::Object(e.properties.clone()).to_string()),
                        int(e.received_at),
                        int(e.generated_id.into()),
                    ],
                ),
                EventMessage::Link(Link { project_id, anonymous_id, user_id, linked_at }) => self.statement(
                    "INSERT OR IGNORE INTO identity_links (project_id, anonymous_id, user_id, linked_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    &[text(project_id), text(anonymous_id), text(user_id), int(*linked_at)],
                ),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Each batch is a transaction; a consumer batch of packed messages can hold many
        // thousands of events, so write them in bounded batches (each insert is idempotent).
        let mut statements = statements.into_iter().peekable();
        while statements.peek().is_some() {
            self.batch(statements.by_ref().take(STORE_BATCH).collect()).await?;
        }
        Ok(())
    }

    async fn has_session_segment(&self, c: &SessionSegment<'_>) -> Result<bool, PortError> {
        let found: Vec<serde_json::Value> = self
            .rows(
                "SELECT 1 AS found FROM replay_chunk_index WHERE project_id = ?1 AND session_id = ?2 AND chunk = ?3",
                &[text(c.project_id), text(c.session_id), int(c.chunk.into())],
            )
            .await?;
        Ok(!found.is_empty())
    }

    async fn index_session_segment(
        &self,
        c: &SessionSegment<'_>,
        bytes: usize,
        now_ms: i64,
    ) -> Result<bool, PortError> {
        let insert = self.statement(
            "INSERT OR IGNORE INTO replay_chunk_index (project_id, session_id, chunk, bytes, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[text(c.project_id), text(c.session_id), int(c.chunk.into()), int(bytes as i64), int(now_ms)],
        )?;
        Ok(self.batch(vec![insert]).await? == [1])
    }

    async fn list_events(
        &self,
        project_id: &str,
        filter: &EventFilter,
        page: &PageRequest,
    ) -> Result<Vec<EventRecord>, PortError> {
        let after = page.after.as_ref().and_then(event_log::after);
        let rows: Vec<EventRow> = self
            .rows(
                "SELECT key_type, event_id, event, anonymous_id, user_id, timestamp, properties, received_at,
                        generated_id
                 FROM events
                 WHERE project_id = ?1
                   AND (?2 IS NULL OR received_at >= ?2) AND (?3 IS NULL OR received_at <= ?3)
                   AND (?4 IS NULL OR event = ?4) AND (?5 IS NULL OR user_id = ?5)
                   AND (?6 IS NULL OR anonymous_id = ?6)
                   AND (?7 IS NULL OR (received_at, key_type, event_id) < (?7, ?8, ?9))
                 ORDER BY received_at DESC, key_type DESC, event_id DESC LIMIT ?10",
                &[
                    text(project_id),
                    opt_int(filter.from_ms),
                    opt_int(filter.to_ms),
                    opt_text(filter.event.as_deref()),
                    opt_text(filter.user_id.as_deref()),
                    opt_text(filter.anonymous_id.as_deref()),
                    opt_int(after.map(|(ts, _, _)| ts)),
                    opt_text(after.map(|(_, key_type, _)| key_type)),
                    opt_text(after.map(|(_, _, id)| id)),
                    int(page.fetch_len() as i64),
                ],
            )
            .await?;
        rows.into_iter().map(|r| r.into_record(project_id)).collect()
    }

    async fn purge_events(&self, before_ms: i64, limit: u32) -> Result<u32, PortError> {
        // By `events_by_received_at`: the oldest rows of every project, a bounded batch.
        let deleted: Vec<serde_json::Value> = self
            .rows(
                "DELETE FROM events WHERE rowid IN
                   (SELECT rowid FROM events WHERE received_at < ?1 ORDER BY received_at LIMIT ?2)
                 RETURNING 1 AS gone",
                &[int(before_ms), int(limit.into())],
            )
            .await?;
        Ok(deleted.len() as u32)
    }
}

/// An event as the events table returns it (JSON columns as text).
#[derive(serde::Deserialize)]
struct EventRow {
    key_type: String,
    event_id: String,
    event: String,
    anonymous_id: Option<String>,
    user_id: Option<String>,
    timestamp: Option<String>,
    properties: String,
    received_at: i64,
    generated_id: i64,
}

impl EventRow {
    fn into_record(self, project_id: &str) -> Result<EventRecord, PortError> {
        let json =
            |text: &str| serde_json::from_str::<serde_json::Value>(text).map_err(PortError::from_display);
        let properties = match json(&self.properties)? {
            serde_json::Value::Object(map) => map,
            _ => return Err(PortError("an event's properties are not a JSON object".into())),
        };
        Ok(EventRecord {
            project_id: project_id.to_owned(),
            key_type: KeyType::parse(&self.key_type)
                .ok_or_else(|| PortError(format!("an event of key type {:?}", self.key_type)))?,
            event_id: self.event_id,
            event: self.event,
            anonymous_id: self.anonymous_id,
            user_id: self.user_id,
            timestamp: self.timestamp.as_deref().map(json).transpose()?,
            properties,
            received_at: self.received_at,
            generated_id: self.generated_id != 0,
        })
    }
}
