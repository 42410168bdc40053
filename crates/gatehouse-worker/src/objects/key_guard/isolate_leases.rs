//! A hot key's guard as the authority of the key's credits towards isolates (SPEC §20): each lease
//! it makes is kept (`isolate_leases`, with what it drew from the levels above) so that what comes
//! back of it counts once — until its unused credits can no longer come back
//! (`retention::isolate_lease_until`), then purged.

use serde::Deserialize;
use worker::Result;

use super::holder::OWED_GIVE_BACK_MS;
use super::{from_json, rust_error, tables::Role, KeyGuardObject, Purged};
use crate::adapters::clock::now_ms;
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::lease::{accept_give_back, take_back, Drawn, GiveBack, Grant, Returned};
use gatehouse_core::rate_limit::Counters;
use gatehouse_core::retention::isolate_lease_until;

/// How long after a lease to an isolate ends its unused credits may still be on their way back
/// (the isolate gives them back right after the end); a refusal waits that long at most.
pub(super) const LEASE_RETURN_MS: i64 = 250;

pub(super) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS isolate_leases (
       grant_id TEXT PRIMARY KEY, grant TEXT NOT NULL, returned TEXT NOT NULL, drawn TEXT NOT NULL,
       keep_until_ms INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS isolate_leases_by_expiry ON isolate_leases (keep_until_ms)",
];

impl KeyGuardObject {
    /// A lease to an isolate, kept so that what comes back of it counts once (with what it drew
    /// from the levels above), and counted as out until it ends.
    pub(super) fn keep_isolate_lease(&self, grant: &Grant, drawn: &Drawn) -> Result<()> {
        self.create_tables(Role::IsolateLeases)?;
        let keep_until = isolate_lease_until(grant.until_ms);
        self.sql.exec(
            "INSERT INTO isolate_leases (grant_id, grant, returned, drawn, keep_until_ms) VALUES (?, ?, '{}', ?, ?)",
            vec![
                grant.grant_id.clone().into(),
                serde_json::to_string(grant).map_err(rust_error)?.into(),
                serde_json::to_string(drawn).map_err(rust_error)?.into(),
                keep_until.into(),
            ],
        )?;
        self.leases_out.borrow_mut().push((grant.grant_id.clone(), grant.until_ms));
        self.purge_by(keep_until);
        Ok(())
    }

    /// Takes back what an isolate did not use of this key's leases ([`Self::take_back_leases`]),
    /// and wakes to give the levels what is owed to them.
    pub(super) async fn take_back_and_wake(
        &self,
        key: Option<&KeyRecord>,
        give_back: &[GiveBack],
    ) -> Result<()> {
        if self.take_back_leases(key, give_back)? {
            self.alarm.set_by(now_ms() + OWED_GIVE_BACK_MS).await?;
        }
        Ok(())
    }

    /// Until when isolates may hold credits of this key not given back yet (the latest end of a
    /// lease not given back), as this object instance knows.
    pub(super) fn leased_until(&self, now: i64) -> Option<i64> {
        let mut out = self.leases_out.borrow_mut();
        out.retain(|(_, until)| now < until + LEASE_RETURN_MS);
        out.iter().map(|(_, until)| *until).max()
    }

    /// Takes back what an isolate did not use of this key's leases (once each): to the key's
    /// windows and to the levels' grants they drew from (`key`'s levels; without its record,
    /// only the windows).
    fn take_back_leases(&self, key: Option<&KeyRecord>, give_back: &[GiveBack]) -> Result<bool> {
        if give_back.is_empty() || !self.plays(Role::IsolateLeases)? {
            return Ok(false);
        }
        let levels = match key {
            Some(key) => self.levels(key)?,
            None => Vec::new(),
        };
        let mut held = self.held(&levels)?;
        let mut counters = self.current_counters()?;
        let now = now_ms();
        let mut late = Vec::new();
        let mut owed = false;
        for back in give_back {
            let Some((grant, mut returned, drawn)) = self.isolate_lease(&back.grant_id)? else {
                continue;
            };
            let credits = accept_give_back(&mut Counters::default(), now, &grant, &mut returned, back);
            late.extend(take_back(&mut counters, now, &grant, &drawn, &levels, &mut held, credits));
            self.keep_isolate_returned(&back.grant_id, &returned)?;
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

    /// A lease this guard made to an isolate, while kept.
    fn isolate_lease(&self, grant_id: &str) -> Result<Option<(Grant, Returned, Drawn)>> {
        #[derive(Deserialize)]
        struct Row {
            grant: String,
            returned: String,
            drawn: String,
        }
        let row = self
            .sql
            .exec(
                "SELECT grant, returned, drawn FROM isolate_leases WHERE grant_id = ?",
                vec![grant_id.into()],
            )?
            .to_array::<Row>()?
            .pop();
        let Some(row) = row else { return Ok(None) };
        Ok(Some((from_json(&row.grant)?, from_json(&row.returned)?, from_json(&row.drawn)?)))
    }

    fn keep_isolate_returned(&self, grant_id: &str, returned: &Returned) -> Result<()> {
        self.sql.exec(
            "UPDATE isolate_leases SET returned = ? WHERE grant_id = ?",
            vec![serde_json::to_string(returned).map_err(rust_error)?.into(), grant_id.into()],
        )?;
        Ok(())
    }

    pub(super) fn purge_isolate_leases(&self, now: i64) -> Result<Purged> {
        self.purge_table("isolate_leases", now)
    }
}
