//! The [`Redrive`] port over the three queue producers: a dead letter's body goes back to the
//! queue it came from.

use worker::Queue;

use gatehouse_core::ports::{PortError, Redrive};
use gatehouse_core::queue::QueueKind;

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
