//! The [`AuditSink`] port over the `AUDIT_QUEUE` producer: the rows of a call in one `sendBatch`.

use worker::Queue;

use crate::core::audit::{AuditMessage, AuditRow};
use crate::ports::{AuditSink, PortError};

pub const QUEUE_BINDING: &str = "AUDIT_QUEUE";
/// A failed send is tried again this many times: an audit row must not be lost to a blip.
const ATTEMPTS: usize = 3;

pub struct AuditQueue {
    queue: Queue,
}

impl AuditQueue {
    pub fn new(queue: Queue) -> Self {
        Self { queue }
    }
}

impl AuditSink for AuditQueue {
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let bodies = rows
            .iter()
            .map(|row| serde_json::to_string(&AuditMessage::Audit(row.clone())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(PortError::from_display)?;
        let mut last = PortError("audit: nothing sent".into());
        for _ in 0..ATTEMPTS {
            match self.queue.send_batch(bodies.iter().map(String::as_str)).await {
                Ok(()) => return Ok(()),
                Err(e) => last = PortError::from_display(e),
            }
        }
        Err(last)
    }
}
