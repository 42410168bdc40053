//! Deterministic fault simulation for native tests (the FoundationDB / azul habit).
//!
//! The in-memory fakes of the ports route every call through [`Faults::run`]: the call first
//! yields once (a point where the "isolate" may die), then, by a seeded coin, fails before its
//! effect, fails after its effect (a timeout whose write landed anyway), hangs (it never answers:
//! after [`HANG_YIELDS`] the adapter's deadline ends the wait, its effect landed or not), or
//! succeeds. [`drive`] polls a flow step by step and may stop it at any yield: everything after
//! that point never happens, as when an isolate is evicted between two awaits. Half the stops drop
//! the flow (its destructors run); the other half abandon it without dropping it, as workerd does
//! when `waitUntil`'s time ends (its destructors never run, so no state may rely on them).
//! [`check_seeds`] runs a scenario over many seeds plus a fixed list of regression seeds and names
//! the seed of any failure, so it can be replayed with `SIM_SEED=<seed> cargo test <name>`. A
//! schedule whose invariant cannot be decided says so ([`undecided`]); more than
//! [`MAX_UNDECIDED`] of them fail the run (SPEC §19).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::task::{Context, Poll, Waker};

use gatehouse_core::ports::PortError;

/// How one port call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Ok,
    /// The call failed and had no effect.
    FailBefore,
    /// The call took effect, but the caller sees a failure (e.g. a timeout after the write).
    FailAfter,
    /// The call never answered: the caller's deadline ends the wait after [`HANG_YIELDS`]; its
    /// effect landed or not (a coin).
    Hang,
}

/// How long a hung call keeps its caller waiting, in yields (other flows run meanwhile).
pub const HANG_YIELDS: u64 = 40;
/// The share of a scenario's schedules that may end undecided (SPEC §19).
pub const MAX_UNDECIDED: f64 = 0.05;

thread_local! {
    static UNDECIDED: Cell<bool> = const { Cell::new(false) };
}

/// Marks the running schedule as one whose invariant could not be decided (`check_seeds` counts).
pub fn undecided() {
    UNDECIDED.with(|u| u.set(true));
}

/// A seeded source of faults and random choices, shared by every fake of one schedule.
pub struct Faults {
    state: Cell<u64>,
    failure_rate: Cell<f64>,
    /// Every faulty call, for the failure message of a seed.
    pub trace: RefCell<Vec<String>>,
    /// Every call made (a subrequest or a D1 query on the platform), by what it was: counted so a
    /// test can hold a job to the platform's limits per invocation.
    pub calls: RefCell<std::collections::BTreeMap<String, u32>>,
}

impl Faults {
    pub fn new(seed: u64, failure_rate: f64) -> Self {
        Faults {
            state: Cell::new(seed ^ 0x9E37_79B9_7F4A_7C15),
            failure_rate: Cell::new(failure_rate),
            trace: RefCell::default(),
            calls: RefCell::default(),
        }
    }

    /// Calls made since the last time this was asked: (all, D1 queries: those named "d1…").
    pub fn take_calls(&self) -> (u32, u32) {
        let calls = std::mem::take(&mut *self.calls.borrow_mut());
        let d1 = calls.iter().filter(|(k, _)| k.starts_with("d1")).map(|(_, n)| n).sum();
        (calls.values().sum(), d1)
    }

    /// Calls made after this fail with probability `rate` (0 for a clean check phase).
    pub fn set_failure_rate(&self, rate: f64) {
        self.failure_rate.set(rate);
    }

    pub fn failure_rate(&self) -> f64 {
        self.failure_rate.get()
    }

    /// SplitMix64.
    pub fn next_u64(&self) -> u64 {
        let s = self.state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Whether a call one fake makes inside its own effect fails (the claim object's write of the
    /// response store): no yield, no effect on failure.
    pub fn inner_call_fails(&self, what: &str) -> bool {
        let rate = self.failure_rate.get();
        let fails = rate > 0.0 && self.chance(rate);
        if fails {
            self.trace.borrow_mut().push(format!("{what}: FailBefore"));
        }
        fails
    }

    /// How the next call named `what` goes (after one yield, where the flow may be stopped).
    pub async fn call(&self, what: &str) -> Fault {
        *self.calls.borrow_mut().entry(what.to_owned()).or_default() += 1;
        YieldOnce(false).await;
        let rate = self.failure_rate.get();
        if rate <= 0.0 || !self.chance(rate) {
            return Fault::Ok;
        }
        let fault = match self.below(5) {
            0 | 1 => Fault::FailBefore,
            2 | 3 => Fault::FailAfter,
            _ => Fault::Hang,
        };
        self.trace.borrow_mut().push(format!("{what}: {fault:?}"));
        fault
    }

    /// One port call whose effect is `effect`: the effect happens unless the call fails before it,
    /// and the caller sees an error on either kind of failure.
    pub async fn run<T>(&self, what: &str, effect: impl FnOnce() -> T) -> Result<T, PortError> {
        self.run_async(what, async move { effect() }).await
    }

    /// [`Faults::run`] for an effect that itself waits (a call that makes calls).
    pub async fn run_async<T>(&self, what: &str, effect: impl Future<Output = T>) -> Result<T, PortError> {
        match self.call(what).await {
            Fault::FailBefore => Err(PortError(format!("{what}: injected failure"))),
            Fault::Ok => Ok(effect.await),
            Fault::FailAfter => {
                effect.await;
                Err(PortError(format!("{what}: injected timeout after the effect")))
            }
            Fault::Hang => {
                later(HANG_YIELDS).await;
                if self.chance(0.5) {
                    effect.await;
                }
                Err(PortError(format!("{what}: no answer within its deadline (hung)")))
            }
        }
    }
}

/// Yields `n` times: a flow that starts later than the others of its wave.
pub async fn later(n: u64) {
    for _ in 0..n {
        YieldOnce(false).await;
    }
}

/// Pending once, then ready: a point where [`drive`] may stop the flow.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Polls `flow` to the end, or (with probability `crash_rate` at each yield) stops it where it
/// stands, dropping it or abandoning it undropped: `None` means the isolate died there.
pub fn drive<F: Future>(flow: F, faults: &Faults, crash_rate: f64) -> Option<F::Output> {
    drive_with(flow, faults, crash_rate, || {})
}

/// Like [`drive`], and calls `between` at every point where the flow yields (unless it stops
/// there): other writers act, a test checks its invariants.
pub fn drive_with<F: Future>(
    flow: F,
    faults: &Faults,
    crash_rate: f64,
    mut between: impl FnMut(),
) -> Option<F::Output> {
    let mut flow = Box::pin(flow);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..MAX_STEPS {
        if let Poll::Ready(out) = flow.as_mut().poll(&mut cx) {
            return Some(out);
        }
        if crash_rate > 0.0 && faults.chance(crash_rate) {
            if faults.chance(0.5) {
                faults.trace.borrow_mut().push("isolate stopped (flow dropped)".into());
            } else {
                // Never polled again and never dropped: what workerd does at the end of waitUntil.
                faults.trace.borrow_mut().push("isolate stopped (flow abandoned undropped)".into());
                std::mem::forget(flow);
            }
            return None;
        }
        between();
    }
    panic!("a flow did not finish within {MAX_STEPS} steps: something waits for a call that never answers");
}

/// Steps after which [`drive`] calls a flow hung: every fake answers (or times out) in a few.
pub const MAX_STEPS: u64 = 1_000_000;

/// Polls `flow` to the end with no crash (fakes never block, so this always finishes).
pub fn complete<F: Future>(flow: F) -> F::Output {
    let faults = Faults::new(0, 0.0);
    drive(flow, &faults, 0.0).expect("no crash without a crash rate")
}

/// How many schedules a simulation runs: `SIM_SCHEDULES` or `default`.
pub fn schedules(default: u64) -> u64 {
    std::env::var("SIM_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Runs `scenario` for every regression seed, then for `count` seeds (or only `SIM_SEED` when
/// set), and panics naming the first seed whose scenario returned an error.
pub fn check_seeds(
    name: &str,
    count: u64,
    regressions: &[u64],
    scenario: impl Fn(u64) -> Result<(), String>,
) {
    let seeds: Vec<u64> = match std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => regressions.iter().copied().chain(0..schedules(count)).collect(),
    };
    let total = seeds.len();
    let mut undecided = 0;
    for seed in seeds {
        UNDECIDED.with(|u| u.set(false));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(seed)))
            .unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                Err(format!("panicked: {}", why.unwrap_or_default()))
            });
        if let Err(why) = outcome {
            panic!("simulation {name}: seed {seed} failed: {why}\n(replay: SIM_SEED={seed} cargo test {name}; keep the seed in its regression list)");
        }
        undecided += usize::from(UNDECIDED.with(Cell::get));
    }
    if std::env::var("SIM_REPORT").is_ok() {
        eprintln!("simulation {name}: {total} schedules, {undecided} undecided");
    }
    if total >= 20 && undecided as f64 > MAX_UNDECIDED * total as f64 {
        panic!("simulation {name}: {undecided} of {total} schedules undecided (at most {MAX_UNDECIDED})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_makes_the_same_schedule() {
        let draw = |seed| {
            let f = Faults::new(seed, 0.3);
            (0..50).map(|_| complete(f.call("x"))).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(7).contains(&Fault::FailBefore) && draw(7).contains(&Fault::FailAfter));
    }

    #[test]
    fn drive_can_stop_a_flow_between_steps() {
        let f = Faults::new(3, 0.0);
        let steps = Cell::new(0);
        let flow = async {
            for _ in 0..100 {
                f.run("step", || steps.set(steps.get() + 1)).await.unwrap();
            }
        };
        assert!(drive(flow, &f, 0.1).is_none());
        assert!(steps.get() < 100, "stopped part-way");
    }
}
