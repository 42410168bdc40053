//! Errors as RFC 9457 problem details (SPEC §25), for a client that asks for them with
//! `Accept: application/problem+json`; every other client keeps the envelope of SPEC §3.
//!
//! The `type` of an error is the section of the gateway's own error reference (`/errors`, a
//! static page of the deployment) that explains its code; a window's or the monthly quota's 429
//! is the IETF RateLimit draft's registered `quota-exceeded` type, with `violated-policies`
//! naming the policies of `RateLimit-Policy` that refused.

use serde_json::{json, Value};

use crate::error::{ApiError, ErrorCode};

/// The media type of a problem document.
pub const MEDIA_TYPE: &str = "application/problem+json";

/// The problem type the RateLimit draft registers for a request over a quota policy.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// Whether `accept` asks for problem details: it names `application/problem+json` with a
/// quality above zero and at least that of `application/json` (each by the most specific range
/// that matches it, RFC 9110 §12.5.1). `*/*`, `application/*` or no `Accept` keep the §3 envelope,
/// as does an `Accept` that allows no JSON type at all (an error is still JSON).
pub fn wanted(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let ranges: Vec<(&str, f32)> = accept.split(',').filter_map(media_range).collect();
    let named = ranges.iter().any(|(range, q)| range.eq_ignore_ascii_case(MEDIA_TYPE) && *q > 0.0);
    named && quality(&ranges, MEDIA_TYPE) >= quality(&ranges, "application/json")
}

/// One element of `Accept`: its range and its `q` (1 when not given; a malformed `q` is 0,
/// which a client never meant as a preference).
fn media_range(element: &str) -> Option<(&str, f32)> {
    let mut parts = element.split(';');
    let range = parts.next()?.trim();
    if range.is_empty() {
        return None;
    }
    let mut q = 1.0;
    for param in parts {
        if let Some((name, value)) = param.split_once('=') {
            if name.trim().eq_ignore_ascii_case("q") {
                q = value.trim().parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q)).unwrap_or(0.0);
            }
        }
    }
    Some((range, q))
}

/// The quality `ranges` give `media`: that of the most specific range matching it, 0 if none.
fn quality(ranges: &[(&str, f32)], media: &str) -> f32 {
    let kind = media.split('/').next().unwrap_or_default();
    ranges
        .iter()
        .filter_map(|(range, q)| {
            let specificity = match range.split_once('/') {
                Some(("*", "*")) => 1,
                Some((k, "*")) if k.eq_ignore_ascii_case(kind) => 2,
                _ if range.eq_ignore_ascii_case(media) => 3,
                _ => return None,
            };
            Some((specificity, *q))
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        .map_or(0.0, |(_, q)| q)
}

/// The short title of a code's problem type (the same for every occurrence).
pub fn title(code: ErrorCode) -> &'static str {
    use ErrorCode::*;
    match code {
        BadRequest | Unprocessable => "Validation error",
        IdempotencyKeyRequired => "Idempotency-Key required",
        InvalidApiKey => "Invalid API key",
        Forbidden => "Forbidden",
        NotFound => "Not found",
        MethodNotAllowed => "Method not allowed",
        IdempotencyKeyReused => "Idempotency-Key reused",
        IdempotencyKeyInUse => "Idempotency-Key in use",
        IdempotencyResponseNotStored => "Idempotent response not stored",
        Conflict => "Conflict",
        PayloadTooLarge => "Payload too large",
        RateLimitExceeded => "Rate limit exceeded",
        QuotaExceeded => "Quota exceeded",
        TrialQuotaExceeded => "Trial quota exceeded",
        Internal => "Internal error",
        UpstreamUnavailable => "Upstream unavailable",
        ServiceUnavailable => "Service unavailable",
        UpstreamTimeout => "Upstream timeout",
    }
}

/// The anchor of a code in the error reference: `RATE_LIMIT_EXCEEDED` → `rate-limit-exceeded`.
pub fn anchor(code: ErrorCode) -> String {
    code.as_str().to_ascii_lowercase().replace('_', "-")
}

/// The policies of `RateLimit-Policy` a 429 exceeded: the refusing window (its name in
/// `details.window`) or the month. Empty for any other error, and for a 429 no policy describes
/// (unauthenticated requests from one address).
pub fn violated_policies(error: &ApiError) -> Vec<String> {
    match error.code {
        ErrorCode::QuotaExceeded | ErrorCode::TrialQuotaExceeded => vec!["month".to_owned()],
        ErrorCode::RateLimitExceeded => {
            error.details.get("window").and_then(Value::as_str).map(str::to_owned).into_iter().collect()
        }
        _ => Vec::new(),
    }
}

/// The problem document of `error` for the request `request_id`, its `type` under the error
/// reference of the gateway at `origin` (`https://api.example.com`).
pub fn document(error: &ApiError, request_id: &str, origin: &str) -> Value {
    let violated = violated_policies(error);
    let kind = match violated.is_empty() {
        true => format!("{origin}/errors#{}", anchor(error.code)),
        false => QUOTA_EXCEEDED.to_owned(),
    };
    let mut doc = json!({
        "type": kind,
        "title": title(error.code),
        "status": error.status(),
        "detail": error.message,
        "instance": format!("urn:uuid:{request_id}"),
        "code": error.code.as_str(),
        "request_id": request_id,
        "retryable": error.code.retryable(),
        "details": error.details,
    });
    if !violated.is_empty() {
        doc["violated-policies"] = json!(violated);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_details_only_when_named_and_preferred() {
        let cases = [
            (None, false),
            (Some("application/problem+json"), true),
            (Some("application/json, application/problem+json"), true),
            (Some("application/problem+json, application/json;q=0.9"), true),
            (Some("application/json;q=1, application/problem+json;q=0.5"), false),
            (Some("application/problem+json;q=0"), false),
            (Some("APPLICATION/PROBLEM+JSON; Q=0.8, */*;q=0.1"), true),
            (Some("text/html, application/problem+json;q=0.9, application/*;q=0.8"), true),
            (Some("*/*"), false),
            (Some("application/*"), false),
            (Some("application/json"), false),
            (Some("text/html"), false),
            (Some("application/problem+json;q=abc"), false),
            (Some(""), false),
            (Some(" , ;q=1"), false),
        ];
        for (accept, expected) in cases {
            assert_eq!(wanted(accept), expected, "{accept:?}");
        }
    }

    #[test]
    fn a_document_has_the_rfc_9457_members_and_ours() {
        let e = ApiError::not_found("contact");
        let doc = document(&e, "0193-id", "https://api.example.com");
        assert_eq!(doc["type"], "https://api.example.com/errors#not-found");
        assert_eq!(doc["title"], "Not found");
        assert_eq!(doc["status"], 404);
        assert_eq!(doc["detail"], "No such contact.");
        assert_eq!(doc["instance"], "urn:uuid:0193-id");
        assert_eq!((doc["code"].as_str(), doc["request_id"].as_str()), (Some("NOT_FOUND"), Some("0193-id")));
        assert_eq!(doc["retryable"], false);
        assert!(doc["details"].as_object().is_some_and(|d| d.is_empty()));
        assert!(doc.get("violated-policies").is_none());
    }

    #[test]
    fn a_window_or_quota_refusal_is_the_drafts_quota_exceeded() {
        let window = ApiError::new(ErrorCode::RateLimitExceeded, "slow").with_detail("window", "minute");
        let doc = document(&window, "r", "https://g");
        assert_eq!(
            (doc["type"].as_str(), doc["violated-policies"].clone()),
            (Some(QUOTA_EXCEEDED), json!(["minute"]))
        );
        assert_eq!(doc["retryable"], true);
        for code in [ErrorCode::QuotaExceeded, ErrorCode::TrialQuotaExceeded] {
            let doc = document(&ApiError::new(code, "month used"), "r", "https://g");
            assert_eq!(doc["violated-policies"], json!(["month"]));
            assert_eq!(doc["code"], code.as_str());
        }
        // No policy describes the unauthenticated limit: the gateway's own type.
        let anonymous = ApiError::new(ErrorCode::RateLimitExceeded, "too many");
        let doc = document(&anonymous, "r", "https://g");
        assert_eq!(doc["type"], "https://g/errors#rate-limit-exceeded");
        assert!(doc.get("violated-policies").is_none());
    }

    /// Every code's `type` resolves: the error reference the gateway serves has its section.
    #[test]
    fn the_error_reference_has_a_section_for_every_code() {
        let page = include_str!("../../../public/errors.html");
        for &code in ErrorCode::ALL {
            assert!(page.contains(&format!("<section id=\"{}\">", anchor(code))), "{code:?}");
        }
    }
}
