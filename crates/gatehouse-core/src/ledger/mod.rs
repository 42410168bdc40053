//! The EventLedger Durable Object (`EVENT_LEDGER`): the strongly consistent memory of seen
//! `event_id`s for one de-duplication namespace (a project and a key type, SPEC §7), within
//! `EVENT_DEDUP_WINDOW_SECONDS`, pruned as it goes.

pub mod forward;
pub mod protocol;
pub mod shards;
