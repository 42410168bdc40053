//! When to retry and how long to wait (SPEC §14, the retry classification of seed 2). Pure
//! functions of the failure, the time and a random number: the client's send loop asks them, and
//! the unit tests below drive them with a fixed clock and fixed random draws.

use std::time::{Duration, SystemTime};

/// The first exponential wait; each later one doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The ceiling of the exponential wait.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How many attempts a call makes by default, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// Why an attempt did not succeed, as far as the retry decision cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure<'a> {
    /// The server answered with a status outside 2xx; `code` and `retryable` come from the error
    /// body (`""` and `false` when it had none).
    Status { status: u16, code: &'a str, retryable: bool },
    /// No answer within the timeout.
    Timeout,
    /// The connection failed (refused, reset, DNS, TLS) or the answer broke off.
    Network,
}

/// Whether a failed attempt may be tried again. `idempotent` is true for GET and HEAD and for any
/// request that carries an `Idempotency-Key` (or, for `/v1/track`, an `event_id` on every item):
/// a repeat of such a request cannot do the work twice.
///
/// | failure | retried |
/// |---|---|
/// | 429 `RATE_LIMIT_EXCEEDED` (any 429 that is not a quota) | always |
/// | 429 `QUOTA_EXCEEDED`, `TRIAL_QUOTA_EXCEEDED` (`*QUOTA*`) | never: it lasts until the month ends |
/// | 409 with `retryable: true` (`IDEMPOTENCY_KEY_IN_USE`) | always |
/// | other 409 (`IDEMPOTENCY_KEY_REUSED`, …) | never: read the state and decide again |
/// | 500 | always (the server promises nothing was done) |
/// | 408, 502, 503, 504, timeouts, network errors | only when idempotent: the work may have been done |
/// | 400, 401, 402, 403, 404, 413, 422 and any other status | never: the same request gets the same answer |
pub fn should_retry(failure: Failure<'_>, idempotent: bool) -> bool {
    match failure {
        Failure::Status { status: 429, code, .. } => !code.contains("QUOTA"),
        Failure::Status { status: 409, retryable, .. } => retryable,
        Failure::Status { status: 500, .. } => true,
        Failure::Status { status: 408 | 502 | 503 | 504, .. } => idempotent,
        Failure::Status { .. } => false,
        Failure::Timeout | Failure::Network => idempotent,
    }
}

/// A source of uniform random numbers in `[0, 1]`: the operating system's in the client, a fixed
/// sequence in tests.
pub trait RandomSource: Send + Sync {
    fn unit(&self) -> f64;
}

/// The time the SDK reads: when a key's window resets, what a `Retry-After` date means. The
/// default is the system clock; a test injects its own (waits still take real time).
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Random numbers from the operating system (`getrandom`).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRandom;

impl RandomSource for OsRandom {
    fn unit(&self) -> f64 {
        let mut bytes = [0u8; 8];
        // The OS source does not fail on supported platforms; should it, no jitter is no harm.
        if getrandom::getrandom(&mut bytes).is_err() {
            return 0.0;
        }
        (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The wait before the attempt after failed attempt number `attempt` (1 for the first failure).
///
/// * With a `Retry-After` (already turned into a duration by [`parse_retry_after`]): that long,
///   plus up to 10 % more (`random` × 10 %), so clients told the same second do not return in the
///   same instant.
/// * Without: exponential from 1 s, doubling per attempt, capped at 30 s, times a factor in
///   `[0.5, 1]` (`0.5 + random / 2`).
pub fn retry_delay(attempt: u32, retry_after: Option<Duration>, random: f64) -> Duration {
    let random = random.clamp(0.0, 1.0);
    match retry_after {
        Some(wait) => wait.mul_f64(1.0 + 0.1 * random),
        None => {
            let doublings = attempt.saturating_sub(1).min(16);
            let base = FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF);
            base.mul_f64(0.5 + 0.5 * random)
        }
    }
}

/// What the send loop does after failed attempt `attempt`: the wait before the next attempt, or
/// `None` to give up — the attempts are spent, the failure is never retried, or the wait would
/// end after the call's deadline (`time_left`; `None` without one).
pub fn next_wait(
    attempt: u32,
    max_attempts: u32,
    failure: Failure<'_>,
    idempotent: bool,
    retry_after: Option<Duration>,
    random: f64,
    time_left: Option<Duration>,
) -> Option<Duration> {
    let wait = retry_delay(attempt, retry_after, random);
    let fits = time_left.is_none_or(|left| wait < left);
    (attempt < max_attempts && should_retry(failure, idempotent) && fits).then_some(wait)
}

/// The proactive slow-down before an attempt: `window` (until the key's window resets, while the
/// last answer said none remain) plus up to 10 %, when the call may wait — more than one attempt
/// allowed and the wait ends before its deadline; `None`: send now (a call allowed one attempt,
/// or whose deadline ends first, gets the server's answer instead of being held).
pub fn pacing_wait(
    window: Duration,
    random: f64,
    max_attempts: u32,
    time_left: Option<Duration>,
) -> Option<Duration> {
    let wait = window.mul_f64(1.0 + 0.1 * random.clamp(0.0, 1.0));
    (max_attempts > 1 && time_left.is_none_or(|left| wait < left)).then_some(wait)
}

/// A `Retry-After` header value as a wait from `now`: delay-seconds (`"2"`) or an HTTP date
/// (`"Wed, 21 Oct 2026 07:28:00 GMT"`; a date in the past is no wait). Anything else is `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn status(status: u16, code: &str, retryable: bool) -> Failure<'_> {
        Failure::Status { status, code, retryable }
    }

    #[test]
    fn classification_follows_every_row_of_the_table() {
        // (failure, retried when idempotent, retried when not)
        let rows = [
            (status(429, "RATE_LIMIT_EXCEEDED", true), true, true),
            (status(429, "QUOTA_EXCEEDED", false), false, false),
            (status(429, "TRIAL_QUOTA_EXCEEDED", false), false, false),
            (status(409, "IDEMPOTENCY_KEY_IN_USE", true), true, true),
            (status(409, "PRIVACY_JOB_ACTIVE", true), true, true),
            (status(409, "IDEMPOTENCY_KEY_REUSED", false), false, false),
            (status(500, "INTERNAL_ERROR", true), true, true),
            (status(502, "", false), true, false),
            (status(503, "SERVICE_UNAVAILABLE", true), true, false),
            (status(504, "UPSTREAM_TIMEOUT", true), true, false),
            (status(408, "", false), true, false),
            (Failure::Timeout, true, false),
            (Failure::Network, true, false),
            (status(400, "VALIDATION_ERROR", false), false, false),
            (status(400, "IDEMPOTENCY_KEY_REQUIRED", false), false, false),
            (status(401, "INVALID_API_KEY", false), false, false),
            (status(402, "", false), false, false),
            (status(403, "FORBIDDEN", false), false, false),
            (status(404, "NOT_FOUND", false), false, false),
            (status(413, "PAYLOAD_TOO_LARGE", false), false, false),
            (status(422, "VALIDATION_ERROR", false), false, false),
            (status(405, "METHOD_NOT_ALLOWED", false), false, false),
        ];
        for (failure, idempotent, plain) in rows {
            assert_eq!(should_retry(failure, true), idempotent, "{failure:?}, idempotent request");
            assert_eq!(should_retry(failure, false), plain, "{failure:?}, request without a key");
        }
    }

    #[test]
    fn a_retryable_flag_does_not_override_a_never_row() {
        assert!(!should_retry(status(422, "VALIDATION_ERROR", true), true));
        assert!(!should_retry(status(429, "QUOTA_EXCEEDED", true), true));
    }

    /// Draws from a fixed list, in order.
    struct Draws(Mutex<Vec<f64>>);

    impl RandomSource for Draws {
        fn unit(&self) -> f64 {
            self.0.lock().unwrap().remove(0)
        }
    }

    #[test]
    fn exponential_wait_doubles_from_one_second_to_thirty_times_half_to_one() {
        let at_most: Vec<u64> =
            (1..=8).map(|attempt| retry_delay(attempt, None, 1.0).as_millis() as u64).collect();
        assert_eq!(at_most, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        let at_least: Vec<u64> =
            (1..=7).map(|attempt| retry_delay(attempt, None, 0.0).as_millis() as u64).collect();
        assert_eq!(at_least, [500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000]);
        assert_eq!(retry_delay(3, None, 0.5), Duration::from_millis(3_000));
        assert_eq!(retry_delay(u32::MAX, None, 1.0), MAX_BACKOFF);
    }

    #[test]
    fn retry_after_is_waited_with_up_to_ten_percent_more() {
        let random = Draws(Mutex::new(vec![0.0, 1.0, 0.25]));
        let wait = |seconds| retry_delay(4, Some(Duration::from_secs(seconds)), random.unit());
        assert_eq!(wait(2), Duration::from_secs(2));
        assert_eq!(wait(2), Duration::from_millis(2_200));
        assert_eq!(wait(40), Duration::from_secs(41), "a Retry-After beyond 30 s is still honoured");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_against_the_clock() {
        let now = httpdate::parse_http_date("Mon, 30 Nov 2026 16:00:00 GMT").unwrap();
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 16:00:07 GMT", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 15:59:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn os_random_stays_within_zero_and_one() {
        assert!((0..1_000).map(|_| OsRandom.unit()).all(|r| (0.0..1.0).contains(&r)));
    }
}
