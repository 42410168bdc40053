//! A browser key's visitors as this isolate sees them (SPEC §24, docs/api/ingestion.md "From a
//! browser"). The key's guard decides: a page of an origin the key does not list is refused before
//! anything is counted, and a visitor (its address, an IPv6 /64) over the key's per-visitor window
//! is refused before the key's own window is counted. This module keeps the isolate from asking
//! the guard again and again for what it already said:
//!
//! * a visitor refused for its window is answered from memory until the window ends, and an origin
//!   refused for a minute — no guard call and no audit row, as for an address over its anonymous
//!   limit, so a flood from one page or one address costs neither the guard nor D1;
//! * a hot key's request admitted from this isolate's lease is checked here, with the isolate's
//!   own count of the visitors it admits.

use super::authentication::{window_refused, KeyCredentials, Refusal};
use super::pipeline::Trace;
use super::Gateway;
use gatehouse_core::browser::{Visitor, VisitorCheck};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::Ports;
use gatehouse_core::rate_limit::Usage;

impl<P: Ports> Gateway<'_, P> {
    /// What this isolate decides of a browser key's request before its lease or guard: a refusal
    /// it remembers, or, when `leasing` and it holds a lease of the key, the visitor counted here
    /// (and then not told to the guard). `Some`: the refusal to answer now.
    pub(super) fn screen_visitor(
        &self,
        credentials: &mut KeyCredentials,
        leasing: bool,
        now_ms: i64,
        trace: &mut Trace,
    ) -> Option<Refusal> {
        let visitor = credentials.visitor.as_ref()?;
        let key_hash = credentials.key_hash.as_str();
        {
            let memory = self.memory.borrow();
            if let Some(origin) =
                visitor.origin.as_deref().filter(|o| memory.is_refused_origin(key_hash, o, now_ms))
            {
                trace.unaudited = true;
                return Some((None, origin_refused(Some(origin), None)));
            }
            let address = visitor.address.as_deref();
            if let Some((until, limit)) =
                address.and_then(|a| memory.visitor_blocked_until(key_hash, a, now_ms))
            {
                trace.unaudited = true;
                let usage = Usage::refused_minute(limit, until, now_ms);
                return Some((Some(usage), visitor_over(&usage)));
            }
        }
        let leased = if leasing { self.leases.borrow().key(key_hash).cloned() } else { None };
        let key = leased?;
        let visitor = credentials.visitor.take();
        let per_visitor = self.config.browser_per_address_per_minute(&key);
        let checked = self.memory.borrow_mut().visitors.check(&key, visitor.as_ref(), per_visitor, now_ms);
        let origin = visitor.as_ref().and_then(|v| v.origin.as_deref());
        match checked {
            VisitorCheck::Within => None,
            VisitorCheck::OriginRefused => {
                self.remember_refusal(key_hash, visitor.as_ref(), None, now_ms);
                Some((None, origin_refused(origin, Some(&key.allowed_origins))))
            }
            VisitorCheck::Over(usage) => {
                self.remember_refusal(key_hash, visitor.as_ref(), Some(&usage), now_ms);
                Some((Some(usage), visitor_over(&usage)))
            }
        }
    }

    /// Remembers what the key's guard (or this isolate's lease) refused the visitor for: its
    /// window (`over`, until it ends), else its page's origin.
    pub(super) fn remember_refusal(
        &self,
        key_hash: &str,
        visitor: Option<&Visitor>,
        over: Option<&Usage>,
        now_ms: i64,
    ) {
        let Some(visitor) = visitor else { return };
        let mut memory = self.memory.borrow_mut();
        match (over, &visitor.address, &visitor.origin) {
            (Some(usage), Some(address), _) => {
                memory.block_visitor(key_hash, address, usage.limit(), usage.reset_ms(), now_ms)
            }
            (None, _, Some(origin)) => memory.refuse_origin(key_hash, origin, now_ms),
            _ => {}
        }
    }
}

/// A page of an origin a browser key does not list (403; `allowed`: the key's list, when known).
pub(super) fn origin_refused(origin: Option<&str>, allowed: Option<&[String]>) -> ApiError {
    let e = ApiError::forbidden(format!(
        "This browser key is not for pages of {}; its allowed_origins list the sites that may use it.",
        origin.unwrap_or("this origin")
    ))
    .with_detail("origin", origin.unwrap_or_default());
    match allowed {
        Some(allowed) => e.with_detail("allowed_origins", allowed.to_vec()),
        None => e,
    }
}

/// A browser key's visitor over its own window (429 with that window's usage): the key's window
/// is untouched.
pub(super) fn visitor_over(usage: &Usage) -> ApiError {
    let message = format!(
        "This address has used the {} requests a minute this browser key allows each visitor (its \
         other visitors are not affected).",
        usage.limit()
    );
    window_refused(message, usage).with_detail("per", "address")
}
