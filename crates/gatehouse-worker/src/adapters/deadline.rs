//! Every wait on a binding has a deadline (SPEC §19): a call that never settles becomes a
//! [`PortError`] after its time in `core::platform::deadline`, so nothing stays held by it. A
//! write that lands after its deadline is one its caller already treats as "may have landed".

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use futures_util::future::{select, Either};
use worker::Delay;

use gatehouse_core::ports::PortError;

/// `call`'s result, or an error naming `what` once `ms` have passed first.
pub async fn within<T>(
    ms: u64,
    what: &str,
    call: impl Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    match select(pin!(call), pin!(Delay::from(Duration::from_millis(ms)))).await {
        Either::Left((result, _)) => result,
        Either::Right(_) => Err(PortError(format!("{what}: no answer within {ms} ms"))),
    }
}
