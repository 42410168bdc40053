//! The [`EventLedger`] port over the `EVENT_LEDGER` Durable Objects, and the [`EventSink`] port
//! over the `EVENTS_QUEUE` producer.

use std::rc::Rc;

use worker::{BatchMessageBuilder, ObjectNamespace, Queue};

use super::durable;
use crate::adapters::deadline::within;
use gatehouse_core::events::EventMessage;
use gatehouse_core::ledger::forward::Forwarded;
use gatehouse_core::ledger::protocol::{LedgerAnswer, LedgerCommand, URL};
use gatehouse_core::ledger::shards::ShardAnswer;
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{EventLedger, EventSink, Meter, PortError, ReserveCall};
use gatehouse_core::queue::{pack, MESSAGES_PER_SEND, MESSAGE_MAX_BYTES};

pub const QUEUE_BINDING: &str = "EVENTS_QUEUE";

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

    async fn done(&self, object_name: &str, command: &LedgerCommand) -> Result<(), PortError> {
        match self.send(object_name, command).await? {
            LedgerAnswer::Done => Ok(()),
            other => Err(PortError(format!("event ledger: unexpected answer {other:?}"))),
        }
    }
}

impl EventLedger for LedgerClient {
    async fn reserve(&self, call: ReserveCall<'_>) -> Result<ShardAnswer, PortError> {
        let command = LedgerCommand::Reserve {
            owner: call.owner.to_owned(),
            ids: call.ids.to_vec(),
            ancestors: call.ancestors.to_vec(),
            namespace: Some(call.namespace.to_owned()),
        };
        shard_answer(self.send(call.shard, &command).await?, call.ids.len())
    }

    async fn confirm(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.done(shard, &LedgerCommand::Confirm { owner: owner.to_owned(), ids: ids.to_vec() }).await
    }

    async fn release(&self, shard: &str, owner: &str, ids: &[String]) -> Result<(), PortError> {
        self.done(shard, &LedgerCommand::Release { owner: owner.to_owned(), ids: ids.to_vec() }).await
    }
}

/// A reserve's answer as the port says it, `n` ids asked.
pub(crate) fn shard_answer(answer: LedgerAnswer, n: usize) -> Result<ShardAnswer, PortError> {
    match answer {
        LedgerAnswer::Reserved { decisions } if decisions.len() == n => Ok(ShardAnswer::Decided(decisions)),
        LedgerAnswer::Moved => Ok(ShardAnswer::Moved),
        LedgerAnswer::Forwarded { decisions, at, split } if decisions.len() == n && at.len() == n => {
            Ok(ShardAnswer::Forwarded(Forwarded { decisions, at, split }))
        }
        other => Err(PortError(format!("event ledger: unexpected answer {other:?}"))),
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
        for pair in pack(messages, "events", "items", MESSAGE_MAX_BYTES).chunks(MESSAGES_PER_SEND) {
            let batch = BatchMessageBuilder::new().messages(pair.to_vec()).build();
            let send = async { self.queue.send_batch(batch).await.map_err(PortError::from_display) };
            within(deadline::QUEUE_MS, "events queue send", send).await?;
        }
        Ok(())
    }
}
