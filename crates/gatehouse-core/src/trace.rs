//! W3C trace context (SPEC §25): the trace a request belongs to, and Gatehouse's own span in it.
//!
//! A request that carries a valid `traceparent` continues its trace: Gatehouse's span is a child
//! of the client's, and the client's flags and `tracestate` travel on unchanged. Any other request
//! (none sent, or one malformed — never an error) starts a new trace whose id Gatehouse made at
//! random, so its flags say so (Level 2's `random` flag) and ask the origin to record it
//! (`sampled`). The origin of a proxied route, and the receivers of the webhooks the request
//! caused, get `traceparent` with Gatehouse's span as their parent.

/// `sampled` and Level 2's `random`: the flags of a trace Gatehouse starts, and the only ones
/// version 00 defines (the others are reserved: passed on as zero).
const STARTED_FLAGS: u8 = 0x03;
/// The longest `tracestate` passed on (W3C: platforms propagate at least 512 characters).
const TRACESTATE_MAX: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// Gatehouse's span: 16 lowercase hex digits.
    pub span_id: String,
    /// The client's span, when the request continued a trace.
    pub parent_id: Option<String>,
    pub flags: u8,
    /// The client's `tracestate`, passed on as received (only with a valid `traceparent`).
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The request's trace: continued from `traceparent` when it is valid, else started with
    /// ids from `random` (16 bytes for the trace, 8 for the span; only the span's are used when
    /// the trace continues).
    pub fn of(traceparent: Option<&str>, tracestate: Option<&str>, random: [u8; 24]) -> Self {
        let span_id = crate::encoding::hex(&random[16..]);
        match traceparent.and_then(parse) {
            Some((trace_id, parent_id, flags)) => TraceContext {
                trace_id: trace_id.to_owned(),
                span_id,
                parent_id: Some(parent_id.to_owned()),
                flags: flags & STARTED_FLAGS,
                // Printable ASCII only, and no longer than we pass on: else none (never an error).
                tracestate: tracestate
                    .map(str::trim)
                    .filter(|s| {
                        !s.is_empty()
                            && s.len() <= TRACESTATE_MAX
                            && s.bytes().all(|b| (0x20..0x7f).contains(&b))
                    })
                    .map(str::to_owned),
            },
            None => TraceContext {
                trace_id: crate::encoding::hex(&random[..16]),
                span_id,
                parent_id: None,
                flags: STARTED_FLAGS,
                tracestate: None,
            },
        }
    }

    /// The `traceparent` a callee of this request gets: this trace, Gatehouse's span as parent.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags)
    }
}

/// Whether `id` is a trace id as the log keeps it (for a `trace_id` filter).
pub fn is_trace_id(id: &str) -> bool {
    id.len() == 32 && lower_hex(id) && !zeros(id)
}

/// `(trace id, parent id, flags)` of a valid `traceparent` (W3C Trace Context §3.2): version `00`
/// exactly as specified, or a later version (not `ff`) whose first four fields have version 00's
/// form, followed by nothing or by `-` and more.
fn parse(header: &str) -> Option<(&str, &str, u8)> {
    let header = header.trim();
    let bytes = header.as_bytes();
    if bytes.len() < 55 {
        return None;
    }
    let version = header.get(..2)?;
    let (trace_id, parent_id, flags) = (header.get(3..35)?, header.get(36..52)?, header.get(53..55)?);
    let dashes = [bytes[2], bytes[35], bytes[52]] == [b'-'; 3];
    let rest_ok = match version {
        "00" => bytes.len() == 55,
        "ff" => false,
        _ => bytes.len() == 55 || bytes[55] == b'-',
    };
    let well_formed = dashes
        && rest_ok
        && lower_hex(version)
        && lower_hex(trace_id)
        && lower_hex(parent_id)
        && lower_hex(flags)
        && !zeros(trace_id)
        && !zeros(parent_id);
    well_formed.then(|| (trace_id, parent_id, u8::from_str_radix(flags, 16).unwrap_or(0)))
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn zeros(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANDOM: [u8; 24] = [0xab; 24];
    const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_continued_with_our_span_as_the_parent() {
        let t = TraceContext::of(Some(CLIENT), Some("congo=t61rcWkgMzE"), RANDOM);
        assert_eq!(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.parent_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(t.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        // The client's flags as they came (no `random` added to an id Gatehouse did not make).
        assert_eq!(t.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-abababababababab-01");
        // A later version: its first fields are read, the rest ignored.
        let v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-whatever";
        assert_eq!(
            TraceContext::of(Some(v1), None, RANDOM).traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-abababababababab-00"
        );
    }

    /// Review (LOW): reserved flag bits go on as zero; a `tracestate` too long or with control
    /// characters is dropped, the trace kept.
    #[test]
    fn reserved_flags_and_a_bad_tracestate_are_not_passed_on() {
        let t =
            TraceContext::of(Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff"), None, RANDOM);
        assert_eq!(t.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-abababababababab-03");
        for state in ["a=b\r\nx-injected: 1", &"k=v,".repeat(200), "тест=1"] {
            let t = TraceContext::of(Some(CLIENT), Some(state), RANDOM);
            assert_eq!(
                (t.trace_id.as_str(), t.tracestate),
                ("4bf92f3577b34da6a3ce929d0e0e4736", None),
                "{state:?}"
            );
        }
    }

    #[test]
    fn none_or_a_malformed_one_starts_a_new_random_sampled_trace_and_drops_tracestate() {
        let bad = [
            None,
            Some(""),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"),
            Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
            Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"),
            Some("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"),
            Some("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"),
            Some("тест-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("€0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ];
        for header in bad {
            let t = TraceContext::of(header, Some("congo=t61rcWkgMzE"), RANDOM);
            assert_eq!(t.trace_id, "ab".repeat(16), "{header:?}");
            assert_eq!((t.parent_id.clone(), t.tracestate.clone()), (None, None), "{header:?}");
            assert_eq!(t.traceparent(), format!("00-{}-{}-03", "ab".repeat(16), "ab".repeat(8)));
        }
    }

    #[test]
    fn trace_ids_for_the_log_filter() {
        assert!(is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            "00000000000000000000000000000000",
            "4bf92f35",
            "4bf92f3577b34da6a3ce929d0e0e473g",
        ] {
            assert!(!is_trace_id(bad), "{bad}");
        }
    }
}
