//! The Durable Object class: one shard of a namespace's ids. One SQLite table of reservations
//! `(event_id, owner, confirmed, at_ms)`; ids arrive as one JSON array parameter (`json_each`),
//! so a 500-event batch is one statement whatever the bound-parameter limit. A reserve reads,
//! decides and writes without yielding, so concurrent batches are decided one after another.
//! Rows older than the window are deleted whenever ids are reserved.

use std::collections::HashMap;

use serde::Deserialize;
use worker::{
    durable_object, wasm_bindgen, Date, DurableObject, Env, Request, Response, Result, SqlStorage, State,
};

use crate::adapters::env::config;
use gatehouse_core::events::{reserve, Reservation, Reserved};
use gatehouse_core::ledger::protocol::{LedgerAnswer, LedgerCommand};

#[durable_object]
pub struct EventLedgerObject {
    env: Env,
    sql: SqlStorage,
}

#[derive(Deserialize)]
struct Row {
    event_id: String,
    owner: String,
    confirmed: i64,
    at_ms: i64,
}

impl DurableObject for EventLedgerObject {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        for ddl in [
            "CREATE TABLE IF NOT EXISTS reservations (
               event_id TEXT PRIMARY KEY, owner TEXT NOT NULL, confirmed INTEGER NOT NULL, at_ms INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS reservations_by_time ON reservations (at_ms)",
        ] {
            sql.exec(ddl, None).expect("create the ledger's table");
        }
        Self { env, sql }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let window_ms = config(&self.env)
            .map_err(|e| worker::Error::RustError(e.to_string()))?
            .event_dedup_window_seconds as i64
            * 1000;
        let now = Date::now().as_millis() as i64;
        let answer = match req.json::<LedgerCommand>().await? {
            LedgerCommand::Reserve { owner, ids } => {
                self.sql.exec("DELETE FROM reservations WHERE at_ms <= ?", vec![(now - window_ms).into()])?;
                let held: HashMap<String, Reservation> = self
                    .sql
                    .exec(
                        "SELECT event_id, owner, confirmed, at_ms FROM reservations
                         WHERE event_id IN (SELECT value FROM json_each(?))",
                        vec![serde_json::to_string(&ids)?.into()],
                    )?
                    .to_array::<Row>()?
                    .into_iter()
                    .map(|r| {
                        (
                            r.event_id,
                            Reservation { owner: r.owner, confirmed: r.confirmed != 0, at_ms: r.at_ms },
                        )
                    })
                    .collect();
                let decisions: Vec<Reserved> =
                    ids.iter().map(|id| reserve(held.get(id), &owner, now, window_ms)).collect();
                let fresh: Vec<&String> = ids
                    .iter()
                    .zip(&decisions)
                    .filter(|(_, d)| **d == Reserved::Fresh)
                    .map(|(id, _)| id)
                    .collect();
                if !fresh.is_empty() {
                    self.sql.exec(
                        "INSERT OR REPLACE INTO reservations (event_id, owner, confirmed, at_ms)
                         SELECT value, ?, 0, ? FROM json_each(?)",
                        vec![owner.into(), now.into(), serde_json::to_string(&fresh)?.into()],
                    )?;
                }
                LedgerAnswer::Reserved { decisions }
            }
            LedgerCommand::Confirm { owner, ids } => {
                self.sql.exec(
                    "UPDATE reservations SET confirmed = 1, at_ms = ?
                     WHERE owner = ? AND confirmed = 0 AND event_id IN (SELECT value FROM json_each(?))",
                    vec![now.into(), owner.into(), serde_json::to_string(&ids)?.into()],
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
