//! The events an integrator sent (SPEC §24): `GET /public/v1/events`, and the minute cron's purge
//! of the events older than `EVENT_RETENTION_DAYS` (the window that list shows).

use super::cron::RunBudget;
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::error::ApiError;
use gatehouse_core::event_log::{self, EventFilter, PURGE_BATCH};
use gatehouse_core::events::EventRecord;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{EventStore, PortError, Ports};

impl<P: Ports> Gateway<'_, P> {
    /// `GET /public/v1/events?from&to&event&user_id&anonymous_id&limit&cursor` (owner): the
    /// project's stored events, newest first.
    pub(super) async fn list_events(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let filter = EventFilter::from_query(call.query)?;
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let rows = self.store.list_events(call.project_id(), &filter, &page).await.map_err(unavailable)?;
        Ok(Reply::ok(page.respond(rows, event_log::position, EventRecord::view)))
    }
}

/// Purge batches one run makes at most: 10 × [`PURGE_BATCH`] rows a minute, about 830 events/s
/// (the events table holds far fewer at any retention: ingestion beyond it is open work).
const PURGE_BATCHES_PER_RUN: u32 = 10;

/// The minute cron's purge: batches of up to [`PURGE_BATCH`] events received before the retention
/// window, of every project, one D1 statement each from the run's `budget`, while a batch comes
/// back full. Answers how many went; `None` when the budget had no query left at all.
pub async fn purge_events<S: EventStore>(
    store: &S,
    retention_days: u32,
    budget: &RunBudget,
    now_ms: impl Fn() -> i64,
) -> Result<Option<u32>, PortError> {
    let cutoff = event_log::retention_cutoff(now_ms(), retention_days);
    let mut purged = None;
    for _ in 0..PURGE_BATCHES_PER_RUN {
        if !budget.take(now_ms(), 1, 0) {
            break;
        }
        let gone = store.purge_events(cutoff, PURGE_BATCH).await?;
        purged = Some(purged.unwrap_or(0) + gone);
        if gone < PURGE_BATCH {
            break;
        }
    }
    Ok(purged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::FakeStore;
    use crate::sim::Faults;
    use gatehouse_core::api_key::KeyType;
    use gatehouse_core::events::{EventMessage, EventRecord};
    use gatehouse_core::ports::EventStore;
    use std::rc::Rc;

    const NOW: i64 = 1_796_200_000_000;
    const DAY: i64 = 86_400_000;

    /// SPEC §24: the events table keeps its window and no more, a bounded batch at a time, within
    /// the run's budget (it grew for ever before).
    #[test]
    fn events_past_the_retention_leave_in_bounded_batches() {
        let store = FakeStore::new(Rc::new(Faults::new(1, 0.0)));
        let events: Vec<EventMessage> = (0..12_000)
            .map(|i| {
                EventMessage::Event(EventRecord {
                    project_id: format!("prj_{}", i % 3),
                    key_type: KeyType::Server,
                    event_id: format!("evt_{i}"),
                    event: "x".into(),
                    anonymous_id: Some("a".into()),
                    user_id: None,
                    timestamp: None,
                    properties: Default::default(),
                    // 11,000 older than 30 days, 1,000 within them.
                    received_at: if i < 11_000 { NOW - 31 * DAY - i } else { NOW - DAY },
                    generated_id: false,
                })
            })
            .collect();
        pollster::block_on(store.store_events(&events)).unwrap();
        let run = |budget: &RunBudget| pollster::block_on(purge_events(&store, 30, budget, || NOW)).unwrap();
        // A budget of two queries: two full batches.
        assert_eq!(run(&RunBudget::new(10, 2, i64::MAX)), Some(2 * PURGE_BATCH));
        assert_eq!(run(&RunBudget::unbounded()), Some(1_000));
        assert_eq!(store.events.events.borrow().len(), 1_000, "the window stays");
        assert_eq!(run(&RunBudget::unbounded()), Some(0));
        assert_eq!(run(&RunBudget::new(0, 0, i64::MAX)), None);
    }
}
