//! A level's authority (`project:…`, `identity:…`, SPEC §20): it counts the level's windows and
//! quota in its counters ([`super::admission`]) and grants credits of them to keys' guards. Each
//! grant of credits is kept (`lease_grants`) so that a retried exchange gets the same answer and a
//! credit given back twice counts once — until its holder can no longer give back or retry
//! (`retention::grant_kept_until`), then purged. A grant of no credits is not kept.
//!
//! The level's limits are the authority's own once told (`SetLimits`, first when a plan or an
//! identity changes: SPEC §23): it grants under them, not under the limits a holder whose record
//! is older still sends, and the holder learns them from the grant — for [`LIMITS_TOLD_MS`], the
//! longest a holder uses a record before reading D1 again. After that every holder holds the
//! limits D1 has and the authority grants under theirs again (so a `PLANS` edit, or a change whose
//! D1 write failed after the authority was told, holds for 10 minutes at most). Until told (an
//! object of an older version), it grants under the holder's.

use serde::Deserialize;
use worker::Result;

use super::{from_json, rust_error, KeyGuardObject, Purged};
use crate::adapters::clock::now_ms;
use gatehouse_core::guard::protocol::{Done, SetLimits};
use gatehouse_core::lease::{accept_give_back, grant, Exchange, Grant, Returned};
use gatehouse_core::rate_limit::LimitSpec;
use gatehouse_core::retention::grant_kept_until;

/// How long told limits hold: the longest a key's guard uses its record before reading D1 again.
const LIMITS_TOLD_MS: i64 = 600_000;

/// A level's limits as its authority was told them.
#[derive(Debug, Clone, Copy)]
pub(super) struct ToldLimits {
    limits: LimitSpec,
    version: i64,
    until_ms: i64,
}

pub(super) const TABLES: &[&str] = &[
    // `drawn` is NULL for a level's grant; rows of an older version with `drawn` set were a key's
    // leases to isolates (now `isolate_leases`) and are purged by their `keep_until_ms`.
    "CREATE TABLE IF NOT EXISTS lease_grants (
       grant_id TEXT PRIMARY KEY, grant TEXT NOT NULL, returned TEXT NOT NULL,
       keep_until_ms INTEGER NOT NULL, drawn TEXT)",
    "CREATE INDEX IF NOT EXISTS lease_grants_by_expiry ON lease_grants (keep_until_ms)",
    // The level's limits as last told, the change's version, and until when they hold (one row,
    // rewritten in place).
    "CREATE TABLE IF NOT EXISTS level_limits (id INTEGER PRIMARY KEY CHECK (id = 1), limits TEXT NOT NULL,
       version INTEGER NOT NULL, until_ms INTEGER NOT NULL)",
];

impl KeyGuardObject {
    /// Gives back what the holder did not use, then grants (SPEC §20). Synchronous: exchanges are
    /// decided one after another. The same `grant_id` again answers the same grant.
    pub(super) fn exchange(&self, c: Exchange) -> Result<Grant> {
        let now = now_ms();
        self.create_tables()?;
        let mut counters = self.current_counters()?;
        for back in &c.give_back {
            if let Some((grant, mut returned)) = self.level_grant(&back.grant_id)? {
                accept_give_back(&mut counters, now, &grant, &mut returned, back);
                self.sql.exec(
                    "UPDATE lease_grants SET returned = ? WHERE grant_id = ?",
                    vec![
                        serde_json::to_string(&returned).map_err(rust_error)?.into(),
                        back.grant_id.clone().into(),
                    ],
                )?;
            }
        }
        if let Some((grant, _)) = self.level_grant(&c.grant_id)? {
            self.keep_counters(counters)?;
            return Ok(grant);
        }
        let limits =
            self.level_limits()?.filter(|told| told.until_ms > now).map_or(c.limits, |told| told.limits);
        let (grant, next) = grant(counters, now, &limits, &c.grant_id, c.need, c.want);
        self.keep_counters(next)?;
        if let Some(keep_until) = grant_kept_until(&grant) {
            self.sql.exec(
                "INSERT INTO lease_grants (grant_id, grant, returned, keep_until_ms) VALUES (?, ?, '{}', ?)",
                vec![
                    c.grant_id.into(),
                    serde_json::to_string(&grant).map_err(rust_error)?.into(),
                    keep_until.into(),
                ],
            )?;
            self.purge_by(keep_until);
        }
        Ok(grant)
    }

    /// Holds `limits` as the level's from now on (for [`LIMITS_TOLD_MS`]), unless a later change
    /// was told already.
    pub(super) fn set_limits(&self, c: SetLimits) -> Result<Done> {
        let now = now_ms();
        if self.level_limits()?.is_some_and(|told| told.until_ms > now && told.version > c.version) {
            return Ok(Done {});
        }
        let told = ToldLimits { limits: c.limits, version: c.version, until_ms: now + LIMITS_TOLD_MS };
        self.create_tables()?;
        self.sql.exec(
            "INSERT OR REPLACE INTO level_limits (id, limits, version, until_ms) VALUES (1, ?, ?, ?)",
            vec![
                serde_json::to_string(&told.limits).map_err(rust_error)?.into(),
                told.version.into(),
                told.until_ms.into(),
            ],
        )?;
        self.authority_limits.replace(Some(Some(told)));
        Ok(Done {})
    }

    /// The level's limits as told (read from storage once).
    fn level_limits(&self) -> Result<Option<ToldLimits>> {
        if let Some(known) = *self.authority_limits.borrow() {
            return Ok(known);
        }
        #[derive(Deserialize)]
        struct Row {
            limits: String,
            version: i64,
            until_ms: i64,
        }
        let stored = match self.has_tables()? {
            true => self
                .sql
                .exec("SELECT limits, version, until_ms FROM level_limits", None)?
                .to_array::<Row>()?
                .pop(),
            false => None,
        };
        let known = match stored {
            Some(row) => Some(ToldLimits {
                limits: from_json(&row.limits)?,
                version: row.version,
                until_ms: row.until_ms,
            }),
            None => None,
        };
        self.authority_limits.replace(Some(known));
        Ok(known)
    }

    /// A grant this authority made, while kept.
    fn level_grant(&self, grant_id: &str) -> Result<Option<(Grant, Returned)>> {
        #[derive(Deserialize)]
        struct Row {
            grant: String,
            returned: String,
        }
        let row = self
            .sql
            .exec(
                "SELECT grant, returned FROM lease_grants WHERE grant_id = ? AND drawn IS NULL",
                vec![grant_id.into()],
            )?
            .to_array::<Row>()?
            .pop();
        let Some(row) = row else { return Ok(None) };
        Ok(Some((from_json(&row.grant)?, from_json(&row.returned)?)))
    }

    pub(super) fn purge_grants(&self, now: i64) -> Result<Purged> {
        self.purge_table("lease_grants", now)
    }
}
