//! The audit log (SPEC §9), owner keys: one page, every page by cursor, one request by id, and a
//! tail that follows new rows as they arrive.

use std::time::Duration;

use crate::call::{Call, Page, Pages};
use crate::client::{Client, Request};
use crate::resources::segment;
use crate::tail::{Followed, Tail};

pub use gatehouse_wire::logs::LogEntry;

/// The filters of `GET /public/v1/logs`; unset ones do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogFilter {
    pub method: Option<String>,
    /// `2xx`, `4xx`, `5xx` or an exact status.
    pub status: Option<String>,
    /// A glob over the path and query, `*` = any run of characters.
    pub path: Option<String>,
    pub request_id: Option<String>,
    pub key_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// A W3C trace id (32 lowercase hex digits): the requests of one trace (SPEC §25).
    pub trace_id: Option<String>,
    /// RFC 3339, `YYYY-MM-DD` or Unix milliseconds.
    pub from: Option<String>,
    pub to: Option<String>,
    /// `Some(false)`: leave out the owner dashboard's own reads; `Some(true)`: only them.
    pub dashboard: Option<bool>,
    /// Rows per page (at most 200).
    pub limit: Option<u32>,
}

impl LogFilter {
    fn request(&self) -> Request {
        let mut request = Request::get("/public/v1/logs");
        let fields = [
            ("method", &self.method),
            ("status", &self.status),
            ("path", &self.path),
            ("request_id", &self.request_id),
            ("key_id", &self.key_id),
            ("idempotency_key", &self.idempotency_key),
            ("trace_id", &self.trace_id),
            ("from", &self.from),
            ("to", &self.to),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                request = request.query(name, value);
            }
        }
        if let Some(dashboard) = self.dashboard {
            request = request.query("dashboard", dashboard);
        }
        if let Some(limit) = self.limit {
            request = request.query("limit", limit);
        }
        request
    }
}

impl Client {
    /// One page of the log, newest first; `cursor` continues after an earlier page.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::LogFilter;
    /// let errors = LogFilter { status: Some("5xx".into()), limit: Some(50), ..Default::default() };
    /// let page = owner.log_page(&errors, None).await?;
    /// for row in &page.data {
    ///     println!("{} {} {} {}", row.ts, row.status, row.method, row.path);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn log_page(&self, filter: &LogFilter, cursor: Option<&str>) -> Call<Page<LogEntry>> {
        let mut request = filter.request();
        if let Some(cursor) = cursor {
            request = request.query("cursor", cursor);
        }
        self.call(request)
    }

    /// Every row that matches, newest first, across pages.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::LogFilter;
    /// let mut rows = owner.logs(&LogFilter { path: Some("/public/v1/contacts*".into()), ..Default::default() });
    /// while let Some(row) = rows.try_next().await? {
    ///     println!("{} {}", row.request_id, row.status);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn logs(&self, filter: &LogFilter) -> Pages<LogEntry> {
        Pages::new(self, filter.request())
    }

    /// `GET /public/v1/logs/{request_id}`: one request by the `X-Request-Id` it was answered with.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// let row = owner.get_log("0193…").await?;
    /// println!("{} took {} ms", row.path, row.response_time_ms);
    /// # Ok(()) }
    /// ```
    pub fn get_log(&self, request_id: &str) -> Call<LogEntry> {
        self.call(Request::get(format!("/public/v1/logs/{}", segment(request_id))))
    }

    /// Follows the log from now on: [`LogTail::next`] answers each new row once, oldest first,
    /// polling every `interval` or more slowly: a poll leaves the key at least two thirds of what
    /// its window has left (the pause is at least the time to the window's reset divided by a
    /// third of the requests remaining). The tail's own requests are left out.
    ///
    /// ```no_run
    /// # async fn run(owner: gatehouse_client::Client) -> Result<(), gatehouse_client::Error> {
    /// use gatehouse_client::LogFilter;
    /// use std::time::Duration;
    /// let mut tail = owner.tail_logs(LogFilter { status: Some("4xx".into()), ..Default::default() }, Duration::from_secs(3));
    /// loop {
    ///     let row = tail.next().await?;
    ///     println!("{} {} {} {}", row.ts, row.status, row.method, row.path);
    /// }
    /// # }
    /// ```
    pub fn tail_logs(&self, filter: LogFilter, interval: Duration) -> LogTail {
        Tail::new(self, filter, interval)
    }
}

/// A follower of the audit log (see [`Client::tail_logs`]).
pub type LogTail = Tail<LogEntry>;

impl Followed for LogEntry {
    type Filter = LogFilter;

    fn id(&self) -> &str {
        &self.request_id
    }

    fn at(&self) -> &str {
        &self.ts
    }

    fn page(client: &Client, filter: &LogFilter, from_ms: u128, cursor: Option<&str>) -> Call<Page<Self>> {
        let filter = LogFilter { from: Some(from_ms.to_string()), limit: Some(200), ..filter.clone() };
        client.log_page(&filter, cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_sends_only_what_is_set() {
        let filter = LogFilter {
            status: Some("4xx".into()),
            path: Some("/public/v1/contacts*".into()),
            limit: Some(50),
            ..Default::default()
        };
        let request = filter.request();
        let query: Vec<(&str, &str)> =
            request.query_pairs().iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(query, [("status", "4xx"), ("path", "/public/v1/contacts*"), ("limit", "50")]);
    }
}
