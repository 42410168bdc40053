//! What a rotation has not reached yet (`ports::Rotations`, SPEC §26) over the fake directory's
//! and webhooks' tables, as `adapters/d1/rotations.rs` does it in D1.

use super::FakeStore;
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{PortError, Rotations, SealedSecret};

/// The re-hash of key `id` from `from` to `to` in `keys` (the fake guard makes it too): its guard
/// keeps its name; `None` when its hash is not `from`.
pub(super) fn rehash(
    keys: &mut [KeyRecord],
    id: &str,
    from: &str,
    to: &str,
    pepper: &str,
) -> Option<KeyRecord> {
    let key = keys.iter_mut().find(|k| k.id == id && k.key_hash == from)?;
    if key.key_hash != to {
        key.guard_hash = Some(key.guard().to_owned());
        key.key_hash = to.to_owned();
    }
    key.pepper = Some(pepper.to_owned());
    Some(key.clone())
}

impl Rotations for FakeStore {
    async fn rehash_key(
        &self,
        id: &str,
        from: &str,
        to: &str,
        pepper: &str,
    ) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.rehash_key", || rehash(&mut self.directory.keys.borrow_mut(), id, from, to, pepper))
            .await
    }

    async fn keys_off_pepper(
        &self,
        pepper: &str,
        now_ms: i64,
        page: &PageRequest,
    ) -> Result<(u64, Vec<KeyRecord>), PortError> {
        self.faults
            .run("d1.keys_off_pepper", || {
                let keys = self.directory.keys.borrow();
                let mut off: Vec<KeyRecord> = keys
                    .iter()
                    .filter(|k| k.pepper.as_deref() != Some(pepper) && k.revoked_at.is_none())
                    .filter(|k| k.expires_at.is_none_or(|at| at > now_ms))
                    .cloned()
                    .collect();
                off.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
                let count = off.len() as u64;
                let after = |k: &KeyRecord| match &page.after {
                    None => true,
                    Some(Cursor { ts, id }) => (k.created_at, &k.id) < (*ts, id),
                };
                off.retain(after);
                off.truncate(page.fetch_len());
                (count, off)
            })
            .await
    }

    async fn secrets_off_key(
        &self,
        current_prefix: &str,
        page: &PageRequest,
    ) -> Result<(u64, Vec<SealedSecret>), PortError> {
        self.faults
            .run("d1.secrets_off_key", || {
                let tables = self.webhooks.borrow();
                let mut off: Vec<SealedSecret> = tables
                    .webhooks
                    .values()
                    .filter(|w| !w.secret.as_column().starts_with(current_prefix))
                    .map(|w| SealedSecret {
                        id: w.id.clone(),
                        project_id: w.project_id.clone(),
                        url: w.url.clone(),
                        status: w.status.clone(),
                        created_at: w.created_at,
                        secret: w.secret.clone(),
                    })
                    .collect();
                off.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
                let count = off.len() as u64;
                if let Some(Cursor { ts, id }) = &page.after {
                    off.retain(|w| (w.created_at, &w.id) < (*ts, id));
                }
                off.truncate(page.fetch_len());
                (count, off)
            })
            .await
    }
}
