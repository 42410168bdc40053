//! Thin adapters: the only code that touches `worker::{Env, D1Database, Stub, …}`. Each implements
//! a port of `crate::ports` and converts, nothing more.

pub mod archive;
pub mod audit;
pub mod body;
pub mod d1;
pub mod durable;
pub mod env;
pub mod events;
pub mod guard;
pub mod kv;
pub mod origin;
pub mod redrive;
pub mod webhooks;
