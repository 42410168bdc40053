//! Authentication (SPEC §2, §3): the admin token, or the key's guard deciding on the key, its
//! limits and its idempotency claim in one round trip, then the key type's scope.

use super::pipeline::{Caller, Trace};
use super::{unavailable, Gateway};
use crate::core::api_key;
use crate::core::error::{ApiError, ErrorCode};
use crate::core::rate_limit::{Usage, Verdict};
use crate::core::route::{Access, Route};
use crate::core::sealing::SealingKey;
use crate::core::time::rfc3339;
use crate::ports::{Admission, Authorization, ClaimRequest, KeyGuard, Ports};

/// A refusal during authentication, with the key's usage when the key itself was valid.
pub(super) type Refusal = (Option<Usage>, ApiError);

impl<P: Ports> Gateway<'_, P> {
    /// SPEC §3 order: authenticate, then the rate decision and the idempotency claim (made by the
    /// key's guard in the same round trip), then the key type's scope.
    pub(super) async fn authenticate(
        &self,
        route: &Route,
        authorization: &Option<String>,
        client_ip: Option<&str>,
        claim: Option<&ClaimRequest>,
        trace: &mut Trace,
    ) -> Result<Caller, Refusal> {
        let anonymous = Caller { key: None, key_hash: None, usage: None, claim: None, sealing: None };
        let token = authorization.as_deref().and_then(api_key::bearer_token);
        let scope = match route.access {
            Access::Public => return Ok(anonymous),
            Access::Admin => {
                let expected = self.config.admin_token.as_bytes();
                return match token {
                    Some(t) if api_key::constant_time_eq(t.as_bytes(), expected) => Ok(anonymous),
                    _ => {
                        let e =
                            ApiError::new(ErrorCode::InvalidApiKey, "The admin token is missing or wrong.");
                        Err((None, self.refuse(client_ip, e).await))
                    }
                };
            }
            Access::Key(scope) => scope,
        };
        let Some(token) = token.filter(|t| api_key::is_well_formed(t)) else {
            return Err((None, self.refuse(client_ip, ApiError::invalid_api_key()).await));
        };
        let key_hash = api_key::hash(self.config.key_pepper.as_bytes(), token);
        let Admission { key, verdict, usage, claim } =
            match self.guard.authorize(&key_hash, scope, claim).await {
                Ok(Authorization::Admitted(admission)) => {
                    trace.key = Some(admission.key.clone());
                    *admission
                }
                Ok(Authorization::Denied(revoked)) => {
                    trace.key = revoked.map(|k| *k);
                    return Err((None, self.refuse(client_ip, ApiError::invalid_api_key()).await));
                }
                Err(e) => {
                    // The guard may have taken a claim and lost only its answer.
                    trace.unanswered_guard = Some(key_hash);
                    return Err((None, unavailable(e)));
                }
            };
        let refusal = match verdict {
            Verdict::Allowed => None,
            Verdict::RateLimited => Some(
                ApiError::new(
                    ErrorCode::RateLimitExceeded,
                    format!("Rate limit of {} requests per minute exceeded.", usage.limit),
                )
                .with_retry_after(usage.seconds_to_reset()),
            ),
            Verdict::QuotaExceeded => {
                let code = if key.plan == crate::config::DEFAULT_PLAN {
                    ErrorCode::TrialQuotaExceeded
                } else {
                    ErrorCode::QuotaExceeded
                };
                Some(
                    ApiError::new(
                        code,
                        format!("The monthly quota of {} requests is used up.", usage.quota_limit),
                    )
                    .with_detail("resets_at", rfc3339(usage.quota_resets_ms))
                    .with_detail("plan", key.plan.as_str()),
                )
            }
        };
        if let Some(e) = refusal {
            return Err((Some(usage), e));
        }
        if !key.key_type.allows(scope) {
            // The guard took no claim for it.
            let e = ApiError::forbidden(format!("A {} key may not call this route.", key.key_type.as_str()))
                .with_detail("key_type", key.key_type.as_str());
            return Err((Some(usage), e));
        }
        // Its stored response is sealed under the API key itself (SPEC §13): only this caller's
        // requests can derive the key that reads it.
        let sealing =
            claim.as_ref().map(|_| SealingKey::for_responses(self.config.key_pepper.as_bytes(), token));
        Ok(Caller { key: Some(key), key_hash: Some(key_hash), usage: Some(usage), claim, sealing })
    }

    /// A failed authentication: counted against the client address, and 429 instead of 401 once
    /// the address has failed too often this minute. If the count cannot be made, the 401 stands.
    pub(super) async fn refuse(&self, client_ip: Option<&str>, unauthenticated: ApiError) -> ApiError {
        let Some(ip) = client_ip else {
            return unauthenticated;
        };
        match self.guard.record_auth_failure(ip).await {
            Ok((Verdict::RateLimited, usage)) => ApiError::new(
                ErrorCode::RateLimitExceeded,
                "Too many failed authentications from this address. Retry after the window ends.",
            )
            .with_retry_after(usage.seconds_to_reset()),
            Ok(_) => unauthenticated,
            Err(e) => {
                let mut e401 = unauthenticated;
                e401.internal = Some(format!("failed-authentication counter unavailable: {e}"));
                e401
            }
        }
    }
}
