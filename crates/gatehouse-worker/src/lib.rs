//! The Gatehouse worker: the only crate built for WebAssembly. A request enters through
//! [`fetch_export`] (answered in the call when it needs no wait) into [`entry`], is
//! turned into an `ApiRequest` by [`http`], handled by `gatehouse_app` over the [`adapters`]
//! (D1, KV, R2, Queues, the Durable Objects' stubs, the origin), and answered the same way back.
//! The two Durable Objects live in [`objects`], one file each. Everything that decides lives in
//! `gatehouse_core` and `gatehouse_app`, which build and test natively; natively this crate is
//! empty.
#![cfg(target_arch = "wasm32")]

mod adapters;
mod entry;
mod fetch_export;
mod http;
mod objects;
#[cfg(feature = "profile")]
mod profile;
mod static_files;
