//! The KeyGuard Durable Object class. One class hosts several roles, each an object name apart and
//! each its own module with its own tables and its own purge (SPEC §23):
//!
//! * [`record`]: the key's record, told first of every change (`Apply`), else read from D1.
//! * [`admission`]: a key's guard — its windows, its dashboard budget, its admissions; an address
//!   guard (`ip:…`) counts failed authentications with the same counters.
//! * [`holder`]: the grants a key's guard holds of the levels above its key (SPEC §20).
//! * [`isolate_leases`]: a hot key's leases of its credits to isolates.
//! * [`authority`]: a level's authority (`project:…`, `identity:…`): the grants it made.
//! * [`claims`]: a claim shard (and a key's guard for its own claims): idempotency claims.
//! * [`audit_head`]: a project's chain of audit digests (`audit:…`, SPEC §23).
//!
//! Reading, deciding and writing a role's rows is synchronous (no `await` in between), so
//! concurrent commands to one object are decided strictly one after another. A role's tables are
//! created on its first write, not when the object starts (SPEC §19), and only that role's
//! ([`tables`]): the guard of an unknown key leaves no storage behind, and a claim object holds
//! only claims. Every row has a keep-until time (`gatehouse_core::retention`); purges run in
//! bounded passes while the object is called, and from its alarm when it is not.

mod admission;
mod audit_head;
mod authority;
mod claims;
mod holder;
mod isolate_leases;
mod record;
mod tables;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use serde::Deserialize;
use worker::wasm_bindgen::prelude::{wasm_bindgen, JsValue};
use worker::{console_log, durable_object, DurableObject, Env, Request, Response, Result, SqlStorage, State};

use crate::adapters::alarm::Alarm;
use crate::adapters::clock::{self, now_ms};
use crate::adapters::{durable, env::config};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::audit_chain::{AdoptHead, AdvanceHead, BindObjects, ConfirmObjects, ReadHead};
use gatehouse_core::config::Config;
use gatehouse_core::guard::protocol::{
    Apply, Ask, AuthFailures, Authorize, CompleteClaim, Done, GiveBackLeases, GuardCommand, HeldResponse,
    ReleaseClaim, RenewLease, SetLimits, TakeClaim, BINDING,
};
use gatehouse_core::guard::single_flight::SingleFlight;
use gatehouse_core::lease::{Grant, RequestRate};
use gatehouse_core::ports::Meter;
use gatehouse_core::rate_limit::{Counters, LimitSpec, Limits, AUTH_FAILURE_LIMITS};
use gatehouse_core::retention::{next_alarm, purge_due};
use tables::Role;

#[durable_object]
pub struct KeyGuardObject {
    env: Env,
    sql: SqlStorage,
    alarm: Alarm,
    /// The roles whose tables exist, as bits, once looked up (`tables`).
    tables: Cell<Option<u8>>,
    /// The record and until when it is used without reading it again.
    key: RefCell<Option<(KeyRecord, i64)>>,
    /// The load of the record from D1 in flight, if any.
    loading: SingleFlight<std::result::Result<Option<KeyRecord>, String>>,
    counters: Cell<Option<Counters>>,
    /// The dashboard budget's counters (`budget_counters`), once read.
    dashboard_counters: Cell<Option<Counters>>,
    /// Per level above the key, once read from storage.
    leases: RefCell<BTreeMap<String, holder::LevelLease>>,
    /// Requests from isolates in the current second: a hot key leases (SPEC §20).
    rate: Cell<RequestRate>,
    /// When each level's quota was last asked about for a request over a window (a minute's start).
    quota_asked: RefCell<BTreeMap<String, i64>>,
    /// The leases to isolates this instance made that were not given back: (grant id, end).
    leases_out: RefCell<Vec<(String, i64)>>,
    /// Per level, the exchange in flight: requests that need credits meanwhile wait for it.
    exchanges: RefCell<BTreeMap<String, Rc<Exchanging>>>,
    epoch: Cell<u64>,
    /// As a level's authority: its limits as told, and their version, once read (`None`: not read).
    authority_limits: RefCell<Option<Option<authority::ToldLimits>>>,
    /// As a holder: each level's limits as its authority last granted under them (SPEC §23).
    learned_limits: RefCell<BTreeMap<String, LimitSpec>>,
    /// When the last purge pass ran, and whether it left rows behind (a full batch).
    purged: Cell<(i64, bool)>,
    /// The earliest keep-until of a row written since the alarm was last looked at.
    purge_by: Cell<Option<i64>>,
    /// As a project's chain of audit digests: its tables exist (looked up once).
    chain_tables: Cell<bool>,
    /// A browser key's visitors this minute (SPEC §24), in memory only: never stored.
    visitors: RefCell<gatehouse_core::browser::VisitorWindows>,
    /// Claim bodies the response store took, whose shorter keeping is written with the object's
    /// next command (`claims::keep_stored_bodies`).
    stored_bodies: RefCell<Vec<(String, i64)>>,
}

/// An exchange with a level's authority in flight, shared by the requests that wait for it.
type Exchanging = SingleFlight<std::result::Result<Grant, String>>;

fn rust_error(e: impl std::fmt::Display) -> worker::Error {
    worker::Error::RustError(e.to_string())
}

/// A value the object keeps as JSON text.
fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(rust_error)
}

impl DurableObject for KeyGuardObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            env,
            sql: state.storage().sql(),
            alarm: Alarm::new(state.storage()),
            tables: Cell::new(None),
            key: RefCell::new(None),
            loading: SingleFlight::default(),
            counters: Cell::new(None),
            dashboard_counters: Cell::new(None),
            leases: RefCell::default(),
            exchanges: RefCell::default(),
            leases_out: RefCell::default(),
            quota_asked: RefCell::default(),
            rate: Cell::default(),
            epoch: Cell::new(0),
            authority_limits: RefCell::new(None),
            learned_limits: RefCell::default(),
            purged: Cell::new((0, false)),
            purge_by: Cell::new(None),
            chain_tables: Cell::new(false),
            visitors: RefCell::default(),
            stored_bodies: RefCell::default(),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        self.follow_clock().await?;
        Response::ok(self.dispatch(req.json::<GuardCommand>().await?).await?)
    }

    /// Gives back what the grants this guard held of levels above its key did not use (SPEC §20),
    /// and purges what is past its keeping (SPEC §23) — also on an object nobody calls any more.
    async fn alarm(&self) -> Result<Response> {
        self.alarm.ran();
        self.follow_clock().await?;
        let now = now_ms();
        let give_back = self.give_back_ended(now).await?;
        self.keep_stored_bodies()?;
        let purge = match self.has_storage()? {
            true => next_alarm(now, self.purge(now)?),
            false => None,
        };
        if let Some(at) = [give_back, purge].into_iter().flatten().min() {
            self.alarm.set_by(at).await?;
        }
        Response::ok("")
    }
}

/// The guard's RPC method (the worker's path): a command as JSON text in, its answer as JSON text
/// out — what `fetch` does, without a `Request` and a `Response` around it on either side
/// (src/main.mjs makes the class a `DurableObject`, which RPC needs).
#[wasm_bindgen(wasm_bindgen = ::worker::wasm_bindgen, wasm_bindgen_futures = ::worker::wasm_bindgen_futures)]
impl KeyGuardObject {
    pub async fn ask(&self, command: String) -> std::result::Result<String, JsValue> {
        let command = serde_json::from_str(&command).map_err(|e| JsValue::from_str(&e.to_string()))?;
        self.follow_clock().await.map_err(|e| JsValue::from_str(&e.to_string()))?;
        self.dispatch(command).await.map_err(|e| JsValue::from_str(&e.to_string()))
    }
}

impl KeyGuardObject {
    /// Reads the test kit's clock, when there is one, as a command or an alarm begins.
    async fn follow_clock(&self) -> Result<()> {
        clock::follow(&self.env).await.map_err(rust_error)
    }

    /// Runs one command and answers its JSON; the keeping of stored claim bodies and a purge pass
    /// first when one is due, and the alarm set by the keep-until of any row the command wrote.
    async fn dispatch(&self, command: GuardCommand) -> Result<String> {
        self.keep_stored_bodies()?;
        let (last_pass, left_behind) = self.purged.get();
        let now = now_ms();
        if purge_due(now, last_pass, left_behind) && self.has_storage()? {
            if let Some(due) = self.purge(now)? {
                self.purge_by(due);
            }
        }
        let answer = self.run(command).await?;
        if let Some(due) = self.purge_by.take() {
            if let Some(at) = next_alarm(now_ms(), Some(due)) {
                self.alarm.set_by(at).await?;
            }
        }
        Ok(answer)
    }

    async fn run(&self, command: GuardCommand) -> Result<String> {
        match command {
            GuardCommand::Authorize(c) => answer::<Authorize>(self.authorize(c).await?),
            GuardCommand::Apply(Apply { key, undo }) => answer::<Apply>(self.apply(key, undo)?),
            GuardCommand::RecordAuthFailure(c) => {
                let limits = c.per_minute.map_or(AUTH_FAILURE_LIMITS, Limits::per_minute);
                let (verdict, usage) = self.count(limits, 1, true)?;
                answer::<gatehouse_core::guard::protocol::RecordAuthFailure>(AuthFailures { verdict, usage })
            }
            GuardCommand::CompleteClaim(c) => answer::<CompleteClaim>(self.complete(c).await?),
            GuardCommand::ReleaseClaim(ReleaseClaim { claim, of_key }) => {
                // A releaser that never heard where the claim went names the key: the claim is
                // where the key's record says, here or in one of its claim objects.
                let elsewhere = match of_key {
                    Some(key_hash) => match self.record(&key_hash).await?.0 {
                        Some(key) => {
                            Some(key.claim_object(&claim.idempotency_key)).filter(|o| *o != key_hash)
                        }
                        None => None,
                    },
                    None => None,
                };
                let done = match elsewhere {
                    Some(object) => self.ask_other(&object, ReleaseClaim { claim, of_key: None }).await?,
                    None => self.release(&claim).map(|()| Done {})?,
                };
                answer::<ReleaseClaim>(done)
            }
            GuardCommand::HeldResponse(HeldResponse { idempotency_key }) => {
                answer::<HeldResponse>(self.held_response(&idempotency_key)?)
            }
            GuardCommand::Ping(_) => answer::<gatehouse_core::guard::protocol::Ping>(Done {}),
            GuardCommand::Exchange(c) => answer::<gatehouse_core::lease::Exchange>(self.exchange(c).await?),
            GuardCommand::RecallGrant(c) => answer::<gatehouse_core::lease::RecallGrant>(self.recall(c)?),
            GuardCommand::RenewLease(c) => answer::<RenewLease>(self.renew(c).await?),
            GuardCommand::GiveBackLeases(c) => {
                let key = self.remembered(now_ms())?;
                self.take_back_and_wake(key.as_ref(), &c.give_back).await?;
                answer::<GiveBackLeases>(Done {})
            }
            GuardCommand::TakeClaim(c) => answer::<TakeClaim>(self.claim_waiting(&c.claim).await?),
            GuardCommand::SetLimits(c) => answer::<SetLimits>(self.set_limits(c)?),
            GuardCommand::BindObjects(c) => answer::<BindObjects>(self.bind_objects(c)?),
            GuardCommand::ConfirmObjects(c) => answer::<ConfirmObjects>(self.confirm_objects(c)?),
            GuardCommand::ReadHead(c) => answer::<ReadHead>(self.read_head(c.objects)?),
            GuardCommand::AdoptHead(c) => answer::<AdoptHead>(self.adopt_head(c)?),
            GuardCommand::AdvanceHead(c) => answer::<AdvanceHead>(self.advance_head(c)?),
        }
    }

    /// One bounded purge pass over every role's tables (SPEC §23). Answers the earliest keep-until
    /// still in storage, if any (what the next pass waits for).
    fn purge(&self, now: i64) -> Result<Option<i64>> {
        let passes = [
            self.plays(Role::IsolateLeases)?.then(|| self.purge_isolate_leases(now)).transpose()?,
            self.plays(Role::Authority)?.then(|| self.purge_grants(now)).transpose()?,
            self.plays(Role::Claims)?.then(|| self.purge_claims(now)).transpose()?,
            self.plays(Role::Record)?.then(|| self.purge_applied(now)).transpose()?,
        ];
        let passes: Vec<Purged> = passes.into_iter().flatten().collect();
        let left_behind = passes.iter().any(|p| p.left_behind);
        self.purged.set((now, left_behind));
        let due = passes.iter().filter_map(|p| p.next_due).min();
        if left_behind {
            console_log!(r#"{{"component":"key_guard","event":"purge_behind"}}"#);
        }
        Ok(due)
    }

    /// A row that must go by `at` was written: the alarm is set by then when the command ends.
    fn purge_by(&self, at: i64) {
        self.purge_by.set(Some(self.purge_by.get().map_or(at, |p| p.min(at))));
    }

    fn config(&self) -> Result<&'static Config> {
        config(&self.env).map_err(rust_error)
    }

    /// Sends a command to another object of this namespace: a level's authority (leases), or the
    /// key's claim object that holds a claim (SPEC §20) — near this one, so one more call but no
    /// more round trips for the isolate.
    async fn ask_other<C: Ask>(&self, object: &str, command: C) -> Result<C::Answer> {
        let namespace = self.env.durable_object(BINDING)?;
        let command: GuardCommand = command.into();
        durable::ask(&namespace, &Meter::default(), object, &command).await.map_err(rust_error)
    }

    /// Deletes at most one batch of `table`'s rows whose `keep_until_ms` passed (its index on that
    /// column finds them), and reads the next keep-until left.
    fn purge_table(&self, table: &str, now: i64) -> Result<Purged> {
        let batch = gatehouse_core::retention::PURGE_BATCH_ROWS;
        let deleted = self
            .sql
            .exec(
                &format!(
                    "DELETE FROM {table} WHERE rowid IN
                       (SELECT rowid FROM {table} WHERE keep_until_ms <= ? ORDER BY keep_until_ms LIMIT {batch})"
                ),
                vec![now.into()],
            )?
            .rows_written();
        Ok(Purged {
            left_behind: deleted >= batch as usize,
            next_due: self.earliest(&format!("SELECT MIN(keep_until_ms) AS at FROM {table}"))?,
        })
    }

    /// The one time `query` selects as `at`, if any.
    fn earliest(&self, query: &str) -> Result<Option<i64>> {
        #[derive(Deserialize)]
        struct At {
            at: Option<i64>,
        }
        Ok(self.sql.exec(query, None)?.to_array::<At>()?.pop().and_then(|row| row.at))
    }
}

/// What one purge pass of a table did.
struct Purged {
    /// A full batch was deleted: more may be due.
    left_behind: bool,
    /// The earliest keep-until still in the table.
    next_due: Option<i64>,
}

/// The answer to command `C`, and only of its type.
fn answer<C: Ask>(answer: C::Answer) -> Result<String> {
    serde_json::to_string(&answer).map_err(rust_error)
}
