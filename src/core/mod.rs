//! Pure domain logic: no Workers types, no I/O. Functions take the time (`now_ms`) and random
//! bytes as arguments and return decisions, so every rule here is unit-tested natively.

pub mod abuse;
pub mod api_key;
pub mod archive;
pub mod audit;
pub mod body;
pub mod canonical_json;
pub mod encoding;
pub mod error;
pub mod events;
pub mod idempotency;
pub mod json_body;
pub mod page;
pub mod platform;
pub mod queue;
pub mod rate_limit;
pub mod resources;
pub mod route;
pub mod sealing;
pub mod tagged;
pub mod tiers;
pub mod time;
pub mod upstream;
pub mod webhook;
