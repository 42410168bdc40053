//! Commands to the EventLedger Durable Object and their answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Serialize};

use crate::core::events::Reserved;

pub const BINDING: &str = "EVENT_LEDGER";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://event-ledger/";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum LedgerCommand {
    /// Reserve these ids for `owner` where they are free (see `core::events::reserve`).
    Reserve { owner: String, ids: Vec<String> },
    /// The owner's reservations of these ids become accepted ids.
    Confirm { owner: String, ids: Vec<String> },
    /// Drop the owner's unconfirmed reservations of these ids.
    Release { owner: String, ids: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum LedgerAnswer {
    Reserved { decisions: Vec<Reserved> },
    Done,
}
