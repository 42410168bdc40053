//! Our queues' failures and dead letters (SPEC §12.1), and the cron jobs' leases (SPEC §19).

use super::PortError;
use crate::page::PageRequest;
use crate::queue::DeadLetter;

/// One failure of a queue message in its consumer. Counted in D1, so the retry delay can grow and
/// the dead letter can say what went wrong (a dead-letter queue carries only the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageFailure {
    pub message_id: String,
    pub queue: String,
    /// `core::queue::body_digest` of the body: a message may reach the dead-letter queue under
    /// another id.
    pub body_digest: String,
    pub error: String,
    pub at_ms: i64,
}

/// Dead letters in D1 (SPEC §12.1), and the failures counted before a message becomes one.
pub trait DeadLetters {
    /// Counts one failure of each message; answers, per failure in order, how many times that
    /// message has failed (1 for the first).
    async fn note_failures(&self, failures: &[MessageFailure]) -> Result<Vec<u32>, PortError>;
    /// Keeps each letter once per id (a letter delivered again changes nothing). When failures
    /// were counted for its message (by id, else by queue and body), the letter takes its first
    /// failure, last error and count from them, and the count is dropped.
    async fn keep(&self, letters: &[DeadLetter]) -> Result<(), PortError>;
    /// Letters newest first (by `dead_at`), optionally of one queue, after the page's cursor.
    async fn dead_letters(
        &self,
        queue: Option<&str>,
        page: &PageRequest,
    ) -> Result<Vec<DeadLetter>, PortError>;
    /// Letters not re-driven yet, oldest first, at most `limit`: those named, or any.
    async fn undriven(&self, ids: Option<&[String]>, limit: usize) -> Result<Vec<DeadLetter>, PortError>;
    async fn mark_redriven(&self, id: &str, now_ms: i64) -> Result<(), PortError>;
}

/// The producers of our three queues, to send a dead letter's body back where it came from.
pub trait Redrive {
    async fn resend(&self, queue: &str, body: &str) -> Result<(), PortError>;
}

/// Leases of the cron jobs (SPEC §19), in D1: no two runs of one job overlap.
pub trait JobLeases {
    /// Takes `lease`, unless another holder's lease of its job is still running at its `now_ms`;
    /// answers whether it was taken.
    async fn take_lease(&self, lease: &Lease<'_>) -> Result<bool, PortError>;
    /// Gives the lease back, if `holder` still holds it.
    async fn release_lease(&self, job: &str, holder: &str) -> Result<(), PortError>;
}

/// A cron job's lease as a run asks for it: `job` held by `holder` (one per invocation) until
/// `until_ms`, asked at `now_ms`.
pub struct Lease<'a> {
    pub job: &'a str,
    pub holder: &'a str,
    pub now_ms: i64,
    pub until_ms: i64,
}
