//! The [`DeadLetters`] port over D1 (`dead_letters`, `queue_failures`), and the [`Redrive`] port
//! over the three queue producers.

use std::rc::Rc;

use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, Queue};

use crate::core::page::PageRequest;
use crate::core::queue::{body_digest, DeadLetter, QueueKind};
use crate::ports::{DeadLetters, MessageFailure, Meter, PortError, Redrive};

/// Failure counts older than this are dropped (their message was stored, or kept, long ago).
const FAILURE_KEPT_MS: i64 = 7 * 86_400_000;
const COLUMNS: &str = "id, queue, body, first_failed_at, dead_at, last_error, attempts, redriven_at";

pub struct D1DeadLetters {
    db: D1Database,
    meter: Rc<Meter>,
}

impl D1DeadLetters {
    pub fn new(db: D1Database, meter: Rc<Meter>) -> Self {
        Self { db, meter }
    }

    fn statement(&self, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, PortError> {
        self.db.prepare(sql).bind(args).map_err(PortError::from_display)
    }

    async fn letters(&self, sql: &str, args: &[JsValue]) -> Result<Vec<DeadLetter>, PortError> {
        Meter::count(&self.meter.d1_queries);
        let result = self.statement(sql, args)?.all().await.map_err(PortError::from_display)?;
        result.results().map_err(PortError::from_display)
    }

    async fn batch(&self, statements: Vec<D1PreparedStatement>) -> Result<Vec<worker::D1Result>, PortError> {
        Meter::count(&self.meter.d1_queries);
        self.db.batch(statements).await.map_err(PortError::from_display)
    }
}

fn text(s: &str) -> JsValue {
    JsValue::from_str(s)
}

fn int(n: i64) -> JsValue {
    JsValue::from_f64(n as f64)
}

impl DeadLetters for D1DeadLetters {
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
        let results = self.batch(statements).await?;
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
                    l.last_error.as_deref().map_or(JsValue::NULL, text),
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
            self.batch(statements).await?;
        }
        Ok(())
    }

    async fn dead_letters(
        &self,
        queue: Option<&str>,
        page: &PageRequest,
    ) -> Result<Vec<DeadLetter>, PortError> {
        let (ts, id) = match &page.after {
            Some(c) => (int(c.ts), text(&c.id)),
            None => (JsValue::NULL, JsValue::NULL),
        };
        self.letters(
            &format!(
                "SELECT {COLUMNS} FROM dead_letters
                 WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR (dead_at, id) < (?2, ?3))
                 ORDER BY dead_at DESC, id DESC LIMIT ?4"
            ),
            &[queue.map_or(JsValue::NULL, text), ts, id, int(page.fetch_len() as i64)],
        )
        .await
    }

    async fn undriven(&self, ids: Option<&[String]>, limit: usize) -> Result<Vec<DeadLetter>, PortError> {
        let named = match ids {
            Some(ids) => text(&serde_json::to_string(ids).map_err(PortError::from_display)?),
            None => JsValue::NULL,
        };
        self.letters(
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
        self.batch(vec![update]).await?;
        Ok(())
    }
}

/// The producers of `AUDIT_QUEUE`, `EVENTS_QUEUE` and `WEBHOOK_QUEUE`: a letter goes back to the
/// one its queue's name says.
pub struct QueueRedrive {
    pub audit: Queue,
    pub events: Queue,
    pub webhooks: Queue,
}

impl Redrive for QueueRedrive {
    async fn resend(&self, queue: &str, body: &str) -> Result<(), PortError> {
        let producer = match QueueKind::of(queue) {
            Some(QueueKind::Audit) => &self.audit,
            Some(QueueKind::Events) => &self.events,
            Some(QueueKind::Webhooks) => &self.webhooks,
            None => return Err(PortError(format!("no producer for queue {queue}"))),
        };
        producer.send(body.to_owned()).await.map_err(PortError::from_display)
    }
}
