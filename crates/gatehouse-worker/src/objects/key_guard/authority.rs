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

use super::{from_json, rust_error, tables::Role, KeyGuardObject, Purged};
use crate::adapters::clock::now_ms;
use gatehouse_core::guard::protocol::{Done, SetLimits};
use gatehouse_core::lease::{
    accept_give_back, grant, parked as lease_parked, Exchange, GiveBack, Grant, RecallGrant, Returned,
    RECALLS_PER_REFUSAL,
};
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
    // `holder`: the key's guard that holds the grant (where it is asked back, SPEC §23).
    "CREATE TABLE IF NOT EXISTS lease_grants (
       grant_id TEXT PRIMARY KEY, grant TEXT NOT NULL, returned TEXT NOT NULL,
       keep_until_ms INTEGER NOT NULL, drawn TEXT, holder TEXT)",
    "CREATE INDEX IF NOT EXISTS lease_grants_by_expiry ON lease_grants (keep_until_ms)",
    // The level's limits as last told, the change's version, and until when they hold (one row,
    // rewritten in place).
    "CREATE TABLE IF NOT EXISTS level_limits (id INTEGER PRIMARY KEY CHECK (id = 1), limits TEXT NOT NULL,
       version INTEGER NOT NULL, until_ms INTEGER NOT NULL)",
];

impl KeyGuardObject {
    /// Gives back what the holder did not use, then grants (SPEC §20). About to refuse while
    /// other holders hold running grants of this level, it asks those back first (at most
    /// [`RECALLS_PER_REFUSAL`], the largest) and grants again with what came back (SPEC §23: a
    /// level refuses only when no credit is left anywhere). Each decision is synchronous, so
    /// exchanges are decided one after another; the same `grant_id` again answers the same grant.
    pub(super) async fn exchange(&self, c: Exchange) -> Result<Grant> {
        self.create_tables(Role::Authority)?;
        self.take_back(&c.give_back)?;
        let grant = self.grant_now(&c)?;
        if grant.credits > 0 || c.want == 0 {
            return Ok(grant);
        }
        let parked = self.parked(c.holder.as_deref())?;
        if parked.is_empty() {
            return Ok(grant);
        }
        let recalls = parked.into_iter().map(|(holder, grant_id)| async move {
            // A holder out of reach keeps its credits: the refusal stands for it.
            self.ask_other(&holder, RecallGrant { grant_id }).await.unwrap_or_default()
        });
        let recalled = futures_util::future::join_all(recalls).await;
        let back: Vec<GiveBack> = recalled.into_iter().flat_map(|r| r.give_back).collect();
        if back.is_empty() {
            return Ok(grant);
        }
        self.take_back(&back)?;
        self.grant_now(&c)
    }

    /// Takes back what holders did not use of grants this authority made (once each).
    fn take_back(&self, give_back: &[GiveBack]) -> Result<()> {
        if give_back.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let mut counters = self.current_counters()?;
        for back in give_back {
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
        self.keep_counters(counters)
    }

    /// The grant of `c` now: the one made under its id before, or a new one (kept, when it has
    /// credits).
    fn grant_now(&self, c: &Exchange) -> Result<Grant> {
        let now = now_ms();
        if let Some((grant, _)) = self.level_grant(&c.grant_id)? {
            return Ok(grant);
        }
        let counters = self.current_counters()?;
        let limits =
            self.level_limits()?.filter(|told| told.until_ms > now).map_or(c.limits, |told| told.limits);
        let (grant, next) = grant(counters, now, &limits, &c.grant_id, c.need, c.want);
        self.keep_counters(next)?;
        if let Some(keep_until) = grant_kept_until(&grant) {
            self.sql.exec(
                "INSERT INTO lease_grants (grant_id, grant, returned, keep_until_ms, holder) VALUES (?, ?, '{}', ?, ?)",
                vec![
                    c.grant_id.clone().into(),
                    serde_json::to_string(&grant).map_err(rust_error)?.into(),
                    keep_until.into(),
                    c.holder.clone().into(),
                ],
            )?;
            self.purge_by(keep_until);
        }
        Ok(grant)
    }

    /// Running grants of other holders than `asker` that may hold credits: (holder, grant id), the
    /// largest first, at most [`RECALLS_PER_REFUSAL`].
    fn parked(&self, asker: Option<&str>) -> Result<Vec<(String, String)>> {
        #[derive(Deserialize)]
        struct Row {
            grant: String,
            returned: String,
            holder: Option<String>,
        }
        let now = now_ms();
        let rows = self
            .sql
            .exec(
                "SELECT grant, returned, holder FROM lease_grants
                 WHERE holder IS NOT NULL AND drawn IS NULL AND keep_until_ms > ?",
                vec![now.into()],
            )?
            .to_array::<Row>()?;
        let mut parked = Vec::new();
        for row in rows {
            let (grant, returned): (Grant, Returned) = (from_json(&row.grant)?, from_json(&row.returned)?);
            if lease_parked(&grant, &returned, row.holder.as_deref(), asker, now) {
                parked.push((
                    grant.credits - returned.credits,
                    row.holder.unwrap_or_default(),
                    grant.grant_id,
                ));
            }
        }
        parked.sort_by_key(|(credits, _, _)| std::cmp::Reverse(*credits));
        Ok(parked.into_iter().take(RECALLS_PER_REFUSAL).map(|(_, holder, id)| (holder, id)).collect())
    }

    /// Holds `limits` as the level's from now on (for [`LIMITS_TOLD_MS`]), unless a later change
    /// was told already.
    pub(super) fn set_limits(&self, c: SetLimits) -> Result<Done> {
        let now = now_ms();
        if self.level_limits()?.is_some_and(|told| told.until_ms > now && told.version > c.version) {
            return Ok(Done {});
        }
        let told = ToldLimits { limits: c.limits, version: c.version, until_ms: now + LIMITS_TOLD_MS };
        self.create_tables(Role::Authority)?;
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
        let stored = match self.plays(Role::Authority)? {
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
