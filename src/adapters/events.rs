//! The [`EventLedger`] port over the `EVENT_LEDGER` Durable Objects, and the [`EventSink`] port
//! over the `EVENTS_QUEUE` producer.

use std::rc::Rc;

use worker::{BatchMessageBuilder, ObjectNamespace, Queue};

use super::durable;
use crate::core::events::EventMessage;
use crate::ledger::protocol::{LedgerAnswer, LedgerCommand, URL};
use crate::ports::{EventLedger, EventSink, Meter, PortError};

pub const QUEUE_BINDING: &str = "EVENTS_QUEUE";
/// Queues take at most 100 messages and 256 KB in one `sendBatch`; events are at most 64 KiB.
const SEND_MAX_MESSAGES: usize = 100;
const SEND_MAX_BYTES: usize = 192 * 1024;

pub struct LedgerClient {
    namespace: ObjectNamespace,
    meter: Rc<Meter>,
}

impl LedgerClient {
    pub fn new(namespace: ObjectNamespace, meter: Rc<Meter>) -> Self {
        Self { namespace, meter }
    }

    async fn send(&self, object_name: &str, command: &LedgerCommand) -> Result<LedgerAnswer, PortError> {
        durable::call(&self.namespace, &self.meter, URL, object_name, command).await
    }
}

impl EventLedger for LedgerClient {
    async fn seen(&self, namespace: &str, ids: &[String]) -> Result<Vec<bool>, PortError> {
        match self.send(namespace, &LedgerCommand::Seen { ids: ids.to_vec() }).await? {
            LedgerAnswer::Seen { seen } if seen.len() == ids.len() => Ok(seen),
            other => Err(PortError(format!("event ledger: unexpected answer {other:?}"))),
        }
    }

    async fn remember(&self, namespace: &str, ids: &[String]) -> Result<(), PortError> {
        match self.send(namespace, &LedgerCommand::Remember { ids: ids.to_vec() }).await? {
            LedgerAnswer::Done => Ok(()),
            other => Err(PortError(format!("event ledger: unexpected answer {other:?}"))),
        }
    }
}

pub struct QueueSink {
    queue: Queue,
}

impl QueueSink {
    pub fn new(queue: Queue) -> Self {
        Self { queue }
    }
}

impl EventSink for QueueSink {
    async fn send(&self, messages: &[EventMessage]) -> Result<(), PortError> {
        let mut start = 0;
        while start < messages.len() {
            // As many messages as fit one sendBatch, each as JSON text (a JS structured clone of
            // serde's output would turn maps into `Map`s).
            let mut end = start;
            let mut bytes = 0;
            let mut bodies = Vec::new();
            while end < messages.len() && end - start < SEND_MAX_MESSAGES {
                let body = serde_json::to_string(&messages[end]).map_err(PortError::from_display)?;
                if end > start && bytes + body.len() > SEND_MAX_BYTES {
                    break;
                }
                bytes += body.len();
                bodies.push(body);
                end += 1;
            }
            let batch = BatchMessageBuilder::new().messages(bodies).build();
            self.queue.send_batch(batch).await.map_err(PortError::from_display)?;
            start = end;
        }
        Ok(())
    }
}
