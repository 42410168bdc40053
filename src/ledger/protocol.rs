//! Commands to the EventLedger Durable Object and its answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Serialize};

pub const BINDING: &str = "EVENT_LEDGER";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://event-ledger/";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum LedgerCommand {
    /// Which of these ids were seen within the window?
    Seen { ids: Vec<String> },
    /// Remember these ids as seen now.
    Remember { ids: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum LedgerAnswer {
    Seen { seen: Vec<bool> },
    Done,
}
