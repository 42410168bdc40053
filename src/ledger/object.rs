//! The Durable Object class. One SQLite table of `(event_id, seen_at)`; ids arrive as one JSON
//! array parameter (`json_each`), so a 500-event batch is one statement whatever the bound-parameter
//! limit. Rows older than the window are deleted whenever ids are remembered.

use std::collections::HashSet;

use serde::Deserialize;
use worker::{
    durable_object, wasm_bindgen, Date, DurableObject, Env, Request, Response, Result, SqlStorage, State,
};

use super::protocol::{LedgerAnswer, LedgerCommand};
use crate::adapters::env::config;

#[durable_object]
pub struct EventLedgerObject {
    env: Env,
    sql: SqlStorage,
}

#[derive(Deserialize)]
struct Row {
    event_id: String,
}

impl DurableObject for EventLedgerObject {
    fn new(state: State, env: Env) -> Self {
        let sql = state.storage().sql();
        for ddl in [
            "CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY, seen_at INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS seen_by_time ON seen (seen_at)",
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
            LedgerCommand::Seen { ids } => {
                let json = serde_json::to_string(&ids)?;
                let rows: Vec<Row> = self
                    .sql
                    .exec(
                        "SELECT event_id FROM seen WHERE seen_at > ?
                           AND event_id IN (SELECT value FROM json_each(?))",
                        vec![(now - window_ms).into(), json.into()],
                    )?
                    .to_array()?;
                let found: HashSet<String> = rows.into_iter().map(|r| r.event_id).collect();
                LedgerAnswer::Seen { seen: ids.iter().map(|id| found.contains(id)).collect() }
            }
            LedgerCommand::Remember { ids } => {
                self.sql.exec("DELETE FROM seen WHERE seen_at <= ?", vec![(now - window_ms).into()])?;
                self.sql.exec(
                    "INSERT INTO seen (event_id, seen_at) SELECT value, ? FROM json_each(?) WHERE true
                     ON CONFLICT (event_id) DO UPDATE SET seen_at = excluded.seen_at",
                    vec![now.into(), serde_json::to_string(&ids)?.into()],
                )?;
                LedgerAnswer::Done
            }
        };
        Response::from_json(&answer)
    }
}
