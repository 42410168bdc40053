//! The one clock the worker and its Durable Objects read (SPEC §21): the real time, unless the
//! test kit (`@gatehouse/testing`) binds `TEST_CLOCK`, a service that answers how far ahead of the
//! real time the kit's clock is, in milliseconds. Each event reads it as it begins — a request, a
//! queue batch, a cron run, an object's command or alarm — so everything one event does sees one
//! time. Nothing else in the worker reads the time. `wrangler.toml` has no such binding and
//! `scripts/deploy` refuses a configuration that has one: a deployed gateway runs on the real time.

use std::cell::{Cell, OnceCell};
use std::rc::Rc;

use worker::{Env, Fetcher};

use super::deadline::within;
use gatehouse_core::ports::PortError;

/// The binding only the test kit provides.
pub const BINDING: &str = "TEST_CLOCK";

/// How long an event waits for the kit's clock before it fails.
const ASK_MS: u64 = 2_000;

thread_local! {
    /// How far the kit's clock is ahead of the real time (0 without a kit).
    static OFFSET_MS: Cell<i64> = const { Cell::new(0) };
    /// How many times the kit was reset (0 without a kit): each reset starts every Durable Object
    /// afresh (`object_name`).
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// The kit's clock, looked up once per isolate (`None`: the real time).
    static KIT: OnceCell<Option<Rc<Fetcher>>> = const { OnceCell::new() };
}

/// The time now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    // `Date.now()`: one call into JavaScript (worker's `Date::now` makes a `Date` and reads it: two).
    js_sys::Date::now() as i64 + OFFSET_MS.get()
}

/// `at` of this clock on the real one: the runtime runs alarms by the real time.
pub fn real_ms(at: i64) -> i64 {
    at - OFFSET_MS.get()
}

/// `at` of the real clock on this one (an alarm the runtime reports).
pub fn clock_ms(real: i64) -> i64 {
    real + OFFSET_MS.get()
}

/// The name a Durable Object is reached by: `name` itself, or under the test kit after a reset
/// `{generation}/{name}`, so no object of an earlier test is reached again (its keys' guards
/// would still hold their records).
pub fn object_name(name: &str) -> std::borrow::Cow<'_, str> {
    match GENERATION.get() {
        0 => name.into(),
        generation => format!("{generation}/{name}").into(),
    }
}

/// Reads the kit's clock as an event begins; nothing without a kit.
pub async fn follow(env: &Env) -> Result<(), PortError> {
    let Some(kit) = KIT.with(|k| k.get_or_init(|| env.service(BINDING).ok().map(Rc::new)).clone()) else {
        return Ok(());
    };
    let asked = async {
        let mut answer = kit.fetch("http://clock/", None).await.map_err(PortError::from_display)?;
        answer.text().await.map_err(PortError::from_display)
    };
    let text = within(ASK_MS, BINDING, asked).await?;
    // "{offset}" or "{offset} {generation}".
    let mut parts = text.split_whitespace().map(str::parse::<i64>);
    let unreadable = || PortError(format!("{BINDING} answered {text:?}"));
    let offset = parts.next().and_then(Result::ok).ok_or_else(unreadable)?;
    let generation = parts.next().transpose().map_err(|_| unreadable())?.unwrap_or(0);
    OFFSET_MS.set(offset);
    GENERATION.set(generation.max(0) as u64);
    Ok(())
}
