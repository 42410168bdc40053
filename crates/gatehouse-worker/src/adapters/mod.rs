//! Thin adapters: the only code that touches `worker::{Env, D1Database, Stub, …}`. Each implements
//! a port of `gatehouse_core::ports` and converts, nothing more.

pub mod alarm;
pub mod archive;
pub mod audit;
pub mod body;
pub mod clock;
pub mod d1;
pub mod deadline;
pub mod durable;
pub mod env;
pub mod events;
pub mod guard;
pub mod kv;
pub mod origin;
pub mod redrive;
pub mod webhooks;

/// A JavaScript exception as a port error: its message when it is a string, else its debug form.
fn js_error(e: wasm_bindgen::JsValue) -> gatehouse_core::ports::PortError {
    gatehouse_core::ports::PortError(e.as_string().unwrap_or_else(|| format!("{e:?}")))
}
