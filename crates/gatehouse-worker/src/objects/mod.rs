//! The Durable Object classes of SPEC §1, one file each. Their wire protocols are
//! `gatehouse_core::guard::protocol` and `gatehouse_core::ledger::protocol`.

pub mod event_ledger;
pub mod key_guard;
