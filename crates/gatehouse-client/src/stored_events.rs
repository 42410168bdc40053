//! The events an integrator sent (SPEC §24), owner keys: `GET /public/v1/events`, newest first,
//! over the window the gateway keeps (`EVENT_RETENTION_DAYS`, 30 days by default).

use std::time::Duration;

use crate::call::{Call, Page, Pages};
use crate::client::{Client, Request};
use crate::tail::{Followed, Tail};

pub use gatehouse_wire::events::StoredEvent;

/// The filters of `GET /public/v1/events`; unset ones do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredEventFilter {
    /// RFC 3339, `YYYY-MM-DD` or Unix milliseconds: received at or after.
    pub from: Option<String>,
    /// Received at or before.
    pub to: Option<String>,
    /// The event's name, e.g. `signup`.
    pub event: Option<String>,
    pub user_id: Option<String>,
    pub anonymous_id: Option<String>,
    /// Events per page (at most 200).
    pub limit: Option<u32>,
}

impl StoredEventFilter {
    fn request(&self) -> Request {
        let mut request = Request::get("/public/v1/events");
        let fields = [
            ("from", &self.from),
            ("to", &self.to),
            ("event", &self.event),
            ("user_id", &self.user_id),
            ("anonymous_id", &self.anonymous_id),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                request = request.query(name, value);
            }
        }
        if let Some(limit) = self.limit {
            request = request.query("limit", limit);
        }
        request
    }
}

impl Client {
    /// One page of the stored events, newest first; `cursor` continues after an earlier page.
    pub fn event_page(&self, filter: &StoredEventFilter, cursor: Option<&str>) -> Call<Page<StoredEvent>> {
        let mut request = filter.request();
        if let Some(cursor) = cursor {
            request = request.query("cursor", cursor);
        }
        self.call(request)
    }

    /// Every stored event that matches, newest first, across pages.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::StoredEventFilter;
    /// let mut events = owner.stored_events(&StoredEventFilter { event: Some("signup".into()), ..Default::default() });
    /// while let Some(e) = events.try_next().await? {
    ///     println!("{} {} {}", e.received_at, e.event, e.event_id);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stored_events(&self, filter: &StoredEventFilter) -> Pages<StoredEvent> {
        Pages::new(self, filter.request())
    }

    /// Follows the stored events from now on: [`Tail::next`] answers each new event once,
    /// oldest first, polling every `interval` or more slowly while the key's window runs low
    /// (as [`Client::tail_logs`]).
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::StoredEventFilter;
    /// use std::time::Duration;
    /// let mut tail = owner.tail_events(StoredEventFilter::default(), Duration::from_secs(3));
    /// loop {
    ///     let e = tail.next().await?;
    ///     println!("{} {} {}", e.received_at, e.event, e.event_id);
    /// }
    /// # }
    /// ```
    pub fn tail_events(&self, filter: StoredEventFilter, interval: Duration) -> EventTail {
        Tail::new(self, filter, interval)
    }
}

/// A follower of the stored events (see [`Client::tail_events`]).
pub type EventTail = Tail<StoredEvent>;

impl Followed for StoredEvent {
    type Filter = StoredEventFilter;

    fn id(&self) -> &str {
        &self.event_id
    }

    fn at(&self) -> &str {
        &self.received_at
    }

    fn page(
        client: &Client,
        filter: &StoredEventFilter,
        from_ms: u128,
        cursor: Option<&str>,
    ) -> Call<Page<Self>> {
        let filter =
            StoredEventFilter { from: Some(from_ms.to_string()), limit: Some(200), ..filter.clone() };
        client.event_page(&filter, cursor)
    }
}
