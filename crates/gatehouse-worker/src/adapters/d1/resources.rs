//! The resource API's rows (the [`Resources`] port), each create in one batch with the webhook
//! deliveries of its events.

use worker::D1PreparedStatement;

use super::webhook_rows::fan_out;
use super::{int, opt_text, text, D1Store};
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{PortError, Resources, RunStart};
use gatehouse_core::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use gatehouse_core::webhook::OutgoingEvent;

const CONTACT_COLUMNS: &str = "id, project_id, name, phone, email, external_id, created_at";

/// Create-or-find: a row whose id exists is left as it is (the no-op update makes `RETURNING`
/// answer it too), so a second execution of one operation reads its first `created_at`.
const FIND: &str = " ON CONFLICT (id) DO UPDATE SET id = excluded.id RETURNING created_at";

impl D1Store {
    /// One delivery per active subscription of the event's project that wants its type, written
    /// only if the row the event is about exists (so a failed item emits nothing), and once per
    /// subscription and event (a found row's event, executed again, writes none).
    fn delivery_statements(&self, events: &[OutgoingEvent]) -> Result<Vec<D1PreparedStatement>, PortError> {
        events
            .iter()
            .map(|e| {
                let subject_table = match e.event_type {
                    "contact.created" => "contacts",
                    "message.created" => "messages",
                    "scenario.run.started" => "scenario_runs",
                    "release_marker.created" => "release_markers",
                    other => return Err(PortError(format!("no table holds the subject of {other} events"))),
                };
                self.statement(
                    &format!(
                        "{} RETURNING id",
                        fan_out(&format!("EXISTS (SELECT 1 FROM {subject_table} WHERE id = ?7)"))
                    ),
                    &[
                        text(&e.project_id),
                        text(&e.event_id),
                        text(e.event_type),
                        text(&e.payload),
                        text(&e.request_id),
                        int(e.created_at),
                        text(&e.subject_id),
                        opt_text(e.traceparent.as_deref()),
                    ],
                )
            })
            .collect()
    }
}

impl Resources for D1Store {
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<i64>, Vec<String>), PortError> {
        let statements = contacts
            .iter()
            .map(|c| {
                self.statement(
                    &format!(
                        "INSERT INTO contacts ({CONTACT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7){FIND}"
                    ),
                    &[
                        text(&c.id),
                        text(&c.project_id),
                        opt_text(c.name.as_deref()),
                        opt_text(c.phone.as_deref()),
                        opt_text(c.email.as_deref()),
                        opt_text(c.external_id.as_deref()),
                        int(c.created_at),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (stored, deliveries) = self.create_or_find(statements, self.delivery_statements(events)?).await?;
        Ok((stored.into_iter().map(|at| at.unwrap_or_default()).collect(), deliveries))
    }

    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError> {
        let rows = self
            .rows(
                &format!("SELECT {CONTACT_COLUMNS} FROM contacts WHERE id = ?1 AND project_id = ?2"),
                &[text(id), text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn list_contacts(&self, project_id: &str, page: &PageRequest) -> Result<Vec<Contact>, PortError> {
        self.newest_first(CONTACT_COLUMNS, "contacts", project_id, page).await
    }

    async fn create_messages(
        &self,
        messages: &[Message],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<Option<i64>>, Vec<String>), PortError> {
        // Inserts nothing for a contact that is not in the project: the item fails, the rest go on.
        let statements = messages
            .iter()
            .map(|m| {
                self.statement(
                    &format!(
                        "INSERT INTO messages (id, project_id, contact_id, text, status, created_at)
                         SELECT ?1, ?2, ?3, ?4, 'queued', ?5
                         WHERE EXISTS (SELECT 1 FROM contacts WHERE id = ?3 AND project_id = ?2){FIND}"
                    ),
                    &[
                        text(&m.id),
                        text(&m.project_id),
                        text(&m.contact_id),
                        text(&m.text),
                        int(m.created_at),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.create_or_find(statements, self.delivery_statements(events)?).await
    }

    async fn create_scenario(&self, scenario: &Scenario) -> Result<i64, PortError> {
        let insert = self.statement(
            &format!(
                "INSERT INTO scenarios (id, project_id, name, created_at) VALUES (?1, ?2, ?3, ?4){FIND}"
            ),
            &[text(&scenario.id), text(&scenario.project_id), text(&scenario.name), int(scenario.created_at)],
        )?;
        Ok(self.create_or_find(vec![insert], Vec::new()).await?.0[0].unwrap_or(scenario.created_at))
    }

    async fn start_run(
        &self,
        run: &ScenarioRun,
        events: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError> {
        let variables = serde_json::to_string(&run.variables).map_err(PortError::from_display)?;
        let insert = self.statement(
            &format!(
                "INSERT INTO scenario_runs (id, project_id, scenario_id, contact_id, variables, status, created_at)
                 SELECT ?1, ?2, ?3, ?4, ?5, 'started', ?6
                 WHERE EXISTS (SELECT 1 FROM scenarios WHERE id = ?3 AND project_id = ?2)
                   AND EXISTS (SELECT 1 FROM contacts WHERE id = ?4 AND project_id = ?2){FIND}"
            ),
            &[
                text(&run.id),
                text(&run.project_id),
                text(&run.scenario_id),
                text(&run.contact_id),
                text(&variables),
                int(run.created_at),
            ],
        )?;
        let (stored, deliveries) =
            self.create_or_find(vec![insert], self.delivery_statements(events)?).await?;
        if stored.first().is_some_and(Option::is_some) {
            return Ok((RunStart::Started, deliveries));
        }
        // Nothing inserted: say which of the two was missing.
        #[derive(serde::Deserialize)]
        struct Found {
            scenario: i64,
        }
        let found: Vec<Found> = self
            .rows(
                "SELECT EXISTS (SELECT 1 FROM scenarios WHERE id = ?1 AND project_id = ?2) AS scenario",
                &[text(&run.scenario_id), text(&run.project_id)],
            )
            .await?;
        let missing = if found.first().is_some_and(|f| f.scenario == 1) {
            RunStart::UnknownContact
        } else {
            RunStart::UnknownScenario
        };
        Ok((missing, Vec::new()))
    }

    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        events: &[OutgoingEvent],
    ) -> Result<(i64, Vec<String>), PortError> {
        let insert = self.statement(
            &format!(
                "INSERT INTO release_markers (id, project_id, version, ts, environment, commit_sha, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7){FIND}"
            ),
            &[
                text(&marker.id),
                text(&marker.project_id),
                text(&marker.version),
                text(&marker.ts.to_string()),
                opt_text(marker.environment.as_deref()),
                opt_text(marker.commit.as_deref()),
                int(marker.created_at),
            ],
        )?;
        let (stored, deliveries) =
            self.create_or_find(vec![insert], self.delivery_statements(events)?).await?;
        Ok((stored[0].unwrap_or(marker.created_at), deliveries))
    }
}
