//! The error contract of SPEC §3, in one place: every failure the client sees is an [`ApiError`],
//! whose [`ErrorCode`] fixes the status, the code string and whether a retry may help.

use serde_json::{json, Map, Value};

/// The enum and [`ErrorCode::ALL`] from one list, so no code can be left out of either.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $code:ident,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorCode {
            $($(#[$doc])* $code,)*
        }

        impl ErrorCode {
            /// Every code (the error reference, `public/errors.html`, has a section for each).
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$code,)*];
        }
    };
}

error_codes! {
    /// 400: malformed JSON or a field of the wrong shape.
    BadRequest,
    IdempotencyKeyRequired,
    InvalidApiKey,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    IdempotencyKeyReused,
    IdempotencyKeyInUse,
    /// 409: the key completed with a response too large to keep (SPEC §15): never executed again.
    IdempotencyResponseNotStored,
    /// 409: the request names something the project holds already (an identity's `external_id`).
    Conflict,
    PayloadTooLarge,
    /// 422: well-formed input that the operation cannot accept.
    Unprocessable,
    RateLimitExceeded,
    QuotaExceeded,
    TrialQuotaExceeded,
    Internal,
    /// 502: the origin of a proxied route could not be reached (SPEC §15).
    UpstreamUnavailable,
    ServiceUnavailable,
    /// 504: the origin did not answer within the route's `timeout_ms` (SPEC §15).
    UpstreamTimeout,
}

impl ErrorCode {
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            BadRequest | IdempotencyKeyRequired => 400,
            InvalidApiKey => 401,
            Forbidden => 403,
            NotFound => 404,
            MethodNotAllowed => 405,
            IdempotencyKeyReused | IdempotencyKeyInUse | IdempotencyResponseNotStored | Conflict => 409,
            PayloadTooLarge => 413,
            Unprocessable => 422,
            RateLimitExceeded | QuotaExceeded | TrialQuotaExceeded => 429,
            Internal => 500,
            UpstreamUnavailable => 502,
            ServiceUnavailable => 503,
            UpstreamTimeout => 504,
        }
    }

    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            BadRequest | Unprocessable => "VALIDATION_ERROR",
            IdempotencyKeyRequired => "IDEMPOTENCY_KEY_REQUIRED",
            InvalidApiKey => "INVALID_API_KEY",
            Forbidden => "FORBIDDEN",
            NotFound => "NOT_FOUND",
            MethodNotAllowed => "METHOD_NOT_ALLOWED",
            IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            IdempotencyKeyInUse => "IDEMPOTENCY_KEY_IN_USE",
            IdempotencyResponseNotStored => "IDEMPOTENCY_RESPONSE_NOT_STORED",
            Conflict => "CONFLICT",
            PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            RateLimitExceeded => "RATE_LIMIT_EXCEEDED",
            QuotaExceeded => "QUOTA_EXCEEDED",
            TrialQuotaExceeded => "TRIAL_QUOTA_EXCEEDED",
            Internal => "INTERNAL_ERROR",
            ServiceUnavailable => "SERVICE_UNAVAILABLE",
            UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            UpstreamTimeout => "UPSTREAM_TIMEOUT",
        }
    }

    pub fn retryable(self) -> bool {
        use ErrorCode::*;
        matches!(
            self,
            IdempotencyKeyInUse
                | RateLimitExceeded
                | Internal
                | ServiceUnavailable
                | UpstreamUnavailable
                | UpstreamTimeout
        )
    }
}

/// A failure on its way to the client. `internal` is for the worker log only and never serialised.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
    /// Whole seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
    /// Methods for an `Allow` header (405 only).
    pub allow: Vec<&'static str>,
    pub internal: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Map::new(),
            retry_after: None,
            allow: Vec::new(),
            internal: None,
        }
    }

    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unprocessable, message)
    }

    pub fn invalid_api_key() -> Self {
        Self::new(
            ErrorCode::InvalidApiKey,
            "The API key is missing, unknown or revoked. Send it as `Authorization: Bearer <key>`.",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("No such {what}."))
    }

    /// 409 `CONFLICT`: something of this name exists already (not retryable: the state must change).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Conflict, message)
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            ErrorCode::PayloadTooLarge,
            format!("The request body exceeds this route's limit of {limit} bytes."),
        )
        .with_detail("limit_bytes", limit)
    }

    /// A failure of our own: the client gets a generic 500, the cause goes to the log.
    pub fn internal(cause: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorCode::Internal, "An internal error occurred. Retry later.");
        e.internal = Some(cause.into());
        e
    }

    /// A dependency (D1, a Durable Object, a queue) did not answer: retry with care.
    pub fn unavailable(cause: impl Into<String>) -> Self {
        let mut e = Self::new(
            ErrorCode::ServiceUnavailable,
            "A backing service is temporarily unavailable. Retry later.",
        );
        e.internal = Some(cause.into());
        e
    }

    /// The gateway's configuration does not parse (SPEC §26): 503 on every route, and `/health`
    /// (`shown`) says why in the worker's own words; the cause goes to the log as well.
    pub fn misconfigured(cause: &str, shown: bool) -> Self {
        let message = if shown {
            format!("The gateway's configuration is invalid: {cause}. Its operator must correct it and deploy again.")
        } else {
            "The gateway's configuration is invalid; its operator must correct it (GET /health says why)."
                .into()
        };
        let mut e = Self::new(ErrorCode::ServiceUnavailable, message);
        e.internal = Some(format!("configuration: {cause}"));
        e
    }

    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// The JSON body of SPEC §3.
    pub fn body(&self, request_id: &str) -> Value {
        json!({
            "error": {
                "code": self.code.as_str(),
                "message": self.message,
                "request_id": request_id,
                "retryable": self.code.retryable(),
                "details": self.details,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_configuration_is_503_and_shown_only_where_asked() {
        let shown = ApiError::misconfigured("PLANS must define the \"trial\" plan", true);
        let hidden = ApiError::misconfigured("PLANS must define the \"trial\" plan", false);
        assert_eq!((shown.status(), hidden.status()), (503, 503));
        assert!(shown.message.contains("PLANS must define"));
        assert!(!hidden.message.contains("PLANS"));
        assert_eq!(hidden.internal.as_deref(), Some("configuration: PLANS must define the \"trial\" plan"));
    }

    #[test]
    fn maps_codes_to_spec_table() {
        use ErrorCode::*;
        let table = [
            (BadRequest, 400, "VALIDATION_ERROR", false),
            (IdempotencyKeyRequired, 400, "IDEMPOTENCY_KEY_REQUIRED", false),
            (InvalidApiKey, 401, "INVALID_API_KEY", false),
            (Forbidden, 403, "FORBIDDEN", false),
            (NotFound, 404, "NOT_FOUND", false),
            (MethodNotAllowed, 405, "METHOD_NOT_ALLOWED", false),
            (IdempotencyKeyReused, 409, "IDEMPOTENCY_KEY_REUSED", false),
            (IdempotencyKeyInUse, 409, "IDEMPOTENCY_KEY_IN_USE", true),
            (Conflict, 409, "CONFLICT", false),
            (PayloadTooLarge, 413, "PAYLOAD_TOO_LARGE", false),
            (Unprocessable, 422, "VALIDATION_ERROR", false),
            (RateLimitExceeded, 429, "RATE_LIMIT_EXCEEDED", true),
            (QuotaExceeded, 429, "QUOTA_EXCEEDED", false),
            (TrialQuotaExceeded, 429, "TRIAL_QUOTA_EXCEEDED", false),
            (Internal, 500, "INTERNAL_ERROR", true),
            (ServiceUnavailable, 503, "SERVICE_UNAVAILABLE", true),
        ];
        for (code, status, name, retryable) in table {
            assert_eq!((code.status(), code.as_str(), code.retryable()), (status, name, retryable));
        }
    }

    #[test]
    fn body_has_contract_shape_and_hides_internal_cause() {
        let e = ApiError::internal("D1_ERROR: no such table").with_detail("x", 1);
        let body = e.body("req-1");
        assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
        assert_eq!(body["error"]["request_id"], "req-1");
        assert_eq!(body["error"]["retryable"], true);
        assert_eq!(body["error"]["details"]["x"], 1);
        assert!(!body.to_string().contains("D1_ERROR"));
    }

    #[test]
    fn retry_after_is_at_least_one_second() {
        let e = ApiError::new(ErrorCode::RateLimitExceeded, "slow down").with_retry_after(0);
        assert_eq!(e.retry_after, Some(1));
    }
}
