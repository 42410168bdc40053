//! `Server-Timing` on every answer (SPEC §16): how long the gateway took in all, split into its
//! own work and the waits it made — its Durable Objects (`guard`: the key's guard and claim
//! objects, the event ledger on `/v1/track`) and, on a proxied route, the origin — so an
//! integrator sees at a glance whether the time is theirs or ours. `SERVER_TIMING=off` leaves the
//! header out.
//!
//! Milliseconds, as the runtime's clock gives them: workerd (deployed and local alike) does not
//! move the clock while a request computes, only with I/O, so `gateway;dur` is the time of the
//! gateway's own I/O (D1, KV, the queue send), 0 for a request that only computes.

/// The time an answer took, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// From the request's arrival to the answer.
    pub total_ms: i64,
    /// Waiting on Durable Objects; `None` when none was called.
    pub guard_ms: Option<i64>,
    /// Waiting on the origin (proxy mode); `None` when it was not called.
    pub origin_ms: Option<i64>,
}

impl Spent {
    /// The header's value: `gateway;dur=<own work>`, then `guard;dur=…` and `origin;dur=…` when
    /// they were waited on. The parts never add up to more than the total (a clock that moved
    /// backwards counts as no time).
    pub fn header(&self) -> String {
        let total = self.total_ms.max(0);
        let guard = self.guard_ms.map(|ms| ms.clamp(0, total));
        let origin = self.origin_ms.map(|ms| ms.clamp(0, total - guard.unwrap_or(0)));
        let own = total - guard.unwrap_or(0) - origin.unwrap_or(0);
        let mut value = format!("gateway;dur={own}");
        for (name, ms) in [("guard", guard), ("origin", origin)] {
            if let Some(ms) = ms {
                value.push_str(&format!(", {name};dur={ms}"));
            }
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_own_time_is_the_total_without_its_waits() {
        let spent = |total_ms, guard_ms, origin_ms| Spent { total_ms, guard_ms, origin_ms }.header();
        assert_eq!(spent(3, None, None), "gateway;dur=3");
        assert_eq!(spent(12, Some(9), None), "gateway;dur=3, guard;dur=9");
        assert_eq!(spent(40, Some(2), Some(30)), "gateway;dur=8, guard;dur=2, origin;dur=30");
        assert_eq!(
            spent(0, Some(0), None),
            "gateway;dur=0, guard;dur=0",
            "a guard called in no measurable time"
        );
        assert_eq!(
            spent(5, Some(9), Some(4)),
            "gateway;dur=0, guard;dur=5, origin;dur=0",
            "never more than the total"
        );
        assert_eq!(spent(-3, None, None), "gateway;dur=0");
    }

    #[test]
    fn the_header_parses_as_rfc_9651_list_members_with_a_dur_parameter() {
        // Server-Timing (W3C) is a list of `name;dur=number` members.
        let value = Spent { total_ms: 40, guard_ms: Some(2), origin_ms: Some(30) }.header();
        let parsed: Vec<(String, i64)> = value
            .split(", ")
            .map(|member| {
                let (name, dur) = member.split_once(";dur=").expect("a dur parameter");
                (name.to_owned(), dur.parse().expect("a number"))
            })
            .collect();
        assert_eq!(parsed, [("gateway".to_owned(), 8), ("guard".to_owned(), 2), ("origin".to_owned(), 30)]);
    }
}
