//! Commands to the EventLedger Durable Object and their answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Deserializer, Serialize};

use crate::events::Reserved;
use crate::tagged::{deserialize_tagged, field, unit, unknown, Tagged};

pub const BINDING: &str = "EVENT_LEDGER";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://event-ledger/";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum LedgerCommand {
    /// Reserve these ids for `owner` where they are free (see `core::events::reserve`).
    Reserve { owner: String, ids: Vec<String> },
    /// The owner's reservations of these ids become accepted ids.
    Confirm { owner: String, ids: Vec<String> },
    /// Drop the owner's unconfirmed reservations of these ids.
    Release { owner: String, ids: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum LedgerAnswer {
    Reserved { decisions: Vec<Reserved> },
    Done,
}

impl Tagged for LedgerCommand {
    const TAG: &'static str = "command";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        /// The fields every command has.
        #[derive(Deserialize)]
        struct Fields {
            owner: String,
            ids: Vec<String>,
        }
        let command = match tag {
            "reserve" => |owner, ids| Self::Reserve { owner, ids },
            "confirm" => |owner, ids| Self::Confirm { owner, ids },
            "release" => |owner, ids| Self::Release { owner, ids },
            other => return Err(unknown(other, &["reserve", "confirm", "release"])),
        };
        let Fields { owner, ids } = Fields::deserialize(fields)?;
        Ok(command(owner, ids))
    }
}

impl Tagged for LedgerAnswer {
    const TAG: &'static str = "answer";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        match tag {
            "reserved" => Ok(Self::Reserved { decisions: field(fields, "decisions")? }),
            "done" => unit(fields, Self::Done),
            other => Err(unknown(other, &["reserved", "done"])),
        }
    }
}

deserialize_tagged!(LedgerCommand, LedgerAnswer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_answers_read_back_as_written() {
        let ids = || vec!["e1".to_owned(), "e2".to_owned()];
        for command in [
            LedgerCommand::Reserve { owner: "r1".into(), ids: ids() },
            LedgerCommand::Confirm { owner: "r1".into(), ids: ids() },
            LedgerCommand::Release { owner: "r1".into(), ids: Vec::new() },
        ] {
            let json = serde_json::to_string(&command).unwrap();
            assert!(json.starts_with(r#"{"command":"#), "{json}");
            assert_eq!(serde_json::from_str::<LedgerCommand>(&json).unwrap(), command);
        }
        for answer in [
            LedgerAnswer::Reserved { decisions: vec![Reserved::Fresh, Reserved::InFlight] },
            LedgerAnswer::Done,
        ] {
            let json = serde_json::to_string(&answer).unwrap();
            assert_eq!(serde_json::from_str::<LedgerAnswer>(&json).unwrap(), answer);
        }
        assert!(
            serde_json::from_str::<LedgerCommand>(r#"{"command":"forget","owner":"r1","ids":[]}"#).is_err()
        );
        assert!(serde_json::from_str::<LedgerCommand>(r#"{"command":"reserve","owner":"r1"}"#).is_err());
    }
}
