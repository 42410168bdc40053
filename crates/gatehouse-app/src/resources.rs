//! The resource API of SPEC §6 (contacts, messages, scenarios, bulk calls) and the release
//! markers of SPEC §8.

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::json_body;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{Ports, Resources, RunStart};
use gatehouse_core::resources::{
    bulk_view, unknown_contact, BulkInput, Contact, ContactInput, ItemOutcome, MessageInput,
    ReleaseMarkerInput, RunInput, ScenarioInput, ScenarioRun,
};
use gatehouse_core::webhook::OutgoingEvent;

/// The event a created resource emits (SPEC §10), about the row `subject_id`.
fn event(call: &Call<'_>, event_type: &'static str, subject_id: &str, data: Value) -> OutgoingEvent {
    let event = OutgoingEvent::new(
        call.ids.next("evt"),
        event_type,
        subject_id,
        data,
        call.request_id,
        call.project_id(),
        call.now_ms,
    );
    OutgoingEvent { traceparent: Some(call.trace.traceparent()), ..event }
}

/// A reply that also queues the webhook deliveries its request wrote.
fn with_deliveries(mut reply: Reply, deliveries: Vec<String>) -> Reply {
    reply.deliveries = deliveries;
    reply
}

/// One bulk item into its input type; a wrong shape fails that item alone.
fn item<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("Invalid item: {e}")))
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_contact(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: ContactInput = json_body::parse(&call.body)?;
        let mut contact = input.validate(call.ids.next("con"), call.project_id(), call.now_ms)?;
        let events = [event(call, "contact.created", &contact.id, contact.view())];
        let (stored, deliveries) =
            self.store.create_contacts(std::slice::from_ref(&contact), &events).await.map_err(unavailable)?;
        contact.created_at = stored.first().copied().unwrap_or(contact.created_at);
        Ok(with_deliveries(Reply::created(contact.view()), deliveries))
    }

    pub(super) async fn get_contact(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        match self.store.contact(call.project_id(), id).await.map_err(unavailable)? {
            Some(contact) => Ok(Reply::ok(contact.view())),
            None => Err(ApiError::not_found("contact").with_detail("id", id)),
        }
    }

    pub(super) async fn list_contacts(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let rows = self.store.list_contacts(call.project_id(), &page).await.map_err(unavailable)?;
        let position = |c: &Contact| Cursor { ts: c.created_at, id: c.id.clone() };
        Ok(Reply::ok(page.respond(rows, position, Contact::view)))
    }

    /// Each item is validated on its own; the valid ones are written in one D1 batch.
    pub(super) async fn bulk_contacts(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: BulkInput = json_body::parse(&call.body)?;
        input.check_size()?;
        let checked: Vec<Result<Contact, ApiError>> = input
            .items
            .into_iter()
            .map(|v| item::<ContactInput>(v)?.validate(call.ids.next("con"), call.project_id(), call.now_ms))
            .collect();
        let valid: Vec<Contact> = checked.iter().filter_map(|c| c.as_ref().ok().cloned()).collect();
        let events: Vec<_> = valid.iter().map(|c| event(call, "contact.created", &c.id, c.view())).collect();
        let (_, deliveries) = self.store.create_contacts(&valid, &events).await.map_err(unavailable)?;
        let outcomes: Vec<ItemOutcome> = checked
            .into_iter()
            .map(|c| match c {
                Ok(contact) => ItemOutcome::Created(contact.id),
                Err(e) => ItemOutcome::Failed(e),
            })
            .collect();
        Ok(with_deliveries(Reply::ok(bulk_view(&outcomes)), deliveries))
    }

    pub(super) async fn create_message(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: MessageInput = json_body::parse(&call.body)?;
        let mut message = input.validate(call.ids.next("msg"), call.project_id(), call.now_ms)?;
        let events = [event(call, "message.created", &message.id, message.view())];
        let (stored, deliveries) =
            self.store.create_messages(std::slice::from_ref(&message), &events).await.map_err(unavailable)?;
        let Some(Some(created_at)) = stored.first().copied() else {
            return Err(unknown_contact(&message.contact_id));
        };
        message.created_at = created_at;
        Ok(with_deliveries(Reply::created(message.view()), deliveries))
    }

    /// Like contacts; an item whose contact does not exist in the project fails alone.
    pub(super) async fn bulk_messages(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: BulkInput = json_body::parse(&call.body)?;
        input.check_size()?;
        let checked: Vec<_> = input
            .items
            .into_iter()
            .map(|v| item::<MessageInput>(v)?.validate(call.ids.next("msg"), call.project_id(), call.now_ms))
            .collect();
        let valid: Vec<_> = checked.iter().filter_map(|m| m.as_ref().ok().cloned()).collect();
        let events: Vec<_> = valid.iter().map(|m| event(call, "message.created", &m.id, m.view())).collect();
        let (inserted, deliveries) =
            self.store.create_messages(&valid, &events).await.map_err(unavailable)?;
        let mut inserted = inserted.into_iter();
        let outcomes: Vec<ItemOutcome> = checked
            .into_iter()
            .map(|m| match m {
                Ok(message) if inserted.next().flatten().is_some() => ItemOutcome::Created(message.id),
                Ok(message) => ItemOutcome::Failed(unknown_contact(&message.contact_id)),
                Err(e) => ItemOutcome::Failed(e),
            })
            .collect();
        Ok(with_deliveries(Reply::ok(bulk_view(&outcomes)), deliveries))
    }

    pub(super) async fn create_scenario(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: ScenarioInput = json_body::parse(&call.body)?;
        let mut scenario = input.validate(call.ids.next("scn"), call.project_id(), call.now_ms)?;
        scenario.created_at = self.store.create_scenario(&scenario).await.map_err(unavailable)?;
        Ok(Reply::created(scenario.view()))
    }

    pub(super) async fn run_scenario(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let scenario_id = call.params[0];
        let input: RunInput = json_body::parse(&call.body)?;
        let run = ScenarioRun {
            id: call.ids.next("run"),
            project_id: call.project_id().to_owned(),
            scenario_id: scenario_id.to_owned(),
            contact_id: input.contact_id,
            variables: input.variables,
            created_at: call.now_ms,
        };
        let data = json!({
            "run_id": run.id,
            "scenario_id": run.scenario_id,
            "contact_id": run.contact_id,
            "variables": run.variables,
            "status": "started",
        });
        let events = [event(call, "scenario.run.started", &run.id, data)];
        let (started, deliveries) = self.store.start_run(&run, &events).await.map_err(unavailable)?;
        match started {
            RunStart::Started => Ok(with_deliveries(
                Reply::accepted(json!({ "run_id": run.id, "status": "started" })),
                deliveries,
            )),
            RunStart::UnknownScenario => Err(ApiError::not_found("scenario").with_detail("id", scenario_id)),
            RunStart::UnknownContact => Err(unknown_contact(&run.contact_id)),
        }
    }

    /// SPEC §8: a `cicd` key records a deploy of its own project; another project's path is 403.
    pub(super) async fn deploy_marker(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let project_id = call.params[0];
        if project_id != call.project_id() {
            return Err(ApiError::forbidden("This key belongs to another project.")
                .with_detail("project_id", project_id));
        }
        let input: ReleaseMarkerInput = json_body::parse(&call.body)?;
        let mut marker = input.validate(call.ids.next("rel"), project_id, call.now_ms)?;
        let events = [event(call, "release_marker.created", &marker.id, marker.view())];
        let (created_at, deliveries) =
            self.store.create_release_marker(&marker, &events).await.map_err(unavailable)?;
        marker.created_at = created_at;
        Ok(with_deliveries(Reply::created(marker.view()), deliveries))
    }
}
