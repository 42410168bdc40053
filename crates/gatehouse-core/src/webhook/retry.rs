//! When to try again (SPEC §10, §12.1): the schedule with jitter, the receiver's `Retry-After`,
//! and the judgement of one attempt.

/// The longest receiver `Retry-After` honoured (SPEC §12.1): 24 hours.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 86_400;

/// Seconds to wait after the `failed_attempts`-th failed attempt, or `None` when the schedule is
/// used up and the delivery fails. `jitter` in [-1, 1] moves the delay by up to ±10 %; a longer
/// `Retry-After` from the receiver wins, up to [`MAX_RETRY_AFTER_SECONDS`].
pub fn retry_delay(
    failed_attempts: u32,
    schedule: &[u64],
    jitter: f64,
    retry_after: Option<u64>,
) -> Option<u64> {
    let base = *schedule.get(failed_attempts.checked_sub(1)? as usize)?;
    let jittered = (base as f64 * (1.0 + 0.1 * jitter.clamp(-1.0, 1.0))).round() as u64;
    Some(jittered.max(retry_after.unwrap_or(0).min(MAX_RETRY_AFTER_SECONDS)).max(1))
}

/// A receiver's `Retry-After`: delay-seconds, or an HTTP date (IMF-fixdate, or the obsolete RFC 850
/// and asctime forms RFC 9110 asks recipients to accept; the `httpdate` crate, 7× faster than the
/// parser we had) relative to `now_ms`; at most [`MAX_RETRY_AFTER_SECONDS`] however far away it
/// points (`99999999999`, a date in year 99999).
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<u64> {
    let v = value.trim();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(v) {
        // Too many digits for a u64 is still "later than the cap".
        return Some(v.parse::<u64>().unwrap_or(u64::MAX).min(MAX_RETRY_AFTER_SECONDS));
    }
    let Ok(at) = httpdate::parse_http_date(v) else {
        // An IMF-fixdate after the year 9999, which the crate does not read, is later than the cap.
        let parts: Vec<&str> = v.split_whitespace().collect();
        let far = parts.len() == 6
            && parts[5] == "GMT"
            && digits(parts[3])
            && parts[3].trim_start_matches('0').len() > 4;
        return far.then_some(MAX_RETRY_AFTER_SECONDS);
    };
    let at_ms =
        at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64);
    let seconds = at_ms.saturating_sub(now_ms).max(0) / 1000;
    Some((seconds as u64).min(MAX_RETRY_AFTER_SECONDS))
}

/// What a receiver answered, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverOutcome {
    Answered {
        status: u16,
        retry_after: Option<String>,
        excerpt: String,
    },
    /// A timeout or a network error.
    Unreachable(String),
}

/// What one attempt decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub status: &'static str,
    pub next_attempt_ms: Option<i64>,
    pub response_code: Option<u16>,
    pub error: Option<String>,
    /// 410 Gone: the subscription is disabled and its pending deliveries fail.
    pub disable_subscription: bool,
}

/// Judges the `attempt`-th attempt (1-based): 2xx delivered; 410 fails and disables; anything
/// else is retried on the schedule, and fails when the schedule is used up.
pub fn judge(attempt: u32, reply: &ReceiverOutcome, schedule: &[u64], jitter: f64, now_ms: i64) -> Judgement {
    let (code, error, retry_after) = match reply {
        ReceiverOutcome::Answered { status, .. } if (200..300).contains(status) => {
            return Judgement {
                status: "delivered",
                next_attempt_ms: None,
                response_code: Some(*status),
                error: None,
                disable_subscription: false,
            };
        }
        ReceiverOutcome::Answered { status: 410, .. } => {
            return Judgement {
                status: "failed",
                next_attempt_ms: None,
                response_code: Some(410),
                error: Some("410 Gone: the subscription was disabled".into()),
                disable_subscription: true,
            };
        }
        ReceiverOutcome::Answered { status, retry_after, .. } => {
            let honoured = matches!(status, 429 | 503)
                .then(|| retry_after.as_deref().and_then(|v| parse_retry_after(v, now_ms)))
                .flatten();
            (Some(*status), Some(format!("receiver answered {status}")), honoured)
        }
        ReceiverOutcome::Unreachable(e) => (None, Some(e.clone()), None),
    };
    match retry_delay(attempt, schedule, jitter, retry_after) {
        Some(delay) => Judgement {
            status: "pending",
            next_attempt_ms: Some(
                now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX).saturating_mul(1000)),
            ),
            response_code: code,
            error,
            disable_subscription: false,
        },
        None => Judgement {
            status: "failed",
            next_attempt_ms: None,
            response_code: code,
            error,
            disable_subscription: false,
        },
    }
}

/// An attempt whose target [`super::target_refusal`] refuses (the switch was turned off, or the row
/// predates the rules): no request is sent, and the delivery fails at once, since every later
/// attempt would be refused alike (a manual retry tries again, under the configuration of then).
pub fn refused(why: &str) -> Judgement {
    Judgement {
        status: "failed",
        next_attempt_ms: None,
        response_code: None,
        error: Some(format!("refused: url {why}")),
        disable_subscription: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::*;

    #[test]
    fn schedule_is_30s_5m_30m_2h_6h_then_none() {
        let s = [30, 300, 1800, 7200, 21600];
        let delays: Vec<_> = (1..=6).map(|n| retry_delay(n, &s, 0.0, None)).collect();
        assert_eq!(delays, [Some(30), Some(300), Some(1800), Some(7200), Some(21600), None]);
        assert_eq!(retry_delay(0, &s, 0.0, None), None);
        assert_eq!(retry_delay(1, &s, 1.0, None), Some(33));
        assert_eq!(retry_delay(1, &s, -1.0, None), Some(27));
        assert_eq!(retry_delay(2, &s, -5.0, None), Some(270), "jitter is clamped to ±10 %");
        assert_eq!(retry_delay(1, &s, 0.0, Some(120)), Some(120), "a longer Retry-After wins");
        assert_eq!(retry_delay(2, &s, 0.0, Some(120)), Some(300), "a shorter one does not");
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = crate::time::parse_rfc3339("1994-11-06T08:49:00Z").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(120));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(37));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:48:00 GMT", now), Some(0), "a past date: now");
        // The obsolete forms RFC 9110 §5.6.7 asks a recipient to accept.
        assert_eq!(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now), Some(37));
        assert_eq!(parse_retry_after("Sun Nov  6 08:49:37 1994", now), Some(37));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 UTC", now), None);
    }

    #[test]
    fn retry_after_is_honoured_up_to_24_hours_without_overflow() {
        let now = crate::time::parse_rfc3339("2026-11-29T08:00:00Z").unwrap();
        assert_eq!(parse_retry_after("86400", now), Some(86_400));
        assert_eq!(parse_retry_after("86401", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("99999999999", now), Some(MAX_RETRY_AFTER_SECONDS));
        assert_eq!(parse_retry_after("184467440737095516150000", now), Some(86_400), "beyond u64");
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 08:00:00 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Fri, 31 Dec 99999999999 23:59:59 GMT", now), Some(86_400));
        assert_eq!(parse_retry_after("Sun, 29 Nov 2026 09:00:00 GMT", now), Some(3600));
        let s = [30, 300];
        assert_eq!(retry_delay(1, &s, 0.0, Some(u64::MAX)), Some(86_400), "capped even if unparsed");
        let answered = ReceiverOutcome::Answered {
            status: 429,
            retry_after: Some("99999999999".into()),
            excerpt: String::new(),
        };
        let j = judge(1, &answered, &s, 0.0, now);
        assert_eq!(j.next_attempt_ms, Some(now + 86_400_000));
        let far = judge(1, &answered, &[u64::MAX / 2], 1.0, i64::MAX - 5);
        assert_eq!(far.next_attempt_ms, Some(i64::MAX), "saturates instead of overflowing");
    }

    #[test]
    fn a_refused_target_fails_the_delivery_at_once_with_its_reason() {
        let why = target_refusal("https://198.18.0.1/", true, &[]).unwrap_err();
        let j = refused(&why);
        assert_eq!(
            (j.status, j.next_attempt_ms, j.response_code, j.disable_subscription),
            ("failed", None, None, false)
        );
        assert_eq!(
            j.error.as_deref(),
            Some("refused: url must not point to a benchmarking address (198.18.0.0/15)")
        );
    }

    #[test]
    fn judges_attempts_by_status_and_schedule() {
        let s = [30, 300];
        let answered = |status, retry_after: Option<&str>| ReceiverOutcome::Answered {
            status,
            retry_after: retry_after.map(String::from),
            excerpt: String::new(),
        };
        assert_eq!(judge(1, &answered(204, None), &s, 0.0, 0).status, "delivered");
        let j = judge(1, &answered(500, None), &s, 0.0, 1000);
        assert_eq!((j.status, j.next_attempt_ms, j.response_code), ("pending", Some(31_000), Some(500)));
        assert_eq!(judge(3, &answered(500, None), &s, 0.0, 0).status, "failed");
        let gone = judge(1, &answered(410, None), &s, 0.0, 0);
        assert!(gone.disable_subscription && gone.status == "failed");
        assert_eq!(judge(1, &answered(503, Some("600")), &s, 0.0, 0).next_attempt_ms, Some(600_000));
        assert_eq!(
            judge(1, &answered(500, Some("600")), &s, 0.0, 0).next_attempt_ms,
            Some(30_000),
            "only 429/503"
        );
        let down = judge(2, &ReceiverOutcome::Unreachable("timed out".into()), &s, 0.0, 0);
        assert_eq!(
            (down.status, down.response_code, down.error.as_deref()),
            ("pending", None, Some("timed out"))
        );
    }
}
