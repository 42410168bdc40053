//! The KeyGuard Durable Object (SPEC §1 `KEY_GUARD`): one instance per API key, named by the key's
//! hash. It remembers the key's record so that steady-state authentication needs no D1 query, and
//! it is the one place that decides for its key in a strongly consistent way.
//!
//! [`protocol`] is the typed wire contract shared by the caller (`adapters::guard`) and the object.

pub mod protocol;
pub mod single_flight;

#[cfg(target_arch = "wasm32")]
pub mod object;
