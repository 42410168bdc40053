//! A claim shard (SPEC §5, §20): the idempotency claims of a key, in the key's guard or in one of
//! its claim objects. A claim row (`idempotency_claims`: fingerprint, status, operation) is kept
//! until the idempotency TTL ends. A completed claim's sealed response body (`claim_bodies`) is
//! written by this object to the response store (Workers KV) and kept here only until the store
//! shows it everywhere (`retention::body_until`); if the store refused it, until the TTL ends
//! (SPEC §23). That shorter keeping is written with the object's next command or by its alarm a
//! purge interval later, whichever comes first (one commit less per claim). Rows of an older
//! version kept the body in the claim row for the TTL.

use std::rc::Rc;
use std::time::Duration;

use serde::Deserialize;
use worker::{console_log, Delay, Result};

use super::{rust_error, tables::Role, KeyGuardObject, Purged};
use crate::adapters::clock::now_ms;
use crate::adapters::kv::{KvResponses, BINDING as RESPONSES};
use gatehouse_core::guard::protocol::{CompleteClaim, Completed};
use gatehouse_core::idempotency::{decide_claim, Claim, ClaimDecision, Entry, KeptResponse, LEASE_MS};
use gatehouse_core::ports::{ClaimRequest, Meter, ResponseStore};
use gatehouse_core::retention::body_until;

/// How long a request with the same key as a running one waits for it to finish before it is
/// answered 409 `IDEMPOTENCY_KEY_IN_USE`.
const IN_USE_WAIT_MS: u64 = 2_000;
const IN_USE_POLL_MS: u64 = 20;
/// How long replays carry the response inline after the claim completed (the response store may
/// not show it yet meanwhile).
const INLINE_MS: i64 = gatehouse_core::retention::STORE_PROPAGATION_MS;
/// At most this many stored bodies wait for the object's next command or alarm to write down
/// their shorter keeping.
const STORED_BODIES_WAITING: usize = 64;
/// When no command comes first, the alarm writes them down at most this long after the last one
/// waited: well before the runtime evicts an idle object (10 s after its last event), which loses
/// them, and seldom enough that a busy object's alarm adds little (one run in 3 s at most).
const STORED_BODIES_WAIT_MS: i64 = 3_000;

pub(super) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS idempotency_claims (
       idempotency_key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, owner TEXT NOT NULL,
       operation TEXT NOT NULL, until_ms INTEGER NOT NULL, completed INTEGER NOT NULL,
       released INTEGER NOT NULL, keep_until_ms INTEGER NOT NULL,
       response TEXT, response_until_ms INTEGER)",
    "CREATE INDEX IF NOT EXISTS idempotency_claims_by_expiry ON idempotency_claims (keep_until_ms)",
    "CREATE TABLE IF NOT EXISTS claim_bodies (
       idempotency_key TEXT PRIMARY KEY, response TEXT NOT NULL, keep_until_ms INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS claim_bodies_by_expiry ON claim_bodies (keep_until_ms)",
];

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

impl KeyGuardObject {
    /// Takes the claim, or waits a little while the same request is still running elsewhere, so
    /// a client that retries right after its first attempt gets the replay instead of a 409.
    pub(super) async fn claim_waiting(&self, request: &ClaimRequest) -> Result<ClaimDecision> {
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
        // An object without the claims' tables has no claim yet; it creates them when it takes this one.
        let existing =
            if self.plays(Role::Claims)? { self.held_claim(&request.idempotency_key, now)? } else { None };
        let decision = decide_claim(existing.as_ref(), &request.fingerprint, &request.request_id, now);
        if let ClaimDecision::Execute { operation } = &decision {
            let ttl_ms = self.config()?.idempotency_ttl_seconds as i64 * 1000;
            self.create_tables(Role::Claims)?;
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
            self.purge_by(now + ttl_ms);
        }
        Ok(decision)
    }

    /// The claim kept for `idempotency_key`, unless it is past its keeping; with its response
    /// while replays carry it inline.
    fn held_claim(&self, idempotency_key: &str, now: i64) -> Result<Option<Claim>> {
        self.sql
            .exec(
                "SELECT c.fingerprint, c.operation, c.until_ms, c.completed, c.released,
                        CASE WHEN c.response_until_ms > ?1 THEN COALESCE(b.response, c.response) END AS response
                 FROM idempotency_claims c
                 LEFT JOIN claim_bodies b ON b.idempotency_key = c.idempotency_key AND b.keep_until_ms > ?1
                 WHERE c.idempotency_key = ?2 AND c.keep_until_ms > ?1",
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
    pub(super) fn release(&self, claim: &ClaimRequest) -> Result<()> {
        if self.plays(Role::Claims)? {
            self.sql.exec(
                "UPDATE idempotency_claims SET released = 1
                 WHERE idempotency_key = ? AND owner = ? AND completed = 0",
                vec![claim.idempotency_key.clone().into(), claim.request_id.clone().into()],
            )?;
        }
        Ok(())
    }

    /// Marks the claim completed until the TTL ends, keeps its response body and writes it to the
    /// response store (when told under which key): once the store took it, the body stays only
    /// until the store shows it everywhere. Replays carry the response inline meanwhile; after
    /// that they read the store, and ask [`Self::held_response`] when it misses. A repeated
    /// notice changes nothing (the caller then writes the store itself).
    pub(super) async fn complete(&self, c: CompleteClaim) -> Result<Completed> {
        let CompleteClaim { claim, response, api_key_id } = c;
        if !self.plays(Role::Claims)? {
            // No claim was ever taken here (or its object's storage was lost).
            return Ok(Completed { completed: false, stored: false });
        }
        let now = now_ms();
        let ttl_seconds = self.config()?.idempotency_ttl_seconds;
        let until = now + ttl_seconds as i64 * 1000;
        let updated = self.sql.exec(
            "UPDATE idempotency_claims
             SET completed = 1, until_ms = ?, keep_until_ms = ?, response = NULL, response_until_ms = ?
             WHERE idempotency_key = ? AND owner = ? AND completed = 0 AND released = 0",
            vec![
                until.into(),
                until.into(),
                (now + INLINE_MS).into(),
                claim.idempotency_key.clone().into(),
                claim.request_id.clone().into(),
            ],
        )?;
        if updated.rows_written() == 0 {
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
            return Ok(Completed {
                completed: mine.first().is_some_and(|m| m.completed == 1),
                stored: false,
            });
        }
        let body = serde_json::to_string(&response).map_err(rust_error)?;
        self.sql.exec(
            "INSERT OR REPLACE INTO claim_bodies (idempotency_key, response, keep_until_ms) VALUES (?, ?, ?)",
            vec![claim.idempotency_key.clone().into(), body.into(), until.into()],
        )?;
        self.purge_by(until);
        let Some(api_key_id) = api_key_id else {
            return Ok(Completed { completed: true, stored: false });
        };
        let store = KvResponses::new(self.env.kv(RESPONSES)?, ttl_seconds, Rc::new(Meter::default()));
        let entry = Entry { api_key_id: &api_key_id, idempotency_key: &claim.idempotency_key };
        if let Err(e) = store.put(entry, &response).await {
            console_log!(r#"{{"component":"key_guard","event":"response_store_failed","error":{:?}}}"#, e.0);
            return Ok(Completed { completed: true, stored: false });
        }
        // The shorter keeping is written with the next command, whose own writes commit with it
        // (one commit less per claim), or by the alarm 3 s from now, whichever comes first.
        // An object evicted before either keeps those bodies until the TTL.
        let now = now_ms();
        let waiting = {
            let mut stored = self.stored_bodies.borrow_mut();
            stored.push((claim.idempotency_key, body_until(now)));
            stored.len()
        };
        if waiting >= STORED_BODIES_WAITING {
            self.keep_stored_bodies()?;
        } else {
            self.alarm.set_by(now + STORED_BODIES_WAIT_MS).await?;
        }
        Ok(Completed { completed: true, stored: true })
    }

    /// Writes down the shorter keeping of the bodies the response store took since the last
    /// command (`BODY_AFTER_STORE_MS` after each was stored).
    pub(super) fn keep_stored_bodies(&self) -> Result<()> {
        let stored = std::mem::take(&mut *self.stored_bodies.borrow_mut());
        for (idempotency_key, until) in stored {
            self.sql.exec(
                "UPDATE claim_bodies SET keep_until_ms = MIN(keep_until_ms, ?) WHERE idempotency_key = ?",
                vec![until.into(), idempotency_key.into()],
            )?;
            self.purge_by(until);
        }
        Ok(())
    }

    /// The response body of a completed claim, while this object keeps it.
    pub(super) fn held_response(&self, idempotency_key: &str) -> Result<Option<KeptResponse>> {
        #[derive(Deserialize)]
        struct Held {
            response: Option<String>,
        }
        if !self.plays(Role::Claims)? {
            return Ok(None);
        }
        let now = now_ms();
        let rows = self
            .sql
            .exec(
                "SELECT COALESCE(b.response, c.response) AS response
                 FROM idempotency_claims c
                 LEFT JOIN claim_bodies b ON b.idempotency_key = c.idempotency_key AND b.keep_until_ms > ?1
                 WHERE c.idempotency_key = ?2 AND c.completed = 1 AND c.until_ms > ?1",
                vec![now.into(), idempotency_key.into()],
            )?
            .to_array::<Held>()?;
        rows.into_iter()
            .find_map(|row| row.response)
            .map(|r| serde_json::from_str(&r).map_err(rust_error))
            .transpose()
    }

    /// Claims past their TTL, and bodies the response store shows (or past the TTL).
    pub(super) fn purge_claims(&self, now: i64) -> Result<Purged> {
        let claims = self.purge_table("idempotency_claims", now)?;
        let bodies = self.purge_table("claim_bodies", now)?;
        Ok(Purged {
            left_behind: claims.left_behind || bodies.left_behind,
            next_due: [claims.next_due, bodies.next_due].into_iter().flatten().min(),
        })
    }
}
