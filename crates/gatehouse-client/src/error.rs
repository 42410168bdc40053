//! The SDK's error: an API error as the server reported it (SPEC §3), or a request that got no
//! usable answer.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{json, Value};

/// An error answer of the API: `{"error":{"code","message","request_id","retryable","details"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The stable error code, e.g. `RATE_LIMIT_EXCEEDED` (`HTTP_<status>` when the answer had no
    /// error body, as from a proxy in front of the gateway).
    pub code: String,
    pub message: String,
    /// The `X-Request-Id` of the answer: quote it when asking about a request.
    pub request_id: Option<String>,
    /// Whether the server says a retry may succeed.
    pub retryable: bool,
    /// Extra facts, e.g. `{"header":"Idempotency-Key"}`, `{"resets_at":"…"}`, or for a 429 of a
    /// window `{"window","limit","remaining","reset"}`.
    pub details: Value,
    /// The answer's `Retry-After`: how long the server asks the caller to wait before trying again.
    pub retry_after: Option<Duration>,
    /// The key's rate window as the answer's `X-RateLimit-*` headers gave it (none on a 401).
    pub rate_limit: Option<RateLimitState>,
}

/// A key's rate window as an answer's headers gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitState {
    /// `X-RateLimit-Limit`.
    pub limit: u64,
    /// `X-RateLimit-Remaining`.
    pub remaining: u64,
    /// `X-RateLimit-Reset`: the window's end, in Unix seconds.
    pub reset: u64,
}

impl RateLimitState {
    /// From the three headers; `None` unless all are there and numeric.
    pub(crate) fn from_headers(
        limit: Option<&str>,
        remaining: Option<&str>,
        reset: Option<&str>,
    ) -> Option<Self> {
        let number = |v: Option<&str>| v.and_then(|v| v.trim().parse().ok());
        Some(RateLimitState { limit: number(limit)?, remaining: number(remaining)?, reset: number(reset)? })
    }

    /// When the window ends.
    pub fn reset_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.reset)
    }
}

#[derive(Deserialize)]
struct Envelope {
    error: Body,
}

#[derive(Deserialize)]
struct Body {
    code: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    retryable: bool,
    #[serde(default)]
    details: Value,
}

impl ApiError {
    /// Reads an error answer; a body that is not the error schema still makes an error.
    pub(crate) fn from_answer(status: u16, header_request_id: Option<String>, body: &[u8]) -> ApiError {
        match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope { error }) => ApiError {
                status,
                code: error.code,
                message: error.message,
                request_id: error.request_id.or(header_request_id),
                retryable: error.retryable,
                details: error.details,
                retry_after: None,
                rate_limit: None,
            },
            Err(_) => ApiError {
                status,
                code: format!("HTTP_{status}"),
                message: String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned(),
                request_id: header_request_id,
                retryable: false,
                details: Value::Object(Default::default()),
                retry_after: None,
                rate_limit: None,
            },
        }
    }
}

/// Everything a call can fail with.
#[derive(Debug)]
pub enum Error {
    /// The API answered with an error status (after any retries it allowed).
    Api(Box<ApiError>),
    /// No answer: the connection failed or broke off, or the timeout passed (`timeout`).
    Network { message: String, timeout: bool },
    /// A success answer the SDK could not read as the documented type.
    Decode { status: u16, request_id: Option<String>, message: String },
    /// A call the SDK refuses to send (a bad argument), or a client it cannot build.
    Invalid(String),
    /// The local event buffer could not be read or written.
    Buffer(std::io::Error),
}

impl Error {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.status),
            Error::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The `X-Request-Id` of the answer, when there was one.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::Api(e) => e.request_id.as_deref(),
            Error::Decode { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// The error code: the API's, or `NETWORK_ERROR`, `TIMEOUT`, `INVALID_RESPONSE`,
    /// `INVALID_ARGUMENT`, `BUFFER_ERROR`.
    pub fn code(&self) -> &str {
        match self {
            Error::Api(e) => &e.code,
            Error::Network { timeout: true, .. } => "TIMEOUT",
            Error::Network { .. } => "NETWORK_ERROR",
            Error::Decode { .. } => "INVALID_RESPONSE",
            Error::Invalid(_) => "INVALID_ARGUMENT",
            Error::Buffer(_) => "BUFFER_ERROR",
        }
    }

    /// Whether trying the same call again later may succeed (the API's flag; true for network
    /// errors).
    pub fn retryable(&self) -> bool {
        match self {
            Error::Api(e) => e.retryable,
            Error::Network { .. } => true,
            Error::Decode { .. } | Error::Invalid(_) | Error::Buffer(_) => false,
        }
    }

    /// The error in the API's JSON shape, as the CLI prints it.
    pub fn to_json(&self) -> Value {
        let (message, details) = match self {
            Error::Api(e) => (e.message.clone(), e.details.clone()),
            other => (other.to_string(), json!({})),
        };
        json!({ "error": {
            "status": self.status(),
            "code": self.code(),
            "message": message,
            "request_id": self.request_id(),
            "retryable": self.retryable(),
            "details": details,
        }})
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(e) => {
                write!(f, "{} {}: {}", e.status, e.code, e.message)?;
                if let Some(id) = &e.request_id {
                    write!(f, " (request {id})")?;
                }
                Ok(())
            }
            Error::Network { message, .. } => write!(f, "{message}"),
            Error::Decode { status, message, .. } => write!(f, "unreadable {status} answer: {message}"),
            Error::Invalid(message) => write!(f, "{message}"),
            Error::Buffer(e) => write!(f, "event buffer: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Buffer(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_error_contract_and_falls_back_for_other_bodies() {
        let body = br#"{"error":{"code":"QUOTA_EXCEEDED","message":"monthly quota used","request_id":"r-1",
            "retryable":false,"details":{"resets_at":"2026-12-01T00:00:00.000Z"}}}"#;
        let e = ApiError::from_answer(429, Some("header-id".into()), body);
        assert_eq!(
            (e.status, e.code.as_str(), e.request_id.as_deref()),
            (429, "QUOTA_EXCEEDED", Some("r-1"))
        );
        assert_eq!(e.details["resets_at"], "2026-12-01T00:00:00.000Z");
        let e = ApiError::from_answer(502, Some("h".into()), b"<html>Bad Gateway</html>");
        assert_eq!((e.code.as_str(), e.request_id.as_deref()), ("HTTP_502", Some("h")));
        assert_eq!(e.message, "<html>Bad Gateway</html>");
        let json = Error::Api(Box::new(e)).to_json();
        assert_eq!(json["error"]["status"], 502);
        assert_eq!(json["error"]["retryable"], false);
    }
}
