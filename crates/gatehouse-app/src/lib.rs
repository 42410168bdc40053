//! The application: the request pipeline of SPEC §3 (`pipeline`, `authentication`,
//! `responses`), the work after the response (`after_response`), the route handlers, and the
//! queue and cron jobs. Generic over the ports (`gatehouse_core::ports`), so it runs the same
//! over Durable Objects, D1 and KV in the worker and over in-memory fakes in native tests.
//!
//! With the feature `testing` (and in this crate's own tests) it also offers `fakes` of every
//! port, `testing`'s gateway over them, and the seeded fault simulation `sim`.

mod after_response;
pub mod answer_now;
mod audit;
mod authentication;
mod body_reading;
pub mod cron;
pub mod ingest;
pub mod outbox;
mod pipeline;
mod responses;

pub use after_response::{AfterResponse, Settlement};
pub use responses::failure;

pub use dead_letters::{redrive, RedriveReport};
pub use digest_job::{DigestJob, DigestReport};
pub use event_log::purge_events;
pub use roll_up::{move_legacy_audit_rows, roll_up, roll_up_each, RollUpLimits, RollUpReport, RollUpRun};
pub use usage::{export_usage, UsagePeriods, UsageReport};
pub use wake::{wake_objects, WakeReport};
pub use webhooks::{dispatch, jitter, reseal_secrets, retry, sweep, ManualRetry, SEAL_BATCH};
#[cfg(test)]
mod audit_load;
#[cfg(test)]
mod browser_keys;
#[cfg(test)]
mod dashboard_budget;
mod dead_letters;
mod digest_job;
mod digests;
mod event_log;
#[cfg(any(test, feature = "testing"))]
pub mod fakes;
mod identities;
mod keys;
#[cfg(test)]
mod lifecycle;
mod listener;
mod projects;
mod proxy;
pub mod queues;
mod resources;
mod roll_up;
mod rotations;
#[cfg(any(test, feature = "testing"))]
pub mod sim;
#[cfg(test)]
mod simulation;
mod subscriptions;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod usage;
mod usage_runs;
mod visitors;
mod wake;
mod webhooks;

use std::cell::RefCell;
use std::rc::Rc;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

use gatehouse_core::abuse::AbuseMemory;
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::audit::AuditRow;
use gatehouse_core::config::Config;
use gatehouse_core::encoding::object_id;
use gatehouse_core::error::ApiError;
use gatehouse_core::lease::LeaseBook;
use gatehouse_core::ports::{AnswerBody, PassThrough, PortError, Ports};
use gatehouse_core::rate_limit::Usage;
use gatehouse_core::trace::TraceContext;

pub struct ApiRequest<B> {
    pub method: String,
    /// The gateway's own origin as the client reached it (`https://api.example.com`): the base of
    /// the problem types of its errors (SPEC §25).
    pub origin: String,
    /// `Accept`: problem details when it asks for them (`core::problem::wanted`).
    pub accept: Option<String>,
    /// W3C `traceparent` and `tracestate` as received (`core::trace`).
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// `Origin`: the page that sent the request, if a browser did (a browser key's
    /// `allowed_origins`, SPEC §24).
    pub page_origin: Option<String>,
    /// The path without the query string, as the client sent it.
    pub path: String,
    /// Decoded query pairs, in order.
    pub query: Vec<(String, String)>,
    /// The query string as sent (for the audit log, redacted there).
    pub raw_query: Option<String>,
    pub user_agent: Option<String>,
    pub authorization: Option<String>,
    /// The `Idempotency-Key` header as received (repeats joined with `, ` by the runtime).
    pub idempotency_key: Option<String>,
    /// `CF-Connecting-IP`: failed authentications are limited per client address.
    pub client_ip: Option<String>,
    /// `Gatehouse-Budget`: the dashboard's reads ask for its budget (`gatehouse_core::budget`).
    pub budget: Option<String>,
    /// Every header as received (a proxied request forwards most of them, SPEC §15).
    pub headers: Vec<(String, String)>,
    pub body: B,
    pub now_ms: i64,
}

#[derive(Clone, PartialEq, Eq)]
pub struct ApiResponse {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub request_id: String,
    /// What the log should say: the cause of a failure the client saw only as a generic error,
    /// or a problem behind a success.
    pub internal_error: Option<String>,
    /// Work to finish after the response is sent (`ctx.wait_until`).
    pub settlements: Vec<Settlement>,
    /// The request's audit row; the caller adds the response time and sends it off the hot path.
    pub audit: AuditRow,
    /// Whether the row is sent: not for a request refused from the isolate's memory of an address
    /// over its anonymous limit (docs/api/rate-limits.md, "Abuse").
    pub audited: bool,
    /// Webhook deliveries to enqueue after the response (the minute sweep catches a lost send).
    pub webhook_deliveries: Vec<String>,
    /// A proxied answer's own headers (after `headers`; ours win, SPEC §15).
    pub origin_headers: Vec<(String, String)>,
    /// The rest of a proxied answer too large to hold, streamed after `body`.
    pub passthrough: Option<PassThrough>,
}

/// The body may carry a new API key or signing secret: Debug output shows its size only.
impl std::fmt::Debug for ApiResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiResponse")
            .field("status", &self.status)
            .field("request_id", &self.request_id)
            .field("body", &format_args!("[{} bytes]", self.body.len()))
            .field("internal_error", &self.internal_error)
            .field("settlements", &self.settlements.len())
            .finish_non_exhaustive()
    }
}

/// A successful answer before it becomes bytes.
pub struct Reply {
    pub status: u16,
    pub body: Payload,
    /// Something the operator should see in the log although the request succeeded.
    pub log: Option<String>,
    /// Webhook deliveries the request wrote, to enqueue after the response.
    pub deliveries: Vec<String>,
    /// Work to finish after the response.
    pub after: Option<Box<Settlement>>,
}

pub enum Payload {
    Json(Value),
    /// A download, e.g. an audit archive.
    File {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
    /// A proxied route's answer: the origin's headers (as the client may see them) and body.
    Origin {
        headers: Vec<(String, String)>,
        body: AnswerBody,
    },
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Reply { status: 200, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
    pub fn created(body: Value) -> Self {
        Reply { status: 201, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
    pub fn accepted(body: Value) -> Self {
        Reply { status: 202, body: Payload::Json(body), log: None, deliveries: Vec::new(), after: None }
    }
    /// A download.
    pub fn file(content_type: &'static str, bytes: Vec<u8>) -> Self {
        let body = Payload::File { content_type, bytes };
        Reply { status: 200, body, log: None, deliveries: Vec::new(), after: None }
    }
}

/// Everything a handler may read about the request it serves.
pub struct Call<'a> {
    pub request_id: &'a str,
    pub key: Option<KeyRecord>,
    /// The key's limits after this request was admitted.
    pub usage: Option<Usage>,
    pub params: Vec<&'a str>,
    pub query: &'a [(String, String)],
    /// The body, or the first bytes of a proxied body streamed on (then `rest` holds the rest).
    pub body: Vec<u8>,
    /// The unread rest of a proxied body over `SIGNED_BODY_LIMIT` (SPEC §19 "Memory").
    pub rest: Option<gatehouse_core::ports::PassThrough>,
    /// `CF-Connecting-IP`: the address the origin of a proxied route is told.
    pub client_ip: Option<&'a str>,
    pub now_ms: i64,
    /// Where the ids of the rows this request creates come from.
    pub ids: Ids,
    /// The request's `Idempotency-Key` where the route honours it.
    pub idempotency_key: Option<String>,
    /// The W3C trace the request belongs to, with Gatehouse's span (SPEC §25): what a proxied
    /// origin and the webhooks the request causes are told.
    pub trace: TraceContext,
}

/// The ids a request gives the rows it creates. Random, except for an idempotent request: there
/// they derive from its operation, so executing the same operation again (after a failure whose
/// write landed, or a worker that died mid-way) names the same rows, and the stores find them
/// instead of writing them twice.
///
/// The secrets such a request makes (a rolled key, a rotated webhook secret) derive from the
/// operation too, keyed by the credential the caller authenticated with, so only a request that
/// carries that credential makes them again and nothing stored derives them (SPEC §19,
/// "Operations that run twice").
pub struct Ids {
    seed: Option<[u8; 32]>,
    issued: std::cell::Cell<u32>,
    /// HMAC-SHA256(credential, the operation's seed): the key of the operation's secrets.
    secrets: Option<[u8; 32]>,
    secrets_issued: std::cell::Cell<u32>,
}

impl Ids {
    pub fn new(seed: Option<[u8; 32]>) -> Self {
        Ids { seed, issued: std::cell::Cell::new(0), secrets: None, secrets_issued: std::cell::Cell::new(0) }
    }

    /// The ids of an operation (`seed`, none for a request without `Idempotency-Key`) and its
    /// secrets, keyed by the caller's `credential` (its API key, or the admin token).
    pub fn for_operation(seed: Option<[u8; 32]>, credential: Option<&str>) -> Self {
        let secrets = seed.zip(credential).map(|(seed, credential)| {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(credential.as_bytes())
                .expect("HMAC accepts any key length");
            mac.update(OPERATION_SECRETS_INFO);
            mac.update(&seed);
            mac.finalize().into_bytes().into()
        });
        Ids { secrets, ..Ids::new(seed) }
    }

    /// The next secret's `N` random bytes for `kind` (`key`, `whsec`, …): derived from the
    /// operation and the caller's credential, or fresh random bytes outside an operation.
    pub fn secret<const N: usize>(&self, kind: &str) -> [u8; N] {
        let Some(prk) = &self.secrets else {
            return random();
        };
        let n = self.secrets_issued.get();
        self.secrets_issued.set(n + 1);
        let mut info = kind.as_bytes().to_vec();
        info.extend_from_slice(&n.to_be_bytes());
        let mut out = [0u8; N];
        hkdf::Hkdf::<Sha256>::from_prk(prk)
            .expect("a 32-byte PRK")
            .expand(&info, &mut out)
            .expect("a secret is far below HKDF's output limit");
        out
    }

    /// The next id of `kind` (`con`, `msg`, `evt`, …).
    pub fn next(&self, kind: &str) -> String {
        let Some(seed) = &self.seed else {
            return object_id(kind, &random());
        };
        let n = self.issued.get();
        self.issued.set(n + 1);
        let mut h = Sha256::new();
        h.update(seed);
        h.update(kind.as_bytes());
        h.update(n.to_be_bytes());
        let digest = h.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        object_id(kind, &bytes)
    }
}

impl Call<'_> {
    /// The authenticated key; routes with `Access::Key` always have one.
    fn key(&self) -> &KeyRecord {
        self.key.as_ref().expect("route requires an API key")
    }

    fn project_id(&self) -> &str {
        &self.key().project_id
    }
}

/// What keys the secrets of an operation apart from any other HMAC made with the same credential.
const OPERATION_SECRETS_INFO: &[u8] = b"gatehouse/operation-secrets/v1\n";

/// The pipeline over its ports: key guards, the D1 store, the response store, the event ledger,
/// the events queue and the audit archive.
pub struct Gateway<'c, P: Ports> {
    pub config: &'c Config,
    pub guard: P::Guard,
    pub store: P::Store,
    pub responses: P::Responses,
    pub ledger: P::Ledger,
    pub events: P::Events,
    pub archive: P::Archive,
    pub deliveries: P::Deliveries,
    pub audit: P::Audit,
    pub dead_letters: P::DeadLetters,
    pub redrive: P::Redrive,
    /// The origins of proxied routes (SPEC §15).
    pub origin: P::Origin,
    /// What this isolate remembers of blocked addresses and unknown and recent keys (shared by
    /// the requests an isolate serves).
    pub memory: Rc<RefCell<AbuseMemory>>,
    /// The leases of hot keys this isolate holds (SPEC §20), shared by the requests it serves.
    pub leases: Rc<RefCell<LeaseBook>>,
    /// The event-ledger shards this isolate saw split (SPEC §20), shared by the requests it serves.
    pub ledger_layout: Rc<RefCell<gatehouse_core::ledger::shards::LedgerLayout>>,
    /// The request's own timer (a request waits for its isolate's lease of a hot key with it).
    pub timer: P::Timer,
}

fn unavailable(e: PortError) -> ApiError {
    ApiError::unavailable(e.0)
}

/// `N` bytes from the platform's CSPRNG (Web Crypto in the worker), handed out of a pool that is
/// refilled `RANDOM_POOL` bytes at a time: each draw from the platform is a call into
/// JavaScript (≈ 15 µs of a request in the profile). Each byte is handed out once.
pub fn random<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    if N > RANDOM_POOL / 4 {
        getrandom::getrandom(&mut buf).expect("the platform CSPRNG is available");
        return buf;
    }
    POOL.with_borrow_mut(|(used, pool)| {
        if *used + N > RANDOM_POOL {
            getrandom::getrandom(pool).expect("the platform CSPRNG is available");
            *used = 0;
        }
        buf.copy_from_slice(&pool[*used..*used + N]);
        *used += N;
    });
    buf
}

const RANDOM_POOL: usize = 512;

thread_local! {
    /// Bytes of the platform's CSPRNG not handed out yet: those from `.0` on.
    static POOL: std::cell::RefCell<(usize, [u8; RANDOM_POOL])> =
        const { std::cell::RefCell::new((RANDOM_POOL, [0; RANDOM_POOL])) };
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::random;

    /// The pool hands each byte out once: draws of mixed sizes across many refills never repeat.
    #[test]
    fn random_draws_never_repeat_across_refills_of_the_pool() {
        let mut seen = BTreeSet::new();
        for _ in 0..400 {
            assert!(seen.insert(random::<16>().to_vec()));
            assert!(seen.insert(random::<12>().to_vec()));
            assert!(seen.insert(random::<10>().to_vec()));
        }
        assert!(seen.insert(random::<200>().to_vec()), "a draw larger than the pool's share");
    }
}
