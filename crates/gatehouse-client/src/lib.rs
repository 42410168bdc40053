//! # gatehouse-client
//!
//! The Rust SDK of the Gatehouse API (the `gatehouse` CLI is built on it). It does for you what
//! every integrator otherwise writes by hand:
//!
//! * **Idempotency built in.** Every mutating call carries an `Idempotency-Key` (a UUIDv4) made
//!   once per call and reused by each of its retries, so a retry after a lost answer replays the
//!   first result instead of doing the work twice. [`Call::idempotency_key`] sets your own.
//! * **Retries by classification, never blindly** ([`retry::should_retry`]): 429
//!   `RATE_LIMIT_EXCEEDED`, a 409 marked `retryable`, and 500 are retried; 502/503/504, timeouts
//!   and network errors only when the request is idempotent (GET/HEAD, or it carries a key);
//!   quotas, 400, 401, 403, 404, other 409s, 413 and 422 never. At most 5 attempts by default.
//! * **Delays** ([`retry::retry_delay`]): the server's `Retry-After` (seconds or an HTTP date)
//!   plus up to 10 % jitter; otherwise 1 s doubling to 30 s, times a random factor in `[0.5, 1]`,
//!   so parallel workers do not come back in the same instant.
//! * **Proactive slow-down**: clones of a [`Client`] share each key's last
//!   `X-RateLimit-Remaining`/`X-RateLimit-Reset`; while a window is used up, new requests wait for
//!   its reset instead of being sent into a 429.
//! * **Typed errors** ([`Error`], [`ApiError`]) with status, code, message, `request_id`,
//!   `retryable` and `details`.
//! * **Events** ([`Event`], [`Client::track`]) get their `event_id` when they are made and keep
//!   it across retries; undelivered events go to a local NDJSON buffer for
//!   [`Client::flush_events`].
//! * **Lists** ([`Pages`]) follow cursors; the **audit log** can be tailed ([`Client::tail_logs`]).
//! * **Webhook verification** ([`WebhookVerifier`]): Standard Webhooks, several signatures during
//!   a secret rotation, ±5 minutes, constant-time comparison.
//! * **Webhook listeners**: a `cli` subscription's deliveries are pulled by a long poll
//!   ([`Client::pull_deliveries`]) and each outcome reported ([`Client::report_delivery`]), as
//!   `gatehouse listen` does to forward them to a local URL.
//!
//! ```no_run
//! use gatehouse_client::{Actor, Client, Event, NewContact};
//!
//! # async fn run() -> Result<(), gatehouse_client::Error> {
//! let client = Client::new("http://127.0.0.1:8787", std::env::var("GATEHOUSE_KEY").unwrap())?;
//! let ada = client
//!     .create_contact(&NewContact { name: Some("Ada".into()), email: Some("ada@example.com".into()), ..Default::default() })
//!     .await?;
//! client.track(vec![Event::new("Contact Created", Actor::User(ada.id.clone()))]).await?;
//! match client.get_contact("con_missing").await {
//!     Err(gatehouse_client::Error::Api(e)) if e.status == 404 => println!("not found (request {:?})", e.request_id),
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```

mod call;
mod client;
#[cfg(test)]
mod contract_tests;
pub mod digests;
mod error;
mod events;
mod logs;
mod notice;
mod pacing;
mod resources;
pub mod retry;
mod stored_events;
mod tail;
#[cfg(feature = "testing")]
pub mod testing;
mod verify;
mod webhooks;

pub use call::{Call, Page, Pages, Reply};
pub use client::{Client, ClientBuilder, Notice, DEFAULT_URL};
pub use error::{ApiError, Error, RateLimitState};
pub use events::{
    Actor, Event, Identified, Linked, RejectedEvent, ReplayChunkStored, TrackOutcome, MAX_BATCH,
    MAX_BUFFERED_AGE,
};
pub use logs::{LogEntry, LogFilter, LogTail};
pub use resources::{
    BulkItem, BulkOutcome, Contact, CreatedKey, Key, KeyChanges, KeyStatus, KeyType, Limits, Me, Message,
    NewContact, NewKey, NewMessage, NewReleaseMarker, Quota, RateLimit, ReleaseMarker, Scenario, ScenarioRun,
};
pub use stored_events::{EventTail, StoredEvent, StoredEventFilter};
pub use tail::{Followed, Tail};
pub use verify::{VerifyError, WebhookVerifier, TIMESTAMP_TOLERANCE};
pub use webhooks::{
    event_types, CreatedWebhook, DeletedWebhook, Delivery, DeliveryAttempt, DeliveryReport, DeliveryStatus,
    PulledDeliveries, PulledDelivery, Recovered, ReportedDelivery, TriggeredEvent, Webhook, WebhookPublicKey,
    WebhookStatus, MAX_PULL_WAIT,
};
