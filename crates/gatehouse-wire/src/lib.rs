//! The JSON shapes of Gatehouse's public API that both sides read or write, declared once: the
//! worker builds them (`gatehouse-core`'s views) and the SDK (`gatehouse-client`) reads them.
//! Times are RFC 3339 strings here; the server keeps Unix milliseconds and converts at the view.

pub mod keys;
pub mod logs;
pub mod resources;
pub mod webhooks;
