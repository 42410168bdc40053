//! Fakes of the request pipeline's ports: the response store (which may miss, as Workers KV does
//! while a write propagates), the audit queue, and the directory and resource tables of the D1
//! store. The key guard's fake is [`super::guard`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use super::FakeStore;
use crate::sim::{Fault, Faults};
use gatehouse_core::api_key::{IdentityLimits, KeyRecord, KeyType};
use gatehouse_core::audit::AuditRow;
use gatehouse_core::idempotency::{Entry, KeptResponse};
use gatehouse_core::identity::Identity;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{
    AuditSink, Directory, IdentityChange, IdentityInsert, IdentityUpdate, KeyChanges, KeyUpdate, PlanChange,
    PortError, Resources, ResponseStore, Revocation, RunStart,
};
use gatehouse_core::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use gatehouse_core::retention::STORE_PROPAGATION_MS;
use gatehouse_core::webhook::OutgoingEvent;

/// The simulated wall clock (Unix ms), shared by the fakes and the driver.
pub type Clock = Rc<Cell<i64>>;

pub use super::guard::{FakeGuard, HeldClaim};

/// Workers KV: eventually consistent, so a read may miss a value written shortly before (within
/// [`STORE_PROPAGATION_MS`] of the write; never later).
pub struct FakeResponses {
    pub faults: Rc<Faults>,
    pub clock: Clock,
    pub entries: Rc<KvEntries>,
    /// The chance that a read misses an entry written less than a minute before.
    pub miss_rate: f64,
}

/// What KV holds, by key (`Entry::storage_key`), with when each was written.
#[derive(Default)]
pub struct KvEntries(pub RefCell<HashMap<String, (KeptResponse, i64)>>);

impl KvEntries {
    pub fn put(&self, entry: Entry<'_>, response: &KeptResponse, now_ms: i64) {
        self.0.borrow_mut().insert(entry.storage_key(), (response.clone(), now_ms));
    }

    /// Every response held, in no order.
    pub fn responses(&self) -> Vec<KeptResponse> {
        self.0.borrow().values().map(|(r, _)| r.clone()).collect()
    }
}

impl ResponseStore for FakeResponses {
    async fn put(&self, entry: Entry<'_>, response: &KeptResponse) -> Result<(), PortError> {
        use gatehouse_core::platform::{KV_MAX_KEY_BYTES, KV_MAX_VALUE_BYTES};
        super::over_limit("kv key", entry.storage_key().len(), KV_MAX_KEY_BYTES)?;
        let value = serde_json::to_string(response).map_or(usize::MAX, |s| s.len());
        super::over_limit("kv value", value, KV_MAX_VALUE_BYTES)?;
        self.faults.run("kv.put", || self.entries.put(entry, response, self.clock.get())).await
    }

    async fn get(&self, entry: Entry<'_>) -> Result<Option<KeptResponse>, PortError> {
        let miss = self.faults.chance(self.miss_rate);
        let now = self.clock.get();
        self.faults
            .run("kv.get", || {
                let entries = self.entries.0.borrow();
                let (response, at) = entries.get(&entry.storage_key())?;
                let propagating = now - at < STORE_PROPAGATION_MS;
                (!(miss && propagating)).then(|| response.clone())
            })
            .await
    }
}

/// The audit queue: the rows it took.
pub struct FakeAuditQueue {
    pub faults: Rc<Faults>,
    pub sent: RefCell<Vec<AuditRow>>,
}

impl AuditSink for FakeAuditQueue {
    /// A hung send never answers at all (the outbox's own deadline must end the wait).
    async fn record(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let what = "queue.send_audit";
        match self.faults.call(what).await {
            Fault::Hang => std::future::pending().await,
            Fault::FailBefore => Err(PortError(format!("{what}: injected failure"))),
            fault => {
                self.sent.borrow_mut().extend(rows.iter().cloned());
                match fault {
                    Fault::Ok => Ok(()),
                    _ => Err(PortError(format!("{what}: injected timeout after the effect"))),
                }
            }
        }
    }
}

#[derive(Default)]
pub struct DirectoryTables {
    pub projects: RefCell<Vec<FakeProject>>,
    /// Each key's `identity` holds its identity's limits as they are now, as D1's join reads
    /// them: every change of an identity is written to its keys here too.
    pub keys: Rc<RefCell<Vec<KeyRecord>>>,
    pub identities: RefCell<Vec<Identity>>,
}

pub struct FakeProject {
    pub id: String,
    pub name: String,
    pub plan: String,
    pub created_at: i64,
}

impl DirectoryTables {
    fn plan_of(&self, project_id: &str) -> Option<String> {
        self.projects.borrow().iter().find(|p| p.id == project_id).map(|p| p.plan.clone())
    }

    /// The key as D1 stores it: on the identity it names only while that identity exists in the
    /// key's project (the insert's sub-select), with that identity's limits now (the join).
    fn joined(&self, mut key: KeyRecord) -> KeyRecord {
        key.identity = key.identity.and_then(|named| {
            let identities = self.identities.borrow();
            let found = identities.iter().find(|i| i.id == named.id && i.project_id == key.project_id)?;
            Some(IdentityLimits { id: found.id.clone(), limits: found.limits.unwrap_or_default() })
        });
        key
    }

    /// Writes the identity's limits (or its deletion) into its keys; answers up to `tell` of them
    /// that are not revoked, newest first, as they are now, and how many it has (had).
    fn rewrite_keys(&self, identity: &Identity, deleted: bool, tell: usize) -> (Vec<KeyRecord>, u64) {
        let mut keys = self.keys.borrow_mut();
        let mut told = Vec::new();
        let mut count = 0;
        for key in keys.iter_mut().rev() {
            if key.identity.as_ref().is_none_or(|i| i.id != identity.id) {
                continue;
            }
            count += 1;
            key.identity = (!deleted).then(|| IdentityLimits {
                id: identity.id.clone(),
                limits: identity.limits.unwrap_or_default(),
            });
            if !key.is_revoked() && told.len() < tell {
                told.push(key.clone());
            }
        }
        (told, count)
    }
}

impl Directory for FakeStore {
    async fn create_project(&self, name: &str, owner_key: &KeyRecord) -> Result<KeyRecord, PortError> {
        let project_id = owner_key.project_id.as_str();
        self.faults
            .run("d1.create_project", || {
                let mut projects = self.directory.projects.borrow_mut();
                if !projects.iter().any(|p| p.id == project_id) {
                    let project = FakeProject {
                        id: project_id.to_owned(),
                        name: name.to_owned(),
                        plan: owner_key.plan.clone(),
                        created_at: owner_key.created_at,
                    };
                    projects.push(project);
                }
                let mut keys = self.directory.keys.borrow_mut();
                if let Some(found) = keys.iter().find(|k| k.id == owner_key.id) {
                    return found.clone();
                }
                keys.push(owner_key.clone());
                owner_key.clone()
            })
            .await
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.insert_key", || {
                let plan = self.directory.plan_of(&key.project_id)?;
                let mut keys = self.directory.keys.borrow_mut();
                if let Some(found) = keys.iter().find(|k| k.id == key.id || k.key_hash == key.key_hash) {
                    return (found.project_id == key.project_id && found.id == key.id).then(|| found.clone());
                }
                let stored = self.directory.joined(KeyRecord { plan, ..key.clone() });
                keys.push(stored.clone());
                Some(stored)
            })
            .await
    }

    async fn set_project_plan(&self, project_id: &str, plan: &str) -> Result<Option<PlanChange>, PortError> {
        self.faults
            .run("d1.set_project_plan", || {
                let mut projects = self.directory.projects.borrow_mut();
                let project = projects.iter_mut().find(|p| p.id == project_id)?;
                project.plan = plan.to_owned();
                let mut keys = self.directory.keys.borrow_mut();
                let keys = keys.iter_mut().filter(|k| k.project_id == project_id).map(|k| {
                    k.plan = plan.to_owned();
                    k.clone()
                });
                Some(PlanChange { name: project.name.clone(), keys: keys.collect() })
            })
            .await
    }

    async fn list_keys(&self, project_id: &str, _: &PageRequest) -> Result<Vec<KeyRecord>, PortError> {
        self.faults
            .run("d1.list_keys", || {
                let keys = self.directory.keys.borrow();
                keys.iter().rev().filter(|k| k.project_id == project_id).cloned().collect()
            })
            .await
    }

    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError> {
        self.faults
            .run("d1.update_key", || {
                let mut keys = self.directory.keys.borrow_mut();
                let others = keys.iter().filter(|k| k.is_other_lasting_owner(project_id, key_id)).count();
                match keys.iter_mut().find(|k| k.id == key_id && k.project_id == project_id) {
                    None => KeyUpdate::NotFound,
                    Some(k) if k.is_revoked() => KeyUpdate::Revoked,
                    Some(k)
                        if matches!(changes.expires_at, Some(Some(_)))
                            && k.key_type == KeyType::Owner
                            && k.rolled_at.is_none()
                            && others == 0 =>
                    {
                        KeyUpdate::LastOwnerKey
                    }
                    Some(k) => {
                        *k = self.directory.joined(changes.applied_to(k.clone()));
                        KeyUpdate::Updated(k.clone())
                    }
                }
            })
            .await
    }

    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError> {
        self.faults
            .run("d1.revoke_key", || {
                let mut keys = self.directory.keys.borrow_mut();
                let others = keys.iter().filter(|k| k.is_other_lasting_owner(project_id, key_id)).count();
                match keys.iter_mut().find(|k| k.id == key_id && k.project_id == project_id) {
                    None => Revocation::NotFound,
                    Some(k) if k.is_revoked() => Revocation::AlreadyRevoked(k.clone()),
                    Some(k) if k.key_type == KeyType::Owner && k.refusal(now_ms).is_none() && others == 0 => {
                        Revocation::LastOwnerKey
                    }
                    Some(k) => {
                        k.revoked_at = Some(now_ms);
                        Revocation::Revoked(k.clone())
                    }
                }
            })
            .await
    }

    async fn roll_key(
        &self,
        rolled: &KeyRecord,
        replacement: &KeyRecord,
        now_ms: i64,
    ) -> Result<Option<(KeyRecord, KeyRecord)>, PortError> {
        self.faults
            .run("d1.roll_key", || {
                let plan = self.directory.plan_of(&rolled.project_id)?;
                let mut keys = self.directory.keys.borrow_mut();
                let old = keys.iter_mut().find(|k| k.id == rolled.id && k.project_id == rolled.project_id)?;
                if old.is_revoked()
                    || old.rolled_at.is_some()
                    || old.expires_at.is_some_and(|at| at <= now_ms)
                {
                    return None;
                }
                old.rolled_at = Some(now_ms);
                old.rolled_to.clone_from(&rolled.rolled_to);
                old.expires_at = rolled.expires_at;
                let old = old.clone();
                let new = self.directory.joined(KeyRecord { plan, ..replacement.clone() });
                keys.push(new.clone());
                Some((old, new))
            })
            .await
    }

    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.find_key", || {
                let keys = self.directory.keys.borrow();
                keys.iter().find(|k| k.id == key_id && k.project_id == project_id).cloned()
            })
            .await
    }

    async fn lasting_owner_keys(&self, project_id: &str, except_key_id: &str) -> Result<u32, PortError> {
        self.faults
            .run("d1.lasting_owner_keys", || {
                let keys = self.directory.keys.borrow();
                keys.iter().filter(|k| k.is_other_lasting_owner(project_id, except_key_id)).count() as u32
            })
            .await
    }

    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        self.faults
            .run("d1.key_by_hash", || {
                self.directory
                    .keys
                    .borrow()
                    .iter()
                    .find(|k| k.key_hash == key_hash || k.guard_hash.as_deref() == Some(key_hash))
                    .cloned()
            })
            .await
    }

    async fn create_identity(&self, identity: &Identity) -> Result<IdentityInsert, PortError> {
        self.faults
            .run("d1.create_identity", || {
                if self.directory.plan_of(&identity.project_id).is_none() {
                    return IdentityInsert::NoProject;
                }
                let mut identities = self.directory.identities.borrow_mut();
                if let Some(found) = identities.iter().find(|i| i.id == identity.id) {
                    return IdentityInsert::Stored(found.clone());
                }
                let same = |i: &&Identity| {
                    i.project_id == identity.project_id && i.external_id == identity.external_id
                };
                if let Some(found) = identities.iter().find(same) {
                    return IdentityInsert::Duplicate(found.id.clone());
                }
                identities.push(identity.clone());
                IdentityInsert::Stored(identity.clone())
            })
            .await
    }

    async fn identity(&self, project_id: &str, identity_id: &str) -> Result<Option<Identity>, PortError> {
        self.faults
            .run("d1.identity", || {
                let identities = self.directory.identities.borrow();
                identities.iter().find(|i| i.id == identity_id && i.project_id == project_id).cloned()
            })
            .await
    }

    async fn list_identities(
        &self,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<Identity>, PortError> {
        self.faults
            .run("d1.list_identities", || {
                let mut rows: Vec<Identity> = self
                    .directory
                    .identities
                    .borrow()
                    .iter()
                    .filter(|i| i.project_id == project_id)
                    .filter(|i| page.after.as_ref().is_none_or(|c| (i.created_at, &i.id) < (c.ts, &c.id)))
                    .cloned()
                    .collect();
                rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
                rows.truncate(page.fetch_len());
                rows
            })
            .await
    }

    async fn update_identity(&self, update: IdentityUpdate<'_>) -> Result<Option<IdentityChange>, PortError> {
        let IdentityUpdate { project_id, identity_id, changes, now_ms, tell } = update;
        self.faults
            .run("d1.update_identity", || {
                let mut identities = self.directory.identities.borrow_mut();
                let found =
                    identities.iter_mut().find(|i| i.id == identity_id && i.project_id == project_id)?;
                *found = changes.applied_to(found.clone(), now_ms);
                let identity = found.clone();
                drop(identities);
                let (keys, key_count) = self.directory.rewrite_keys(&identity, false, tell);
                Some(IdentityChange { identity, keys, key_count })
            })
            .await
    }

    async fn delete_identity(
        &self,
        project_id: &str,
        identity_id: &str,
        tell: usize,
    ) -> Result<Option<IdentityChange>, PortError> {
        self.faults
            .run("d1.delete_identity", || {
                let mut identities = self.directory.identities.borrow_mut();
                let at = identities.iter().position(|i| i.id == identity_id && i.project_id == project_id)?;
                let identity = identities.remove(at);
                drop(identities);
                let (keys, key_count) = self.directory.rewrite_keys(&identity, true, tell);
                Some(IdentityChange { identity, keys, key_count })
            })
            .await
    }
}

#[derive(Default)]
pub struct ResourceTables {
    pub contacts: RefCell<Vec<Contact>>,
    pub messages: RefCell<Vec<Message>>,
    pub scenarios: RefCell<Vec<Scenario>>,
    pub runs: RefCell<Vec<ScenarioRun>>,
    pub markers: RefCell<Vec<ReleaseMarker>>,
}

/// Create-or-find by id, as the D1 statements do: answers the stored row's `created_at`.
fn create_or_find<T: Clone>(
    rows: &mut Vec<T>,
    row: &T,
    id: impl Fn(&T) -> &str,
    at: impl Fn(&T) -> i64,
) -> i64 {
    match rows.iter().find(|r| id(r) == id(row)) {
        Some(stored) => at(stored),
        None => {
            rows.push(row.clone());
            at(row)
        }
    }
}

impl Resources for FakeStore {
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        _: &[OutgoingEvent],
    ) -> Result<(Vec<i64>, Vec<String>), PortError> {
        self.faults
            .run("d1.create_contacts", || {
                let mut rows = self.resources.contacts.borrow_mut();
                let stored =
                    contacts.iter().map(|c| create_or_find(&mut rows, c, |c| &c.id, |c| c.created_at));
                (stored.collect(), Vec::new())
            })
            .await
    }

    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError> {
        self.faults
            .run("d1.contact", || {
                let contacts = self.resources.contacts.borrow();
                contacts.iter().find(|c| c.id == id && c.project_id == project_id).cloned()
            })
            .await
    }

    async fn list_contacts(&self, project_id: &str, _: &PageRequest) -> Result<Vec<Contact>, PortError> {
        self.faults
            .run("d1.list_contacts", || {
                let contacts = self.resources.contacts.borrow();
                contacts.iter().rev().filter(|c| c.project_id == project_id).cloned().collect()
            })
            .await
    }

    async fn create_messages(
        &self,
        messages: &[Message],
        _: &[OutgoingEvent],
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError> {
        self.faults
            .run("d1.create_messages", || {
                let contacts = self.resources.contacts.borrow();
                let mut rows = self.resources.messages.borrow_mut();
                let stored = messages.iter().map(|m| {
                    let known = contacts.iter().any(|c| c.id == m.contact_id && c.project_id == m.project_id);
                    known.then(|| create_or_find(&mut rows, m, |m| &m.id, |m| m.created_at))
                });
                (stored.collect(), Vec::new())
            })
            .await
    }

    async fn create_scenario(&self, scenario: &Scenario) -> Result<i64, PortError> {
        self.faults
            .run("d1.create_scenario", || {
                create_or_find(
                    &mut self.resources.scenarios.borrow_mut(),
                    scenario,
                    |s| &s.id,
                    |s| s.created_at,
                )
            })
            .await
    }

    async fn start_run(
        &self,
        run: &ScenarioRun,
        _: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError> {
        self.faults
            .run("d1.start_run", || {
                create_or_find(&mut self.resources.runs.borrow_mut(), run, |r| &r.id, |r| r.created_at);
                (RunStart::Started, Vec::new())
            })
            .await
    }

    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        _: &[OutgoingEvent],
    ) -> Result<(i64, Vec<String>), PortError> {
        self.faults
            .run("d1.create_release_marker", || {
                let mut rows = self.resources.markers.borrow_mut();
                (create_or_find(&mut rows, marker, |m| &m.id, |m| m.created_at), Vec::new())
            })
            .await
    }
}
