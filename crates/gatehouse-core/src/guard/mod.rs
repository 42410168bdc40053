//! The KeyGuard Durable Object (SPEC §1 `KEY_GUARD`): one instance per API key, named by the key's
//! hash. It remembers the key's record so that steady-state authentication needs no D1 query, and
//! it is the one place that decides for its key in a strongly consistent way.
//!
//! The object itself is `gatehouse_worker`'s `objects::key_guard`; [`protocol`] is the typed wire
//! contract its caller (the worker's `adapters::guard`) and it share.

pub mod protocol;
pub mod single_flight;
