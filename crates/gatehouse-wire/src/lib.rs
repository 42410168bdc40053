//! The JSON shapes of Gatehouse's public API that both sides read or write, declared once: the
//! worker builds them (`gatehouse-core`'s views) and the SDK (`gatehouse-client`) reads them.
//! Times are RFC 3339 strings here; the server keeps Unix milliseconds and converts at the view.

use serde::Serialize;

pub mod digests;
pub mod identities;
pub mod keys;
pub mod logs;
pub mod resources;
pub mod webhooks;

/// A shape as the JSON value an answer carries (a struct of strings, numbers and JSON values
/// always serialises).
pub fn to_json(shape: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(shape).expect("a wire shape serialises")
}
