//! The proactive slow-down (SPEC §14): the last `X-RateLimit-Remaining` / `X-RateLimit-Reset`
//! seen for each API key, shared by every clone of a [`Client`](crate::Client), so that while a
//! key's window is used up no task sends a request that can only earn a 429.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// What the server last said about one key's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    remaining: u64,
    /// Unix seconds of the window's end.
    reset: u64,
}

/// Windows by API key (kept by a SHA-256 of the key, not the key itself).
#[derive(Debug, Default)]
pub(crate) struct RateWindows {
    windows: Mutex<HashMap<[u8; 32], Window>>,
}

pub(crate) fn key_id(api_key: &str) -> [u8; 32] {
    Sha256::digest(api_key.as_bytes()).into()
}

impl RateWindows {
    /// Remembers a response's rate-limit headers (both must be present and numeric).
    pub(crate) fn observe(&self, key: &[u8; 32], remaining: Option<&str>, reset: Option<&str>) {
        let (Some(remaining), Some(reset)) =
            (remaining.and_then(|r| r.trim().parse().ok()), reset.and_then(|r| r.trim().parse().ok()))
        else {
            return;
        };
        self.windows.lock().expect("rate windows").insert(*key, Window { remaining, reset });
    }

    /// How long a request with `key` should wait at `now` before it is sent: until the window's
    /// reset while the last answer said none remain and the reset is still ahead; else not at all.
    pub(crate) fn wait(&self, key: &[u8; 32], now: SystemTime) -> Option<Duration> {
        let window = *self.windows.lock().expect("rate windows").get(key)?;
        if window.remaining > 0 {
            return None;
        }
        let reset = UNIX_EPOCH + Duration::from_secs(window.reset);
        reset.duration_since(now).ok().filter(|wait| !wait.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix_ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(unix_ms)
    }

    #[test]
    fn an_empty_window_holds_requests_until_its_reset() {
        let windows = RateWindows::default();
        let key = key_id("gh_s_example");
        assert_eq!(windows.wait(&key, at(1_000_000)), None, "nothing seen yet");
        windows.observe(&key, Some("3"), Some("1060"));
        assert_eq!(windows.wait(&key, at(1_000_000)), None, "requests remain");
        windows.observe(&key, Some("0"), Some("1060"));
        assert_eq!(windows.wait(&key, at(1_000_000)), Some(Duration::from_secs(60)));
        assert_eq!(windows.wait(&key, at(1_059_750)), Some(Duration::from_millis(250)));
        assert_eq!(windows.wait(&key, at(1_060_000)), None, "the reset has come");
        assert_eq!(windows.wait(&key, at(1_200_000)), None, "a stale window holds nothing");
    }

    #[test]
    fn windows_are_per_key_and_ignore_unreadable_headers() {
        let windows = RateWindows::default();
        let (a, b) = (key_id("gh_s_a"), key_id("gh_s_b"));
        windows.observe(&a, Some("0"), Some("1060"));
        assert!(windows.wait(&a, at(1_000_000)).is_some());
        assert_eq!(windows.wait(&b, at(1_000_000)), None);
        windows.observe(&a, Some("many"), Some("1060"));
        windows.observe(&a, Some("5"), None);
        assert!(windows.wait(&a, at(1_000_000)).is_some(), "unreadable headers change nothing");
    }
}
