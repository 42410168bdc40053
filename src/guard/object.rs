//! The Durable Object class itself.
//!
//! * The key's record is kept in memory once loaded (one D1 query per object start); `Invalidate`
//!   drops it, and an epoch counter makes sure a load that raced with an invalidation is not kept.
//! * The rate window and monthly quota live in the object's SQLite storage. Reading, deciding and
//!   writing them is synchronous (no `await` in between), so concurrent requests to one key are
//!   decided strictly one after another: exactly `limit` pass per window.
//! * An object named `ip:<address>` counts failed authentications from that address instead.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use worker::{
    console_log, durable_object, wasm_bindgen, Date, DurableObject, Env, Request, Response, Result,
    SqlStorage, State,
};

use super::protocol::{GuardAnswer, GuardCommand};
use crate::adapters::{d1::D1Directory, env::config};
use crate::core::api_key::KeyRecord;
use crate::core::rate_limit::{decide, Counters, Limits, Usage, Verdict, AUTH_FAILURE_LIMITS};
use crate::ports::Directory;

#[durable_object]
pub struct KeyGuardObject {
    env: Env,
    sql: SqlStorage,
    key: RefCell<Option<KeyRecord>>,
    counters: Cell<Option<Counters>>,
    epoch: Cell<u64>,
}

impl DurableObject for KeyGuardObject {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        sql.exec(
            "CREATE TABLE IF NOT EXISTS counters (
               id INTEGER PRIMARY KEY CHECK (id = 1),
               window_start_ms INTEGER NOT NULL, window_used INTEGER NOT NULL,
               month_start_ms INTEGER NOT NULL, month_used INTEGER NOT NULL)",
            None,
        )
        .expect("create the counters table");
        Self {
            env,
            sql,
            key: RefCell::new(None),
            counters: Cell::new(None),
            epoch: Cell::new(0),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let command: GuardCommand = req.json().await?;
        let answer = match command {
            GuardCommand::Authorize { key_hash } => match self.record(&key_hash).await? {
                Some(key) if !key.is_revoked() => {
                    let limits = config(&self.env)
                        .map_err(|e| worker::Error::RustError(e.to_string()))?
                        .limits(&key);
                    let (verdict, usage) = self.count(limits)?;
                    GuardAnswer::Decided { key, verdict, usage }
                }
                _ => GuardAnswer::Denied,
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
        };
        Response::from_json(&answer)
    }
}

impl KeyGuardObject {
    /// The remembered record, loaded from D1 when the object has none. Unknown keys are not
    /// remembered: nothing is cached for a hash that no key has.
    async fn record(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        if let Some(key) = self.key.borrow().as_ref() {
            return Ok(Some(key.clone()));
        }
        let epoch = self.epoch.get();
        let directory = D1Directory::new(self.env.d1("DB")?, Rc::default());
        let loaded = directory
            .key_by_hash(key_hash)
            .await
            .map_err(|e| worker::Error::RustError(e.0))?;
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
        let (verdict, usage, next) = decide(prev, Date::now().as_millis() as i64, limits);
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
        self.counters
            .set(Some(if verdict == Verdict::Allowed { next } else { prev }));
        Ok((verdict, usage))
    }
}
