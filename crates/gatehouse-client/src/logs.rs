//! The audit log (SPEC §9), owner keys: one page, every page by cursor, one request by id, and a
//! tail that follows new rows as they arrive.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::call::{Call, Page, Pages};
use crate::client::{Client, Request};
use crate::error::Error;
use crate::resources::segment;

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
        LogTail {
            client: self.clone(),
            filter,
            interval,
            since: SystemTime::now(),
            seen: HashMap::new(),
            ready: VecDeque::new(),
            first_poll: true,
            pause: interval,
        }
    }
}

/// How far back each poll looks again: audit rows reach the log through a queue, so a row may
/// appear after rows that are newer than it.
const LOOKBACK: Duration = Duration::from_secs(120);

/// A follower of the audit log (see [`Client::tail_logs`]).
pub struct LogTail {
    client: Client,
    filter: LogFilter,
    interval: Duration,
    /// Rows before this are never shown.
    since: SystemTime,
    /// Request ids shown (and those of the tail's own polls), with their time, forgotten once
    /// well past the lookback.
    seen: HashMap<String, SystemTime>,
    ready: VecDeque<LogEntry>,
    first_poll: bool,
    /// The wait before the next poll: `interval`, or longer while the key's window runs low.
    pause: Duration,
}

impl LogTail {
    /// The next new row; waits (polling) until there is one.
    pub async fn next(&mut self) -> Result<LogEntry, Error> {
        loop {
            if let Some(row) = self.ready.pop_front() {
                return Ok(row);
            }
            if !self.first_poll {
                tokio::time::sleep(self.pause).await;
            }
            self.first_poll = false;
            self.poll().await?;
        }
    }

    async fn poll(&mut self) -> Result<(), Error> {
        let newest_seen = self.seen.values().max().copied().unwrap_or(self.since);
        let from = newest_seen.checked_sub(LOOKBACK).unwrap_or(UNIX_EPOCH).max(self.since);
        let mut filter = self.filter.clone();
        filter.from = Some(unix_ms(from).to_string());
        filter.limit = Some(200);
        let mut fresh = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let reply = self.client.log_page(&filter, cursor.as_deref()).reply().await?;
            self.pause = pause(self.interval, reply.rate_limit, SystemTime::now());
            if let Some(id) = reply.request_id {
                self.seen.insert(id, SystemTime::now());
            }
            let page = reply.value;
            fresh.extend(page.data.into_iter().filter(|row| !self.seen.contains_key(&row.request_id)));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        fresh.sort_by(|a, b| (&a.ts, &a.request_id).cmp(&(&b.ts, &b.request_id)));
        for row in &fresh {
            let at = humantime::parse_rfc3339_weak(&row.ts).unwrap_or_else(|_| SystemTime::now());
            self.seen.insert(row.request_id.clone(), at);
        }
        let forget_before = self.seen.values().max().copied().unwrap_or(self.since).checked_sub(LOOKBACK * 2);
        if let Some(limit) = forget_before {
            self.seen.retain(|_, at| *at >= limit);
        }
        self.ready.extend(fresh);
        Ok(())
    }
}

/// The wait before a tail's next poll: `interval`, or the time to the window's reset divided by a
/// third of the requests it has left, when that is longer (the tail takes at most a third).
fn pause(interval: Duration, window: Option<crate::RateLimitState>, now: SystemTime) -> Duration {
    let Some(window) = window else { return interval };
    let to_reset = window.reset_at().duration_since(now).unwrap_or_default();
    let share = (window.remaining / 3).max(1);
    interval.max(to_reset / u32::try_from(share).unwrap_or(u32::MAX))
}

fn unix_ms(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
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

    #[test]
    fn a_tail_takes_at_most_a_third_of_what_its_window_has_left() {
        let at = |unix: u64| UNIX_EPOCH + Duration::from_secs(unix);
        let window = |limit, remaining, reset| Some(crate::RateLimitState { limit, remaining, reset });
        let three = Duration::from_secs(3);
        assert_eq!(pause(three, None, at(1_000)), three);
        // Trial, 30 a minute, the window just begun: 60 s / 9 ≈ 6.7 s, so 9 polls of its 29.
        assert_eq!(pause(three, window(30, 29, 1_060), at(1_000)), Duration::from_secs(60) / 9);
        // Two requests left, 40 s to go: one poll before the reset.
        assert_eq!(pause(three, window(30, 2, 1_040), at(1_000)), Duration::from_secs(40));
        // Business, 2000 a minute: the interval asked for.
        assert_eq!(pause(three, window(2000, 1_990, 1_060), at(1_000)), three);
        // A reset already past: the interval.
        assert_eq!(pause(three, window(30, 0, 990), at(1_000)), three);
    }
}
