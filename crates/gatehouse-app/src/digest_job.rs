//! The audit digests' job (SPEC §22, §23): the minute cron's job that signs each project's closed
//! periods. The routes a verifier reads them with are `app::digests`.
//!
//! What is signed comes from the project's chain head (`core::audit_chain`), never from D1: the
//! objects the roll-up bound there with the hashes of the bytes it wrote, from where the head
//! ends; the head moves only after the files are written. D1 only tells the job which projects
//! have work (`digest_due`, which the roll-up writes), so a project that is idle costs nothing per
//! period, and one digest covers a run of periods without objects. A period is closed once the
//! roll-up's cutoff has passed its end and none of the project's rows older than that is still in
//! the hot tier. A head whose newest digest R2 lacks writes it again from the head; one whose
//! newest digest R2 holds with other bytes stops that project's digests; both are reported.

use std::collections::HashSet;

use futures_util::stream::{self, StreamExt};

use super::cron::RunBudget;
use gatehouse_core::audit_chain::{
    digest_end, start_at, trusted_start, AdoptHead, AdvanceHead, Advanced, BoundObject, ChainHead, HeadState,
};
use gatehouse_core::digest::{digest_key, period_start, sha256_hex, AuditSigner, VERSION};
use gatehouse_core::platform::WORKER_MAX_OPEN_CONNECTIONS;
use gatehouse_core::ports::{
    Archive, AuditHeads, ChainStart, DigestDue, DigestRecord, DigestStore, DigestWritten, PortError, Settled,
};
use gatehouse_core::time::rfc3339;
use gatehouse_wire::digests::{AuditDigest, DigestedObject, PreviousDigest};

/// Projects one run looks at, at most (the longest waiting first).
pub const PROJECTS_PER_RUN: usize = 500;
/// Digests one project's run writes at most: a project far behind catches up over a few runs.
const DIGESTS_PER_PROJECT: usize = 48;
/// Bound objects one head read answers (the oldest; more wait for the next digest).
const OBJECTS_PER_READ: usize = 2_000;
/// A run stops starting digests after this long.
const TIME_BOX_MS: i64 = 20_000;
/// A run's D1 queries: the projects due and their first periods, those waiting for the roll-up,
/// the records, where they stand (each per audit database, and the main database's: four
/// databases' worth).
const RUN_QUERIES: u32 = 16;
/// A project's calls: its head read (and started), its newest digest's file, its head's move.
const PROJECT_CALLS: u32 = 4;
/// A digest's calls: its file's put.
const DIGEST_CALLS: u32 = 1;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestReport {
    pub digests: usize,
    pub objects: usize,
    /// Projects whose roll-up is behind (rows older than a closed period still hot): none made.
    pub waiting: usize,
    /// Projects whose digest failed this run (tried again the next), and why.
    pub failed: Vec<String>,
    /// Projects whose storage disagrees with their chain head (SPEC §23), and how: their digests
    /// stop until it agrees again. Logged as an alert and kept for `GET /admin/v1/audit/health`.
    pub alerts: Vec<(String, String)>,
}

/// What signs digests, and over what.
pub struct DigestJob<'a, S, A, H> {
    pub store: &'a S,
    pub archive: &'a A,
    pub heads: &'a H,
    pub signer: &'a AuditSigner,
    pub period_ms: i64,
    /// The roll-up's cutoff: periods that end by it are closed.
    pub cutoff_ms: i64,
    /// `AUDIT_CHAIN_SINCE`: what a starting chain may take from D1 ended before it.
    pub chain_since_ms: i64,
}

/// One project's part of a run: its head as read, the digests signed after it, and what storage
/// said of its newest digest.
#[derive(Default)]
struct Planned {
    project: String,
    /// The head read (`None`: none to start from this run).
    head: Option<ChainHead>,
    digests: Vec<ChainHead>,
    /// The oldest object no digest lists, before and after `digests`.
    oldest_pending_ts: Option<i64>,
    pending_after: Option<i64>,
    /// What storage said that must be reported; `stopped`: and that stops its digests.
    alert: Option<String>,
    stopped: bool,
}

impl<S: DigestStore, A: Archive, H: AuditHeads> DigestJob<'_, S, A, H> {
    /// Writes the due digests: of the projects D1 names as having work, the longest waiting first,
    /// as far as `budget` and the time box go. In steps, each one call per project or one for all:
    /// every project's head read and its digests signed (six projects at a time); every digest
    /// recorded in D1 (one batch per database); their files written to R2; each head moved along
    /// its digests (once: a head another run moved keeps what that run signed); D1 told where
    /// each project stands. A run that stops before a head moved is done again by the next, which
    /// signs the same spans again (their record and file replaced, nothing linked to them yet);
    /// verifiers follow the chain only as far as the head.
    pub async fn run(&self, budget: &RunBudget, now_ms: impl Fn() -> i64) -> Result<DigestReport, PortError> {
        let started = now_ms();
        let mut report = DigestReport::default();
        let closed_end = period_start(self.cutoff_ms, self.period_ms);
        if !budget.take(started, RUN_QUERIES, 0) {
            return Ok(report);
        }
        let due = self.store.projects_due_for_digest(self.period_ms, closed_end, PROJECTS_PER_RUN).await?;
        if due.is_empty() {
            return Ok(report);
        }
        let ids: Vec<String> = due.iter().map(|d| d.project_id.clone()).collect();
        let waiting: HashSet<String> =
            self.store.projects_waiting(&ids, closed_end).await?.into_iter().collect();
        report.waiting = waiting.len();
        let ready: Vec<&DigestDue> = due.iter().filter(|d| !waiting.contains(&d.project_id)).collect();
        // Each head (one call each, six at a time); the chains that never started, started from
        // D1 (one query for all, then one call each).
        let now = &now_ms;
        let reads = stream::iter(ready).map(|due| async move {
            let granted = budget.take(now(), 0, PROJECT_CALLS);
            let state = match granted {
                true => self.heads.read_head(&due.project_id, OBJECTS_PER_READ).await.map(Some),
                false => Ok(None),
            };
            (due, state)
        });
        let reads: Vec<_> = reads.buffer_unordered(WORKER_MAX_OPEN_CONNECTIONS).collect().await;
        let mut states = Vec::new();
        let mut unstarted = Vec::new();
        for (due, state) in reads {
            match state {
                Ok(Some(state)) if state.head.is_none() => unstarted.push((due, state.oldest_pending_ts)),
                Ok(Some(state)) => states.push((due, state)),
                Ok(None) => {}
                Err(e) => report.failed.push(format!("{}: {}", due.project_id, e.0)),
            }
        }
        if !unstarted.is_empty() && budget.take(now_ms(), 2, 0) {
            let ids: Vec<String> = unstarted.iter().map(|(d, _)| d.project_id.clone()).collect();
            let starts = self.store.chain_starts(&ids).await?;
            let adopted: Vec<_> = stream::iter(unstarted)
                .map(|(due, oldest)| {
                    let start =
                        starts.iter().find(|s| s.project_id == due.project_id).cloned().unwrap_or_default();
                    async move { (due, self.adopt(due, start, oldest, closed_end).await) }
                })
                .buffer_unordered(WORKER_MAX_OPEN_CONNECTIONS)
                .collect()
                .await;
            for (due, state) in adopted {
                match state {
                    Ok(state) => states.push((due, state)),
                    Err(e) => report.failed.push(format!("{}: {}", due.project_id, e.0)),
                }
            }
        }
        let plans: Vec<Result<Planned, (String, PortError)>> = stream::iter(states)
            .map(|(due, state)| async {
                let plan = self.plan(&due.project_id, state, closed_end, budget, started, &now_ms).await;
                plan.map_err(|e| (due.project_id.clone(), e))
            })
            .buffer_unordered(WORKER_MAX_OPEN_CONNECTIONS)
            .collect()
            .await;
        let mut planned = Vec::new();
        for plan in plans {
            match plan {
                Ok(plan) => {
                    report.alerts.extend(plan.alert.clone().map(|a| (plan.project.clone(), a)));
                    planned.push(plan);
                }
                // One project's failure (its object or R2 out of reach a moment) holds up no other.
                Err((project, e)) => report.failed.push(format!("{project}: {}", e.0)),
            }
        }
        // The head each run finds is recorded again: a run that lost a race records what won.
        let made_at = now_ms();
        let records: Vec<DigestWritten> = planned
            .iter()
            .flat_map(|p| {
                let head = p.head.iter().filter(|h| h.sequence > 0);
                head.chain(&p.digests).map(|d| written(&p.project, d, made_at))
            })
            .collect();
        self.store.record_digests(&records).await?;
        let moves = planned.iter().filter(|p| p.head.is_some() && !p.stopped).map(|p| async move {
            let head = p.head.as_ref().expect("filtered");
            let mut settled = Settled {
                project_id: p.project.clone(),
                covered_to: head.period_end,
                oldest_pending_ts: p.oldest_pending_ts,
            };
            let Some(last) = p.digests.last() else { return Ok((settled, 0, 0)) };
            // The files first: a head never names a file that is not written.
            for d in &p.digests {
                self.archive.put_digest(&d.key, d.file.as_bytes()).await?;
            }
            let advance = AdvanceHead { after: head.sequence, digests: p.digests.clone() };
            if let Advanced::Conflict { .. } = self.heads.advance_head(&p.project, &advance).await? {
                // Another run moved it first: what it signed stands, and it settles.
                return Err(PortError("its chain head moved meanwhile (another run)".into()));
            }
            settled.covered_to = last.period_end;
            settled.oldest_pending_ts = p.pending_after;
            Ok::<_, PortError>((
                settled,
                p.digests.len(),
                p.digests.iter().map(|d| d.listed.len()).sum::<usize>(),
            ))
        });
        let moved: Vec<_> = stream::iter(moves).buffer_unordered(WORKER_MAX_OPEN_CONNECTIONS).collect().await;
        let mut settled = Vec::new();
        for m in moved {
            match m {
                Ok((s, digests, objects)) => {
                    settled.push(s);
                    report.digests += digests;
                    report.objects += objects;
                }
                Err(e) => report.failed.push(e.0),
            }
        }
        self.store.settle_digests(&settled, &report.alerts, now_ms()).await?;
        Ok(report)
    }

    /// One project's digests from its head on: its newest digest's file checked (written again
    /// if R2 lost it), then a digest signed per closed span.
    async fn plan(
        &self,
        project: &str,
        state: HeadState,
        closed_end: i64,
        budget: &RunBudget,
        started: i64,
        now_ms: &impl Fn() -> i64,
    ) -> Result<Planned, PortError> {
        let mut plan = Planned { project: project.to_owned(), ..Default::default() };
        let Some(mut head) = state.head.clone() else { return Ok(plan) };
        if head.sequence > 0 {
            match self.archive.get(&head.key).await? {
                Some(bytes) if sha256_hex(&bytes) == head.sha256 => {}
                Some(_) => {
                    plan.alert = Some(format!(
                        "the newest digest {} in R2 is not the one signed (SHA-256 {}): digests stop until it is",
                        head.key, head.sha256
                    ));
                    plan.stopped = true;
                    return Ok(plan);
                }
                // Gone (a head names only files written before it moved): deleted. The head has
                // the file: written again, and reported.
                None => {
                    self.archive.put_digest(&head.key, head.file.as_bytes()).await?;
                    plan.alert = Some(format!(
                        "the newest digest {} was missing from R2 (deleted): written again from the chain head",
                        head.key
                    ));
                }
            }
        }
        // Bindings the head refused (storage rewrote an object): the digest lists the bytes bound.
        let alerts = plan.alert.take().into_iter().chain(state.alerts.iter().cloned());
        plan.alert = Some(alerts.collect::<Vec<_>>().join("; ")).filter(|a| !a.is_empty());
        plan.head = Some(head.clone());
        plan.oldest_pending_ts = state.oldest_pending_ts;
        let (read, last_read) = (state.objects.len(), state.objects.last().map(|o| o.first_ts));
        let mut pending: Vec<BoundObject> = state.objects;
        // A chain's first digest begins at its oldest object bound, if that is older than its start.
        let oldest =
            pending.first().filter(|_| head.sequence == 0).map(|o| period_start(o.first_ts, self.period_ms));
        let mut start = oldest.map_or(head.period_end, |p| p.min(head.period_end));
        while plan.digests.len() < DIGESTS_PER_PROJECT && now_ms() - started < TIME_BOX_MS {
            let firsts: Vec<i64> = pending.iter().map(|o| o.first_ts).collect();
            let Some(end) = digest_end(start, closed_end, self.period_ms, &firsts) else { break };
            if !budget.take(now_ms(), 0, DIGEST_CALLS) {
                break;
            }
            let (listed, rest): (Vec<BoundObject>, Vec<BoundObject>) =
                pending.into_iter().partition(|o| o.first_ts < end);
            pending = rest;
            head = self.sign(project, &head, start, end, &listed, now_ms());
            plan.digests.push(head.clone());
            start = end;
        }
        // What is left: the objects read and not listed, and any the read did not answer (none
        // older than the last it answered).
        let unread = state.pending > read as u64;
        plan.pending_after = pending.first().map(|o| o.first_ts).or(last_read.filter(|_| unread));
        Ok(plan)
    }

    /// The head of a chain that never started here, from what D1 had (`start`, this once) before
    /// `AUDIT_CHAIN_SINCE` (`core::audit_chain::trusted_start`): its last digest (a project from
    /// before SPEC §23) with the objects D1 lists as not digested yet; or else its first period,
    /// no later than its oldest object bound (`oldest_bound`) or the last closed period's end.
    async fn adopt(
        &self,
        due: &DigestDue,
        start: ChainStart,
        oldest_bound: Option<i64>,
        closed_end: i64,
    ) -> Result<HeadState, PortError> {
        // Never later than what is closed now (an `AUDIT_CHAIN_SINCE` set ahead takes nothing more).
        let since = self.chain_since_ms.min(closed_end);
        let first_period = oldest_bound
            .map(|ts| period_start(ts, self.period_ms))
            .into_iter()
            .chain([due.first_period, closed_end])
            .min()
            .expect("three");
        let head = match start.last.filter(|d| trusted_start(d.period_end, since)) {
            Some(d) => {
                let file = self.archive.get(&d.key).await?.unwrap_or_default();
                ChainHead {
                    sequence: 1,
                    period_start: d.period_start,
                    period_end: d.period_end,
                    file: String::from_utf8_lossy(&file).into_owned(),
                    key: d.key,
                    sha256: d.sha256,
                    listed: Vec::new(),
                }
            }
            None => start_at(first_period),
        };
        let mut objects = Vec::new();
        for o in start.objects.into_iter().filter(|o| trusted_start(o.first_ts, since)) {
            // The hash the roll-up stored it with; for objects from before digests, their bytes'.
            let sha256 = match o.sha256 {
                Some(sha256) => sha256,
                None => match self.archive.get(&o.key).await? {
                    Some(bytes) => sha256_hex(&bytes),
                    None => continue,
                },
            };
            objects.push(BoundObject {
                key: o.key,
                sha256,
                rows: o.rows,
                first_id: o.first_id,
                last_id: o.last_id,
                first_ts: o.first_ts,
            });
        }
        self.heads.adopt_head(&due.project_id, &AdoptHead { head, objects }).await
    }

    /// The digest of `[start, end)` after `head`, listing `objects`: signed, as the next head.
    fn sign(
        &self,
        project: &str,
        head: &ChainHead,
        start: i64,
        end: i64,
        objects: &[BoundObject],
        now_ms: i64,
    ) -> ChainHead {
        let digest = AuditDigest {
            version: VERSION,
            project_id: project.to_owned(),
            period_start: rfc3339(start),
            period_end: rfc3339(end),
            made_at: Some(rfc3339(now_ms)),
            objects: objects
                .iter()
                .map(|o| DigestedObject {
                    key: o.key.clone(),
                    sha256: o.sha256.clone(),
                    rows: o.rows,
                    first_request_id: o.first_id.clone(),
                    last_request_id: o.last_id.clone(),
                })
                .collect(),
            previous: (head.sequence > 0)
                .then(|| PreviousDigest { key: head.key.clone(), sha256: head.sha256.clone() }),
            algorithm: String::new(),
            public_key: String::new(),
            signature: None,
        };
        let (_, file) = self.signer.sign(digest);
        ChainHead {
            sequence: head.sequence + 1,
            period_start: start,
            period_end: end,
            key: digest_key(project, start),
            sha256: sha256_hex(&file),
            file: String::from_utf8(file).expect("a digest is JSON text"),
            listed: objects.iter().map(|o| o.key.clone()).collect(),
        }
    }
}

/// How long after a row's time its digest may take (what docs/api/verifying-the-audit-log.md
/// promises): the hot window, the rest of its period, and a period for the job to get to it.
pub fn digest_lag_ms(period_ms: i64, hot_seconds: u32) -> i64 {
    i64::from(hot_seconds) * 1000 + 2 * period_ms
}

/// The D1 record of the digest `head` names.
fn written(project: &str, head: &ChainHead, now_ms: i64) -> DigestWritten {
    DigestWritten {
        project_id: project.to_owned(),
        record: DigestRecord {
            project_id: None,
            period_start: head.period_start,
            period_end: head.period_end,
            key: head.key.clone(),
            sha256: head.sha256.clone(),
            objects: head.listed.len() as u32,
        },
        listed: head.listed.clone(),
        made_at: now_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use super::*;
    use crate::fakes::audit::FakeArchive;
    use crate::fakes::gateway::FakeProject;
    use crate::fakes::FakeStore;
    use crate::sim::{check_seeds, complete, drive, Faults};
    use crate::{roll_up, RollUpLimits};
    use gatehouse_core::audit::AuditRow;
    use gatehouse_core::ports::AuditStore;

    const HOUR: i64 = 3_600_000;
    const T0: i64 = 1_795_910_400_000; // a UTC midnight
    /// Seeds that once broke a promise, replayed on every run.
    const REGRESSIONS: &[u64] = &[];
    const LIMITS: RollUpLimits =
        RollUpLimits { rows_per_batch: 10, slices_per_run: 100, time_box_ms: i64::MAX };

    fn row(project: &str, id: &str, ts: i64) -> AuditRow {
        let mut row = AuditRow::new(id.into(), ts, "GET".into(), "/public/v1/me".into());
        row.project_id = Some(project.into());
        row.status = 200;
        row
    }

    fn signer() -> AuditSigner {
        AuditSigner::from_secret("audit-signing-key-0123")
    }

    fn fakes() -> (FakeStore, FakeArchive) {
        let faults = Rc::new(Faults::new(0, 0.0));
        (FakeStore::new(faults.clone()), FakeArchive::new(faults))
    }

    fn project(store: &FakeStore, id: &str, created_at: i64) {
        let p = FakeProject { id: id.into(), name: id.into(), plan: "trial".into(), created_at };
        store.directory.projects.borrow_mut().push(p);
    }

    fn job<'a>(
        store: &'a FakeStore,
        bucket: &'a FakeArchive,
        signer: &'a AuditSigner,
        cutoff_ms: i64,
    ) -> DigestJob<'a, FakeStore, FakeArchive, crate::fakes::audit_heads::FakeAuditHeads> {
        DigestJob {
            store,
            archive: bucket,
            heads: &bucket.heads,
            signer,
            period_ms: HOUR,
            cutoff_ms,
            chain_since_ms: i64::MIN,
        }
    }

    fn digest(store: &FakeStore, bucket: &FakeArchive, cutoff: i64) -> DigestReport {
        complete(job(store, bucket, &signer(), cutoff).run(&RunBudget::unbounded(), || cutoff)).unwrap()
    }

    fn roll(store: &FakeStore, bucket: &FakeArchive, cutoff: i64) {
        complete(roll_up(
            store,
            &crate::RollUpRun::into_fake(bucket, cutoff, LIMITS, &RunBudget::unbounded()),
            || cutoff,
        ))
        .unwrap();
    }

    /// What a verifier finds for `project` up to its chain head (D1 may record digests a moment
    /// before the head takes them): each digest's file where its record says, its hash as
    /// recorded, linked to the one before, signed, its span starting where the one before ended;
    /// every object of the project listed once, with the hash of its bytes now and its row count
    /// (`all`: every object is listed). Answers the span covered.
    fn check_chain(
        store: &FakeStore,
        bucket: &FakeArchive,
        project: &str,
        all: bool,
    ) -> Result<Option<(i64, i64)>, String> {
        let digests = store.audit.digests.borrow();
        let objects = bucket.objects.borrow();
        let mut previous: Option<&DigestRecord> = None;
        let mut listed = BTreeMap::new();
        let mut covered = None;
        let head_end = bucket
            .heads
            .objects
            .borrow()
            .get(project)
            .and_then(|o| o.head.clone())
            .map_or(0, |h| h.period_end);
        let chain = digests.range((project.to_owned(), i64::MIN)..(project.to_owned(), head_end));
        for ((_, start), record) in chain {
            let file = objects.get(&record.key).ok_or(format!("digest {} missing", record.key))?;
            if sha256_hex(file) != record.sha256 {
                return Err(format!("digest {} is not the one recorded", record.key));
            }
            let digest: AuditDigest = serde_json::from_slice(file).map_err(|e| e.to_string())?;
            if signer().sign(digest.clone()).0 != digest {
                return Err(format!("digest {} does not verify", record.key));
            }
            if let Some(p) = previous {
                if p.period_end != *start {
                    return Err(format!("no digest between {} and {start}", p.period_end));
                }
            }
            let link = previous.map(|p| PreviousDigest { key: p.key.clone(), sha256: p.sha256.clone() });
            if digest.previous != link {
                return Err(format!("digest {} links to {:?}, not {link:?}", record.key, digest.previous));
            }
            for o in &digest.objects {
                let bytes = objects.get(&o.key).ok_or(format!("object {} missing", o.key))?;
                if sha256_hex(bytes) != o.sha256 {
                    return Err(format!("object {} changed after digest {} listed it", o.key, record.key));
                }
                let rows = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64;
                if rows != o.rows || listed.insert(o.key.clone(), record.key.clone()).is_some() {
                    return Err(format!(
                        "object {} listed with {} rows (has {rows}) or twice",
                        o.key, o.rows
                    ));
                }
            }
            covered = Some((covered.map_or(*start, |(first, _)| first), record.period_end));
            previous = Some(record);
        }
        let prefix = format!("audit/{project}/");
        let mut archived = objects.keys().filter(|k| k.starts_with(&prefix) && !k.contains("/digest/"));
        if let Some(unlisted) = archived.find(|k| all && !listed.contains_key(*k)) {
            return Err(format!("object {unlisted} is listed by no digest"));
        }
        Ok(covered)
    }

    /// One schedule: a project's rows arrive over six hours (late ones for hours rolled up and
    /// digested already); each hour the roll-up and the digest job run, any D1, R2 or head call
    /// failing before or after its effect and the isolate stopping anywhere; then both run with
    /// faults off. The chain must be whole from the project's first hour and every object listed
    /// once, by its bytes as they stay.
    fn schedule(seed: u64) -> Result<(), String> {
        let faults = Rc::new(Faults::new(seed, 0.0));
        let store = FakeStore::new(faults.clone());
        let bucket = FakeArchive::new(faults.clone());
        let signer = signer();
        project(&store, "prj_a", T0 + 1_000);
        let limits = RollUpLimits {
            rows_per_batch: 1 + faults.below(4) as usize,
            slices_per_run: 3,
            time_box_ms: i64::MAX,
        };
        let arrive = |n: u64, ts: i64| {
            let rate = faults.failure_rate();
            faults.set_failure_rate(0.0);
            complete(store.insert_audit_rows(&[row("prj_a", &format!("r{n:04}"), ts)])).expect("no faults");
            faults.set_failure_rate(rate);
        };
        let mut n = 0;
        for hour in 1..=6 {
            for _ in 0..faults.below(6) {
                n += 1;
                // Mostly the hour just ended; sometimes a late row of an hour long closed.
                let back = if faults.chance(0.2) { 1 + faults.below(hour as u64) as i64 } else { 1 };
                arrive(n, T0 + (hour - back) * HOUR + faults.below(HOUR as u64) as i64);
            }
            let cutoff = T0 + hour * HOUR;
            faults.set_failure_rate([0.0, 0.1, 0.3][faults.below(3) as usize]);
            let crash = [0.0, 0.02, 0.1][faults.below(3) as usize];
            for _ in 0..1 + faults.below(3) {
                let budget = RunBudget::unbounded();
                let _ = drive(
                    roll_up(&store, &crate::RollUpRun::into_fake(&bucket, cutoff, limits, &budget), || {
                        cutoff
                    }),
                    &faults,
                    crash,
                );
                let _ = drive(job(&store, &bucket, &signer, cutoff).run(&budget, || cutoff), &faults, crash);
                check_chain(&store, &bucket, "prj_a", false)
                    .map_err(|e| format!("{e}; trace {:?}", faults.trace.borrow()))?;
            }
            faults.set_failure_rate(0.0);
        }
        let end = T0 + 8 * HOUR;
        for _ in 0..20 {
            let budget = RunBudget::unbounded();
            complete(roll_up(&store, &crate::RollUpRun::into_fake(&bucket, end, limits, &budget), || end))
                .map_err(|e| e.0)?;
            complete(job(&store, &bucket, &signer, end).run(&budget, || end)).map_err(|e| e.0)?;
        }
        match check_chain(&store, &bucket, "prj_a", true)? {
            // Every hour up to the last one with an object is covered, from the first.
            Some((first, last)) if first == T0 && (n == 0 || last >= T0 + HOUR) => Ok(()),
            None if n == 0 => Ok(()),
            covered => Err(format!("the digests cover {covered:?}")),
        }
    }

    #[test]
    fn digests_chain_every_hour_and_list_every_object_once_under_faults() {
        check_seeds(
            "digests_chain_every_hour_and_list_every_object_once_under_faults",
            600,
            REGRESSIONS,
            schedule,
        );
    }

    /// The roll-up is behind (a row of a closed hour still hot): no digest until it is archived.
    /// An idle stretch is one digest; an hour with objects is its own (SPEC §23).
    #[test]
    fn no_digest_while_rows_of_a_closed_period_are_hot_and_idle_hours_are_one_digest() {
        let (store, bucket) = fakes();
        project(&store, "prj_a", T0);
        complete(
            store.insert_audit_rows(&[row("prj_a", "r1", T0 + 10), row("prj_a", "r2", T0 + 5 * HOUR + 10)]),
        )
        .unwrap();
        roll(&store, &bucket, T0 + HOUR);
        let report = digest(&store, &bucket, T0 + 6 * HOUR);
        assert_eq!((report.digests, report.waiting), (0, 1), "{report:?}");
        roll(&store, &bucket, T0 + 6 * HOUR);
        let report = digest(&store, &bucket, T0 + 6 * HOUR);
        assert_eq!((report.digests, report.objects, report.waiting), (3, 2, 0), "{report:?}");
        let spans: Vec<(i64, i64)> =
            store.audit.digests.borrow().values().map(|d| (d.period_start - T0, d.period_end - T0)).collect();
        assert_eq!(spans, [(0, HOUR), (HOUR, 5 * HOUR), (5 * HOUR, 6 * HOUR)]);
        assert_eq!(check_chain(&store, &bucket, "prj_a", true), Ok(Some((T0, T0 + 6 * HOUR))));
        // Idle since: no work at all, however many periods pass.
        store.faults.take_calls();
        let report = digest(&store, &bucket, T0 + 100 * HOUR);
        assert_eq!(report, DigestReport::default());
        assert_eq!(store.faults.take_calls().0, 1, "one query finds that no project has work");
    }

    /// Project `prj_a` with three rows of its first hour rolled up: its one object's key and bytes.
    fn one_object_rolled_up() -> (FakeStore, FakeArchive, String, Vec<u8>) {
        let (store, bucket) = fakes();
        project(&store, "prj_a", T0);
        let rows = [row("prj_a", "r1", T0 + 10), row("prj_a", "r2", T0 + 20), row("prj_a", "r3", T0 + 30)];
        complete(store.insert_audit_rows(&rows)).unwrap();
        roll(&store, &bucket, T0 + HOUR);
        let key = bucket.objects.borrow().keys().next().unwrap().clone();
        let written = bucket.objects.borrow()[&key].clone();
        (store, bucket, key, written)
    }

    /// Found by the review: bytes changed in R2 between the roll-up and the digest are never
    /// signed (the digest pins the hash the roll-up bound).
    #[test]
    fn an_object_changed_before_its_digest_is_not_signed() {
        let (store, bucket, key, written) = one_object_rolled_up();
        let forged =
            String::from_utf8(written.clone()).unwrap().replace(r#""status":200"#, r#""status":201"#);
        bucket.objects.borrow_mut().insert(key.clone(), forged.into_bytes()); // same rows, ids, order
                                                                              // And D1's summary says the forged bytes' hash: D1 is not where the job reads it.
        store.audit.objects.borrow_mut().get_mut(&key).unwrap().sha256 = Some("f".repeat(64));
        digest(&store, &bucket, T0 + HOUR);
        let record = store.audit.digests.borrow().values().next().cloned().expect("a digest");
        let digest: AuditDigest = serde_json::from_slice(&bucket.objects.borrow()[&record.key]).unwrap();
        assert_eq!(digest.objects[0].sha256, sha256_hex(&written), "the digest signed the forged bytes");
    }

    /// Found by the review: an object gone from R2 holds up neither its own chain nor another
    /// project's.
    #[test]
    fn a_missing_object_stalls_no_chain() {
        let (store, bucket) = fakes();
        project(&store, "prj_a", T0);
        project(&store, "prj_b", T0);
        complete(store.insert_audit_rows(&[row("prj_a", "r1", T0 + 10), row("prj_b", "r2", T0 + 20)]))
            .unwrap();
        roll(&store, &bucket, T0 + HOUR);
        let gone = bucket.objects.borrow().keys().find(|k| k.starts_with("audit/prj_a/")).cloned().unwrap();
        bucket.objects.borrow_mut().remove(&gone);
        digest(&store, &bucket, T0 + HOUR);
        let digests = store.audit.digests.borrow();
        assert!(digests.contains_key(&("prj_b".to_owned(), T0)), "prj_b starved by prj_a's missing object");
        assert!(digests.contains_key(&("prj_a".to_owned(), T0)), "prj_a's chain stopped");
    }

    /// SPEC §23, the signer as an oracle: someone who writes D1 and R2 without the signing key
    /// deletes the newest digest (R2 and D1), sets `digest_next` back and lists an invented object
    /// in D1. The job signs nothing twice and nothing D1 made up; the deleted digest comes back
    /// from the chain head, reported; a digest replaced with other bytes stops the project's
    /// digests, reported, until it is put back.
    #[test]
    fn a_d1_and_r2_writer_cannot_steer_the_signer() {
        let (store, bucket) = fakes();
        project(&store, "prj_a", T0);
        complete(store.insert_audit_rows(&[row("prj_a", "r1", T0 + 10), row("prj_a", "r2", T0 + HOUR + 10)]))
            .unwrap();
        roll(&store, &bucket, T0 + 2 * HOUR);
        assert_eq!(digest(&store, &bucket, T0 + 2 * HOUR).digests, 2);
        let newest = store.audit.digests.borrow().values().last().cloned().unwrap();
        let signed = bucket.objects.borrow()[&newest.key].clone();
        // The attack.
        bucket.objects.borrow_mut().remove(&newest.key);
        store.audit.digests.borrow_mut().remove(&("prj_a".to_owned(), newest.period_start));
        store.audit.digest_next.borrow_mut().insert("prj_a".into(), newest.period_start);
        let mut invented = store.audit.objects.borrow().values().next().cloned().unwrap();
        invented.key = "audit/prj_a/forged.ndjson.gz".into();
        invented.first_ts = T0 + HOUR + 5;
        store.audit.objects.borrow_mut().insert(invented.key.clone(), invented);
        // The project has no work: the job does not look at it, and signs nothing.
        assert_eq!(digest(&store, &bucket, T0 + 2 * HOUR), DigestReport::default());
        // Told it has work (a `digest_due` row written too), it still signs nothing twice and
        // nothing D1 made up.
        store.audit.digest_due.borrow_mut().insert("prj_a".into(), T0 + HOUR + 5);
        let report = digest(&store, &bucket, T0 + 2 * HOUR);
        assert_eq!(report.digests, 0, "nothing signed twice or made up: {report:?}");
        assert!(report.alerts[0].1.contains("missing from R2"), "{report:?}");
        assert_eq!(bucket.objects.borrow()[&newest.key], signed, "the deleted digest is back, as signed");
        assert_eq!(store.audit.digests.borrow()[&("prj_a".to_owned(), newest.period_start)], newest);
        assert_eq!(check_chain(&store, &bucket, "prj_a", false), Ok(Some((T0, T0 + 2 * HOUR))));
        // The newest digest replaced with other bytes: the project's digests stop, reported.
        bucket.objects.borrow_mut().insert(newest.key.clone(), b"{}".to_vec());
        complete(store.insert_audit_rows(&[row("prj_a", "r3", T0 + 2 * HOUR + 10)])).unwrap();
        roll(&store, &bucket, T0 + 3 * HOUR);
        let report = digest(&store, &bucket, T0 + 3 * HOUR);
        assert_eq!(report.digests, 0, "{report:?}");
        assert!(report.alerts[0].1.contains("is not the one signed"), "{report:?}");
        assert_eq!(store.audit.digest_alerts.borrow().len(), 1, "kept for the health route");
        // Put back: the digests go on, and the alert goes.
        bucket.objects.borrow_mut().insert(newest.key.clone(), signed);
        assert_eq!(digest(&store, &bucket, T0 + 3 * HOUR).digests, 1);
        assert!(store.audit.digest_alerts.borrow().is_empty());
        assert_eq!(check_chain(&store, &bucket, "prj_a", false), Ok(Some((T0, T0 + 3 * HOUR))));
    }

    /// An object planted in R2 with its D1 row (and a digest D1 claims came before) for a project
    /// whose chain has not started: found by the second review (H1; this failed before
    /// `AUDIT_CHAIN_SINCE`: the first digest signed the planted object, linked to the claimed
    /// digest). A chain starts from D1 only for what ended before `AUDIT_CHAIN_SINCE`.
    #[test]
    fn a_chain_that_starts_takes_from_d1_only_what_ended_before_the_chain_since() {
        for since in [i64::MIN, T0 + HOUR / 2] {
            let (store, bucket) = fakes();
            project(&store, "prj_a", T0);
            complete(
                store.insert_audit_rows(&[row("prj_a", "r1", T0 + 10), row("prj_a", "r2", T0 + HOUR + 10)]),
            )
            .unwrap();
            roll(&store, &bucket, T0 + 2 * HOUR);
            let mut planted = store.audit.objects.borrow().values().next().cloned().unwrap();
            let bytes = br#"{"invented":true}"#.to_vec();
            planted.key = "audit/prj_a/2026-11-29/1795910400001-x.ndjson.gz".into();
            planted.first_ts = T0 + 1;
            planted.sha256 = Some(sha256_hex(&bytes));
            bucket.objects.borrow_mut().insert(planted.key.clone(), bytes);
            store.audit.objects.borrow_mut().insert(planted.key.clone(), planted.clone());
            let claimed = DigestRecord {
                project_id: None,
                period_start: T0 - HOUR,
                period_end: T0,
                key: "audit/prj_a/digest/claimed.json".into(),
                sha256: "0".repeat(64),
                objects: 0,
            };
            store.audit.digests.borrow_mut().insert(("prj_a".into(), T0 - HOUR), claimed);
            let signer = signer();
            let job = DigestJob { chain_since_ms: since, ..job(&store, &bucket, &signer, T0 + 2 * HOUR) };
            complete(job.run(&RunBudget::unbounded(), || T0 + 2 * HOUR)).unwrap();
            let head = bucket.heads.objects.borrow()["prj_a"].head.clone().unwrap();
            let first: AuditDigest = {
                let key = digest_key("prj_a", T0);
                serde_json::from_slice(&bucket.objects.borrow()[&key]).unwrap()
            };
            let listed: Vec<&str> = first.objects.iter().map(|o| o.key.as_str()).collect();
            match since {
                // A new deployment: nothing from D1; the chain starts at the project's first hour.
                i64::MIN => {
                    assert!(!listed.contains(&planted.key.as_str()), "the planted object was signed");
                    assert_eq!(first.previous, None, "linked to the digest D1 claimed");
                    assert_eq!((head.sequence, listed.len()), (2, 1));
                }
                // An upgraded one whose chains moved at T0 + 30 min: what D1 had from before.
                _ => {
                    assert!(listed.contains(&planted.key.as_str()), "history from before the move is kept");
                    assert_eq!(first.previous.map(|p| p.key), Some("audit/prj_a/digest/claimed.json".into()));
                }
            }
        }
    }

    /// Storage makes the roll-up write an archived object again (its D1 row deleted and a row
    /// planted at its first position; then its R2 object deleted too; then one a digest listed,
    /// replaced): found by the second review (H2; before, the object was rewritten with the
    /// planted row alone and signed, and the verifier found the chain intact) and the third (a
    /// refusal stopped the database's roll-up after one batch, unreported; a listed object, which
    /// the head forgets, was written again with the bytes storage put there). The rewrite keeps
    /// every row the object held; without the object bound to read back, the head refuses the
    /// write, nothing is written, the slice stays in D1 passed over, other tenants roll on, and
    /// the refusal is reported.
    #[test]
    fn storage_cannot_make_the_roll_up_rewrite_an_object_without_its_rows() {
        let (store, bucket, key, written) = one_object_rolled_up();
        let roll_reporting = |cutoff: i64| {
            let budget = RunBudget::unbounded();
            complete(roll_up(&store, &crate::RollUpRun::into_fake(&bucket, cutoff, LIMITS, &budget), || {
                cutoff
            }))
            .unwrap()
        };
        // Its D1 row gone, a row at its first position planted: written again with its rows.
        store.audit.objects.borrow_mut().remove(&key);
        let mut planted = row("prj_a", "r1", T0 + 10);
        planted.status = 500;
        complete(store.insert_audit_rows(&[planted.clone()])).unwrap();
        roll(&store, &bucket, T0 + HOUR);
        assert_eq!(bucket.objects.borrow()[&key], written, "rewritten without the rows it held");
        assert_eq!(digest(&store, &bucket, T0 + HOUR).digests, 1);
        assert_eq!(check_chain(&store, &bucket, "prj_a", true), Ok(Some((T0, T0 + HOUR))));
        // Listed by that digest (the head forgot it), replaced in R2 with invented rows, its D1
        // row gone and a row planted again: refused, and no second digest lists it.
        let invented = serde_json::to_vec(&row("prj_a", "r1", T0 + 10)).unwrap();
        bucket.objects.borrow_mut().insert(key.clone(), invented.clone());
        store.audit.objects.borrow_mut().remove(&key);
        complete(store.insert_audit_rows(&[planted.clone()])).unwrap();
        assert_eq!(roll_reporting(T0 + HOUR).refused, vec![key.clone()]);
        assert_eq!(bucket.objects.borrow()[&key], invented, "written again");
        // The project's roll-up stops at that slice (log order) until the planted row goes.
        store.audit.rows.borrow_mut().remove("r1");
        // The next hour, with the R2 object deleted too: refused; another tenant rolls on.
        let rows = [row("prj_a", "r4", T0 + HOUR + 10), row("prj_a", "r5", T0 + HOUR + 20)];
        complete(store.insert_audit_rows(&rows)).unwrap();
        roll(&store, &bucket, T0 + 2 * HOUR);
        let k4 = bucket.objects.borrow().keys().find(|k| k.contains("-r4")).unwrap().clone();
        store.audit.objects.borrow_mut().remove(&k4);
        bucket.objects.borrow_mut().remove(&k4);
        let mut planted4 = row("prj_a", "r4", T0 + HOUR + 10);
        planted4.status = 500;
        complete(store.insert_audit_rows(&[planted4, row("prj_c", "c1", T0 + HOUR + 30)])).unwrap();
        let report = roll_reporting(T0 + 2 * HOUR);
        assert_eq!(report.refused, vec![k4.clone()], "{report:?}");
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(!bucket.objects.borrow().contains_key(&k4), "written though refused");
        assert!(!store.audit.rows.borrow().contains_key("c1"), "another tenant's row stayed in D1");
        // Its planted rows keep the project waiting (no digest of a changed history); they gone,
        // the digest reports the refusal and lists the bytes bound, which R2 lacks.
        store.audit.rows.borrow_mut().retain(|_, r| r.project_id.as_deref() != Some("prj_a"));
        let report = digest(&store, &bucket, T0 + 2 * HOUR);
        assert!(report.alerts.iter().any(|(_, a)| a.contains("not the ones bound")), "{report:?}");
        let listing: Vec<String> = store.audit.digests.borrow().values().map(|d| d.key.clone()).collect();
        let files = bucket.objects.borrow();
        let listed_twice = listing.iter().filter(|d| {
            let file: AuditDigest = serde_json::from_slice(&files[*d]).unwrap();
            file.objects.iter().any(|o| o.key == key)
        });
        assert_eq!(listed_twice.count(), 1, "a listed object signed again");
    }

    /// A project's chain starts at its creation (the route starts its head): an object D1 dates
    /// before `AUDIT_CHAIN_SINCE`, planted in R2 with its D1 row before the project's first digest,
    /// is not signed (found by the third review: the chain was adopted from D1 at its first
    /// digest, trusting D1's dates), nor is one dated after.
    #[test]
    fn a_chain_started_at_its_projects_creation_takes_nothing_from_d1() {
        let (store, bucket) = fakes();
        project(&store, "prj_b", T0 + 2 * HOUR);
        let start = AdoptHead { head: start_at(T0 + 2 * HOUR), objects: Vec::new() };
        complete(bucket.heads.adopt_head("prj_b", &start)).unwrap();
        complete(store.insert_audit_rows(&[row("prj_b", "b1", T0 + 2 * HOUR + 10)])).unwrap();
        roll(&store, &bucket, T0 + 3 * HOUR);
        let mut planted = store.audit.objects.borrow().values().next().cloned().unwrap();
        let bytes = serde_json::to_vec(&row("prj_b", "x1", T0 + 2 * HOUR + 5)).unwrap();
        planted.key = "audit/prj_b/2026-11-29/1795910400000-x.ndjson.gz".into();
        planted.first_ts = T0;
        planted.sha256 = Some(sha256_hex(&bytes));
        bucket.objects.borrow_mut().insert(planted.key.clone(), bytes);
        store.audit.objects.borrow_mut().insert(planted.key.clone(), planted.clone());
        let signer = signer();
        let since = T0 + HOUR / 2;
        let job = DigestJob { chain_since_ms: since, ..job(&store, &bucket, &signer, T0 + 3 * HOUR) };
        assert_eq!(complete(job.run(&RunBudget::unbounded(), || T0 + 3 * HOUR)).unwrap().digests, 1);
        let digest: AuditDigest =
            serde_json::from_slice(&bucket.objects.borrow()[&digest_key("prj_b", T0 + 2 * HOUR)]).unwrap();
        let listed: Vec<&str> = digest.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(listed.len(), 1);
        assert!(!listed.contains(&planted.key.as_str()), "the planted object was signed");
    }

    /// SPEC §23: 150 projects six hours old are digested within 4 runs; over 100,000 projects, of
    /// which 1,000 have six hours of objects, a run stays inside the invocation's limits and every
    /// project with work is served within a few runs.
    #[test]
    fn many_tenants_are_digested_in_a_few_runs_each_inside_the_invocations_limits() {
        for (projects, active, runs_allowed) in [(150, 150, 4), (100_000, 1_000, 10)] {
            let (store, bucket) = fakes();
            let created = T0 - 6 * HOUR;
            for p in 0..projects {
                project(&store, &format!("prj_{p:06}"), created);
            }
            let rows: Vec<AuditRow> = (0..active)
                .flat_map(|p| {
                    (0..6).map(move |h| {
                        row(&format!("prj_{p:06}"), &format!("r{p}-{h}"), created + h * HOUR + p as i64)
                    })
                })
                .collect();
            complete(store.insert_audit_rows(&rows)).unwrap();
            let mut runs = 0;
            loop {
                runs += 1;
                assert!(runs <= runs_allowed, "{projects} projects: not digested in {runs_allowed} runs");
                let budget = RunBudget::minute(T0);
                let limits = RollUpLimits::PER_MINUTE;
                store.faults.take_calls();
                complete(roll_up(&store, &crate::RollUpRun::into_fake(&bucket, T0, limits, &budget), || T0))
                    .unwrap();
                let report = complete(job(&store, &bucket, &signer(), T0).run(&budget, || T0)).unwrap();
                let (calls, d1) = store.faults.take_calls();
                assert!(d1 <= 1_000 && calls <= 10_000, "run {runs}: {d1} D1 queries, {calls} calls");
                assert!(report.failed.is_empty(), "{report:?}");
                let behind = complete(store.digest_health(T0)).unwrap().projects_behind;
                if behind == 0 && store.audit.rows.borrow().is_empty() {
                    break;
                }
            }
            assert_eq!(store.audit.digests.borrow().len(), active * 6, "one digest per hour with objects");
        }
    }
}
