//! Projects' chain heads (SPEC §23) as their Durable Objects keep them: the head and the objects
//! bound to it, per project; every call goes through the schedule's [`Faults`] and takes effect
//! whole or not at all, as one command to one object does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::sim::Faults;
use gatehouse_core::audit_chain::{
    may_advance, may_bind, refused_binding, AdoptHead, AdvanceHead, Advanced, BindObjects, BoundObject,
    ChainHead, HeadState,
};
use gatehouse_core::ports::{AuditHeads, PortError};

/// One project's object: its head (`None`: never started) and its bound objects by key.
#[derive(Debug, Clone, Default)]
pub struct HeadObject {
    pub head: Option<ChainHead>,
    pub bound: BTreeMap<String, BoundObject>,
    /// Puts announced since the last confirmation, by key (any of them may have landed).
    pub writing: BTreeMap<String, Vec<BoundObject>>,
    /// Bindings refused, by key, until a digest lists the object.
    pub refused: BTreeMap<String, String>,
}

pub struct FakeAuditHeads {
    pub faults: Rc<Faults>,
    pub objects: RefCell<BTreeMap<String, HeadObject>>,
}

impl FakeAuditHeads {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeAuditHeads { faults, objects: RefCell::default() }
    }

    fn state(object: &HeadObject, objects: usize) -> HeadState {
        let mut pending: Vec<BoundObject> = object.bound.values().cloned().collect();
        pending.sort_by(|a, b| (a.first_ts, &a.key).cmp(&(b.first_ts, &b.key)));
        HeadState {
            head: object.head.clone(),
            pending: pending.len() as u64,
            oldest_pending_ts: pending.first().map(|o| o.first_ts),
            objects: pending.into_iter().take(objects).collect(),
            alerts: object.refused.values().cloned().collect(),
        }
    }
}

impl AuditHeads for FakeAuditHeads {
    async fn bind_objects(&self, project_id: &str, bind: &BindObjects) -> Result<Vec<String>, PortError> {
        self.faults
            .run("head.bind_objects", || {
                let mut all = self.objects.borrow_mut();
                let object = all.entry(project_id.to_owned()).or_default();
                let mut refused = Vec::new();
                for o in &bind.objects {
                    let bound = object.bound.get(&o.key);
                    let writing = object.writing.get(&o.key).map_or(&[][..], Vec::as_slice);
                    if !may_bind(bound, writing, o, bind.replaces.as_deref()) {
                        let alert = refused_binding(bound, o, bind.replaces.as_deref());
                        object.refused.insert(o.key.clone(), alert);
                        refused.push(o.key.clone());
                    } else if bind.announce {
                        let writing = object.writing.entry(o.key.clone()).or_default();
                        writing.retain(|w| w.sha256 != o.sha256);
                        writing.push(o.clone());
                    } else {
                        object.bound.insert(o.key.clone(), o.clone());
                    }
                }
                refused
            })
            .await
    }

    async fn confirm_objects(&self, project_id: &str, objects: &[BoundObject]) -> Result<(), PortError> {
        self.faults
            .run("head.confirm_objects", || {
                let mut all = self.objects.borrow_mut();
                let Some(object) = all.get_mut(project_id) else { return };
                for o in objects {
                    if object.writing.get(&o.key).is_some_and(|w| w.iter().any(|w| w.sha256 == o.sha256)) {
                        object.writing.remove(&o.key);
                        object.bound.insert(o.key.clone(), o.clone());
                    }
                }
            })
            .await
    }

    async fn read_head(&self, project_id: &str, objects: usize) -> Result<HeadState, PortError> {
        self.faults
            .run("head.read_head", || {
                self.objects.borrow().get(project_id).map(|o| Self::state(o, objects)).unwrap_or_default()
            })
            .await
    }

    async fn adopt_head(&self, project_id: &str, adopt: &AdoptHead) -> Result<HeadState, PortError> {
        self.faults
            .run("head.adopt_head", || {
                let mut all = self.objects.borrow_mut();
                let object = all.entry(project_id.to_owned()).or_default();
                if object.head.is_none() {
                    object.head = Some(adopt.head.clone());
                    for o in &adopt.objects {
                        object.bound.entry(o.key.clone()).or_insert_with(|| o.clone());
                    }
                }
                Self::state(object, usize::MAX)
            })
            .await
    }

    async fn advance_head(&self, project_id: &str, advance: &AdvanceHead) -> Result<Advanced, PortError> {
        self.faults
            .run("head.advance_head", || {
                let mut all = self.objects.borrow_mut();
                let object = all.entry(project_id.to_owned()).or_default();
                if !may_advance(object.head.as_ref(), advance) {
                    return Advanced::Conflict { head: object.head.clone() };
                }
                for key in advance.digests.iter().flat_map(|d| &d.listed) {
                    object.bound.remove(key);
                    object.writing.remove(key);
                    object.refused.remove(key);
                }
                object.head = advance.digests.last().cloned();
                Advanced::Moved
            })
            .await
    }
}

/// The guard's namespace answers for the heads too, as the `KEY_GUARD` class does.
impl AuditHeads for super::guard::FakeGuard {
    async fn bind_objects(&self, project_id: &str, bind: &BindObjects) -> Result<Vec<String>, PortError> {
        self.heads.bind_objects(project_id, bind).await
    }
    async fn confirm_objects(&self, project_id: &str, objects: &[BoundObject]) -> Result<(), PortError> {
        self.heads.confirm_objects(project_id, objects).await
    }
    async fn read_head(&self, project_id: &str, objects: usize) -> Result<HeadState, PortError> {
        self.heads.read_head(project_id, objects).await
    }
    async fn adopt_head(&self, project_id: &str, adopt: &AdoptHead) -> Result<HeadState, PortError> {
        self.heads.adopt_head(project_id, adopt).await
    }
    async fn advance_head(&self, project_id: &str, advance: &AdvanceHead) -> Result<Advanced, PortError> {
        self.heads.advance_head(project_id, advance).await
    }
}
