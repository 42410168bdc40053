//! The minute cron's jobs (SPEC §19, §23): each takes a lease, so no two runs of one job overlap,
//! and each runs on its own, so one failing job never skips the others. The jobs share one
//! invocation's subrequests, D1 queries and time through one [`RunBudget`]: a job takes its part
//! before each step and stops when the budget says no, so however many tenants there are, a run
//! stays inside the platform's limits and the next run carries on. A job's lease outlasts its time
//! plus the deadline of the last binding call it may be waiting on.

use std::cell::Cell;
use std::future::Future;

use futures_util::future::LocalBoxFuture;

use gatehouse_core::ports::{JobLeases, Lease, PortError};

/// How long a job's lease lasts: longer than its time box plus the deadline of the call it may
/// wait on last, shorter than the minute to the next run.
pub const LEASE_MS: i64 = 55_000;

/// What one invocation of the minute cron may still spend, shared by its jobs in turn.
#[derive(Debug)]
pub struct RunBudget {
    /// Subrequests left: D1 queries, R2, Queues and Durable Object calls.
    calls: Cell<u32>,
    /// D1 queries left (D1 counts them on its own as well).
    d1: Cell<u32>,
    /// When the run starts no further step (Unix ms).
    ends_at_ms: i64,
}

impl RunBudget {
    /// The invocation's limits less a margin for the calls made before and around the jobs (the
    /// test clock, the leases): 10,000 subrequests and 1,000 D1 queries on Workers Paid.
    pub const CALLS: u32 = gatehouse_core::platform::WORKER_MAX_SUBREQUESTS as u32 - 200;
    pub const D1_QUERIES: u32 = gatehouse_core::platform::D1_MAX_QUERIES_PER_INVOCATION as u32 - 100;
    /// A run starts no step after this long: it ends well inside the jobs' leases ([`LEASE_MS`]),
    /// a step's slowest call's deadline included.
    pub const TIME_MS: i64 = 30_000;

    pub fn new(calls: u32, d1: u32, ends_at_ms: i64) -> Self {
        RunBudget { calls: Cell::new(calls), d1: Cell::new(d1), ends_at_ms }
    }

    /// The whole budget of a minute-cron invocation started at `now_ms`.
    pub fn minute(now_ms: i64) -> Self {
        Self::new(Self::CALLS, Self::D1_QUERIES, now_ms + Self::TIME_MS)
    }

    /// A budget that never says no (tests of a job's own logic).
    pub fn unbounded() -> Self {
        Self::new(u32::MAX, u32::MAX, i64::MAX)
    }

    /// Takes `d1` queries and `calls` other subrequests, if both are left and the run's time is
    /// not up at `now_ms`; answers whether it did (nothing is taken otherwise).
    pub fn take(&self, now_ms: i64, d1: u32, calls: u32) -> bool {
        self.grant(now_ms, d1, calls, 1, 0) == 1
    }

    /// Takes `d1` queries and `calls` subrequests once, and `unit_calls` more for each of up to
    /// `wanted` units: answers how many units it took (0: it took nothing at all).
    pub fn grant(&self, now_ms: i64, d1: u32, calls: u32, wanted: usize, unit_calls: u32) -> usize {
        let fixed = d1.saturating_add(calls);
        if now_ms >= self.ends_at_ms || self.d1.get() < d1 || self.calls.get() < fixed {
            return 0;
        }
        let spare = (self.calls.get() - fixed) / unit_calls.max(1);
        let units = wanted.min(spare as usize);
        if units == 0 {
            return 0;
        }
        self.d1.set(self.d1.get() - d1);
        self.calls.set(self.calls.get() - fixed - units as u32 * unit_calls);
        units
    }

    /// Subrequests and D1 queries left.
    pub fn left(&self) -> (u32, u32) {
        (self.calls.get(), self.d1.get())
    }
}

/// One job of the minute cron: its name (and its lease's) and its work, which answers what it did
/// as log fields (empty: nothing worth a line).
pub type Job<'a> = (&'static str, LocalBoxFuture<'a, Result<String, PortError>>);

/// Runs `jobs` one after the other, each under its own lease: one that fails, or whose lease
/// another run holds, never keeps the next from running (SPEC §19). Answers each job's outcome.
pub async fn run_jobs<L: JobLeases>(
    leases: &L,
    holder: &str,
    now_ms: impl Fn() -> i64,
    jobs: Vec<Job<'_>>,
) -> Vec<(&'static str, Result<JobRun<String>, PortError>)> {
    let mut outcomes = Vec::new();
    for (name, work) in jobs {
        outcomes.push((name, leased(leases, name, holder, now_ms(), LEASE_MS, work).await));
    }
    outcomes
}

/// What one job's run came to.
#[derive(Debug, PartialEq, Eq)]
pub enum JobRun<T> {
    /// The job ran and answered this.
    Ran(T),
    /// Another run holds the lease: this one did nothing.
    Skipped,
}

/// Runs `work` under the lease of `job` for `lease_ms` from `now_ms`, then gives the lease back
/// (also when `work` failed). `holder` names this run (unique per invocation).
pub async fn leased<L: JobLeases, T>(
    leases: &L,
    job: &str,
    holder: &str,
    now_ms: i64,
    lease_ms: i64,
    work: impl Future<Output = Result<T, PortError>>,
) -> Result<JobRun<T>, PortError> {
    if !leases.take_lease(&Lease { job, holder, now_ms, until_ms: now_ms + lease_ms }).await? {
        return Ok(JobRun::Skipped);
    }
    let result = work.await;
    // A release that fails leaves the lease to run out: the next run waits for it, no more.
    let _ = leases.release_lease(job, holder).await;
    result.map(JobRun::Ran)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::fakes::FakeStore;
    use crate::sim::{complete, Faults};

    #[test]
    fn the_budget_grants_what_is_left_and_nothing_past_its_time() {
        let budget = RunBudget::new(100, 10, 1_000);
        // 3 queries, 1 call, then 10 calls a unit: 9 units fit in the 96 calls left.
        assert_eq!(budget.grant(0, 3, 1, 50, 10), 9);
        assert_eq!(budget.left(), (6, 7));
        assert!(!budget.take(0, 8, 0), "more queries than are left");
        assert_eq!(budget.left(), (6, 7), "a refusal takes nothing");
        assert!(budget.take(0, 2, 1));
        assert_eq!(budget.grant(0, 1, 0, 5, 10), 0, "no unit fits: nothing taken");
        assert_eq!(budget.left(), (3, 5));
        assert!(!budget.take(1_000, 0, 1), "the run's time is up");
    }

    #[test]
    fn a_second_run_while_the_first_holds_the_lease_does_nothing_and_a_lapsed_lease_is_taken() {
        let store = FakeStore::new(Rc::new(Faults::new(0, 0.0)));
        let held = std::cell::Cell::new(false);
        // Run A holds the lease while B starts: B skips.
        let b_inside_a = async {
            held.set(true);
            let b = leased(&store, "roll_up", "run-b", 1_000, 55_000, async { Ok("b") }).await;
            Ok(b)
        };
        let a = complete(leased(&store, "roll_up", "run-a", 0, 55_000, b_inside_a)).unwrap();
        assert!(held.get());
        assert_eq!(a, JobRun::Ran(Ok(JobRun::Skipped)));
        // A gave the lease back: C runs.
        assert_eq!(
            complete(leased(&store, "roll_up", "run-c", 2_000, 55_000, async { Ok(1) })),
            Ok(JobRun::Ran(1))
        );
        // Another job's lease is its own.
        let d_inside_e = async { leased(&store, "sweep", "run-d", 3_000, 55_000, async { Ok(2) }).await };
        assert_eq!(
            complete(leased(&store, "roll_up", "run-e", 3_000, 55_000, d_inside_e)),
            Ok(JobRun::Ran(JobRun::Ran(2)))
        );
    }

    #[test]
    fn a_run_that_died_holding_the_lease_blocks_only_until_it_lapses() {
        let store = FakeStore::new(Rc::new(Faults::new(0, 0.0)));
        assert_eq!(
            complete(store.take_lease(&Lease {
                job: "roll_up",
                holder: "dead-run",
                now_ms: 0,
                until_ms: 55_000
            })),
            Ok(true)
        );
        assert_eq!(
            complete(leased(&store, "roll_up", "next", 54_999, 55_000, async { Ok(()) })),
            Ok(JobRun::Skipped)
        );
        assert_eq!(
            complete(leased(&store, "roll_up", "later", 55_000, 55_000, async { Ok(()) })),
            Ok(JobRun::Ran(()))
        );
    }

    /// SPEC §19: the minute cron's jobs run on their own (main ran them with `?`: a failing sweep
    /// skipped the roll-up).
    #[test]
    fn a_failing_or_skipped_job_never_keeps_the_next_from_running() {
        let store = FakeStore::new(Rc::new(Faults::new(0, 0.0)));
        assert_eq!(
            complete(store.take_lease(&Lease {
                job: "held",
                holder: "another-run",
                now_ms: 0,
                until_ms: 55_000
            })),
            Ok(true)
        );
        let ran = std::cell::Cell::new(0);
        let jobs: Vec<Job<'_>> = vec![
            ("fails", Box::pin(async { Err(PortError("D1 down".into())) })),
            ("held", Box::pin(async { Ok("never".to_owned()) })),
            (
                "runs",
                Box::pin(async {
                    ran.set(ran.get() + 1);
                    Ok("done".to_owned())
                }),
            ),
        ];
        let outcomes = complete(run_jobs(&store, "this-run", || 1_000, jobs));
        assert_eq!(
            outcomes,
            vec![
                ("fails", Err(PortError("D1 down".into()))),
                ("held", Ok(JobRun::Skipped)),
                ("runs", Ok(JobRun::Ran("done".to_owned()))),
            ]
        );
        assert_eq!(ran.get(), 1);
        // The leases this run took are given back; the one another run holds stays.
        assert_eq!(
            complete(store.take_lease(&Lease {
                job: "fails",
                holder: "next",
                now_ms: 2_000,
                until_ms: 57_000
            })),
            Ok(true)
        );
        assert_eq!(
            complete(store.take_lease(&Lease {
                job: "held",
                holder: "next",
                now_ms: 2_000,
                until_ms: 57_000
            })),
            Ok(false)
        );
    }

    #[test]
    fn a_failing_job_still_gives_its_lease_back() {
        let store = FakeStore::new(Rc::new(Faults::new(0, 0.0)));
        let failed = complete(leased(&store, "sweep", "a", 0, 55_000, async {
            Err::<(), _>(PortError("down".into()))
        }));
        assert_eq!(failed, Err(PortError("down".into())));
        assert_eq!(complete(leased(&store, "sweep", "b", 1, 55_000, async { Ok(()) })), Ok(JobRun::Ran(())));
    }
}
