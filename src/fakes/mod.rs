//! In-memory fakes of every port, for native tests and the fault simulations. Each fake routes
//! its calls through one shared [`Faults`], so a seeded schedule decides which calls fail, which
//! land but report a failure, and where the "isolate" stops (see [`crate::sim`]).
//!
//! The D1-backed ports share one [`FakeStore`] (the worker's `Ports::Store` is one type); each
//! concern keeps its tables in its own submodule.

use std::rc::Rc;

use crate::sim::Faults;

pub mod audit;
pub mod gateway;
pub mod ingest;
pub mod origin;
pub mod queue;
pub mod webhooks;

/// The D1-backed ports over in-memory tables.
pub struct FakeStore {
    pub faults: Rc<Faults>,
    pub audit: audit::AuditTables,
    pub directory: gateway::DirectoryTables,
    pub resources: gateway::ResourceTables,
    pub events: ingest::EventTables,
    pub webhooks: std::cell::RefCell<webhooks::WebhookTables>,
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
        }
    }
}
