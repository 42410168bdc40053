//! The wake's state and lists (`ports::wake`) over the fake directory's tables.

use super::FakeStore;
use gatehouse_core::ports::{PortError, WakeEntry, WakeList, WakeState, WakeStore};

impl WakeStore for FakeStore {
    async fn wake_state(&self) -> Result<WakeState, PortError> {
        self.faults.run("d1 wake state", || self.wake.borrow().clone().unwrap_or_default()).await
    }

    async fn wake_next(&self, at: &WakeState, limit: usize) -> Result<Vec<WakeEntry>, PortError> {
        let (before, after) = (at.before, at.after.as_deref());
        let d = &self.directory;
        let entry = |id: &str, claim_shards: u32| WakeEntry { id: id.to_owned(), claim_shards };
        let mut entries: Vec<WakeEntry> = match at.list {
            None => Vec::new(),
            Some(WakeList::Keys) => {
                let keys = d.keys.borrow();
                keys.iter()
                    .filter(|k| k.created_at < before)
                    .map(|k| entry(&k.key_hash, k.claim_shards))
                    .collect()
            }
            Some(WakeList::Projects) => {
                let projects = d.projects.borrow();
                projects.iter().filter(|p| p.created_at < before).map(|p| entry(&p.id, 1)).collect()
            }
            Some(WakeList::Identities) => {
                let identities = d.identities.borrow();
                identities.iter().filter(|i| i.created_at < before).map(|i| entry(&i.id, 1)).collect()
            }
        };
        entries.retain(|e| after.is_none_or(|a| e.id.as_str() > a));
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        entries.truncate(limit);
        self.faults.run("d1 wake next", || entries).await
    }

    async fn save_wake(&self, state: &WakeState) -> Result<(), PortError> {
        self.faults.run("d1 save wake", || *self.wake.borrow_mut() = Some(state.clone())).await
    }
}
