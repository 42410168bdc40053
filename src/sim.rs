//! Deterministic fault simulation for native tests (the FoundationDB / azul habit).
//!
//! The in-memory fakes of the ports route every call through [`Faults::run`]: the call first
//! yields once (a point where the "isolate" may die), then, by a seeded coin, fails before its
//! effect, fails after its effect (a timeout whose write landed anyway), or succeeds. [`drive`]
//! polls a flow step by step and may drop it at any yield: everything after that point never
//! happens, as when an isolate is evicted between two awaits. [`check_seeds`] runs a scenario over
//! many seeds plus a fixed list of regression seeds and names the seed of any failure, so it can be
//! replayed with `SIM_SEED=<seed> cargo test <name>`.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::ports::PortError;

/// How one port call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Ok,
    /// The call failed and had no effect.
    FailBefore,
    /// The call took effect, but the caller sees a failure (e.g. a timeout after the write).
    FailAfter,
}

/// A seeded source of faults and random choices, shared by every fake of one schedule.
pub struct Faults {
    state: Cell<u64>,
    failure_rate: Cell<f64>,
    /// Every faulty call, for the failure message of a seed.
    pub trace: RefCell<Vec<String>>,
}

impl Faults {
    pub fn new(seed: u64, failure_rate: f64) -> Self {
        Faults {
            state: Cell::new(seed ^ 0x9E37_79B9_7F4A_7C15),
            failure_rate: Cell::new(failure_rate),
            trace: RefCell::default(),
        }
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

    /// How the next call named `what` goes (after one yield, where the flow may be stopped).
    pub async fn call(&self, what: &str) -> Fault {
        YieldOnce(false).await;
        let rate = self.failure_rate.get();
        if rate <= 0.0 || !self.chance(rate) {
            return Fault::Ok;
        }
        let fault = if self.chance(0.5) { Fault::FailBefore } else { Fault::FailAfter };
        self.trace.borrow_mut().push(format!("{what}: {fault:?}"));
        fault
    }

    /// One port call whose effect is `effect`: the effect happens unless the call fails before it,
    /// and the caller sees an error on either kind of failure.
    pub async fn run<T>(&self, what: &str, effect: impl FnOnce() -> T) -> Result<T, PortError> {
        match self.call(what).await {
            Fault::FailBefore => Err(PortError(format!("{what}: injected failure"))),
            Fault::Ok => Ok(effect()),
            Fault::FailAfter => {
                effect();
                Err(PortError(format!("{what}: injected timeout after the effect")))
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

/// Polls `flow` to the end, or (with probability `crash_rate` at each yield) drops it where it
/// stands: `None` means the isolate died there.
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
    let mut flow = pin!(flow);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = flow.as_mut().poll(&mut cx) {
            return Some(out);
        }
        if crash_rate > 0.0 && faults.chance(crash_rate) {
            faults.trace.borrow_mut().push("isolate stopped".into());
            return None;
        }
        between();
    }
}

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
    for seed in seeds {
        if let Err(why) = scenario(seed) {
            panic!("simulation {name}: seed {seed} failed: {why}\n(replay: SIM_SEED={seed} cargo test {name}; keep the seed in its regression list)");
        }
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
