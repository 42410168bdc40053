//! How a request's body is read (SPEC §19 "Memory"): held up to the route's limit, or for a
//! proxied route without a claim, its first part held and the rest streamed on to the origin.

use gatehouse_core::body::CappedBody;
use gatehouse_core::error::ApiError;
use gatehouse_core::idempotency;
use gatehouse_core::ports::{PassThrough, RequestBody};
use gatehouse_core::route::Route;
use gatehouse_core::upstream::SIGNED_BODY_LIMIT;

/// How a route's body is read: held up to `held` bytes; past that a proxied body without a claim
/// streams on (up to `limit`), any other is 413.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BodyReading {
    limit: usize,
    held: usize,
    /// A proxied request with an `Idempotency-Key`: its fingerprint needs the whole body held.
    claimed_proxy: bool,
}

/// A body as read: whole, or the first bytes of a proxied body and its unread rest.
pub(super) struct ReadBody {
    pub(super) bytes: Vec<u8>,
    pub(super) rest: Option<PassThrough>,
}

impl BodyReading {
    pub(super) fn of(route: &Route, proxied: bool, claimed: bool) -> Self {
        let limit = route.body_limit;
        let held = if proxied { limit.min(SIGNED_BODY_LIMIT) } else { limit };
        BodyReading { limit, held, claimed_proxy: proxied && claimed }
    }

    fn too_large(&self) -> ApiError {
        if self.claimed_proxy && self.held < self.limit {
            // SPEC §19: a streamed body cannot be fingerprinted before it is forwarded.
            ApiError::payload_too_large(self.held)
                .with_detail("reason", "A proxied request with an Idempotency-Key carries at most 1 MiB.")
                .with_detail("header", idempotency::HEADER)
        } else {
            ApiError::payload_too_large(self.limit)
        }
    }

    /// 413 before reading when the declared length is over what this request may send.
    pub(super) fn admits(&self, declared_len: Option<u64>) -> Result<(), ApiError> {
        let most = if self.claimed_proxy { self.held } else { self.limit };
        match declared_len {
            Some(n) if n > most as u64 => Err(self.too_large()),
            _ => Ok(()),
        }
    }

    /// Reads the body as it streams in: 413 at the first chunk that would take it over (the rest is
    /// never read), or, for a proxied body past `held` without a claim, the rest left to stream on.
    /// The buffer grows with the bytes read, never with the declared length (`CappedBody`).
    pub(super) async fn read<B: RequestBody>(&self, mut body: B) -> Result<ReadBody, ApiError> {
        let declared = body.declared_len().filter(|n| *n <= self.held as u64);
        let mut capped = CappedBody::new(self.held, declared).map_err(|_| self.too_large())?;
        loop {
            let chunk = body.next_chunk().await.map_err(|e| {
                ApiError::bad_request("The request body could not be read.").with_detail("cause", e.0)
            })?;
            let Some(chunk) = chunk else {
                return Ok(ReadBody { bytes: capped.into_bytes(), rest: None });
            };
            if capped.push(&chunk).is_err() {
                let mut head = capped.into_bytes();
                if self.claimed_proxy || self.held == self.limit || head.len() + chunk.len() > self.limit {
                    return Err(self.too_large());
                }
                head.extend_from_slice(&chunk);
                return Ok(ReadBody { bytes: head, rest: Some(body.into_rest()) });
            }
        }
    }
}
