//! Gatehouse: a public-API edge gateway on Cloudflare Workers.
//!
//! A request enters `entry`, passes `http` into [`app`], which asks [`core`] for decisions and
//! the adapters for I/O, and returns the same way. `core`, `app`, `config`, `ports` and the
//! Durable Objects' protocols build natively and are unit-tested without a runtime; the
//! Workers-facing modules build for wasm only.

pub mod app;
pub mod config;
pub mod core;
pub mod guard;
pub mod ledger;
pub mod ports;

#[cfg(test)]
pub mod fakes;
#[cfg(test)]
pub mod sim;

#[cfg(target_arch = "wasm32")]
mod adapters;
#[cfg(target_arch = "wasm32")]
mod entry;
#[cfg(target_arch = "wasm32")]
mod http;
