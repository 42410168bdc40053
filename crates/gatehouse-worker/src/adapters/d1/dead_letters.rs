//! Dead letters and failure counts (`dead_letters`, `queue_failures`): the [`DeadLetters`] port.

use wasm_bindgen::JsValue;

use super::{after, int, opt_text, text, D1Store};
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{DeadLetters, MessageFailure, PortError};
use gatehouse_core::queue::{body_digest, DeadLetter};

/// Failure counts older than this are dropped (their message was stored, or kept, long ago).
const FAILURE_KEPT_MS: i64 = 7 * 86_400_000;
const COLUMNS: &str = "id, queue, body, first_failed_at, dead_at, last_error, attempts, redriven_at";

impl DeadLetters for D1Store {
    async fn note_failures(&self, failures: &[MessageFailure]) -> Result<Vec<u32>, PortError> {
        let mut statements = failures
            .iter()
            .map(|f| {
                self.statement(
                    "INSERT INTO queue_failures (message_id, queue, body_digest, first_failed_at,
                       last_failed_at, last_error, failures)
                     VALUES (?1, ?2, ?3, ?4, ?4, ?5, 1)
                     ON CONFLICT (message_id) DO UPDATE SET last_failed_at = excluded.last_failed_at,
                       last_error = excluded.last_error, failures = failures + 1
                     RETURNING failures",
                    &[
                        text(&f.message_id),
                        text(&f.queue),
                        text(&f.body_digest),
                        int(f.at_ms),
                        text(&f.error),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let oldest = failures.iter().map(|f| f.at_ms).min().unwrap_or(0) - FAILURE_KEPT_MS;
        statements
            .push(self.statement("DELETE FROM queue_failures WHERE last_failed_at < ?1", &[int(oldest)])?);
        #[derive(serde::Deserialize)]
        struct Count {
            failures: u32,
        }
        let results = self.results(statements).await?;
        results[..failures.len()]
            .iter()
            .map(|r| {
                let counts: Vec<Count> = r.results().map_err(PortError::from_display)?;
                counts
                    .first()
                    .map(|c| c.failures)
                    .ok_or_else(|| PortError("no failure count returned".into()))
            })
            .collect()
    }

    async fn keep(&self, letters: &[DeadLetter]) -> Result<(), PortError> {
        let mut statements = Vec::with_capacity(letters.len() * 2);
        for l in letters {
            let digest = body_digest(&l.body);
            statements.push(self.statement(
                "INSERT OR IGNORE INTO dead_letters (id, queue, body, first_failed_at, dead_at, last_error,
                   attempts, status)
                 SELECT ?1, ?2, ?3, coalesce(f.first_failed_at, ?4), ?5, coalesce(f.last_error, ?6),
                   coalesce(f.failures, ?7), 'dead'
                 FROM (SELECT 1) LEFT JOIN (
                   SELECT first_failed_at, last_error, failures FROM queue_failures
                   WHERE message_id = ?1 OR (queue = ?2 AND body_digest = ?8)
                   ORDER BY message_id = ?1 DESC, last_failed_at DESC LIMIT 1) f ON 1",
                &[
                    text(&l.id),
                    text(&l.queue),
                    text(&l.body),
                    int(l.first_failed_at),
                    int(l.dead_at),
                    opt_text(l.last_error.as_deref()),
                    int(l.attempts.into()),
                    text(&digest),
                ],
            )?);
            statements.push(self.statement(
                "DELETE FROM queue_failures WHERE message_id = ?1 OR (queue = ?2 AND body_digest = ?3)",
                &[text(&l.id), text(&l.queue), text(&digest)],
            )?);
        }
        if !statements.is_empty() {
            self.results(statements).await?;
        }
        Ok(())
    }

    async fn dead_letters(
        &self,
        queue: Option<&str>,
        page: &PageRequest,
    ) -> Result<Vec<DeadLetter>, PortError> {
        let (ts, id) = after(page.after.as_ref());
        self.rows::<DeadLetter>(
            &format!(
                "SELECT {COLUMNS} FROM dead_letters
                 WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR (dead_at, id) < (?2, ?3))
                 ORDER BY dead_at DESC, id DESC LIMIT ?4"
            ),
            &[opt_text(queue), ts, id, int(page.fetch_len() as i64)],
        )
        .await
    }

    async fn undriven(&self, ids: Option<&[String]>, limit: usize) -> Result<Vec<DeadLetter>, PortError> {
        let named = match ids {
            Some(ids) => text(&serde_json::to_string(ids).map_err(PortError::from_display)?),
            None => JsValue::NULL,
        };
        self.rows::<DeadLetter>(
            &format!(
                "SELECT {COLUMNS} FROM dead_letters
                 WHERE status = 'dead' AND (?1 IS NULL OR id IN (SELECT value FROM json_each(?1)))
                 ORDER BY dead_at, id LIMIT ?2"
            ),
            &[named, int(limit as i64)],
        )
        .await
    }

    async fn mark_redriven(&self, id: &str, now_ms: i64) -> Result<(), PortError> {
        let update = self.statement(
            "UPDATE dead_letters SET status = 'redriven', redriven_at = ?2 WHERE id = ?1",
            &[text(id), int(now_ms)],
        )?;
        self.results(vec![update]).await?;
        Ok(())
    }
}
