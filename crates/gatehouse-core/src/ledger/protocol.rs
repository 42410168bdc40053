//! Commands to the EventLedger Durable Object and their answers, as JSON over `stub.fetch`.

use serde::{Deserialize, Deserializer, Serialize};

use crate::events::{Reservation, Reserved};
use crate::tagged::{deserialize_tagged, field, unit, unknown, Tagged};

pub const BINDING: &str = "EVENT_LEDGER";
/// Durable Object `fetch` needs an absolute URL; the host is never resolved.
pub const URL: &str = "https://event-ledger/";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum LedgerCommand {
    /// Reserve these ids for `owner` where they are free (see `core::ledger::shards::reserve_here`);
    /// `ancestors`: the shards this one split from, nearest first (none at level 0). A shard that
    /// has split forwards the ids to its children when it knows their `namespace` (an older
    /// worker sends none: it answers `moved`).
    Reserve { owner: String, ids: Vec<String>, ancestors: Vec<String>, namespace: Option<String> },
    /// What this shard and its ancestors hold for these ids (a child asking its parent).
    Check { ids: Vec<String>, ancestors: Vec<String> },
    /// The owner's reservations of these ids become accepted ids.
    Confirm { owner: String, ids: Vec<String> },
    /// Drop the owner's unconfirmed reservations of these ids.
    Release { owner: String, ids: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum LedgerAnswer {
    Reserved {
        decisions: Vec<Reserved>,
    },
    /// The shard has split: its children take the ids.
    Moved,
    /// The shard has split and forwarded the ids (see `core::ledger::shards::Forwarded`).
    Forwarded {
        decisions: Vec<Reserved>,
        at: Vec<String>,
        split: Vec<String>,
    },
    /// One entry per id checked, and when the shard split.
    Held {
        held: Vec<Option<Reservation>>,
        split_at_ms: Option<i64>,
    },
    Done,
}

impl Tagged for LedgerCommand {
    const TAG: &'static str = "command";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        /// The fields every command has.
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            owner: Option<String>,
            ids: Vec<String>,
            /// A version before the shards split sends none.
            #[serde(default)]
            ancestors: Vec<String>,
            /// A version before forwarding sends none.
            #[serde(default)]
            namespace: Option<String>,
        }
        let Fields { owner, ids, ancestors, namespace } = Fields::deserialize(fields)?;
        let owner = || owner.ok_or_else(|| serde::de::Error::missing_field("owner"));
        Ok(match tag {
            "reserve" => Self::Reserve { owner: owner()?, ids, ancestors, namespace },
            "check" => Self::Check { ids, ancestors },
            "confirm" => Self::Confirm { owner: owner()?, ids },
            "release" => Self::Release { owner: owner()?, ids },
            other => return Err(unknown(other, &["reserve", "check", "confirm", "release"])),
        })
    }
}

impl Tagged for LedgerAnswer {
    const TAG: &'static str = "answer";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        match tag {
            "reserved" => Ok(Self::Reserved { decisions: field(fields, "decisions")? }),
            "moved" => unit(fields, Self::Moved),
            "forwarded" => {
                #[derive(Deserialize)]
                struct Forwarded {
                    decisions: Vec<Reserved>,
                    at: Vec<String>,
                    split: Vec<String>,
                }
                let Forwarded { decisions, at, split } = Forwarded::deserialize(fields)?;
                Ok(Self::Forwarded { decisions, at, split })
            }
            "held" => {
                #[derive(Deserialize)]
                struct Held {
                    held: Vec<Option<Reservation>>,
                    split_at_ms: Option<i64>,
                }
                let Held { held, split_at_ms } = Held::deserialize(fields)?;
                Ok(Self::Held { held, split_at_ms })
            }
            "done" => unit(fields, Self::Done),
            other => Err(unknown(other, &["reserved", "moved", "forwarded", "held", "done"])),
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
            LedgerCommand::Reserve {
                owner: "r1".into(),
                ids: ids(),
                ancestors: vec!["ns:1".into()],
                namespace: Some("ns".into()),
            },
            LedgerCommand::Reserve { owner: "r1".into(), ids: ids(), ancestors: vec![], namespace: None },
            LedgerCommand::Check { ids: ids(), ancestors: Vec::new() },
            LedgerCommand::Confirm { owner: "r1".into(), ids: ids() },
            LedgerCommand::Release { owner: "r1".into(), ids: Vec::new() },
        ] {
            let json = serde_json::to_string(&command).unwrap();
            assert!(json.starts_with(r#"{"command":"#), "{json}");
            assert_eq!(serde_json::from_str::<LedgerCommand>(&json).unwrap(), command);
        }
        for answer in [
            LedgerAnswer::Reserved { decisions: vec![Reserved::Fresh, Reserved::InFlight] },
            LedgerAnswer::Moved,
            LedgerAnswer::Forwarded {
                decisions: vec![Reserved::Fresh, Reserved::Duplicate],
                at: vec!["ns:L1:5".into(), "ns:L2:1".into()],
                split: vec!["ns:1".into(), "ns:L1:1".into()],
            },
            LedgerAnswer::Held {
                held: vec![None, Some(Reservation { owner: "r1".into(), confirmed: true, at_ms: 5 })],
                split_at_ms: Some(3),
            },
            LedgerAnswer::Done,
        ] {
            let json = serde_json::to_string(&answer).unwrap();
            assert_eq!(serde_json::from_str::<LedgerAnswer>(&json).unwrap(), answer);
        }
        assert!(
            serde_json::from_str::<LedgerCommand>(r#"{"command":"forget","owner":"r1","ids":[]}"#).is_err()
        );
        assert!(serde_json::from_str::<LedgerCommand>(r#"{"command":"reserve","owner":"r1"}"#).is_err());
        assert!(serde_json::from_str::<LedgerCommand>(r#"{"command":"reserve","ids":[]}"#).is_err());
        // The first version's reserve (no ancestors) reads as a level-0 reserve.
        assert_eq!(
            serde_json::from_str::<LedgerCommand>(r#"{"command":"reserve","owner":"r1","ids":["e"]}"#)
                .unwrap(),
            LedgerCommand::Reserve {
                owner: "r1".into(),
                ids: vec!["e".into()],
                ancestors: Vec::new(),
                namespace: None
            }
        );
    }
}
