//! The Durable Object class itself.
//!
//! * The key's record is kept in memory once loaded (one D1 query per object start, then one per
//!   [`RECORD_FRESH_MS`] at most). A change to the key is told to the guard first (`Apply`): it is
//!   kept in the object's storage too, so it holds across a restart of the object even while D1
//!   does not show it yet; an epoch counter makes sure a D1 load that raced with it is not kept.
//! * The rate window, the monthly quota and the idempotency claims live in the object's SQLite
//!   storage. Reading, deciding and writing them is synchronous (no `await` in between), so
//!   concurrent requests to one key are decided strictly one after another: exactly `limit` pass
//!   per window, and exactly one request takes a claim.
//! * An object named `ip:<address>` counts failed authentications from that address instead.
//! * Its tables are created on the first write (a counter, a claim, an applied record), not when
//!   the object starts (SPEC §19): the guard of an unknown key, which only reads D1 and answers
//!   "unknown", leaves no storage behind. Until then every read finds nothing.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use worker::wasm_bindgen::prelude::{wasm_bindgen, JsValue};
use worker::{
    console_log, durable_object, Delay, DurableObject, Env, Request, Response, Result, SqlStorage, State,
    Storage,
};

use crate::adapters::clock::{self, now_ms};
use crate::adapters::{d1::D1Store, durable, env::config};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::config::Config;
use gatehouse_core::guard::protocol::{
    project_authority, Apply, Ask, AuthFailures, Authorize, Authorized, CompleteClaim, Completed, Decided,
    Denied, Done, GiveBackLeases, GuardCommand, HeldResponse, ReleaseClaim, RenewLease, Renewed, TakeClaim,
    BINDING,
};
use gatehouse_core::guard::single_flight::SingleFlight;
use gatehouse_core::idempotency::{decide_claim, Claim, ClaimDecision, KeptResponse, LEASE_MS};
use gatehouse_core::lease::{
    accept_give_back, admit, grant, lease_to_isolate, quota_to_ask, refusal_lease, refused_by_level,
    take_back, with_project_quota, Decision, Drawn, Exchange, GiveBack, Grant, Held, LeaseAsk, RequestRate,
    Returned,
};
use gatehouse_core::ports::{ClaimRequest, Directory, Meter};
use gatehouse_core::rate_limit::{
    decide_request, next_month_start, Counters, LimitSpec, Limits, Usage, Verdict, Window, WindowCount,
    AUTH_FAILURE_LIMITS,
};

/// How long a request with the same key as a running one waits for it to finish before it is
/// answered 409 `IDEMPOTENCY_KEY_IN_USE`.
const IN_USE_WAIT_MS: u64 = 2_000;
const IN_USE_POLL_MS: u64 = 20;
/// How long the guard keeps a completed response itself after the response store has it too:
/// Workers KV may take this long to show a write everywhere.
const STORE_PROPAGATION_MS: i64 = 60_000;
/// How long after a lease to an isolate ends its unused credits may still be on their way back
/// (the isolate gives them back right after the end); a refusal waits that long at most.
const LEASE_RETURN_MS: i64 = 250;
const LEASE_WAIT_POLL_MS: u64 = 20;
/// How soon credits owed to a level (a lease's part that came back after its grant was given back)
/// go back to the level's authority, when no exchange takes them first.
const OWED_GIVE_BACK_MS: i64 = 1_000;
/// How long a record of the key is used before it is read again (from D1, or from what `Apply`
/// stored): a change whose D1 write failed after the guard was told is undone by then at the latest.
const RECORD_FRESH_MS: i64 = 600_000;
/// How often lapsed idempotency claims are deleted (a lookup ignores them meanwhile): a claim
/// does not pay for a delete statement of its own.
const PURGE_EVERY_MS: i64 = 60_000;

#[durable_object]
pub struct KeyGuardObject {
    env: Env,
    sql: SqlStorage,
    storage: Storage,
    /// When the alarm is set to run, as this instance set it (`None`: unknown or none).
    alarm_at: Cell<Option<i64>>,
    /// Whether the guard's tables exist, once looked up.
    tables: Cell<Option<bool>>,
    /// The record and until when it is used without reading it again.
    key: RefCell<Option<(KeyRecord, i64)>>,
    /// The load of the record from D1 in flight, if any.
    loading: SingleFlight<std::result::Result<Option<KeyRecord>, String>>,
    counters: Cell<Option<Counters>>,
    /// The dashboard budget's counters (`budget_counters`), once read.
    dashboard_counters: Cell<Option<Counters>>,
    /// Per level above the key, once read from storage.
    leases: RefCell<BTreeMap<String, LevelLease>>,
    /// Requests from isolates in the current second: a hot key leases (SPEC §20).
    rate: Cell<RequestRate>,
    /// When each level's quota was last asked about for a request over a window (a minute's start).
    quota_asked: RefCell<BTreeMap<String, i64>>,
    /// The leases to isolates this instance made that were not given back: (grant id, end).
    leases_out: RefCell<Vec<(String, i64)>>,
    /// Per level, the exchange in flight: requests that need credits meanwhile wait for it.
    exchanges: RefCell<BTreeMap<String, Rc<Exchanging>>>,
    epoch: Cell<u64>,
    /// When lapsed claims were last deleted.
    purged_ms: Cell<i64>,
}

/// A claim row as SQLite returns it.
#[derive(Deserialize)]
struct ClaimRow {
    fingerprint: String,
    operation: String,
    until_ms: i64,
    completed: i64,
    released: i64,
    response: Option<String>,
}

/// The guard's tables, created together on its first write.
const TABLES: [&str; 8] = [
    // Every window's count and the month's, as JSON (`Counters`). The first version kept one
    // minute window in `counters`; it is read once when this table has no row yet.
    "CREATE TABLE IF NOT EXISTS limit_counters (
       id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS idempotency_claims (
       idempotency_key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, owner TEXT NOT NULL,
       operation TEXT NOT NULL, until_ms INTEGER NOT NULL, completed INTEGER NOT NULL,
       released INTEGER NOT NULL, keep_until_ms INTEGER NOT NULL,
       response TEXT, response_until_ms INTEGER)",
    "CREATE INDEX IF NOT EXISTS idempotency_claims_by_expiry ON idempotency_claims (keep_until_ms)",
    "CREATE TABLE IF NOT EXISTS applied (
       id INTEGER PRIMARY KEY CHECK (id = 1), record TEXT NOT NULL, until_ms INTEGER NOT NULL)",
    // A key's guard as a holder (SPEC §20): per level above the key, the grant it holds and what
    // it owes back of grants it replaced (`LevelLease` as JSON).
    "CREATE TABLE IF NOT EXISTS level_leases (level TEXT PRIMARY KEY, state TEXT NOT NULL)",
    // A level's authority: each grant it made (`Grant` as JSON), kept until its month is over so
    // a retried exchange gets the same answer and a credit given back twice counts once.
    // A key's guard as the authority of the key's credits towards isolates (hot keys) keeps its
    // leases here too, with what each drew from the levels above (`drawn`; NULL for a level's
    // grant).
    "CREATE TABLE IF NOT EXISTS lease_grants (
       grant_id TEXT PRIMARY KEY, grant TEXT NOT NULL, returned TEXT NOT NULL,
       keep_until_ms INTEGER NOT NULL, drawn TEXT)",
    "CREATE INDEX IF NOT EXISTS lease_grants_by_expiry ON lease_grants (keep_until_ms)",
    // The counters of a budget apart from the key's windows: the dashboard's (`Counters` as JSON).
    "CREATE TABLE IF NOT EXISTS budget_counters (budget TEXT PRIMARY KEY, state TEXT NOT NULL)",
];

/// An exchange with a level's authority in flight, shared by the requests that wait for it.
type Exchanging = SingleFlight<std::result::Result<Grant, String>>;

/// What a key's guard holds of one level above the key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LevelLease {
    held: Option<Held>,
    /// Credits of replaced grants not given back yet: sent with the next exchange.
    owed: Vec<GiveBack>,
}

/// The grant of its project a key's guard holds, from `held` (by `levels`' order).
fn project_held(key: &KeyRecord, levels: &[(String, LimitSpec)], held: &[Option<Held>]) -> Option<Held> {
    let level = project_authority(&key.project_id);
    levels.iter().position(|(l, _)| *l == level).and_then(|i| held[i].clone())
}

fn rust_error(e: impl std::fmt::Display) -> worker::Error {
    worker::Error::RustError(e.to_string())
}

impl DurableObject for KeyGuardObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            env,
            sql: state.storage().sql(),
            storage: state.storage(),
            alarm_at: Cell::new(None),
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
            purged_ms: Cell::new(0),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        self.follow_clock().await?;
        Response::ok(self.dispatch(req.json::<GuardCommand>().await?).await?)
    }

    /// The end of a grant this guard holds of a level above its key (SPEC §20): what it did not
    /// use goes back to the level's authority now, so a key that stopped being used does not keep
    /// credits another key of its project could use. Grants still running set the next alarm.
    async fn alarm(&self) -> Result<Response> {
        #[derive(Deserialize)]
        struct Row {
            level: String,
            state: String,
        }
        self.alarm_at.set(None);
        self.follow_clock().await?;
        let now = now_ms();
        let rows = match self.has_tables()? {
            true => self.sql.exec("SELECT level, state FROM level_leases", None)?.to_array::<Row>()?,
            false => Vec::new(),
        };
        let mut next: Option<i64> = None;
        let mut wake = |at: i64| next = Some(next.map_or(at, |n: i64| n.min(at)));
        for row in rows {
            let lease: LevelLease = serde_json::from_str(&row.state).map_err(rust_error)?;
            // An exchange of the level in flight gives back what it owes: look again later.
            if self.exchanges.borrow().get(&row.level).is_some_and(|f| f.is_running()) {
                wake(now + OWED_GIVE_BACK_MS);
                continue;
            }
            let running = lease.held.as_ref().filter(|h| h.until_ms > now);
            let given = match (running, lease.owed.is_empty()) {
                (Some(held), true) => {
                    wake(held.until_ms);
                    Ok(())
                }
                (Some(held), false) => {
                    wake(held.until_ms);
                    self.give_back_owed(&row.level, held.limits).await
                }
                (None, _) if lease.held.is_none() && lease.owed.is_empty() => Ok(()),
                (None, _) => {
                    let limits = lease.held.as_ref().map(|h| h.limits).unwrap_or_default();
                    self.exchange_once(&row.level, limits, 0).await.map(drop)
                }
            };
            if let Err(e) = given {
                console_log!(
                    r#"{{"component":"key_guard","event":"give_back_failed","error":{:?}}}"#,
                    e.to_string()
                );
                wake(now + 5_000);
            }
        }
        if let Some(at) = next {
            self.set_alarm_by(at).await?;
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

    /// Runs one command and answers its JSON.
    async fn dispatch(&self, command: GuardCommand) -> Result<String> {
        match command {
            GuardCommand::Authorize(c) => answer::<Authorize>(self.authorize(c).await?),
            GuardCommand::Apply(Apply { key, undo }) => answer::<Apply>(self.apply(key, undo)?),
            GuardCommand::RecordAuthFailure(_) => {
                let (verdict, usage) = self.count(AUTH_FAILURE_LIMITS, 1, true)?;
                answer::<gatehouse_core::guard::protocol::RecordAuthFailure>(AuthFailures { verdict, usage })
            }
            GuardCommand::CompleteClaim(CompleteClaim { claim, response }) => {
                answer::<CompleteClaim>(self.complete(&claim, &response)?)
            }
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
            GuardCommand::Exchange(c) => answer::<Exchange>(self.exchange(c)?),
            GuardCommand::RenewLease(c) => answer::<RenewLease>(self.renew(c).await?),
            GuardCommand::GiveBackLeases(c) => {
                let key = self.remembered(now_ms())?;
                if self.take_back_leases(key.as_ref(), &c.give_back)? {
                    self.set_alarm_by(now_ms() + OWED_GIVE_BACK_MS).await?;
                }
                answer::<GiveBackLeases>(Done {})
            }
            GuardCommand::TakeClaim(c) => {
                answer::<gatehouse_core::guard::protocol::TakeClaim>(self.claim_waiting(&c.claim).await?)
            }
        }
    }
}

/// The answer to command `C`, and only of its type.
fn answer<C: Ask>(answer: C::Answer) -> Result<String> {
    serde_json::to_string(&answer).map_err(rust_error)
}

impl KeyGuardObject {
    fn config(&self) -> Result<&'static Config> {
        config(&self.env).map_err(rust_error)
    }

    /// Whether the guard has stored anything yet (its tables exist), looked up once per start. An
    /// object of the first version, which kept claims without an operation in `claims`, is
    /// upgraded here: its claims move over (each its owner's operation), so a completed key stays
    /// completed across the upgrade.
    fn has_tables(&self) -> Result<bool> {
        if let Some(known) = self.tables.get() {
            return Ok(known);
        }
        #[derive(Deserialize)]
        struct Table {
            name: String,
        }
        let names: Vec<String> = self
            .sql
            .exec("SELECT name FROM sqlite_master WHERE type = 'table'", None)?
            .to_array::<Table>()?
            .into_iter()
            .map(|t| t.name)
            .collect();
        if !names.iter().any(|n| {
            ["limit_counters", "counters", "idempotency_claims", "applied", "claims", "budget_counters"]
                .contains(&n.as_str())
        }) {
            self.tables.set(Some(false));
            return Ok(false);
        }
        // Any table an older version did not have is created now: the object has storage anyway.
        self.create_tables()?;
        if names.iter().any(|n| n == "claims") {
            // Looked up again at the next command if the move fails.
            self.tables.set(None);
            self.sql.exec(
                "INSERT OR IGNORE INTO idempotency_claims
                   (idempotency_key, fingerprint, owner, operation, until_ms, completed, released, keep_until_ms,
                    response, response_until_ms)
                 SELECT idempotency_key, fingerprint, owner, owner, until_ms, completed, 0,
                        CASE WHEN completed = 1 THEN until_ms ELSE until_ms + 86400000 END, response, response_until_ms
                 FROM claims",
                None,
            )?;
            self.sql.exec("DROP TABLE claims", None)?;
            self.tables.set(Some(true));
        }
        Ok(true)
    }

    /// Before a write: the tables exist from now on.
    fn create_tables(&self) -> Result<()> {
        if self.tables.get() != Some(true) {
            for ddl in TABLES {
                self.sql.exec(ddl, None)?;
            }
            self.tables.set(Some(true));
        }
        Ok(())
    }

    async fn authorize(&self, c: Authorize) -> Result<Authorized> {
        let (record, d1_queries) = self.record(&c.key_hash).await?;
        // Expiry and a roll's grace are decided here, per request, with the object's clock and
        // the record it holds (told first of every change): no D1 read, no cache that lags.
        let refusal = record.as_ref().and_then(|key| key.refusal(now_ms()));
        Ok(match record {
            Some(key) if refusal.is_none() => {
                // A key whose type may not call the route (403) is refused before anything is
                // counted and takes no claim: its answer carries the window as it stands.
                let permitted = key.key_type.allows(c.scope);
                if let Some(lease) = &c.lease {
                    if self.take_back_leases(Some(&key), &lease.give_back)? {
                        self.set_alarm_by(now_ms() + OWED_GIVE_BACK_MS).await?;
                    }
                }
                let (verdict, usage, lease) = if c.scope.is_dashboard_read() {
                    let (verdict, usage) = self.count_dashboard_read(permitted)?;
                    (verdict, usage, None)
                } else {
                    self.admit(&key, c.scope.cost(), permitted, c.lease.as_ref()).await?
                };
                let claim = match c.claim {
                    Some(claim) if verdict == Verdict::Allowed && permitted => {
                        // Taken here, or by the key's claim object that holds it (SPEC §20).
                        let object = key.claim_object(&claim.idempotency_key);
                        Some(if object == c.key_hash {
                            self.claim_waiting(&claim).await?
                        } else {
                            self.ask_other(&object, TakeClaim { claim }).await?
                        })
                    }
                    _ => None,
                };
                Authorized::Decided(Decided { key, verdict, usage, claim, d1_queries, lease })
            }
            refused => {
                if let Some(lease) = &c.lease {
                    if self.take_back_leases(refused.as_ref(), &lease.give_back)? {
                        self.set_alarm_by(now_ms() + OWED_GIVE_BACK_MS).await?;
                    }
                }
                Authorized::Denied(Denied { key: refused, reason: refusal, d1_queries })
            }
        })
    }

    /// The key's record, and how many D1 queries it took: from memory while fresh, else from what
    /// `Apply` stored while that is fresh, else from D1 — one load at a time: requests that come
    /// while it runs wait for it (one query, however many arrive at a guard that just started).
    /// Unknown keys are not remembered.
    async fn record(&self, key_hash: &str) -> Result<(Option<KeyRecord>, u32)> {
        if let Some(key) = self.remembered(now_ms())? {
            return Ok((Some(key), 0));
        }
        // The queries the load makes are counted and reported to the request that made them (SPEC §12).
        let meter = Rc::new(Meter::default());
        let loaded = self.loading.run(|| self.load(key_hash, meter.clone())).await.map_err(rust_error)?;
        // A change told while the load ran is newer than what the load read.
        let key = self.remembered(now_ms())?.or(loaded);
        Ok((key, meter.d1_queries.get()))
    }

    /// The record in memory or, failing that, what `Apply` stored (then kept in memory), while fresh.
    fn remembered(&self, now: i64) -> Result<Option<KeyRecord>> {
        if let Some((key, until)) = self.key.borrow().as_ref() {
            if *until > now {
                return Ok(Some(key.clone()));
            }
        }
        Ok(self.applied_record(now)?.map(|(key, until)| {
            self.key.replace(Some((key.clone(), until)));
            key
        }))
    }

    /// Reads the record from D1 and keeps it in memory, unless a change was told meanwhile.
    async fn load(&self, key_hash: &str, meter: Rc<Meter>) -> std::result::Result<Option<KeyRecord>, String> {
        let epoch = self.epoch.get();
        let now = now_ms();
        let store = D1Store::new(self.env.d1("DB").map_err(|e| e.to_string())?, meter.clone());
        let loaded = store.key_by_hash(key_hash).await.map_err(|e| e.0)?;
        console_log!(
            r#"{{"component":"key_guard","event":"record_loaded","d1_queries":{},"found":{},"waiting":{}}}"#,
            meter.d1_queries.get(),
            loaded.is_some(),
            self.loading.waiting()
        );
        if epoch == self.epoch.get() {
            self.key.replace(loaded.clone().map(|key| (key, now + RECORD_FRESH_MS)));
        }
        Ok(loaded)
    }

    /// What `Apply` stored, while it is fresh.
    fn applied_record(&self, now: i64) -> Result<Option<(KeyRecord, i64)>> {
        #[derive(Deserialize)]
        struct AppliedRow {
            record: String,
            until_ms: i64,
        }
        if !self.has_tables()? {
            return Ok(None);
        }
        let rows = self.sql.exec("SELECT record, until_ms FROM applied", None)?.to_array::<AppliedRow>()?;
        match rows.into_iter().find(|row| row.until_ms > now) {
            Some(row) => Ok(Some((serde_json::from_str(&row.record).map_err(rust_error)?, row.until_ms))),
            None => Ok(None),
        }
    }

    /// Holds `key` as the key's record from now on, in memory and in storage (a revocation it
    /// holds stays, unless it is the one undone: `KeyRecord::told`).
    fn apply(&self, key: KeyRecord, undo: Option<i64>) -> Result<Done> {
        let now = now_ms();
        let held = match self.key.borrow().as_ref() {
            Some((held, until)) if *until > now => Some(held.clone()),
            _ => self.applied_record(now)?.map(|(held, _)| held),
        };
        let key = KeyRecord::told(held.as_ref(), key, undo);
        let until = now + RECORD_FRESH_MS;
        self.create_tables()?;
        self.sql.exec(
            "INSERT OR REPLACE INTO applied (id, record, until_ms) VALUES (1, ?, ?)",
            vec![serde_json::to_string(&key).map_err(rust_error)?.into(), until.into()],
        )?;
        self.epoch.set(self.epoch.get() + 1);
        self.key.replace(Some((key, until)));
        Ok(Done {})
    }

    /// One of the dashboard's reads, in the key's dashboard window only (`DASHBOARD_READS_PER_MINUTE`),
    /// counted only when `permitted`: read, decide and write without yielding.
    fn count_dashboard_read(&self, permitted: bool) -> Result<(Verdict, Usage)> {
        let prev = match self.dashboard_counters.get() {
            Some(c) => c,
            None if self.has_tables()? => self
                .stored_state("SELECT state FROM budget_counters WHERE budget = 'dashboard'")?
                .unwrap_or_default(),
            None => Counters::default(),
        };
        let (verdict, usage, taken) =
            decide_request(prev, now_ms(), self.config()?.dashboard_limits(), 1, permitted);
        if let Some(next) = taken {
            self.keep_state(
                "INSERT OR REPLACE INTO budget_counters (budget, state) VALUES ('dashboard', ?)",
                next,
            )?;
            self.dashboard_counters.set(Some(next));
        }
        Ok((verdict, usage))
    }

    /// Counters kept as JSON in the `state` of the one row `query` reads, if there is one.
    fn stored_state(&self, query: &str) -> Result<Option<Counters>> {
        #[derive(Deserialize)]
        struct State {
            state: String,
        }
        match self.sql.exec(query, None)?.to_array::<State>()?.pop() {
            Some(row) => serde_json::from_str(&row.state).map(Some).map_err(rust_error),
            None => Ok(None),
        }
    }

    /// Keeps counters as JSON by `statement` (its one parameter), the tables made first.
    fn keep_state(&self, statement: &str, next: Counters) -> Result<()> {
        self.create_tables()?;
        self.sql.exec(statement, vec![serde_json::to_string(&next).map_err(rust_error)?.into()])?;
        Ok(())
    }

    /// One request of `cost` units against `limits`, counted only when `permitted`
    /// (`decide_request`): read, decide and write the counters without yielding.
    fn count(&self, limits: Limits, cost: u32, permitted: bool) -> Result<(Verdict, Usage)> {
        let (verdict, usage, taken) =
            decide_request(self.current_counters()?, now_ms(), limits, cost, permitted);
        if let Some(next) = taken {
            self.keep_counters(next)?;
        }
        Ok((verdict, usage))
    }

    /// The decision on one request of `key` (SPEC §20): its own windows, then a credit of each
    /// level above it (its identity, its project), asking a level's authority for a grant when
    /// it holds too few. Read, decide and write happen without yielding; only an exchange waits,
    /// and the decision is made again after it.
    ///
    /// With `lease` (the isolate would hold one), an admission of a hot key also leases the
    /// isolate some of its credits, and a refusal of a hot key comes with a refusal lease. A
    /// refusal while isolates hold credits of the key waits (at most until those leases end and a
    /// moment for them to come back) for what they give back, so leases never make a request fail
    /// that the limit still has room for.
    async fn admit(
        &self,
        key: &KeyRecord,
        cost: u32,
        permitted: bool,
        lease: Option<&LeaseAsk>,
    ) -> Result<(Verdict, Usage, Option<Grant>)> {
        let config = self.config()?;
        let limits = config.limits(key);
        let levels = config.levels(key);
        let specs: Vec<LimitSpec> = levels.iter().map(|(_, spec)| *spec).collect();
        let hot = lease.is_some_and(|ask| self.is_hot(config, ask));
        let mut waited = false;
        let mut wait_until: Option<i64> = None;
        // Each round admits at least one request of this key, ends in a refusal, or waits for
        // leases to come back; the bound is only a guard against a bug.
        for _ in 0..256 {
            let mut held = self.held(&levels)?;
            let now = now_ms();
            let refused =
                match admit(self.current_counters()?, now, limits, cost, permitted, &specs, &mut held) {
                    Decision::Decided { verdict, usage, counters: Some(next) } => {
                        // A request that waited for credits to come back leases none: others wait too.
                        let leased = match lease {
                            Some(ask) if hot && !waited => {
                                let grant_id = gatehouse_core::encoding::hex(&gatehouse_app::random::<16>());
                                lease_to_isolate(
                                    next, now, &limits, &levels, &mut held, &grant_id, ask.want, hot,
                                )
                            }
                            _ => None,
                        };
                        let project = project_held(key, &levels, &held);
                        let (next, lease) = match leased {
                            Some((mut grant, after, drawn)) => {
                                grant.usage = with_project_quota(grant.usage, project.as_ref());
                                self.keep_isolate_lease(&grant, &drawn)?;
                                (after, Some(grant))
                            }
                            None => (next, None),
                        };
                        self.keep_counters(next)?;
                        self.keep_held(&levels, held)?;
                        return Ok((verdict, with_project_quota(usage, project.as_ref()), lease));
                    }
                    Decision::Decided { verdict: Verdict::Allowed, usage, counters: None } => {
                        // A 403: nothing taken.
                        return Ok((Verdict::Allowed, usage, None));
                    }
                    Decision::Decided { verdict: Verdict::RateLimited, usage, counters: None } => {
                        // Over a window: is the quota used up too? Asked once per minute and level.
                        match quota_to_ask(&levels, &held, now).filter(|&i| self.first_ask(&levels[i].0, now))
                        {
                            Some(i) => {
                                let (level, spec) = &levels[i];
                                let flight =
                                    self.exchanges.borrow_mut().entry(level.clone()).or_default().clone();
                                let grant = flight
                                    .run(|| self.exchange_with(level, *spec, cost))
                                    .await
                                    .map_err(rust_error)?;
                                match grant.verdict {
                                    Verdict::QuotaExceeded => refused_by_level(usage, &grant),
                                    _ => (Verdict::RateLimited, usage),
                                }
                            }
                            None => (Verdict::RateLimited, usage),
                        }
                    }
                    Decision::Decided { verdict, usage, counters: None } => (verdict, usage),
                    Decision::NeedsCredits(i) => {
                        let (level, spec) = &levels[i];
                        let flight = self.exchanges.borrow_mut().entry(level.clone()).or_default().clone();
                        let grant = flight
                            .run(|| self.exchange_with(level, *spec, cost))
                            .await
                            .map_err(rust_error)?;
                        if grant.credits >= cost.max(1) {
                            continue;
                        }
                        let (_, stands, _) =
                            decide_request(self.current_counters()?, now, limits, cost, false);
                        refused_by_level(stands, &grant)
                    }
                };
            // Waiting helps a window, never a used-up quota; and only for the leases out when the
            // request was first refused (leases made meanwhile do not extend its wait).
            let deadline = match (wait_until, self.leased_until(now)) {
                (Some(deadline), _) => Some(deadline),
                (None, until) => until.map(|until| until + LEASE_RETURN_MS),
            };
            wait_until = deadline;
            match deadline {
                Some(deadline) if now < deadline && refused.0 != Verdict::QuotaExceeded => {
                    waited = true;
                    Delay::from(Duration::from_millis(LEASE_WAIT_POLL_MS)).await;
                }
                // A hot key's isolate repeats the refusal for up to a second without asking.
                _ => {
                    return Ok((refused.0, refused.1, hot.then(|| refusal_lease(now, refused.0, &refused.1))))
                }
            }
        }
        // Never reached in practice: 256 rounds without an answer.
        let (_, usage, _) = decide_request(self.current_counters()?, now_ms(), limits, cost, false);
        Ok((Verdict::RateLimited, usage, None))
    }

    /// Whether the key is hot: its guard saw `LEASE_ABOVE_PER_SECOND` requests from isolates in
    /// this second, or the isolate asking is renewing a lease.
    fn is_hot(&self, config: &Config, ask: &LeaseAsk) -> bool {
        let mut rate = self.rate.get();
        let seen = rate.count(now_ms());
        self.rate.set(rate);
        config.lease_above_per_second.is_some_and(|above| ask.is_hot(seen, above))
    }

    /// A new lease for an isolate whose lease runs low (SPEC §20): what it gives back first, then
    /// a lease of the key's credits as with an admission, without a request. None for a refused
    /// key, or when nothing is left to lease (the isolate asks with its next request then).
    async fn renew(&self, c: RenewLease) -> Result<Renewed> {
        let (record, _) = self.record(&c.key_hash).await?;
        let now = now_ms();
        if self.take_back_leases(record.as_ref(), &c.lease.give_back)? {
            self.set_alarm_by(now_ms() + OWED_GIVE_BACK_MS).await?;
        }
        let Some(key) = record.filter(|k| k.refusal(now).is_none()) else {
            return Ok(Renewed { key: None, lease: None });
        };
        let config = self.config()?;
        if !self.is_hot(config, &c.lease) {
            return Ok(Renewed { key: Some(key), lease: None });
        }
        let limits = config.limits(&key);
        let levels = config.levels(&key);
        let mut held = self.held(&levels)?;
        let grant_id = gatehouse_core::encoding::hex(&gatehouse_app::random::<16>());
        let counters = self.current_counters()?;
        let leased =
            lease_to_isolate(counters, now, &limits, &levels, &mut held, &grant_id, c.lease.want, true);
        let Some((mut grant, after, drawn)) = leased else {
            return Ok(Renewed { key: Some(key), lease: None });
        };
        let project = project_held(&key, &levels, &held);
        grant.usage = with_project_quota(grant.usage, project.as_ref());
        self.keep_isolate_lease(&grant, &drawn)?;
        self.keep_counters(after)?;
        self.keep_held(&levels, held)?;
        Ok(Renewed { key: Some(key), lease: Some(grant) })
    }

    /// Whether `level`'s quota was not asked about yet in this minute (then it is, from now).
    fn first_ask(&self, level: &str, now: i64) -> bool {
        let minute = Window::Minute.start(now);
        self.quota_asked.borrow_mut().insert(level.to_owned(), minute) != Some(minute)
    }

    /// What this guard holds of each of `levels`.
    fn held(&self, levels: &[(String, LimitSpec)]) -> Result<Vec<Option<Held>>> {
        levels.iter().map(|(level, _)| Ok(self.lease(level)?.held)).collect()
    }

    fn keep_held(&self, levels: &[(String, LimitSpec)], held: Vec<Option<Held>>) -> Result<()> {
        for ((level, _), h) in levels.iter().zip(held) {
            let lease = self.lease(level)?;
            if lease.held != h {
                self.keep_lease(level, LevelLease { held: h, ..lease })?;
            }
        }
        Ok(())
    }

    /// A lease to an isolate, kept so that what comes back of it counts once (`lease_grants`,
    /// with what it drew from the levels above), and counted as out until it ends.
    fn keep_isolate_lease(&self, grant: &Grant, drawn: &Drawn) -> Result<()> {
        self.create_tables()?;
        self.sql.exec(
            "INSERT INTO lease_grants (grant_id, grant, returned, keep_until_ms, drawn) VALUES (?, ?, '{}', ?, ?)",
            vec![
                grant.grant_id.clone().into(),
                serde_json::to_string(grant).map_err(rust_error)?.into(),
                (grant.until_ms + PURGE_EVERY_MS).into(),
                serde_json::to_string(drawn).map_err(rust_error)?.into(),
            ],
        )?;
        self.leases_out.borrow_mut().push((grant.grant_id.clone(), grant.until_ms));
        Ok(())
    }

    /// Until when isolates may hold credits of this key not given back yet (the latest end of a
    /// lease not given back), as this object instance knows.
    fn leased_until(&self, now: i64) -> Option<i64> {
        let mut out = self.leases_out.borrow_mut();
        out.retain(|(_, until)| now < until + LEASE_RETURN_MS);
        out.iter().map(|(_, until)| *until).max()
    }

    /// Takes back what an isolate did not use of this key's leases (once each): to the key's
    /// windows and to the levels' grants they drew from (`key`'s levels; without its record,
    /// only the windows).
    fn take_back_leases(&self, key: Option<&KeyRecord>, give_back: &[GiveBack]) -> Result<bool> {
        if give_back.is_empty() || !self.has_tables()? {
            return Ok(false);
        }
        let levels = match key {
            Some(key) => self.config()?.levels(key),
            None => Vec::new(),
        };
        let mut held = self.held(&levels)?;
        let mut counters = self.current_counters()?;
        let now = now_ms();
        let mut late = Vec::new();
        let mut owed = false;
        for back in give_back {
            let Some((grant, mut returned, drawn)) = self.lease_grant(&back.grant_id, true)? else {
                continue;
            };
            let credits = accept_give_back(&mut Counters::default(), now, &grant, &mut returned, back);
            let drawn = drawn.unwrap_or_default();
            late.extend(take_back(&mut counters, now, &grant, &drawn, &levels, &mut held, credits));
            self.keep_returned(&back.grant_id, &returned)?;
            self.leases_out.borrow_mut().retain(|(id, _)| *id != back.grant_id);
        }
        // Credits that came back for a level grant this guard no longer holds: owed to the level.
        for (level, back) in late {
            let mut lease = self.lease(&level)?;
            lease.owed.push(back);
            self.keep_lease(&level, lease)?;
            owed = true;
        }
        self.keep_counters(counters)?;
        self.keep_held(&levels, held)?;
        Ok(owed)
    }

    /// Asks `level`'s authority for a grant of at least `cost` credits, giving back what is owed
    /// and what the grant held now did not use; the new grant replaces it.
    async fn exchange_with(
        &self,
        level: &str,
        limits: LimitSpec,
        cost: u32,
    ) -> std::result::Result<Grant, String> {
        self.exchange_once(level, limits, cost).await.map_err(|e| e.to_string())
    }

    /// A `cost` of 0 only gives back (the alarm).
    async fn exchange_once(&self, level: &str, limits: LimitSpec, cost: u32) -> Result<Grant> {
        let now = now_ms();
        let lease = self.lease(level)?;
        let mut give_back = lease.owed.clone();
        give_back.extend(lease.held.as_ref().and_then(Held::give_back));
        let exchange = Exchange {
            grant_id: gatehouse_core::encoding::hex(&gatehouse_app::random::<16>()),
            need: cost.max(1),
            want: if cost == 0 { 0 } else { Held::want(lease.held.as_ref(), now, cost) },
            give_back: give_back.clone(),
            limits,
        };
        // Credits on their way back are not used meanwhile.
        self.keep_lease(level, LevelLease { held: None, owed: give_back.clone() })?;
        let grant = self.ask_other(level, exchange).await?;
        // Given back now (a retry of a give-back counts once); a grant that came meanwhile is owed.
        let mut lease = self.lease(level)?;
        lease.owed.retain(|o| !give_back.contains(o));
        lease.owed.extend(lease.held.as_ref().and_then(Held::give_back));
        lease.held = (grant.credits > 0).then(|| Held::from_grant(&grant));
        self.keep_lease(level, lease)?;
        if grant.credits > 0 {
            self.set_alarm_by(grant.until_ms).await?;
        }
        Ok(grant)
    }

    /// Gives back what is owed to `level` while the grant held of it still runs (it stays held).
    async fn give_back_owed(&self, level: &str, limits: LimitSpec) -> Result<()> {
        let owed = self.lease(level)?.owed;
        let exchange = Exchange {
            grant_id: gatehouse_core::encoding::hex(&gatehouse_app::random::<16>()),
            need: 1,
            want: 0,
            give_back: owed.clone(),
            limits,
        };
        self.ask_other(level, exchange).await?;
        let mut lease = self.lease(level)?;
        lease.owed.retain(|o| !owed.contains(o));
        self.keep_lease(level, lease)
    }

    /// Makes sure the alarm runs at `at` at the latest.
    async fn set_alarm_by(&self, at: i64) -> Result<()> {
        if self.alarm_at.get().is_none_or(|current| current > at) {
            // The runtime runs alarms by the real time (the test kit's clock may be ahead of it).
            self.storage.set_alarm(clock::real_ms(at)).await?;
            self.alarm_at.set(Some(at));
        }
        Ok(())
    }

    /// As a level's authority: gives back what the holder did not use, then grants (SPEC §20).
    /// Synchronous: exchanges are decided one after another. The same `grant_id` again answers
    /// the same grant.
    fn exchange(&self, c: Exchange) -> Result<Grant> {
        let now = now_ms();
        self.create_tables()?;
        if now - self.purged_ms.get() >= PURGE_EVERY_MS {
            self.sql.exec("DELETE FROM lease_grants WHERE keep_until_ms <= ?", vec![now.into()])?;
            self.purged_ms.set(now);
        }
        let mut counters = self.current_counters()?;
        for back in &c.give_back {
            if let Some((grant, mut returned, _)) = self.lease_grant(&back.grant_id, false)? {
                accept_give_back(&mut counters, now, &grant, &mut returned, back);
                self.keep_returned(&back.grant_id, &returned)?;
            }
        }
        if let Some((grant, _, _)) = self.lease_grant(&c.grant_id, false)? {
            self.keep_counters(counters)?;
            return Ok(grant);
        }
        let (grant, next) = grant(counters, now, &c.limits, &c.grant_id, c.need, c.want);
        self.keep_counters(next)?;
        self.sql.exec(
            "INSERT INTO lease_grants (grant_id, grant, returned, keep_until_ms) VALUES (?, ?, '{}', ?)",
            vec![
                c.grant_id.into(),
                serde_json::to_string(&grant).map_err(rust_error)?.into(),
                next_month_start(now).into(),
            ],
        )?;
        Ok(grant)
    }

    /// A grant this object made: a level's grant to a key's guard (`to_isolate` false), or a
    /// lease of the key's credits to an isolate (with what it drew from the levels above).
    fn lease_grant(
        &self,
        grant_id: &str,
        to_isolate: bool,
    ) -> Result<Option<(Grant, Returned, Option<Drawn>)>> {
        #[derive(Deserialize)]
        struct Row {
            grant: String,
            returned: String,
            drawn: Option<String>,
        }
        if !self.has_tables()? {
            return Ok(None);
        }
        let sql = match to_isolate {
            true => {
                "SELECT grant, returned, drawn FROM lease_grants WHERE grant_id = ? AND drawn IS NOT NULL"
            }
            false => "SELECT grant, returned, drawn FROM lease_grants WHERE grant_id = ? AND drawn IS NULL",
        };
        let row = self.sql.exec(sql, vec![grant_id.into()])?.to_array::<Row>()?.pop();
        let Some(row) = row else { return Ok(None) };
        let drawn: Option<Drawn> =
            row.drawn.as_deref().map(serde_json::from_str).transpose().map_err(rust_error)?;
        let grant: Grant = serde_json::from_str(&row.grant).map_err(rust_error)?;
        let returned: Returned = serde_json::from_str(&row.returned).map_err(rust_error)?;
        Ok(Some((grant, returned, drawn)))
    }

    fn keep_returned(&self, grant_id: &str, returned: &Returned) -> Result<()> {
        self.sql.exec(
            "UPDATE lease_grants SET returned = ? WHERE grant_id = ?",
            vec![serde_json::to_string(returned).map_err(rust_error)?.into(), grant_id.into()],
        )?;
        Ok(())
    }

    /// What this guard holds of `level`, read from storage once.
    fn lease(&self, level: &str) -> Result<LevelLease> {
        if let Some(lease) = self.leases.borrow().get(level) {
            return Ok(lease.clone());
        }
        #[derive(Deserialize)]
        struct Row {
            state: String,
        }
        let stored = match self.has_tables()? {
            true => self
                .sql
                .exec("SELECT state FROM level_leases WHERE level = ?", vec![level.into()])?
                .to_array::<Row>()?
                .pop()
                .map(|r| serde_json::from_str(&r.state).map_err(rust_error))
                .transpose()?,
            false => None,
        };
        let lease: LevelLease = stored.unwrap_or_default();
        self.leases.borrow_mut().insert(level.to_owned(), lease.clone());
        Ok(lease)
    }

    fn keep_lease(&self, level: &str, lease: LevelLease) -> Result<()> {
        self.create_tables()?;
        self.sql.exec(
            "INSERT OR REPLACE INTO level_leases (level, state) VALUES (?, ?)",
            vec![level.into(), serde_json::to_string(&lease).map_err(rust_error)?.into()],
        )?;
        self.leases.borrow_mut().insert(level.to_owned(), lease);
        Ok(())
    }

    /// The counters as they stand (memory, else storage).
    fn current_counters(&self) -> Result<Counters> {
        Ok(match self.counters.get() {
            Some(c) => c,
            None if self.has_tables()? => self.stored_counters()?,
            None => Counters::default(),
        })
    }

    fn keep_counters(&self, next: Counters) -> Result<()> {
        self.keep_state("INSERT OR REPLACE INTO limit_counters (id, state) VALUES (1, ?)", next)?;
        self.counters.set(Some(next));
        Ok(())
    }

    /// The counters in storage: `limit_counters`, else the first version's one minute window.
    fn stored_counters(&self) -> Result<Counters> {
        if let Some(counters) = self.stored_state("SELECT state FROM limit_counters")? {
            return Ok(counters);
        }
        #[derive(Deserialize)]
        struct FirstVersion {
            window_start_ms: i64,
            window_used: u32,
            month_start_ms: i64,
            month_used: u64,
        }
        let old = match self.sql.exec("SELECT * FROM counters", None) {
            Ok(rows) => rows.to_array::<FirstVersion>()?.pop(),
            Err(_) => None, // no such table: a guard that never had the first version
        };
        Ok(old.map_or_else(Counters::default, |o| {
            let mut c =
                Counters { month_start_ms: o.month_start_ms, month_used: o.month_used, ..Default::default() };
            c.windows[1] = WindowCount { start_ms: o.window_start_ms, used: o.window_used };
            c
        }))
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

    /// Decides on the claim and, when it may execute, takes it, without yielding. A claim is kept
    /// (completed, released or lapsed) until the TTL after it was taken or completed.
    fn claim(&self, request: &ClaimRequest) -> Result<ClaimDecision> {
        let now = now_ms();
        // A guard without tables has no claim yet; it creates them when it takes this one.
        let has_tables = self.has_tables()?;
        if has_tables && now - self.purged_ms.get() >= PURGE_EVERY_MS {
            self.sql.exec("DELETE FROM idempotency_claims WHERE keep_until_ms <= ?", vec![now.into()])?;
            self.purged_ms.set(now);
        }
        let existing = if has_tables { self.held_claim(&request.idempotency_key, now)? } else { None };
        let decision = decide_claim(existing.as_ref(), &request.fingerprint, &request.request_id, now);
        if let ClaimDecision::Execute { operation } = &decision {
            let ttl_ms = self.config()?.idempotency_ttl_seconds as i64 * 1000;
            self.create_tables()?;
            self.sql.exec(
                "INSERT OR REPLACE INTO idempotency_claims
                   (idempotency_key, fingerprint, owner, operation, until_ms, completed, released, keep_until_ms)
                 VALUES (?, ?, ?, ?, ?, 0, 0, ?)",
                vec![
                    request.idempotency_key.clone().into(),
                    request.fingerprint.clone().into(),
                    request.request_id.clone().into(),
                    operation.clone().into(),
                    (now + LEASE_MS).into(),
                    (now + ttl_ms).into(),
                ],
            )?;
        }
        Ok(decision)
    }

    /// The claim kept for `idempotency_key`, unless it is past its keeping.
    fn held_claim(&self, idempotency_key: &str, now: i64) -> Result<Option<Claim>> {
        self.sql
            .exec(
                "SELECT fingerprint, operation, until_ms, completed, released,
                        CASE WHEN response_until_ms > ?1 THEN response END AS response
                 FROM idempotency_claims WHERE idempotency_key = ?2 AND keep_until_ms > ?1",
                vec![now.into(), idempotency_key.into()],
            )?
            .to_array::<ClaimRow>()?
            .pop()
            .map(|row| -> Result<Claim> {
                Ok(Claim {
                    fingerprint: row.fingerprint,
                    until_ms: row.until_ms,
                    completed: row.completed != 0,
                    released: row.released != 0,
                    operation: row.operation,
                    response: row
                        .response
                        .map(|r| serde_json::from_str(&r))
                        .transpose()
                        .map_err(rust_error)?,
                })
            })
            .transpose()
    }

    /// Forgets the claim, kept as released, so the same request executing again continues its
    /// operation.
    fn release(&self, claim: &ClaimRequest) -> Result<()> {
        if self.has_tables()? {
            self.sql.exec(
                "UPDATE idempotency_claims SET released = 1
                 WHERE idempotency_key = ? AND owner = ? AND completed = 0",
                vec![claim.idempotency_key.clone().into(), claim.request_id.clone().into()],
            )?;
        }
        Ok(())
    }

    /// Sends a command to another object of this namespace: a level's authority (leases), or the
    /// key's claim object that holds a claim (SPEC §20) — near this one, so one more call but no
    /// more round trips for the isolate.
    async fn ask_other<C: Ask>(&self, object: &str, command: C) -> Result<C::Answer> {
        let namespace = self.env.durable_object(BINDING)?;
        let command: GuardCommand = command.into();
        durable::ask(&namespace, &Meter::default(), object, &command).await.map_err(rust_error)
    }

    /// Marks the claim completed until the TTL ends and keeps its response as long. Replays carry
    /// the response inline for as long as the response store may not show it yet; after that they
    /// read the store, and ask [`Self::held_response`] when it misses. A repeated notice changes nothing.
    fn complete(&self, claim: &ClaimRequest, response: &KeptResponse) -> Result<Completed> {
        if !self.has_tables()? {
            // No claim was ever taken here (or its object's storage was lost).
            return Ok(Completed { completed: false });
        }
        let now = now_ms();
        let until = now + self.config()?.idempotency_ttl_seconds as i64 * 1000;
        let updated = self.sql.exec(
            "UPDATE idempotency_claims
             SET completed = 1, until_ms = ?, keep_until_ms = ?, response = ?, response_until_ms = ?
             WHERE idempotency_key = ? AND owner = ? AND completed = 0 AND released = 0",
            vec![
                until.into(),
                until.into(),
                serde_json::to_string(response).map_err(rust_error)?.into(),
                (now + STORE_PROPAGATION_MS).into(),
                claim.idempotency_key.clone().into(),
                claim.request_id.clone().into(),
            ],
        )?;
        if updated.rows_written() > 0 {
            return Ok(Completed { completed: true });
        }
        // A repeated notice: the claim is completed already, or was lost.
        #[derive(Deserialize)]
        struct Mine {
            completed: i64,
        }
        let mine = self
            .sql
            .exec(
                "SELECT completed FROM idempotency_claims WHERE idempotency_key = ? AND owner = ?",
                vec![claim.idempotency_key.clone().into(), claim.request_id.clone().into()],
            )?
            .to_array::<Mine>()?;
        Ok(Completed { completed: mine.first().is_some_and(|m| m.completed == 1) })
    }

    fn held_response(&self, idempotency_key: &str) -> Result<Option<KeptResponse>> {
        #[derive(Deserialize)]
        struct Held {
            response: Option<String>,
        }
        if !self.has_tables()? {
            return Ok(None);
        }
        let rows = self
            .sql
            .exec(
                "SELECT response FROM idempotency_claims WHERE idempotency_key = ? AND completed = 1 AND until_ms > ?",
                vec![idempotency_key.into(), now_ms().into()],
            )?
            .to_array::<Held>()?;
        rows.into_iter()
            .find_map(|row| row.response)
            .map(|r| serde_json::from_str(&r).map_err(rust_error))
            .transpose()
    }
}
