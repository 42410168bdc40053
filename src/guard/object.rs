//! The Durable Object class itself.
//!
//! * The key's record is kept in memory once loaded (one D1 query per object start); `Invalidate`
//!   drops it, and an epoch counter makes sure a load that raced with an invalidation is not kept.
//! * The rate window, the monthly quota and the idempotency claims live in the object's SQLite
//!   storage. Reading, deciding and writing them is synchronous (no `await` in between), so
//!   concurrent requests to one key are decided strictly one after another: exactly `limit` pass
//!   per window, and exactly one request takes a claim.
//! * An object named `ip:<address>` counts failed authentications from that address instead.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use serde::Deserialize;
use worker::{
    console_log, durable_object, wasm_bindgen, Date, Delay, DurableObject, Env, Request, Response, Result,
    SqlStorage, State,
};

use super::protocol::{GuardAnswer, GuardCommand};
use crate::adapters::{d1::D1Store, env::config};
use crate::config::Config;
use crate::core::api_key::KeyRecord;
use crate::core::idempotency::{decide_claim, Claim, ClaimDecision, StoredResponse, LEASE_MS};
use crate::core::rate_limit::{decide, Counters, Limits, Usage, Verdict, AUTH_FAILURE_LIMITS};
use crate::ports::{ClaimRequest, Directory};

/// How long a request with the same key as a running one waits for it to finish before it is
/// answered 409 `IDEMPOTENCY_KEY_IN_USE`.
const IN_USE_WAIT_MS: u64 = 2_000;
const IN_USE_POLL_MS: u64 = 20;
/// How long the guard keeps a completed response itself after the response store has it too:
/// Workers KV may take this long to show a write everywhere.
const STORE_PROPAGATION_MS: i64 = 60_000;

#[durable_object]
pub struct KeyGuardObject {
    env: Env,
    sql: SqlStorage,
    key: RefCell<Option<KeyRecord>>,
    counters: Cell<Option<Counters>>,
    epoch: Cell<u64>,
}

/// A claim row as SQLite returns it.
#[derive(Deserialize)]
struct ClaimRow {
    fingerprint: String,
    until_ms: i64,
    completed: i64,
    response: Option<String>,
}

fn now_ms() -> i64 {
    Date::now().as_millis() as i64
}

fn rust_error(e: impl std::fmt::Display) -> worker::Error {
    worker::Error::RustError(e.to_string())
}

impl DurableObject for KeyGuardObject {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        for ddl in [
            "CREATE TABLE IF NOT EXISTS counters (
               id INTEGER PRIMARY KEY CHECK (id = 1),
               window_start_ms INTEGER NOT NULL, window_used INTEGER NOT NULL,
               month_start_ms INTEGER NOT NULL, month_used INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS claims (
               idempotency_key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, owner TEXT NOT NULL,
               until_ms INTEGER NOT NULL, completed INTEGER NOT NULL,
               response TEXT, response_until_ms INTEGER)",
            "CREATE INDEX IF NOT EXISTS claims_by_expiry ON claims (until_ms)",
        ] {
            sql.exec(ddl, None).expect("create the guard's tables");
        }
        Self { env, sql, key: RefCell::new(None), counters: Cell::new(None), epoch: Cell::new(0) }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let command: GuardCommand = req.json().await?;
        let answer = match command {
            GuardCommand::Authorize { key_hash, claim } => match self.record(&key_hash).await? {
                Some(key) if !key.is_revoked() => {
                    let (verdict, usage) = self.count(self.config()?.limits(&key))?;
                    let claim = match claim {
                        Some(c) if verdict == Verdict::Allowed => Some(self.claim_waiting(&c).await?),
                        _ => None,
                    };
                    GuardAnswer::Decided { key, verdict, usage, claim }
                }
                revoked => GuardAnswer::Denied { key: revoked },
            },
            GuardCommand::Invalidate { .. } => {
                self.epoch.set(self.epoch.get() + 1);
                self.key.replace(None);
                GuardAnswer::Done
            }
            GuardCommand::RecordAuthFailure => {
                let (verdict, usage) = self.count(AUTH_FAILURE_LIMITS)?;
                GuardAnswer::AuthFailure { verdict, usage }
            }
            GuardCommand::CompleteClaim { claim, response, stored_elsewhere } => {
                self.complete(&claim, &response, stored_elsewhere)?;
                GuardAnswer::Done
            }
            GuardCommand::Ping => GuardAnswer::Done,
            GuardCommand::ReleaseClaim { claim } => {
                self.sql.exec(
                    "DELETE FROM claims WHERE idempotency_key = ? AND owner = ? AND completed = 0",
                    vec![claim.idempotency_key.into(), claim.request_id.into()],
                )?;
                GuardAnswer::Done
            }
        };
        Response::from_json(&answer)
    }
}

impl KeyGuardObject {
    fn config(&self) -> Result<&'static Config> {
        config(&self.env).map_err(rust_error)
    }

    /// The remembered record, loaded from D1 when the object has none. Unknown keys are not
    /// remembered: nothing is cached for a hash that no key has.
    async fn record(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        if let Some(key) = self.key.borrow().as_ref() {
            return Ok(Some(key.clone()));
        }
        let epoch = self.epoch.get();
        let store = D1Store::new(self.env.d1("DB")?, Rc::default());
        let loaded = store.key_by_hash(key_hash).await.map_err(|e| rust_error(e.0))?;
        console_log!(
            r#"{{"component":"key_guard","event":"record_loaded","d1_queries":1,"found":{}}}"#,
            loaded.is_some()
        );
        if epoch == self.epoch.get() {
            self.key.replace(loaded.clone());
        }
        Ok(loaded)
    }

    /// One request against `limits`: read, decide and write the counters without yielding.
    fn count(&self, limits: Limits) -> Result<(Verdict, Usage)> {
        let prev = match self.counters.get() {
            Some(c) => c,
            None => self
                .sql
                .exec("SELECT * FROM counters", None)?
                .to_array::<Counters>()?
                .pop()
                .unwrap_or_default(),
        };
        let (verdict, usage, next) = decide(prev, now_ms(), limits);
        if verdict == Verdict::Allowed {
            self.sql.exec(
                "INSERT INTO counters (id, window_start_ms, window_used, month_start_ms, month_used)
                 VALUES (1, ?, ?, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET window_start_ms = excluded.window_start_ms,
                   window_used = excluded.window_used, month_start_ms = excluded.month_start_ms,
                   month_used = excluded.month_used",
                vec![
                    next.window_start_ms.into(),
                    i64::from(next.window_used).into(),
                    next.month_start_ms.into(),
                    (next.month_used as i64).into(),
                ],
            )?;
        }
        self.counters.set(Some(if verdict == Verdict::Allowed { next } else { prev }));
        Ok((verdict, usage))
    }

    /// Takes the claim, or waits a little while the same request is still running elsewhere, so
    /// a client that retries right after its first attempt gets the replay instead of a 409.
    async fn claim_waiting(&self, request: &ClaimRequest) -> Result<ClaimDecision> {
        let mut waited = 0;
        loop {
            let decision = self.claim(request)?;
            if decision != ClaimDecision::InUse || waited >= IN_USE_WAIT_MS {
                return Ok(decision);
            }
            Delay::from(Duration::from_millis(IN_USE_POLL_MS)).await;
            waited += IN_USE_POLL_MS;
        }
    }

    /// Decides on the claim and, for a new one, takes it, without yielding.
    fn claim(&self, request: &ClaimRequest) -> Result<ClaimDecision> {
        let now = now_ms();
        self.sql.exec("DELETE FROM claims WHERE until_ms <= ?", vec![now.into()])?;
        let existing = self
            .sql
            .exec(
                "SELECT fingerprint, until_ms, completed,
                        CASE WHEN response_until_ms > ? THEN response END AS response
                 FROM claims WHERE idempotency_key = ?",
                vec![now.into(), request.idempotency_key.clone().into()],
            )?
            .to_array::<ClaimRow>()?
            .pop()
            .map(|row| -> Result<Claim> {
                Ok(Claim {
                    fingerprint: row.fingerprint,
                    until_ms: row.until_ms,
                    completed: row.completed != 0,
                    response: row
                        .response
                        .map(|r| serde_json::from_str(&r))
                        .transpose()
                        .map_err(rust_error)?,
                })
            })
            .transpose()?;
        let decision = decide_claim(existing.as_ref(), &request.fingerprint, now);
        if decision == ClaimDecision::Execute {
            self.sql.exec(
                "INSERT OR REPLACE INTO claims (idempotency_key, fingerprint, owner, until_ms, completed)
                 VALUES (?, ?, ?, ?, 0)",
                vec![
                    request.idempotency_key.clone().into(),
                    request.fingerprint.clone().into(),
                    request.request_id.clone().into(),
                    (now + LEASE_MS).into(),
                ],
            )?;
        }
        Ok(decision)
    }

    /// Marks the claim completed until the TTL ends. The guard keeps the response for as long as
    /// the response store may not show it yet, or for the whole TTL when the store failed.
    fn complete(
        &self,
        claim: &ClaimRequest,
        response: &StoredResponse,
        stored_elsewhere: bool,
    ) -> Result<()> {
        let now = now_ms();
        let until = now + self.config()?.idempotency_ttl_seconds as i64 * 1000;
        let response_until = if stored_elsewhere { now + STORE_PROPAGATION_MS } else { until };
        self.sql.exec(
            "UPDATE claims SET completed = 1, until_ms = ?, response = ?, response_until_ms = ?
             WHERE idempotency_key = ? AND owner = ? AND completed = 0",
            vec![
                until.into(),
                serde_json::to_string(response).map_err(rust_error)?.into(),
                response_until.into(),
                claim.idempotency_key.clone().into(),
                claim.request_id.clone().into(),
            ],
        )?;
        Ok(())
    }
}
