//! In-memory fakes of every port, for native tests and the fault simulations. Each fake routes
//! its calls through one shared [`Faults`], so a seeded schedule decides which calls fail, which
//! land but report a failure, and where the "isolate" stops (see [`crate::sim`]).
//!
//! The D1-backed ports share one [`FakeStore`] (the worker's `Ports::Store` is one type); each
//! concern keeps its tables in its own submodule.

use std::rc::Rc;

use crate::sim::Faults;
use gatehouse_core::ports::{JobLeases, Lease, PortError};

pub mod audit;
pub mod audit_heads;
mod delivery;
pub mod gateway;
pub mod guard;
mod guard_levels;
mod guard_storage;
pub mod ingest;
pub mod origin;
pub mod queue;
mod rotations;
pub mod usage;
mod wake;
pub mod webhooks;

/// What the platform answers a write over one of its limits (`core::platform`): the fakes refuse
/// it as production would, before any effect, so a simulation fails where production would.
pub fn over_limit(what: &str, bytes: usize, limit: usize) -> Result<(), PortError> {
    if bytes > limit {
        return Err(PortError(format!("{what}: {bytes} bytes is over the platform's limit of {limit}")));
    }
    Ok(())
}

/// The D1-backed ports over in-memory tables.
pub struct FakeStore {
    pub faults: Rc<Faults>,
    pub audit: audit::AuditTables,
    pub directory: gateway::DirectoryTables,
    pub resources: gateway::ResourceTables,
    pub events: ingest::EventTables,
    pub webhooks: std::cell::RefCell<webhooks::WebhookTables>,
    /// `job_leases`: job → (holder, until_ms).
    pub leases: std::cell::RefCell<std::collections::HashMap<String, (String, i64)>>,
    /// `object_wake`: where the wake of earlier versions' objects stands.
    pub wake: std::cell::RefCell<Option<gatehouse_core::ports::WakeState>>,
}

impl FakeStore {
    pub fn new(faults: Rc<Faults>) -> Self {
        FakeStore {
            faults,
            audit: Default::default(),
            directory: Default::default(),
            resources: Default::default(),
            events: Default::default(),
            webhooks: Default::default(),
            leases: Default::default(),
            wake: Default::default(),
        }
    }
}

impl JobLeases for FakeStore {
    async fn take_lease(&self, lease: &Lease<'_>) -> Result<bool, PortError> {
        self.faults
            .run("d1 take lease", || {
                let mut leases = self.leases.borrow_mut();
                let free = leases.get(lease.job).is_none_or(|(_, until)| *until <= lease.now_ms);
                if free {
                    leases.insert(lease.job.to_owned(), (lease.holder.to_owned(), lease.until_ms));
                }
                free
            })
            .await
    }

    async fn release_lease(&self, job: &str, holder: &str) -> Result<(), PortError> {
        self.faults
            .run("d1 release lease", || {
                if let Some(lease) = self.leases.borrow_mut().get_mut(job).filter(|(h, _)| h == holder) {
                    lease.1 = 0;
                }
            })
            .await
    }
}
