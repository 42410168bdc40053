//! Following a list as new items arrive: `gatehouse logs tail` (SPEC §14) and `gatehouse events
//! tail` (SPEC §24). Each poll asks for the items from a little before the newest one seen (they
//! are stored through queues, so one may appear after newer ones), shows each new one once,
//! oldest first, and leaves the key most of its window.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;

use crate::call::{Call, Page};
use crate::client::Client;
use crate::error::Error;

/// An item a [`Tail`] can follow: the audit log's rows, the stored events.
pub trait Followed: DeserializeOwned + Send + 'static {
    /// The list's filters.
    type Filter: Clone;
    /// What tells one item from another.
    fn id(&self) -> &str;
    /// When it happened (RFC 3339): the order a tail shows items in.
    fn at(&self) -> &str;
    /// One page of the items matching `filter` at or after `from_ms` (Unix ms).
    fn page(client: &Client, filter: &Self::Filter, from_ms: u128, cursor: Option<&str>) -> Call<Page<Self>>;
}

/// How far back each poll looks again: audit rows and events are stored through a queue, so an
/// item may appear after items that are newer than it.
const LOOKBACK: Duration = Duration::from_secs(120);

/// A list followed as new items arrive ([`Client::tail_logs`], [`Client::tail_events`]).
pub struct Tail<T: Followed> {
    client: Client,
    filter: T::Filter,
    interval: Duration,
    /// Rows before this are never shown.
    since: SystemTime,
    /// Ids shown (and the request ids of the tail's own polls, which a log tail leaves out), with
    /// their time, forgotten once well past the lookback.
    seen: HashMap<String, SystemTime>,
    ready: VecDeque<T>,
    first_poll: bool,
    /// The wait before the next poll: `interval`, or longer while the key's window runs low.
    pause: Duration,
}

impl<T: Followed> Tail<T> {
    pub(crate) fn new(client: &Client, filter: T::Filter, interval: Duration) -> Tail<T> {
        Tail {
            client: client.clone(),
            filter,
            interval,
            since: SystemTime::now(),
            seen: HashMap::new(),
            ready: VecDeque::new(),
            first_poll: true,
            pause: interval,
        }
    }

    /// The next new item, oldest first; waits (polling) until there is one.
    pub async fn next(&mut self) -> Result<T, Error> {
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
        let mut fresh = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let reply = T::page(&self.client, &self.filter, unix_ms(from), cursor.as_deref()).reply().await?;
            self.pause = pause(self.interval, reply.rate_limit, SystemTime::now());
            if let Some(id) = reply.request_id {
                self.seen.insert(id, SystemTime::now());
            }
            let page = reply.value;
            fresh.extend(page.data.into_iter().filter(|item| !self.seen.contains_key(item.id())));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        fresh.sort_by(|a, b| (a.at(), a.id()).cmp(&(b.at(), b.id())));
        for item in &fresh {
            let at = humantime::parse_rfc3339_weak(item.at()).unwrap_or_else(|_| SystemTime::now());
            self.seen.insert(item.id().to_owned(), at);
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
