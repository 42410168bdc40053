//! Browser keys in the browser (SPEC §24): a key every visitor's page holds must not let one
//! visitor spend every visitor's window, may be sent as `?key=` where a page cannot set
//! `Authorization` (`navigator.sendBeacon` on `/v1/track`), and may be tied to the sites that
//! use it (`allowed_origins`).
//!
//! * **The per-visitor window** ([`VisitorWindows`]): a browser key's requests are counted per
//!   client address (an IPv6 address by its /64, as [`address_group`] spells it) in a minute
//!   window of the plan's `browser_per_address_per_minute`, *before* the key's own windows: a
//!   visitor over it is refused without taking anything of the key's window. The key's guard
//!   keeps the counts in memory for the current minute only (one entry per visitor seen in it);
//!   an isolate holding a lease of a hot key (SPEC §20) counts the visitors it admits itself.
//!   Counts are not stored: a guard that restarts forgets them, which can only admit more.
//! * **Origins**: an `Origin` a key's `allowed_origins` does not list is refused (403) before
//!   anything is counted. A request without `Origin` (a server, `curl`) is not a page's and is
//!   not refused for it: the list keeps other sites' pages off the key, not its holders.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use crate::abuse::address_group;
use crate::api_key::{KeyRecord, KeyType};
use crate::rate_limit::{Usage, Window};

/// Who sent a request with a browser key, as the key's guard is told it: the client address's
/// group ([`address_group`]; none when the runtime gave no address: then nothing is counted per
/// visitor) and the page's `Origin`, when the request had one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Visitor {
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub origin: Option<String>,
}

impl Visitor {
    /// The visitor of a request from `client_ip` with the `Origin` header `origin`.
    pub fn of(client_ip: Option<&str>, origin: Option<&str>) -> Visitor {
        Visitor { address: client_ip.map(address_group), origin: origin.map(str::to_owned) }
    }
}

/// What [`VisitorWindows::check`] decided, before the key's own windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisitorCheck {
    /// Not a browser key's request from a visitor, or one within its window: on to the key's.
    Within,
    /// A page of an origin the key does not list: 403, nothing counted.
    OriginRefused,
    /// The visitor's window is used up: 429 with this usage, nothing of the key's window taken.
    Over(Usage),
}

/// A plan's per-visitor window when it names none: a tenth of the key's minute, at least this.
pub const MIN_PER_ADDRESS_PER_MINUTE: u32 = 10;

/// Visitors one guard or isolate counts in a minute at most; past it a new visitor is admitted
/// uncounted (its key's window still applies) rather than growing memory without bound.
pub const MAX_VISITORS: usize = 100_000;

/// The most origins one key may list, and the longest one.
pub const MAX_ALLOWED_ORIGINS: usize = 20;
const MAX_ORIGIN_LEN: usize = 200;

/// One minute's counts of a browser key's visitors.
#[derive(Debug, Default, Clone)]
pub struct VisitorWindows {
    /// Unix ms of the minute the counts belong to.
    minute: i64,
    counts: HashMap<String, u32>,
}

impl VisitorWindows {
    /// Counts one request of `visitor` at `now_ms` against `per_minute`: `None` within it, else
    /// the usage of the visitor's used-up window (what a 429's headers and `Retry-After` say),
    /// with nothing counted.
    pub fn count(&mut self, visitor: &str, per_minute: u32, now_ms: i64) -> Option<Usage> {
        let minute = Window::Minute.start(now_ms);
        if minute != self.minute {
            self.minute = minute;
            self.counts.clear();
        }
        let refusal = |now_ms| Usage::refused_minute(per_minute, minute + Window::Minute.ms(), now_ms);
        let full = self.counts.len() >= MAX_VISITORS;
        match self.counts.get_mut(visitor) {
            Some(n) if *n >= per_minute => Some(refusal(now_ms)),
            Some(n) => {
                *n += 1;
                None
            }
            None if full => None,
            None if per_minute == 0 => Some(refusal(now_ms)),
            None => {
                self.counts.insert(visitor.to_owned(), 1);
                None
            }
        }
    }

    /// The check of a request by `key` from `visitor` (under `scope` the key name spreads over
    /// the visitors of all keys an isolate sees): the origin first, then the visitor's window of
    /// `per_minute`. Keys of other types pass.
    pub fn check(
        &mut self,
        key: &KeyRecord,
        visitor: Option<&Visitor>,
        per_minute: u32,
        now_ms: i64,
    ) -> VisitorCheck {
        let Some(visitor) = visitor.filter(|_| key.key_type == KeyType::Browser) else {
            return VisitorCheck::Within;
        };
        if !key.admits_origin(visitor.origin.as_deref()) {
            return VisitorCheck::OriginRefused;
        }
        let Some(address) = &visitor.address else { return VisitorCheck::Within };
        // One table may serve many keys (an isolate's): each key's visitors apart.
        let name = format!("{}:{address}", key.id);
        match self.count(&name, per_minute, now_ms) {
            None => VisitorCheck::Within,
            Some(usage) => VisitorCheck::Over(usage),
        }
    }

    /// How many visitors are counted this minute.
    pub fn visitors(&self) -> usize {
        self.counts.len()
    }
}

/// An `allowed_origins` entry in its one spelling (`https://shop.example`, lower case, no path,
/// no default port), or why it is not an origin.
pub fn parse_origin(text: &str) -> Result<String, String> {
    let refused = || format!("{text:?} is not an origin like https://shop.example");
    if text.len() > MAX_ORIGIN_LEN {
        return Err(format!("an origin is at most {MAX_ORIGIN_LEN} characters"));
    }
    let url = url::Url::parse(text).map_err(|_| refused())?;
    let bare = url.path() == "/" && url.query().is_none() && url.fragment().is_none();
    let credentials = !url.username().is_empty() || url.password().is_some();
    // No pattern either: `https://*.shop.example` would be kept as it is and match nothing.
    let pattern = url.host_str().is_some_and(|h| h.contains('*'));
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() || !bare || credentials || pattern {
        return Err(refused());
    }
    // `Url::parse` keeps a trailing slash's absence out of `path()`: refuse text with a path.
    if text.trim_end_matches('/').matches('/').count() > 2 {
        return Err(refused());
    }
    Ok(url.origin().ascii_serialization())
}

/// Whether a request with this `Origin` header may use a key listing `allowed`: an empty list
/// allows every origin; a request without `Origin` is not a page's and is allowed.
pub fn admits_origin(allowed: &[String], origin: Option<&str>) -> bool {
    match origin {
        _ if allowed.is_empty() => true,
        None => true,
        Some(origin) => allowed.iter().any(|a| a.eq_ignore_ascii_case(origin.trim())),
    }
}

/// The API key a request to `/v1/track` carries in its query (`?key=`), when it carries one.
pub fn query_key(query: &[(String, String)]) -> Option<&str> {
    query.iter().find(|(name, _)| name == "key").map(|(_, value)| value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_796_054_400_000; // a minute's start

    #[test]
    fn a_visitor_over_its_window_is_refused_and_others_are_not() {
        let mut w = VisitorWindows::default();
        for _ in 0..10 {
            assert!(w.count("203.0.113.7", 10, T0 + 5).is_none());
        }
        let usage = w.count("203.0.113.7", 10, T0 + 1_000).unwrap();
        assert_eq!((usage.limit(), usage.remaining(), usage.reset_ms()), (10, 0, T0 + 60_000));
        assert_eq!(usage.seconds_to_reset(), 59);
        assert!(w.count("198.51.100.1", 10, T0 + 1_000).is_none(), "another visitor has its own window");
        assert!(w.count("203.0.113.7", 10, T0 + 60_000).is_none(), "the next minute starts afresh");
        assert_eq!(w.visitors(), 1, "last minute's visitors are forgotten");
    }

    #[test]
    fn a_refused_request_takes_nothing_and_a_full_table_admits_new_visitors_uncounted() {
        let mut w = VisitorWindows::default();
        assert!(w.count("a", 1, T0).is_none());
        assert!(w.count("a", 1, T0).is_some());
        assert!(w.count("a", 2, T0).is_none(), "refusals were not counted");
        for i in 0..MAX_VISITORS {
            let _ = w.count(&format!("v{i}"), 5, T0);
        }
        assert_eq!(w.visitors(), MAX_VISITORS);
        assert!(w.count("one more", 5, T0).is_none());
        assert_eq!(w.visitors(), MAX_VISITORS, "memory stays bounded");
    }

    #[test]
    fn only_a_browser_keys_visitors_are_checked_origin_first() {
        let mut browser =
            KeyRecord::fresh("key_b", "prj_1", KeyType::Browser, "trial", "h".into(), "gh_b_x".into(), 0);
        browser.allowed_origins = vec!["https://shop.example".into()];
        let server = KeyRecord { key_type: KeyType::Server, id: "key_s".into(), ..browser.clone() };
        let page = |origin: &str| Visitor::of(Some("203.0.113.7"), Some(origin));
        let mut w = VisitorWindows::default();
        assert_eq!(
            w.check(&browser, Some(&page("https://evil.example")), 1, T0),
            VisitorCheck::OriginRefused
        );
        assert_eq!(w.visitors(), 0, "a refused origin is not counted");
        assert_eq!(w.check(&browser, Some(&page("https://shop.example")), 1, T0), VisitorCheck::Within);
        assert!(matches!(
            w.check(&browser, Some(&page("https://shop.example")), 1, T0),
            VisitorCheck::Over(_)
        ));
        assert_eq!(w.check(&server, Some(&page("https://evil.example")), 1, T0), VisitorCheck::Within);
        assert_eq!(
            w.check(&browser, None, 1, T0),
            VisitorCheck::Within,
            "no visitor told: the key's windows only"
        );
        let no_address = Visitor::of(None, Some("https://evil.example"));
        assert_eq!(
            w.check(&browser, Some(&no_address), 1, T0),
            VisitorCheck::OriginRefused,
            "the origin all the same"
        );
        let no_address = Visitor::of(None, Some("https://shop.example"));
        assert_eq!(w.check(&browser, Some(&no_address), 1, T0), VisitorCheck::Within, "nothing to count by");
    }

    #[test]
    fn an_ipv6_visitor_is_its_64() {
        assert_eq!(address_group("2001:db8:1:2:aaaa::1"), address_group("2001:db8:1:2:bbbb::9"));
        assert_ne!(address_group("2001:db8:1:2::1"), address_group("2001:db8:1:3::1"));
    }

    #[test]
    fn origins_are_spelt_one_way_and_anything_else_is_refused() {
        assert_eq!(parse_origin("https://Shop.Example").unwrap(), "https://shop.example");
        assert_eq!(parse_origin("https://shop.example:443").unwrap(), "https://shop.example");
        assert_eq!(parse_origin("http://127.0.0.1:5173/").unwrap(), "http://127.0.0.1:5173");
        for bad in [
            "shop.example",
            "ftp://shop.example",
            "https://shop.example/app",
            "https://a@b.example",
            "https://:pw@b.example",
            "https://*.shop.example",
            "https://shop.example?x=1",
            "*",
            "",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_listed_origins_pass_and_no_list_passes_all() {
        let allowed = vec!["https://shop.example".to_owned()];
        assert!(admits_origin(&allowed, Some("https://shop.example")));
        assert!(!admits_origin(&allowed, Some("https://evil.example")));
        assert!(!admits_origin(&allowed, Some("null")));
        assert!(admits_origin(&allowed, None), "no Origin: not a page");
        assert!(admits_origin(&[], Some("https://evil.example")));
    }

    #[test]
    fn the_query_key_is_the_key_parameter() {
        let q = vec![("a".to_owned(), "1".to_owned()), ("key".to_owned(), "gh_b_x".to_owned())];
        assert_eq!(query_key(&q), Some("gh_b_x"));
        assert_eq!(query_key(&[]), None);
    }
}
