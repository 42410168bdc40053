//! The [`AuditSink`] port over the `AUDIT_QUEUE` producer: the rows of a call packed into as few
//! messages as fit, sent together.

use worker::Queue;

use crate::adapters::deadline::within;
use gatehouse_core::audit::AuditRow;
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{AuditSink, PortError};
use gatehouse_core::queue::{pack, MESSAGES_PER_SEND, MESSAGE_MAX_BYTES};

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
    /// A send that fails after some of its messages went makes the caller write every row directly;
    /// the insert once per `request_id` keeps the ones already sent one row each.
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        for messages in pack(rows, "audit_rows", "rows", MESSAGE_MAX_BYTES).chunks(MESSAGES_PER_SEND) {
            let mut tries = 1;
            loop {
                let send = async {
                    self.queue
                        .send_batch(messages.iter().map(String::as_str))
                        .await
                        .map_err(PortError::from_display)
                };
                let Err(e) = within(deadline::QUEUE_MS, "audit queue send", send).await else { break };
                if tries == ATTEMPTS {
                    return Err(e);
                }
                tries += 1;
            }
        }
        Ok(())
    }
}
