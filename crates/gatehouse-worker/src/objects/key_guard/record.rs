//! The key's record, as a key's guard holds it: kept in memory once loaded (one D1 query per object
//! start, then one per [`RECORD_FRESH_MS`] at most). A change to the key is told to the guard first
//! (`Apply`): it is kept in the object's storage too (`applied`), so it holds across a restart of
//! the object even while D1 does not show it yet; an epoch counter makes sure a D1 load that raced
//! with it is not kept. The stored change is of no use once stale, and is purged then.

use std::rc::Rc;

use serde::Deserialize;
use worker::{console_log, Result};

use super::{rust_error, tables::Role, KeyGuardObject, Purged};
use crate::adapters::clock::now_ms;
use crate::adapters::d1::D1Store;
use gatehouse_core::api_key::{CurrentHash, KeyRecord};
use gatehouse_core::guard::protocol::Done;
use gatehouse_core::ports::{Directory, Meter, Rotations};

/// How long a record of the key is used before it is read again (from D1, or from what `Apply`
/// stored): a change whose D1 write failed after the guard was told is undone by then at the latest.
const RECORD_FRESH_MS: i64 = 600_000;

/// The change last told, used until `until_ms` (then D1 is read again and the row goes).
pub(super) const TABLES: &[&str] = &["CREATE TABLE IF NOT EXISTS applied (
       id INTEGER PRIMARY KEY CHECK (id = 1), record TEXT NOT NULL, until_ms INTEGER NOT NULL)"];

impl KeyGuardObject {
    /// The key's record, and how many D1 queries it took: from memory while fresh, else from what
    /// `Apply` stored while that is fresh, else from D1 — one load at a time: requests that come
    /// while it runs wait for it (one query, however many arrive at a guard that just started).
    /// Unknown keys are not remembered.
    pub(super) async fn record(&self, key_hash: &str) -> Result<(Option<KeyRecord>, u32)> {
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
    pub(super) fn remembered(&self, now: i64) -> Result<Option<KeyRecord>> {
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

    /// The key hashed as `current` says (SPEC §26): written to D1 by its id and old hash (a
    /// request that re-hashed it first wins, and is read back), then held as a told change, merged
    /// with what the guard was told and D1 may not show yet (a revocation stays).
    pub(super) async fn rehash(&self, key: KeyRecord, current: &CurrentHash) -> Result<KeyRecord> {
        let store = D1Store::new(self.env.d1("DB")?, Rc::new(Meter::default()));
        let rehashed = store
            .rehash_key(&key.id, &key.key_hash, &current.key_hash, &current.pepper)
            .await
            .map_err(|e| rust_error(e.0))?;
        let stored = match rehashed {
            Some(rehashed) => {
                console_log!(
                    r#"{{"component":"key_guard","event":"key_rehashed","pepper":"{}"}}"#,
                    current.pepper
                );
                rehashed
            }
            // Changed meanwhile (another request re-hashed it): what D1 holds now.
            None => match store.key_by_hash(key.guard()).await.map_err(|e| rust_error(e.0))? {
                Some(loaded) => loaded,
                None => return Ok(key),
            },
        };
        self.apply(stored.clone(), None)?;
        Ok(self.remembered(now_ms())?.unwrap_or(stored))
    }

    /// What `Apply` stored, while it is fresh.
    fn applied_record(&self, now: i64) -> Result<Option<(KeyRecord, i64)>> {
        #[derive(Deserialize)]
        struct AppliedRow {
            record: String,
            until_ms: i64,
        }
        if !self.plays(Role::Record)? {
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
    pub(super) fn apply(&self, key: KeyRecord, undo: Option<i64>) -> Result<Done> {
        let now = now_ms();
        let held = match self.key.borrow().as_ref() {
            Some((held, until)) if *until > now => Some(held.clone()),
            _ => self.applied_record(now)?.map(|(held, _)| held),
        };
        let key = KeyRecord::told(held.as_ref(), key, undo);
        let until = now + RECORD_FRESH_MS;
        self.create_tables(Role::Record)?;
        self.sql.exec(
            "INSERT OR REPLACE INTO applied (id, record, until_ms) VALUES (1, ?, ?)",
            vec![serde_json::to_string(&key).map_err(rust_error)?.into(), until.into()],
        )?;
        self.epoch.set(self.epoch.get() + 1);
        self.key.replace(Some((key, until)));
        self.purge_by(until);
        Ok(Done {})
    }

    /// The stored change, once stale.
    pub(super) fn purge_applied(&self, now: i64) -> Result<Purged> {
        self.sql.exec("DELETE FROM applied WHERE until_ms <= ?", vec![now.into()])?;
        Ok(Purged { left_behind: false, next_due: self.earliest("SELECT MIN(until_ms) AS at FROM applied")? })
    }
}
