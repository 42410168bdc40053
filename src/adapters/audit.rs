//! The [`AuditSink`] port over the `AUDIT_QUEUE` producer.

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
        for row in rows {
            let body =
                serde_json::to_string(&AuditMessage::Audit(row.clone())).map_err(PortError::from_display)?;
            let mut last = None;
            for _ in 0..ATTEMPTS {
                match self.queue.send(body.clone()).await {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(PortError::from_display(e)),
                }
            }
            if let Some(e) = last {
                return Err(e);
            }
        }
        Ok(())
    }
}
