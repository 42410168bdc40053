//! A key's guard as the holder of its levels' credits (SPEC §20): per level above the key (its
//! identity, its project), the grant it holds of that level's authority and what it owes back of
//! grants it replaced (`level_leases`, one row per level, rewritten in place: nothing to purge).
//! What a grant did not use goes back when it ends (the alarm) or with the next exchange.

use serde::{Deserialize, Serialize};
use worker::{console_log, Result};

use super::{rust_error, tables::Role, KeyGuardObject};
use crate::adapters::clock::now_ms;
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::guard::protocol::project_authority;
use gatehouse_core::lease::{Exchange, GiveBack, Grant, Held, RecallGrant, Recalled};
use gatehouse_core::rate_limit::LimitSpec;

/// How soon credits owed to a level (a lease's part that came back after its grant was given back)
/// go back to the level's authority, when no exchange takes them first.
pub(super) const OWED_GIVE_BACK_MS: i64 = 1_000;

pub(super) const TABLES: &[&str] =
    &["CREATE TABLE IF NOT EXISTS level_leases (level TEXT PRIMARY KEY, state TEXT NOT NULL)"];

/// What a key's guard holds of one level above the key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct LevelLease {
    pub(super) held: Option<Held>,
    /// Credits of replaced grants not given back yet: sent with the next exchange.
    pub(super) owed: Vec<GiveBack>,
}

/// The grant of its project a key's guard holds, from `held` (by `levels`' order).
pub(super) fn project_held(
    key: &KeyRecord,
    levels: &[(String, LimitSpec)],
    held: &[Option<Held>],
) -> Option<Held> {
    let level = project_authority(&key.project_id);
    levels.iter().position(|(l, _)| *l == level).and_then(|i| held[i].clone())
}

impl KeyGuardObject {
    /// The alarm's part: gives back what grants that ended did not use, and what is owed of
    /// replaced ones, so a key that stopped being used does not keep credits another key of its
    /// project could use. Answers when grants still running end (the next wake).
    pub(super) async fn give_back_ended(&self, now: i64) -> Result<Option<i64>> {
        #[derive(Deserialize)]
        struct Row {
            level: String,
            state: String,
        }
        let rows = match self.plays(Role::Holder)? {
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
        Ok(next)
    }

    /// The levels above `key` and their limits: as its record says, unless the level's authority
    /// granted under other limits since (it holds them: SPEC §23), then those.
    pub(super) fn levels(&self, key: &KeyRecord) -> Result<Vec<(String, LimitSpec)>> {
        let learned = self.learned_limits.borrow();
        Ok(self
            .config()?
            .levels(key)
            .into_iter()
            .map(|(level, spec)| {
                let spec = learned.get(&level).copied().unwrap_or(spec);
                (level, spec)
            })
            .collect())
    }

    /// What this guard holds of each of `levels`.
    pub(super) fn held(&self, levels: &[(String, LimitSpec)]) -> Result<Vec<Option<Held>>> {
        levels.iter().map(|(level, _)| Ok(self.lease(level)?.held)).collect()
    }

    pub(super) fn keep_held(&self, levels: &[(String, LimitSpec)], held: Vec<Option<Held>>) -> Result<()> {
        for ((level, _), h) in levels.iter().zip(held) {
            let lease = self.lease(level)?;
            if lease.held != h {
                self.keep_lease(level, LevelLease { held: h, ..lease })?;
            }
        }
        Ok(())
    }

    /// Asks `level`'s authority for a grant of at least `cost` credits, giving back what is owed
    /// and what the grant held now did not use; the new grant replaces it.
    pub(super) async fn exchange_with(
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
            holder: self.own_name(),
        };
        // Credits on their way back are not used meanwhile.
        self.keep_lease(level, LevelLease { held: None, owed: give_back.clone() })?;
        let grant = self.ask_other(level, exchange).await?;
        // The authority's limits, which it granted under, are the level's from now on.
        if grant.limits != limits {
            self.learned_limits.borrow_mut().insert(level.to_owned(), grant.limits);
        }
        // Given back now (a retry of a give-back counts once); a grant that came meanwhile is owed.
        let mut lease = self.lease(level)?;
        lease.owed.retain(|o| !give_back.contains(o));
        lease.owed.extend(lease.held.as_ref().and_then(Held::give_back));
        lease.held = (grant.credits > 0).then(|| Held::from_grant(&grant));
        self.keep_lease(level, lease)?;
        if grant.credits > 0 {
            self.alarm.set_by(grant.until_ms).await?;
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
            holder: self.own_name(),
        };
        self.ask_other(level, exchange).await?;
        let mut lease = self.lease(level)?;
        lease.owed.retain(|o| !owed.contains(o));
        self.keep_lease(level, lease)
    }

    /// The level's authority asks a grant back (SPEC §23: it would refuse another key otherwise):
    /// what this guard did not use of it goes back in the answer, and the guard stops using it
    /// (its next request exchanges). Nothing when the grant is not held now (given back already,
    /// or an exchange of it in flight, which gives it back itself).
    pub(super) fn recall(&self, c: RecallGrant) -> Result<Recalled> {
        #[derive(Deserialize)]
        struct Row {
            level: String,
        }
        if !self.plays(Role::Holder)? {
            return Ok(Recalled::default());
        }
        let levels = self.sql.exec("SELECT level FROM level_leases", None)?.to_array::<Row>()?;
        for Row { level } in levels {
            let lease = self.lease(&level)?;
            if let Some(held) = lease.held.clone().filter(|h| h.grant_id == c.grant_id) {
                self.keep_lease(&level, LevelLease { held: None, ..lease })?;
                return Ok(Recalled { give_back: held.give_back().into_iter().collect() });
            }
        }
        Ok(Recalled::default())
    }

    /// This guard's object name (its key's guard name), once it knows its key.
    fn own_name(&self) -> Option<String> {
        self.key.borrow().as_ref().map(|(key, _)| key.guard().to_owned())
    }

    /// What this guard holds of `level`, read from storage once.
    pub(super) fn lease(&self, level: &str) -> Result<LevelLease> {
        if let Some(lease) = self.leases.borrow().get(level) {
            return Ok(lease.clone());
        }
        #[derive(Deserialize)]
        struct Row {
            state: String,
        }
        let stored = match self.plays(Role::Holder)? {
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

    pub(super) fn keep_lease(&self, level: &str, lease: LevelLease) -> Result<()> {
        self.create_tables(Role::Holder)?;
        self.sql.exec(
            "INSERT OR REPLACE INTO level_leases (level, state) VALUES (?, ?)",
            vec![level.into(), serde_json::to_string(&lease).map_err(rust_error)?.into()],
        )?;
        self.leases.borrow_mut().insert(level.to_owned(), lease);
        Ok(())
    }
}
