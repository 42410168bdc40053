//! How long each row a Durable Object keeps lives, and how it goes (SPEC §23).
//!
//! Every row is written for a promise and kept exactly as long as that promise can still be asked
//! of it: a lease to an isolate until its unused credits can no longer come back, an authority's
//! grant until its holder can no longer give back or retry, a claim until its idempotency TTL ends
//! and its response body only until the response store shows it. Purges delete at most
//! [`PURGE_BATCH_ROWS`] rows of a table per pass; a pass that found a full batch is due again at
//! once, so a busy object catches up over a few commands and never deletes a month of rows in one.
//! An object that receives no traffic purges from its alarm ([`next_alarm`]).
//!
//! The worker's guard roles and the fakes both take their keep-until times from here, and the soak
//! model (`scripts/simulate soak`) runs these rules over simulated months.

mod stored_rows;

pub use stored_rows::{ObjectFull, StoredRows};

use crate::lease::Grant;

/// At most this many rows of one table are deleted by one purge pass.
pub const PURGE_BATCH_ROWS: u32 = 1_000;
/// How often an object with rows to purge purges while it is called (an alarm does when it is not).
pub const PURGE_EVERY_MS: i64 = 10_000;
/// How long after a lease to an isolate ends its unused credits may still come back: the isolate
/// gives back right after the end, and retries with its next requests for a few seconds at most.
pub const ISOLATE_GIVE_BACK_MS: i64 = 60_000;
/// How long after an authority's grant ends a give-back of it or a retried exchange (the same
/// grant id) may still arrive. A give-back later than this finds no grant and counts nothing:
/// credits are lost (a lower admission), never doubled.
pub const GRANT_GIVE_BACK_MS: i64 = 600_000;
/// How long replays carry a completed claim's response inline: Workers KV usually shows a write
/// everywhere within this time.
pub const STORE_PROPAGATION_MS: i64 = 60_000;
/// How long a claim's response body stays in its object after the response store took it: KV's
/// propagation is "60 seconds or more" and a read that missed is cached, so the object's copy
/// stays ten times the usual propagation for a replay whose KV read misses.
pub const BODY_AFTER_STORE_MS: i64 = 600_000;

/// Until when a guard keeps the row of a lease it made to an isolate that runs until `until_ms`.
pub fn isolate_lease_until(until_ms: i64) -> i64 {
    until_ms + ISOLATE_GIVE_BACK_MS
}

/// Until when an authority keeps a grant it made, or `None`: a grant of no credits is not kept
/// (nothing of it can come back, and a retried exchange is decided afresh, again for nothing
/// more than the limit allows).
pub fn grant_kept_until(grant: &Grant) -> Option<i64> {
    (grant.credits > 0).then_some(grant.until_ms + GRANT_GIVE_BACK_MS)
}

/// When a claim's response body may leave its object: once the response store has it and has had
/// time to show it. Before the store confirms a write, the body stays for the claim's whole TTL.
pub fn body_until(stored_at_ms: i64) -> i64 {
    stored_at_ms + BODY_AFTER_STORE_MS
}

/// When an object whose oldest row to purge is due at `earliest_due` (if it has any) should wake
/// to purge, seen at `now_ms`: at that time, but not sooner than one purge interval from now.
pub fn next_alarm(now_ms: i64, earliest_due: Option<i64>) -> Option<i64> {
    earliest_due.map(|due| due.max(now_ms + PURGE_EVERY_MS))
}

/// Whether a purge is due: the interval passed since the last pass, or that pass left rows behind.
pub fn purge_due(now_ms: i64, last_pass_ms: i64, left_rows_behind: bool) -> bool {
    left_rows_behind || now_ms - last_pass_ms >= PURGE_EVERY_MS
}

/// The kinds of Durable Object Gatehouse keeps, each with the storage it may use (SPEC §23): far
/// below the platform's 10 GB, at the rates of SPEC §20, by the retention above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// A key's guard: its record, windows, the grants it holds and its leases to isolates.
    KeyGuard,
    /// A level's authority (`project:…`, `identity:…`): its counters and the grants it made.
    Authority,
    /// A claim shard of a key (and a key's guard for its own claims): idempotency claims.
    ClaimShard,
    /// A shard of a project's event ledger: event ids for 48 h.
    LedgerShard,
    /// An address guard (`ip:…`): failed authentications of one address or network.
    AddressGuard,
}

impl ObjectKind {
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::KeyGuard => "key_guard",
            ObjectKind::Authority => "authority",
            ObjectKind::ClaimShard => "claim_shard",
            ObjectKind::LedgerShard => "ledger_shard",
            ObjectKind::AddressGuard => "address_guard",
        }
    }

    /// The most one object of this kind may hold at the rates of SPEC §20 (the soak model fails
    /// above it): 1 GB, a tenth of the platform's limit.
    pub fn budget_bytes(self) -> u64 {
        1_000_000_000
    }
}

/// What SQLite stores for a row beyond its values (record header, rowid, the index entry on its
/// keep-until time), as the fakes and the model count it.
pub const ROW_OVERHEAD_BYTES: u64 = 48;

/// The bytes a row of these column values takes, as the fakes and the model count it.
pub fn row_bytes(values: &[usize]) -> u64 {
    ROW_OVERHEAD_BYTES + values.iter().map(|&v| v as u64).sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::grant as decide_grant;
    use crate::rate_limit::{Counters, LimitSpec};

    fn grant(credits: u32, until_ms: i64) -> Grant {
        let spec = LimitSpec { per_minute: Some(1_000), ..LimitSpec::default() };
        let (mut g, _) = decide_grant(Counters::default(), 0, &spec, "g", 1, 10);
        g.credits = credits;
        g.until_ms = until_ms;
        g
    }

    #[test]
    fn a_grant_is_kept_until_its_give_back_horizon_not_the_month_end() {
        let g = grant(10, 1_000_000);
        assert_eq!(grant_kept_until(&g), Some(1_000_000 + GRANT_GIVE_BACK_MS));
        assert!(grant_kept_until(&g).unwrap() - 1_000_000 < 3_600_000);
    }

    #[test]
    fn a_grant_of_no_credits_is_not_kept() {
        assert_eq!(grant_kept_until(&grant(0, 1_000)), None);
    }

    #[test]
    fn an_isolate_lease_row_ends_a_minute_after_the_lease() {
        assert_eq!(isolate_lease_until(5_000), 65_000);
    }

    #[test]
    fn the_alarm_waits_at_least_one_interval() {
        assert_eq!(next_alarm(0, None), None);
        assert_eq!(next_alarm(0, Some(1)), Some(PURGE_EVERY_MS));
        assert_eq!(next_alarm(0, Some(50_000)), Some(50_000));
    }

    #[test]
    fn a_pass_that_left_rows_is_due_again_at_once() {
        assert!(purge_due(1, 0, true));
        assert!(!purge_due(1, 0, false));
        assert!(purge_due(PURGE_EVERY_MS, 0, false));
    }
}
