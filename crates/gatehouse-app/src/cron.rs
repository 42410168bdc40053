//! The minute cron's jobs (SPEC §19): each takes a lease, so no two runs of one job overlap, and
//! each runs on its own, so one failing job never skips the others. A job bounds its own time
//! (the roll-up by [`RollUpLimits::time_box_ms`](super::RollUpLimits)); its lease outlasts that
//! time plus the deadline of the last binding call it may be waiting on.

use std::future::Future;

use futures_util::future::LocalBoxFuture;

use gatehouse_core::ports::{JobLeases, Lease, PortError};

/// How long a job's lease lasts: longer than its time box plus the deadline of the call it may
/// wait on last, shorter than the minute to the next run.
pub const LEASE_MS: i64 = 55_000;

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
