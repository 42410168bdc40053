//! The Durable Object class: one shard of a namespace's ids (SPEC §7, §20). One SQLite table of
//! reservations `(event_id, owner, confirmed, at_ms)` and one row of what the shard knows of
//! splits; ids arrive as one JSON array parameter (`json_each`), so a 500-event batch is one
//! statement whatever the bound-parameter limit. The decisions are `core::ledger::shards`': a
//! reserve reads, decides and writes without yielding once its ancestors answered, so concurrent
//! batches are decided one after another. Rows older than the window are deleted in bounded
//! passes (`retention::PURGE_BATCH_ROWS`) with each reserve and check, and from the object's alarm,
//! set by the oldest row's end, when it is called no more (SPEC §23).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde::Deserialize;
use worker::{
    durable_object, wasm_bindgen, DurableObject, Env, ObjectNamespace, Request, Response, Result, SqlStorage,
    State,
};

use crate::adapters::alarm::Alarm;
use crate::adapters::deadline::within;
use crate::adapters::durable;
use crate::adapters::env::config;
use crate::adapters::events::shard_answer;
use gatehouse_core::events::{Reservation, RESERVATION_LEASE_MS};
use gatehouse_core::lease::RequestRate;
use gatehouse_core::ledger::forward::{ForwardTo, Forwarded};
use gatehouse_core::ledger::protocol::{LedgerAnswer, LedgerCommand, BINDING, URL};
use gatehouse_core::ledger::shards::{
    check_here, reserve_here, Checked, ParentChecks, ShardAnswer, ShardMemory, ShardRules,
};
use gatehouse_core::platform::deadline;
use gatehouse_core::ports::{Meter, PortError};
use gatehouse_core::retention::{next_alarm, PURGE_BATCH_ROWS};

/// Forwards a reserve this split shard took to its children in ledger namespace `of`
/// (`core::ledger::forward`), side by side, each within a deadline inside the worker's own.
async fn forward(
    objects: &ObjectNamespace,
    of: &str,
    owner: &str,
    plan: &ForwardTo,
) -> Result<ShardAnswer, PortError> {
    let calls = plan.children.iter().map(|child| async move {
        let command = LedgerCommand::Reserve {
            owner: owner.to_owned(),
            ids: child.ids.clone(),
            ancestors: child.ancestors.clone(),
            namespace: Some(of.to_owned()),
        };
        let meter = Meter::default();
        let call = durable::call(objects, &meter, URL, &child.name, &command);
        shard_answer(
            within(deadline::LEDGER_FORWARD_MS, "event ledger forward", call).await?,
            child.ids.len(),
        )
    });
    let answers = futures_util::future::try_join_all(calls).await?;
    plan.answer(answers).map_err(PortError)
}

#[durable_object]
pub struct EventLedgerObject {
    env: Env,
    sql: SqlStorage,
    alarm: Alarm,
    /// Reserve calls a second, for the split decision (lost with the isolate: it counts again).
    rate: RefCell<RequestRate>,
    /// Its checks of its parent, batched (SPEC §20: no object above ~500 calls/s).
    checks: ParentChecks<PortError>,
}

/// How many purge passes one alarm runs at most (each at most `PURGE_BATCH_ROWS` rows).
const ALARM_PASSES: usize = 20;

#[derive(Deserialize)]
struct Row {
    event_id: String,
    owner: String,
    confirmed: i64,
    at_ms: i64,
}

#[derive(Deserialize)]
struct At {
    at_ms: i64,
}

impl EventLedgerObject {
    /// A `splits` row: `own` (when this shard split) or `parent` (when its parent did). A read
    /// that fails stops the call (the object's error): "unknown" must never read as "not split".
    fn split(&self, which: &str) -> Option<i64> {
        let rows = self.sql.exec("SELECT at_ms FROM splits WHERE which = ?", vec![which.into()]);
        let rows = rows.and_then(|r| r.to_array::<At>()).expect("read the shard's splits");
        rows.first().map(|r| r.at_ms)
    }

    /// Deletes at most a batch of the rows older than the window (on reserves, on a split shard's
    /// checks, and from the alarm). Answers whether it left some behind.
    fn prune(&self, rules: ShardRules) -> Result<bool> {
        let before = rules.now_ms - rules.window_ms;
        let deleted = self
            .sql
            .exec(
                &format!(
                    "DELETE FROM reservations WHERE rowid IN
                       (SELECT rowid FROM reservations WHERE at_ms <= ? ORDER BY at_ms LIMIT {PURGE_BATCH_ROWS})"
                ),
                vec![before.into()],
            )?
            .rows_written();
        Ok(deleted >= PURGE_BATCH_ROWS as usize)
    }

    /// Makes sure the alarm runs by the time the oldest row leaves the window, so a shard that is
    /// called no more empties itself.
    async fn wake_for_oldest(&self, window_ms: i64, now_ms: i64) -> Result<()> {
        // Rows written now leave after every row an alarm already set is for: that alarm comes
        // first and sets the next one (no query on a reserve's path while one is set).
        if self.alarm.is_set() {
            return Ok(());
        }
        #[derive(Deserialize)]
        struct Oldest {
            at_ms: Option<i64>,
        }
        let oldest = self
            .sql
            .exec("SELECT MIN(at_ms) AS at_ms FROM reservations", None)?
            .to_array::<Oldest>()?
            .pop()
            .and_then(|o| o.at_ms);
        let Some(at) = next_alarm(now_ms, oldest.map(|at| at + window_ms)) else { return Ok(()) };
        self.alarm.set_by(at).await
    }

    fn set_split(&self, which: &str, at_ms: i64) {
        let set = "INSERT OR IGNORE INTO splits (which, at_ms) VALUES (?, ?)";
        self.sql.exec(set, vec![which.into(), at_ms.into()]).expect("write the shard's split");
    }
}

impl ShardMemory for EventLedgerObject {
    fn held(&self, ids: &[String], now_ms: i64, window_ms: i64) -> HashMap<String, Reservation> {
        let ids = serde_json::to_string(ids).expect("ids serialise");
        let rows = self
            .sql
            .exec(
                "SELECT event_id, owner, confirmed, at_ms FROM reservations
                 WHERE event_id IN (SELECT value FROM json_each(?)) AND at_ms > ?",
                vec![ids.into(), (now_ms - window_ms).into()],
            )
            .and_then(|c| c.to_array::<Row>())
            .expect("read the ledger's reservations");
        rows.into_iter()
            .map(|r| {
                (r.event_id, Reservation { owner: r.owner, confirmed: r.confirmed != 0, at_ms: r.at_ms })
            })
            .collect()
    }

    fn insert(&self, owner: &str, now_ms: i64, ids: &[&String]) {
        let ids = serde_json::to_string(ids).expect("ids serialise");
        self.sql
            .exec(
                "INSERT OR REPLACE INTO reservations (event_id, owner, confirmed, at_ms)
                 SELECT value, ?, 0, ? FROM json_each(?)",
                vec![owner.into(), now_ms.into(), ids.into()],
            )
            .expect("write the ledger's reservations");
    }

    fn split_at(&self) -> Option<i64> {
        self.split("own")
    }

    fn set_split_at(&self, at_ms: i64) {
        self.set_split("own", at_ms)
    }

    fn parent_split_at(&self) -> Option<i64> {
        self.split("parent")
    }

    fn set_parent_split_at(&self, at_ms: i64) {
        self.set_split("parent", at_ms)
    }

    fn count_call(&self, now_ms: i64) -> u32 {
        let mut rate = self.rate.borrow_mut();
        rate.count(now_ms);
        rate.per_second(now_ms)
    }

    fn stored_bytes(&self) -> u64 {
        self.sql.database_size() as u64
    }
}

impl DurableObject for EventLedgerObject {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        for ddl in [
            "CREATE TABLE IF NOT EXISTS reservations (
               event_id TEXT PRIMARY KEY, owner TEXT NOT NULL, confirmed INTEGER NOT NULL, at_ms INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS reservations_by_time ON reservations (at_ms)",
            "CREATE TABLE IF NOT EXISTS splits (which TEXT PRIMARY KEY, at_ms INTEGER NOT NULL)",
        ] {
            sql.exec(ddl, None).expect("create the ledger's tables");
        }
        Self {
            env,
            sql,
            alarm: Alarm::new(state.storage()),
            rate: RefCell::default(),
            checks: ParentChecks::default(),
        }
    }

    /// An idle shard's old rows go, a batch at a time (a few passes per alarm), then it sleeps until
    /// its next oldest row leaves the window.
    async fn alarm(&self) -> Result<Response> {
        self.alarm.ran();
        let config = config(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
        crate::adapters::clock::follow(&self.env).await.map_err(|e| worker::Error::RustError(e.0))?;
        let now_ms = crate::adapters::clock::now_ms();
        let window_ms = config.event_dedup_window_seconds as i64 * 1000;
        let rules =
            ShardRules { level: 0, now_ms, window_ms, split_above: config.ledger_split_above_per_second };
        for _ in 0..ALARM_PASSES {
            if !self.prune(rules)? {
                break;
            }
        }
        self.wake_for_oldest(window_ms, now_ms).await?;
        Response::ok("")
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let config = config(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
        crate::adapters::clock::follow(&self.env).await.map_err(|e| worker::Error::RustError(e.0))?;
        let now_ms = crate::adapters::clock::now_ms();
        let rules = |ancestors: &[String]| ShardRules {
            level: ancestors.len().min(usize::from(u8::MAX)) as u8,
            now_ms,
            window_ms: config.event_dedup_window_seconds as i64 * 1000,
            split_above: config.ledger_split_above_per_second,
        };
        let namespace = self.env.durable_object(BINDING)?;
        let namespace = Rc::new(namespace);
        // Asks the nearest ancestor (which asks its own) what it holds for the ids, in a check
        // batched with those of the other calls of this object (`ParentChecks`).
        let ask = |ancestors: Vec<String>| {
            let namespace = namespace.clone();
            ancestors.split_first().map(|(parent, rest)| {
                let (parent, rest) = (parent.clone(), rest.to_vec());
                move |ids: Vec<String>| async move {
                    let send = |ids: Vec<String>| async move {
                        let asked = ids.len();
                        let command = LedgerCommand::Check { ids, ancestors: rest };
                        let meter = Meter::default();
                        // Shorter than the worker's own deadline on this call: a reserve never
                        // decides after its caller gave up on it (and released what it reserved),
                        // also when it first waited in line for a check out (at most as long).
                        let check = durable::call(&namespace, &meter, URL, &parent, &command);
                        match within(deadline::LEDGER_CHECK_MS, "event ledger check", check).await? {
                            LedgerAnswer::Held { held, split_at_ms } if held.len() == asked => {
                                Ok::<Checked, PortError>((held, split_at_ms))
                            }
                            other => {
                                Err(PortError(format!("event ledger {parent}: unexpected answer {other:?}")))
                            }
                        }
                    };
                    self.checks.check(ids, now_ms, send).await
                }
            })
        };
        let fail = |e: PortError| worker::Error::RustError(e.0);
        let answer = match req.json::<LedgerCommand>().await? {
            LedgerCommand::Reserve { owner, ids, ancestors, namespace: of } => {
                let rules = rules(&ancestors);
                self.prune(rules)?;
                let answer = match reserve_here(self, rules, &owner, &ids, ask(ancestors.clone()))
                    .await
                    .map_err(fail)?
                {
                    ShardAnswer::Moved => {
                        let plan =
                            of.as_deref().and_then(|of| ForwardTo::plan(of, rules.level, &ancestors, &ids));
                        match (of, plan) {
                            (Some(of), Some(plan)) => {
                                forward(&namespace, &of, &owner, &plan).await.map_err(fail)?
                            }
                            _ => ShardAnswer::Moved,
                        }
                    }
                    decided => decided,
                };
                self.wake_for_oldest(rules.window_ms, now_ms).await?;
                match answer {
                    ShardAnswer::Decided(decisions) => LedgerAnswer::Reserved { decisions },
                    ShardAnswer::Moved => LedgerAnswer::Moved,
                    ShardAnswer::Forwarded(Forwarded { decisions, at, split }) => {
                        LedgerAnswer::Forwarded { decisions, at, split }
                    }
                }
            }
            LedgerCommand::Check { ids, ancestors } => {
                // A split shard takes no reserve, so its old rows go here.
                let rules = rules(&ancestors);
                self.prune(rules)?;
                let held = check_here(self, rules, &ids, ask(ancestors)).await.map_err(fail)?;
                LedgerAnswer::Held { held, split_at_ms: self.split_at() }
            }
            LedgerCommand::Confirm { owner, ids } => {
                // Only within the reservation's lease (see `ledger::shards::asks_parent`).
                let lease_start = now_ms - RESERVATION_LEASE_MS;
                self.sql.exec(
                    "UPDATE reservations SET confirmed = 1, at_ms = ?
                     WHERE owner = ? AND confirmed = 0 AND at_ms > ?
                       AND event_id IN (SELECT value FROM json_each(?))",
                    vec![
                        now_ms.into(),
                        owner.into(),
                        lease_start.into(),
                        serde_json::to_string(&ids)?.into(),
                    ],
                )?;
                LedgerAnswer::Done
            }
            LedgerCommand::Release { owner, ids } => {
                self.sql.exec(
                    "DELETE FROM reservations
                     WHERE owner = ? AND confirmed = 0 AND event_id IN (SELECT value FROM json_each(?))",
                    vec![owner.into(), serde_json::to_string(&ids)?.into()],
                )?;
                LedgerAnswer::Done
            }
        };
        Response::from_json(&answer)
    }
}
