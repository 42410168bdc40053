//! Ingested events, identity links and the index of session-recording segments: the [`EventStore`] port.

use super::{int, opt_text, text, D1Store};
use gatehouse_core::events::{EventMessage, Link};
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
}
