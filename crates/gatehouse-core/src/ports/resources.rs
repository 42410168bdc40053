//! The resource API's rows in D1 (SPEC §6, §8).

use super::PortError;
use crate::page::PageRequest;
use crate::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use crate::webhook::OutgoingEvent;

/// The resource API's rows in D1 (SPEC §6, §8). Each create is one D1 batch (one transaction) that
/// also writes a delivery for every active subscription matching each emitted event, so a resource
/// and its deliveries never diverge. Creates answer the ids of the deliveries written.
///
/// Creates are **create-or-find by id**: a row whose id exists already is left as it is and
/// answered with its stored `created_at`, and its event writes no second delivery. An idempotent
/// request derives its ids from its operation (`app::Ids`), so executing it again after a failure
/// whose write landed finds its rows instead of writing them twice.
pub trait Resources {
    /// Inserts the contacts: all or, on failure, none. Answers each one's stored `created_at`.
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<i64>, Vec<String>), PortError>;
    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError>;
    async fn list_contacts(&self, project_id: &str, page: &PageRequest) -> Result<Vec<Contact>, PortError>;
    /// Inserts each message whose contact exists in its project; answers per message its stored
    /// `created_at`, or `None` when its contact does not exist.
    async fn create_messages(
        &self,
        messages: &[Message],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError>;
    /// Answers the stored `created_at`.
    async fn create_scenario(&self, scenario: &Scenario) -> Result<i64, PortError>;
    async fn start_run(
        &self,
        run: &ScenarioRun,
        events: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError>;
    /// Answers the stored `created_at`.
    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        events: &[OutgoingEvent],
    ) -> Result<(i64, Vec<String>), PortError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStart {
    Started,
    UnknownScenario,
    UnknownContact,
}
