//! Gatehouse's domain: the rules of the product contract as pure functions, the ports (the I/O
//! the application needs, as small traits), the configuration, and the typed protocols of the
//! two Durable Objects. No Workers types and no I/O: functions take the time (`now_ms`) and
//! random bytes as arguments and return decisions, so every rule here is unit-tested natively.

pub mod abuse;
pub mod api_key;
pub mod archive;
pub mod audit;
pub mod audit_chain;
pub mod body;
pub mod browser;
pub mod budget;
pub mod canonical_json;
pub mod config;
pub mod digest;
pub mod encoding;
pub mod error;
pub mod event_log;
pub mod events;
pub mod guard;
pub mod idempotency;
pub mod identity;
pub mod json_body;
pub mod lease;
pub mod ledger;
pub mod page;
pub mod platform;
pub mod ports;
pub mod problem;
pub mod queue;
pub mod rate_limit;
pub mod resources;
pub mod retention;
pub mod route;
pub mod sealing;
pub mod server_timing;
pub mod stats;
pub mod tagged;
pub mod tiers;
pub mod time;
pub mod trace;
pub mod upstream;
pub mod usage;
pub mod webhook;
