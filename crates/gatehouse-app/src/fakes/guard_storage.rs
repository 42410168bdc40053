//! What the fake guard's objects keep, as the platform counts it (SPEC §23): each row in its
//! object, its bytes as SQLite would store it, purged by `core::retention`'s keep-until times, and
//! a write to an object past the platform's 10 GB refused as Durable Objects refuse it.

use std::collections::BTreeMap;

use super::guard::{FakeGuard, Kept};
use gatehouse_core::lease::{Drawn, Grant, Returned};
use gatehouse_core::platform::DO_MAX_OBJECT_BYTES;
use gatehouse_core::ports::PortError;
use gatehouse_core::retention::{isolate_lease_until, row_bytes};

fn json_len(value: serde_json::Result<String>) -> usize {
    value.map_or(0, |s| s.len())
}

impl FakeGuard {
    /// A key's guard keeps its lease to an isolate until its credits can no longer come back.
    pub(super) fn keep_isolate_lease(&self, key_hash: &str, grant: &Grant, drawn: Drawn) {
        let kept = Kept {
            row: (grant.clone(), drawn, Returned::default()),
            object: key_hash.to_owned(),
            keep_until: isolate_lease_until(grant.until_ms),
        };
        self.isolate_leases.borrow_mut().insert(grant.grant_id.clone(), kept);
    }

    /// Every row past its keep-until goes; a claim's body once the store shows it.
    pub(super) fn purge(&self) {
        let now = self.clock.get();
        self.grants.borrow_mut().retain(|_, g| g.keep_until > now);
        self.isolate_leases.borrow_mut().retain(|_, l| l.keep_until > now);
        let mut claims = self.claims.borrow_mut();
        claims.retain(|_, c| c.keep_until > now);
        for c in claims.values_mut().filter(|c| c.body_until <= now) {
            c.claim.response = None;
        }
    }

    /// A command to `object` when it holds 10 GB: every write fails, as on the platform.
    pub(super) fn refuse_if_full(&self, object: &str) -> Result<(), PortError> {
        let bytes = self.object_bytes().get(object).copied().unwrap_or_default();
        match bytes >= DO_MAX_OBJECT_BYTES {
            true => Err(PortError(format!("{object}: the object's storage is full ({bytes} bytes)"))),
            false => Ok(()),
        }
    }

    /// What each object keeps, in bytes: its counters, the grants it holds and made, its leases to
    /// isolates, its claims and their bodies.
    pub fn object_bytes(&self) -> BTreeMap<String, u64> {
        let mut bytes: BTreeMap<String, u64> = BTreeMap::new();
        let mut add = |object: &str, n: u64| *bytes.entry(object.to_owned()).or_default() += n;
        for (object, counters) in self.counters.borrow().iter() {
            add(object, row_bytes(&[json_len(serde_json::to_string(counters))]));
        }
        for ((holder, level), held) in self.held.borrow().iter() {
            add(holder, row_bytes(&[level.len(), json_len(serde_json::to_string(held))]));
        }
        for (id, g) in self.grants.borrow().iter() {
            let (grant, returned) = &g.row;
            let values = [
                id.len(),
                json_len(serde_json::to_string(grant)),
                json_len(serde_json::to_string(returned)),
                8,
            ];
            add(&g.object, row_bytes(&values));
        }
        for (id, l) in self.isolate_leases.borrow().iter() {
            let (grant, drawn, returned) = &l.row;
            let values = [
                id.len(),
                json_len(serde_json::to_string(grant)),
                json_len(serde_json::to_string(returned)),
                json_len(serde_json::to_string(drawn)),
                8,
            ];
            add(&l.object, row_bytes(&values));
        }
        for ((object, idempotency_key), c) in self.claims.borrow().iter() {
            let claim = [
                idempotency_key.len(),
                c.claim.fingerprint.len(),
                c.owner.len(),
                c.claim.operation.len(),
                48,
            ];
            add(object, row_bytes(&claim));
            if let Some(response) = &c.claim.response {
                add(
                    object,
                    row_bytes(&[idempotency_key.len(), json_len(serde_json::to_string(response)), 8]),
                );
            }
        }
        bytes
    }
}
