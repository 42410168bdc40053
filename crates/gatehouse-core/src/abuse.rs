//! What one isolate remembers about abusive traffic (SPEC §13), so a flood from one address costs
//! no Durable Object and no D1 query once the address is over its limit:
//!
//! * **blocked addresses**: an address whose anonymous requests (failed authentication, unmatched
//!   routes) went over the limit, until its window ends — learned from the address's guard;
//! * **unknown keys**: key hashes no key has, for [`UNKNOWN_KEY_TTL_MS`] after their guard said so;
//! * **recent keys**: key hashes a guard admitted in the last [`RECENT_KEY_TTL_MS`], so a valid key
//!   keeps working from a blocked address (a shared NAT must not lock out its good clients).
//!
//! Each list holds at most [`MEMORY_ENTRIES`] entries; when full, expired entries go first, then
//! the one that expires soonest. Pure: the caller passes `now_ms`.
//!
//! An address is limited as its [`address_group`]: an IPv4 address by itself, an IPv6 address by
//! its /64 (SPEC §19: one client holds a whole /64 and can rotate inside it at will).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

/// How long a key hash its guard did not know is answered as unknown without asking again.
pub const UNKNOWN_KEY_TTL_MS: i64 = 60_000;
/// How long a key its guard admitted may pass the check of a blocked address.
pub const RECENT_KEY_TTL_MS: i64 = 600_000;
/// How long a re-hashed key's guard is remembered (SPEC §26); then the object of its hash is
/// asked again (one more round trip), so the memory holds only keys in use.
pub const GUARD_TTL_MS: i64 = 3_600_000;
/// How long a browser key's refusal of a page's origin is answered without asking its guard
/// (a change of its `allowed_origins` reaches this isolate within this time).
pub const REFUSED_ORIGIN_TTL_MS: i64 = 60_000;
/// The most entries each list keeps (a few hundred KiB of the isolate's memory at most).
pub const MEMORY_ENTRIES: usize = 10_000;

/// What the failed-authentication limit counts for a client address: an IPv4 address itself
/// (also written IPv4-mapped, `::ffff:a.b.c.d`), the /64 prefix of an IPv6 address
/// (`2001:db8:1:2::/64`), each in one canonical spelling. Text that is no address stays as it is.
pub fn address_group(address: &str) -> String {
    let address = address.trim();
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                format!("{}/64", Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
        Err(_) => address.to_owned(),
    }
}

/// Failed authentications a minute from one IPv6 /48 in all (SPEC §23): a customer's /48 holds
/// 65,536 /64s, each with its own allowance of 20, so the network is also counted as one, under
/// this wider allowance.
pub const NETWORK_FAILURES_PER_MINUTE: u32 = 200;

/// The network an IPv6 address's failures also count in: its /48 (`2001:db8:1::/48`). None for
/// IPv4 (and IPv4-mapped) addresses and for text that is no address.
pub fn network_group(address: &str) -> Option<String> {
    match address.trim().parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let [a, b, c, ..] = v6.segments();
            Some(format!("{}/48", Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0)))
        }
        _ => None,
    }
}

/// The groups a failed authentication from `address` counts in, each with its allowance a minute:
/// the address (IPv6: its /64), and an IPv6 address's /48.
pub fn failure_groups(address: &str) -> Vec<(String, u32)> {
    let per_address = crate::rate_limit::AUTH_FAILURES_PER_MINUTE;
    std::iter::once((address_group(address), per_address))
        .chain(network_group(address).map(|n| (n, NETWORK_FAILURES_PER_MINUTE)))
        .collect()
}

/// Names (addresses or key hashes) and until when (Unix ms) each is remembered, with a value.
#[derive(Debug)]
struct Expiring<T = ()> {
    until: HashMap<String, (i64, T)>,
    capacity: usize,
}

impl<T: Clone> Expiring<T> {
    fn new(capacity: usize) -> Self {
        Expiring { until: HashMap::new(), capacity }
    }

    fn until(&self, name: &str, now_ms: i64) -> Option<i64> {
        self.get(name, now_ms).map(|(until, _)| until)
    }

    fn get(&self, name: &str, now_ms: i64) -> Option<(i64, T)> {
        self.until.get(name).cloned().filter(|(until, _)| *until > now_ms)
    }

    fn remember(&mut self, name: &str, until_ms: i64, value: T, now_ms: i64) {
        if let Some(entry) = self.until.get_mut(name) {
            *entry = (until_ms, value);
            return;
        }
        if self.until.len() >= self.capacity {
            self.until.retain(|_, (until, _)| *until > now_ms);
        }
        if self.until.len() >= self.capacity {
            let soonest =
                self.until.iter().min_by_key(|(_, (until, _))| *until).map(|(name, _)| name.clone());
            if let Some(soonest) = soonest {
                self.until.remove(&soonest);
            }
        }
        self.until.insert(name.to_owned(), (until_ms, value));
    }
}

/// The isolate's memory of blocked addresses, unknown keys, recently admitted keys and where
/// re-hashed keys' guards are.
#[derive(Debug)]
pub struct AbuseMemory {
    blocked_addresses: Expiring,
    unknown_keys: Expiring,
    recent_keys: Expiring,
    /// Browser keys' visitors over their window (with the window's limit) and origins refused
    /// (SPEC §24), by key hash: answered from memory until the window ends (a minute for an origin).
    browser_refusals: Expiring<u32>,
    /// The visitors of browser keys this isolate admits from a lease (SPEC §24).
    pub visitors: crate::browser::VisitorWindows,
    /// Re-hashed keys' guards (SPEC §26): a key's hash under the current pepper, and the name of
    /// its guard, learnt from the object of that hash (which only points there).
    guards: Expiring<String>,
}

impl Default for AbuseMemory {
    fn default() -> Self {
        Self::with_capacity(MEMORY_ENTRIES)
    }
}

impl AbuseMemory {
    pub fn with_capacity(entries: usize) -> Self {
        AbuseMemory {
            blocked_addresses: Expiring::new(entries),
            unknown_keys: Expiring::new(entries),
            recent_keys: Expiring::new(entries),
            browser_refusals: Expiring::new(entries),
            visitors: crate::browser::VisitorWindows::default(),
            guards: Expiring::new(entries),
        }
    }

    /// Until when (Unix ms) the address (its [`address_group`]) is over its limit, if it is now.
    pub fn blocked_until(&self, address: &str, now_ms: i64) -> Option<i64> {
        failure_groups(address)
            .iter()
            .filter_map(|(group, _)| self.blocked_addresses.until(group, now_ms))
            .max()
    }

    /// A group's guard refused it (one of [`failure_groups`]) until `until_ms` (the end of its window).
    pub fn block(&mut self, group: &str, until_ms: i64, now_ms: i64) {
        self.blocked_addresses.remember(group, until_ms, (), now_ms);
    }

    pub fn is_unknown_key(&self, key_hash: &str, now_ms: i64) -> bool {
        self.unknown_keys.until(key_hash, now_ms).is_some()
    }

    /// The key's guard found no key with this hash.
    pub fn remember_unknown_key(&mut self, key_hash: &str, now_ms: i64) {
        self.unknown_keys.remember(key_hash, now_ms + UNKNOWN_KEY_TTL_MS, (), now_ms);
    }

    /// The key's guard found it under this hash: it is not unknown (any more).
    pub fn forget_unknown_key(&mut self, key_hash: &str) {
        self.unknown_keys.until.remove(key_hash);
    }

    /// The guard of the key whose hash is `key_hash`, when it is another object (SPEC §26).
    pub fn guard_of(&self, key_hash: &str, now_ms: i64) -> Option<String> {
        self.guards.get(key_hash, now_ms).map(|(_, guard)| guard)
    }

    /// The object of `key_hash` said the key's guard is `guard` (a re-hashed key, SPEC §26).
    pub fn remember_guard(&mut self, key_hash: &str, guard: &str, now_ms: i64) {
        self.guards.remember(key_hash, now_ms + GUARD_TTL_MS, guard.to_owned(), now_ms);
    }

    pub fn is_recent_key(&self, key_hash: &str, now_ms: i64) -> bool {
        self.recent_keys.until(key_hash, now_ms).is_some()
    }

    /// The key's guard admitted this key (within its limits or not: it is a valid key).
    pub fn remember_recent_key(&mut self, key_hash: &str, now_ms: i64) {
        self.recent_keys.remember(key_hash, now_ms + RECENT_KEY_TTL_MS, (), now_ms);
    }

    /// The guard of the browser key `key_hash` refused the visitor at `address` (its group) over
    /// its window of `limit`, which ends at `until_ms`.
    pub fn block_visitor(&mut self, key_hash: &str, address: &str, limit: u32, until_ms: i64, now_ms: i64) {
        self.browser_refusals.remember(&format!("visitor {key_hash} {address}"), until_ms, limit, now_ms);
    }

    /// Until when the visitor at `address` is over the browser key's window, and its limit, if it
    /// is now.
    pub fn visitor_blocked_until(&self, key_hash: &str, address: &str, now_ms: i64) -> Option<(i64, u32)> {
        self.browser_refusals.get(&format!("visitor {key_hash} {address}"), now_ms)
    }

    /// The browser key `key_hash` does not allow pages of `origin`.
    pub fn refuse_origin(&mut self, key_hash: &str, origin: &str, now_ms: i64) {
        let name = format!("origin {key_hash} {origin}");
        self.browser_refusals.remember(&name, now_ms + REFUSED_ORIGIN_TTL_MS, 0, now_ms);
    }

    /// Forgets the origins the browser key `key_hash` was remembered to refuse (its
    /// `allowed_origins` changed).
    pub fn forget_refused_origins(&mut self, key_hash: &str) {
        let prefix = format!("origin {key_hash} ");
        self.browser_refusals.until.retain(|name, _| !name.starts_with(&prefix));
    }

    pub fn is_refused_origin(&self, key_hash: &str, origin: &str, now_ms: i64) -> bool {
        self.browser_refusals.until(&format!("origin {key_hash} {origin}"), now_ms).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_795_942_800_000;

    #[test]
    fn a_browser_keys_refusals_are_remembered_per_key_until_their_window_ends() {
        let mut memory = AbuseMemory::default();
        memory.block_visitor("h1", "203.0.113.7", 10, T0 + 30_000, T0);
        assert_eq!(memory.visitor_blocked_until("h1", "203.0.113.7", T0 + 29_999), Some((T0 + 30_000, 10)));
        assert_eq!(memory.visitor_blocked_until("h1", "203.0.113.7", T0 + 30_000), None);
        assert_eq!(memory.visitor_blocked_until("h2", "203.0.113.7", T0), None, "another key's visitor");
        assert_eq!(memory.blocked_until("203.0.113.7", T0), None, "not the address's anonymous limit");
        memory.refuse_origin("h1", "https://evil.example", T0);
        assert!(memory.is_refused_origin("h1", "https://evil.example", T0 + REFUSED_ORIGIN_TTL_MS - 1));
        assert!(!memory.is_refused_origin("h1", "https://evil.example", T0 + REFUSED_ORIGIN_TTL_MS));
        assert!(!memory.is_refused_origin("h2", "https://evil.example", T0));
        memory.refuse_origin("h2", "https://evil.example", T0);
        memory.forget_refused_origins("h1");
        assert!(!memory.is_refused_origin("h1", "https://evil.example", T0), "the key's list changed");
        assert!(memory.is_refused_origin("h2", "https://evil.example", T0), "another key's stays");
    }

    #[test]
    fn an_unknown_key_is_remembered_for_sixty_seconds() {
        let mut memory = AbuseMemory::default();
        assert!(!memory.is_unknown_key("h1", T0));
        memory.remember_unknown_key("h1", T0);
        assert!(memory.is_unknown_key("h1", T0 + 59_999));
        assert!(!memory.is_unknown_key("h1", T0 + 60_000));
        assert!(!memory.is_unknown_key("h2", T0));
    }

    #[test]
    fn a_blocked_address_is_blocked_until_its_window_ends() {
        let mut memory = AbuseMemory::default();
        memory.block(&address_group("192.0.2.1"), T0 + 60_000, T0 + 20_000);
        assert_eq!(memory.blocked_until("192.0.2.1", T0 + 59_999), Some(T0 + 60_000));
        assert_eq!(memory.blocked_until("192.0.2.1", T0 + 60_000), None);
        assert_eq!(memory.blocked_until("192.0.2.2", T0 + 30_000), None);
    }

    #[test]
    fn ipv4_is_limited_per_address_and_ipv6_per_64() {
        assert_eq!(address_group("203.0.113.7"), "203.0.113.7");
        assert_eq!(address_group(" 203.0.113.7 "), "203.0.113.7");
        assert_eq!(address_group("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(address_group("::ffff:cb00:7107"), "203.0.113.7");
        assert_eq!(address_group("2001:db8:1:2::7"), "2001:db8:1:2::/64");
        assert_eq!(address_group("2001:0DB8:0001:0002:ffff:0:0:1"), "2001:db8:1:2::/64");
        assert_eq!(address_group("2001:db8:1:3::7"), "2001:db8:1:3::/64");
        assert_eq!(address_group("::1"), "::/64");
        // Not an address (a local tool's header): kept as it is.
        assert_eq!(address_group("unknown"), "unknown");
    }

    #[test]
    fn a_blocked_ipv6_address_blocks_its_whole_64_and_nothing_beside_it() {
        let mut memory = AbuseMemory::default();
        memory.block(&address_group("2001:db8:aa:bb::1"), T0 + 60_000, T0);
        assert_eq!(memory.blocked_until("2001:db8:aa:bb:1234:5678:9abc:def0", T0), Some(T0 + 60_000));
        assert_eq!(memory.blocked_until("2001:db8:aa:bc::1", T0), None);
        memory.block(&address_group("::ffff:192.0.2.9"), T0 + 60_000, T0);
        assert_eq!(memory.blocked_until("192.0.2.9", T0), Some(T0 + 60_000));
        assert_eq!(memory.blocked_until("192.0.2.10", T0), None);
    }

    #[test]
    fn a_recent_key_passes_for_ten_minutes_after_its_last_admission() {
        let mut memory = AbuseMemory::default();
        memory.remember_recent_key("k", T0);
        memory.remember_recent_key("k", T0 + 300_000);
        assert!(memory.is_recent_key("k", T0 + 899_999));
        assert!(!memory.is_recent_key("k", T0 + 900_000));
    }

    #[test]
    fn a_full_list_drops_expired_entries_first_then_the_one_expiring_soonest() {
        let mut memory = AbuseMemory::with_capacity(3);
        memory.remember_unknown_key("old", T0);
        memory.remember_unknown_key("a", T0 + 10_000);
        memory.remember_unknown_key("b", T0 + 20_000);
        // "old" has expired by now: it goes, the others stay.
        memory.remember_unknown_key("c", T0 + 65_000);
        assert!(["a", "b", "c"].iter().all(|k| memory.is_unknown_key(k, T0 + 65_000)));
        // Nothing has expired: "a" expires soonest and goes.
        memory.remember_unknown_key("d", T0 + 66_000);
        assert!(!memory.is_unknown_key("a", T0 + 66_000));
        assert!(["b", "c", "d"].iter().all(|k| memory.is_unknown_key(k, T0 + 66_000)));
        assert_eq!(memory.unknown_keys.until.len(), 3);
    }

    #[test]
    fn an_ipv6_address_counts_in_its_64_and_its_48_an_ipv4_address_in_itself() {
        assert_eq!(
            failure_groups("2001:db8:1:2:3:4:5:6"),
            vec![
                ("2001:db8:1:2::/64".to_owned(), 20),
                ("2001:db8:1::/48".to_owned(), NETWORK_FAILURES_PER_MINUTE)
            ]
        );
        assert_eq!(failure_groups("192.0.2.7"), vec![("192.0.2.7".to_owned(), 20)]);
        assert_eq!(failure_groups("::ffff:192.0.2.7"), vec![("192.0.2.7".to_owned(), 20)]);
        assert_eq!(network_group("not an address"), None);
    }

    #[test]
    fn a_blocked_48_blocks_every_64_in_it() {
        let mut memory = AbuseMemory::default();
        memory.block("2001:db8:1::/48", T0 + 60_000, T0);
        assert_eq!(memory.blocked_until("2001:db8:1:ffff::1", T0), Some(T0 + 60_000));
        assert_eq!(memory.blocked_until("2001:db8:2::1", T0), None);
    }
}
