//! The audit digests (SPEC §22): the minute cron's job that signs each project's closed periods,
//! and the routes a verifier reads them with (`gatehouse logs verify`).
//!
//! A period is closed once the roll-up's cutoff has passed its end and none of the project's rows
//! older than the cutoff is still in the hot tier: every object whose first row is older is then
//! written for good. Its digest lists every object of the project no digest listed yet (the late
//! ones of earlier periods too), each with the SHA-256 of its stored bytes, links to the previous
//! digest, is signed, and is written to R2 before it is recorded in D1; a run that stops in
//! between writes the same digest again (Ed25519 is deterministic, and the same objects are
//! unlisted), so a digest is never lost and never differs from the one first written unless no
//! later digest linked to it yet.

use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::archive::project_prefix;
use gatehouse_core::digest::{digest_key, period_start, sha256_hex, AuditSigner, VERSION};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::{Archive, DigestRecord, DigestStore, PortError, Ports};
use gatehouse_core::time::{parse_rfc3339_checked, rfc3339};
use gatehouse_wire::digests::{
    ArchivedObject, ArchivedObjects, AuditDigest, AuditPublicKey, DigestList, DigestedObject, ListedDigest,
    PreviousDigest,
};

/// Digests one run of the minute cron writes at most.
pub const DIGESTS_PER_RUN: usize = 60;
/// A run stops starting digests after this long (each reads its objects from R2).
const TIME_BOX_MS: i64 = 20_000;
/// The longest range one listing of archive objects covers, in days.
pub const OBJECTS_RANGE_DAYS: i64 = 31;
/// Digests one listing answers at most.
const DIGESTS_PER_PAGE: usize = 1_000;

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DigestReport {
    pub digests: usize,
    pub objects: usize,
    /// Projects whose roll-up is behind (rows older than the cutoff still hot): none made.
    pub waiting: usize,
    /// Projects whose digest failed this run (tried again the next), and why.
    pub failed: Vec<String>,
}

/// Writes the due digests of `period_ms` whose periods end by `cutoff_ms` (the roll-up's), the
/// most overdue first, at most `DIGESTS_PER_RUN` and for about `TIME_BOX_MS`.
pub async fn make_digests<S: DigestStore, A: Archive>(
    store: &S,
    archive: &A,
    signer: &AuditSigner,
    period_ms: i64,
    cutoff_ms: i64,
    now_ms: impl Fn() -> i64,
) -> Result<DigestReport, PortError> {
    let started = now_ms();
    let mut report = DigestReport::default();
    let run = Run { store, archive, signer, period_ms, cutoff_ms, started, now_ms: &now_ms };
    for (project, next) in store.projects_due_for_digest(period_ms, cutoff_ms, DIGESTS_PER_RUN).await? {
        // One project's failure (D1 or R2 out of reach a moment) holds up no other.
        if let Err(e) = run.project(&project, next, &mut report).await {
            report.failed.push(format!("{project}: {}", e.0));
        }
    }
    Ok(report)
}

struct Run<'a, S, A, N> {
    store: &'a S,
    archive: &'a A,
    signer: &'a AuditSigner,
    period_ms: i64,
    cutoff_ms: i64,
    started: i64,
    now_ms: &'a N,
}

impl<S: DigestStore, A: Archive, N: Fn() -> i64> Run<'_, S, A, N> {
    /// The project's due digests from `next` on, as far as the run's budget goes.
    async fn project(&self, project: &str, next: i64, report: &mut DigestReport) -> Result<(), PortError> {
        let (period_ms, now_ms) = (self.period_ms, self.now_ms);
        if self.store.hot_rows_before(project, self.cutoff_ms).await? {
            report.waiting += 1;
            return Ok(());
        }
        let mut previous = self.store.last_digest(project).await?;
        // A digest recorded whose next period was not (a run stopped in between): go on after it.
        let mut start = match &previous {
            Some(p) if p.period_start >= next => p.period_start + period_ms,
            _ => next,
        };
        while start + period_ms <= self.cutoff_ms
            && report.digests < DIGESTS_PER_RUN
            && now_ms() - self.started < TIME_BOX_MS
        {
            let made = self.make_one(project, start, previous.as_ref(), now_ms()).await?;
            report.digests += 1;
            report.objects += made.objects as usize;
            previous = Some(made);
            start += period_ms;
        }
        Ok(())
    }

    /// The digest of the project's period from `start`, after `previous`: written to R2, then
    /// recorded with the objects it lists.
    async fn make_one(
        &self,
        project: &str,
        start: i64,
        previous: Option<&DigestRecord>,
        now_ms: i64,
    ) -> Result<DigestRecord, PortError> {
        let (store, archive) = (self.store, self.archive);
        let end = start + self.period_ms;
        let objects = store.undigested_objects(project, end).await?;
        let mut listed = Vec::with_capacity(objects.len());
        for o in &objects {
            // The hash the roll-up stored it with: what the bucket holds now may have been changed.
            let sha256 = match &o.sha256 {
                Some(sha256) => sha256.clone(),
                None => sha256_hex(&archive.get(&o.key).await?.ok_or_else(|| {
                    PortError(format!("archive object {} is listed in D1 but missing in R2", o.key))
                })?),
            };
            listed.push(DigestedObject {
                key: o.key.clone(),
                sha256,
                rows: o.rows,
                first_request_id: o.first_id.clone(),
                last_request_id: o.last_id.clone(),
            });
        }
        let digest = AuditDigest {
            version: VERSION,
            project_id: project.to_owned(),
            period_start: rfc3339(start),
            period_end: rfc3339(end),
            objects: listed,
            previous: previous.map(|p| PreviousDigest { key: p.key.clone(), sha256: p.sha256.clone() }),
            algorithm: String::new(),
            public_key: String::new(),
            signature: None,
        };
        let (_, file) = self.signer.sign(digest);
        let key = digest_key(project, start);
        archive.put_digest(&key, &file).await?;
        let record = DigestRecord {
            period_start: start,
            key,
            sha256: sha256_hex(&file),
            objects: objects.len() as u32,
        };
        let keys: Vec<String> = objects.into_iter().map(|o| o.key).collect();
        store.record_digest(project, &record, &keys, now_ms, end).await?;
        Ok(record)
    }
}

impl<P: Ports> Gateway<'_, P> {
    fn signer(&self) -> Result<AuditSigner, ApiError> {
        let secret = self.config.audit_signing_key.as_deref().ok_or_else(|| {
            ApiError::not_found("audit signing key").with_detail("setting", "AUDIT_SIGNING_KEY")
        })?;
        Ok(AuditSigner::from_secret(secret))
    }

    /// `GET /public/v1/audit/public-key`: the key the project's digests verify under (pin it).
    pub(super) async fn audit_public_key(&self, _call: &Call<'_>) -> Result<Reply, ApiError> {
        let key = AuditPublicKey { algorithm: "ed25519".into(), public_key: self.signer()?.public_key() };
        Ok(Reply::ok(gatehouse_wire::to_json(&key)))
    }

    /// `GET /public/v1/audit/digests?from&to`: the project's digests of the periods that overlap
    /// `[from, to)` (default: the last 7 days), oldest first, with the period they close.
    pub(super) async fn list_audit_digests(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (from, to) = time_range(call)?;
        let period = i64::from(self.config.audit_digest_seconds) * 1000;
        // From the digest of the period that holds `from`.
        let first = from.saturating_sub(period - 1);
        let mut digests = self
            .store
            .digests(call.project_id(), first, to, DIGESTS_PER_PAGE + 1)
            .await
            .map_err(unavailable)?;
        let more = digests.len() > DIGESTS_PER_PAGE;
        digests.truncate(DIGESTS_PER_PAGE);
        let data = digests
            .into_iter()
            .map(|d| ListedDigest {
                period_start: rfc3339(d.period_start),
                period_end: rfc3339(d.period_start + period),
                key: d.key,
                sha256: d.sha256,
                objects: d.objects,
            })
            .collect();
        Ok(Reply::ok(gatehouse_wire::to_json(&DigestList { data, more })))
    }

    /// `GET /public/v1/audit/objects?from&to`: the project's archive objects of the days the range
    /// touches that a verifier must find listed by a digest: every slice whose first row is in
    /// `[from, to)`, and any object there whose name is not a slice of its day's folder (a
    /// whole-day object of the old layout, or a name no roll-up writes) — the day's download
    /// serves those too.
    pub(super) async fn list_audit_objects(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let (from, to) = time_range(call)?;
        // One R2 listing per day: a call covers at most a month (a verifier asks month by month).
        if to - from > OBJECTS_RANGE_DAYS * 86_400_000 {
            return Err(ApiError::bad_request(format!(
                "from and to are at most {OBJECTS_RANGE_DAYS} days apart"
            ))
            .with_detail("field", "to"));
        }
        let prefix = project_prefix(Some(call.project_id()));
        let mut keys = Vec::new();
        let mut day = period_start(from, 86_400_000);
        while day < to {
            let date = gatehouse_core::time::utc_date(day);
            let folder = format!("{prefix}{date}/");
            for o in self.archive.list(&format!("{prefix}{date}")).await.map_err(unavailable)? {
                let wanted = match gatehouse_core::archive::slice_start(&folder, &o.key) {
                    Some(c) => (from..to).contains(&c.ts) || gatehouse_core::time::utc_date(c.ts) != date,
                    None => true,
                };
                if wanted {
                    keys.push(ArchivedObject { key: o.key, size: o.size });
                }
            }
            day += 86_400_000;
        }
        Ok(Reply::ok(gatehouse_wire::to_json(&ArchivedObjects { data: keys })))
    }

    /// `GET /public/v1/audit/file?key=`: one archive object or digest of the project, its bytes as
    /// stored (a verifier hashes them).
    pub(super) async fn audit_file(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let prefix = project_prefix(Some(call.project_id()));
        self.project_object(call, &prefix, "audit object", "application/octet-stream").await
    }

    /// The bucket's object `?key=`, which must be under `prefix` (the calling project's), its
    /// bytes as stored; 404 naming `what` when there is none.
    pub(super) async fn project_object(
        &self,
        call: &Call<'_>,
        prefix: &str,
        what: &str,
        content_type: &'static str,
    ) -> Result<Reply, ApiError> {
        let key = call.query.iter().find(|(k, _)| k == "key").map(|(_, v)| v.as_str()).unwrap_or_default();
        if !key.starts_with(prefix) || key.contains("..") {
            return Err(ApiError::bad_request(format!("key must name an object under {prefix}"))
                .with_detail("field", "key"));
        }
        match self.archive.get(key).await.map_err(unavailable)? {
            Some(bytes) => Ok(Reply::file(content_type, bytes)),
            None => Err(ApiError::not_found(what).with_detail("key", key)),
        }
    }
}

/// `from` and `to` (RFC 3339) of a listing: by default the 7 days before the call.
fn time_range(call: &Call<'_>) -> Result<(i64, i64), ApiError> {
    let get = |name: &str| call.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let parse = |name: &str| -> Result<Option<i64>, ApiError> {
        get(name)
            .map(|v| {
                parse_rfc3339_checked(v).map_err(|_| {
                    ApiError::bad_request(format!("{name} must be an RFC 3339 date and time"))
                        .with_detail("field", name)
                })
            })
            .transpose()
    };
    let to = parse("to")?.unwrap_or(call.now_ms);
    let from = parse("from")?.unwrap_or(to - 7 * 86_400_000);
    if from > to {
        return Err(ApiError::bad_request("from must not be after to").with_detail("field", "from"));
    }
    Ok((from, to))
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

    fn row(id: &str, ts: i64) -> AuditRow {
        let mut row = AuditRow::new(id.into(), ts, "GET".into(), "/public/v1/me".into());
        row.project_id = Some("prj_a".into());
        row.status = 200;
        row
    }

    /// What a verifier finds: each digest's file where its record says, its hash as recorded,
    /// linked to the one before, signed; every object of the project listed once, with the hash of
    /// its bytes now and its row count (`all`: every object of the project is listed; while runs
    /// go on, objects not listed yet are allowed). Answers the number of digests.
    fn check_chain(
        store: &FakeStore,
        bucket: &FakeArchive,
        signer: &AuditSigner,
        all: bool,
    ) -> Result<usize, String> {
        let digests = store.audit.digests.borrow();
        let objects = bucket.objects.borrow();
        let mut previous: Option<&DigestRecord> = None;
        let mut listed = BTreeMap::new();
        for ((_, start), record) in digests.iter() {
            let file = objects.get(&record.key).ok_or(format!("digest {} missing", record.key))?;
            if sha256_hex(file) != record.sha256 {
                return Err(format!("digest {} is not the one recorded", record.key));
            }
            let digest: AuditDigest = serde_json::from_slice(file).map_err(|e| e.to_string())?;
            if signer.sign(digest.clone()).0 != digest {
                return Err(format!("digest {} does not verify", record.key));
            }
            if let Some(p) = previous {
                if p.period_start + HOUR != *start {
                    return Err(format!("no digest between {} and {start}", p.period_start));
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
            previous = Some(record);
        }
        let archived = objects.keys().filter(|k| k.starts_with("audit/prj_a/") && !k.contains("/digest/"));
        if let Some(unlisted) = archived.clone().find(|k| all && !listed.contains_key(*k)) {
            return Err(format!("object {unlisted} is listed by no digest"));
        }
        Ok(digests.len())
    }

    /// One schedule: a project's rows arrive over six hours (late ones for hours rolled up and
    /// digested already); each hour the roll-up and the digest job run, any D1 or R2 call failing
    /// before or after its effect and the isolate stopping anywhere; then both run with faults
    /// off. The chain must be whole and every object listed once, by its bytes as they stay.
    fn schedule(seed: u64) -> Result<(), String> {
        let faults = Rc::new(Faults::new(seed, 0.0));
        let store = FakeStore::new(faults.clone());
        let bucket = FakeArchive::new(faults.clone());
        let signer = AuditSigner::from_secret("audit-signing-key-0123");
        store.directory.projects.borrow_mut().push(FakeProject {
            id: "prj_a".into(),
            name: "a".into(),
            plan: "trial".into(),
            created_at: T0 + 1_000,
        });
        let limits = RollUpLimits {
            rows_per_batch: 1 + faults.below(4) as usize,
            slices_per_run: 3,
            time_box_ms: i64::MAX,
        };
        let arrive = |n: u64, ts: i64| {
            let rate = faults.failure_rate();
            faults.set_failure_rate(0.0);
            complete(store.insert_audit_rows(&[row(&format!("r{n:04}"), ts)])).expect("no faults");
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
                let _ = drive(roll_up(&store, &bucket, cutoff, limits, &crate::cron::RunBudget::unbounded(), || cutoff), &faults, crash);
                let _ =
                    drive(make_digests(&store, &bucket, &signer, HOUR, cutoff, || cutoff), &faults, crash);
                check_chain(&store, &bucket, &signer, false)
                    .map_err(|e| format!("{e}; trace {:?}", faults.trace.borrow()))?;
            }
            faults.set_failure_rate(0.0);
        }
        let end = T0 + 8 * HOUR;
        for _ in 0..20 {
            complete(roll_up(&store, &bucket, end, limits, &crate::cron::RunBudget::unbounded(), || end)).map_err(|e| e.0)?;
            complete(make_digests(&store, &bucket, &signer, HOUR, end, || end)).map_err(|e| e.0)?;
        }
        let digests = check_chain(&store, &bucket, &signer, true)?;
        if digests != 8 {
            return Err(format!("{digests} digests for 8 closed hours"));
        }
        Ok(())
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
    #[test]
    fn no_digest_while_rows_of_a_closed_period_are_hot() {
        let faults = Rc::new(Faults::new(0, 0.0));
        let (store, bucket) = (FakeStore::new(faults.clone()), FakeArchive::new(faults));
        store.directory.projects.borrow_mut().push(FakeProject {
            id: "prj_a".into(),
            name: "a".into(),
            plan: "trial".into(),
            created_at: T0,
        });
        let signer = AuditSigner::from_secret("audit-signing-key-0123");
        complete(store.insert_audit_rows(&[row("r1", T0 + 10)])).unwrap();
        let cutoff = T0 + 2 * HOUR;
        let report = complete(make_digests(&store, &bucket, &signer, HOUR, cutoff, || cutoff)).unwrap();
        assert_eq!(report, DigestReport { digests: 0, objects: 0, waiting: 1, failed: vec![] });
        let limits = RollUpLimits { rows_per_batch: 10, slices_per_run: 10, time_box_ms: i64::MAX };
        complete(roll_up(&store, &bucket, cutoff, limits, &crate::cron::RunBudget::unbounded(), || cutoff)).unwrap();
        let report = complete(make_digests(&store, &bucket, &signer, HOUR, cutoff, || cutoff)).unwrap();
        assert_eq!(report, DigestReport { digests: 2, objects: 1, waiting: 0, failed: vec![] });
        assert_eq!(check_chain(&store, &bucket, &signer, true), Ok(2));
    }

    fn project(store: &FakeStore, id: &str) {
        let p = FakeProject { id: id.into(), name: id.into(), plan: "trial".into(), created_at: T0 };
        store.directory.projects.borrow_mut().push(p);
    }

    /// Found by the review: bytes changed in R2 between the roll-up and the digest are never
    /// signed (the digest pins the hash the roll-up stored).
    #[test]
    fn an_object_changed_before_its_digest_is_not_signed() {
        let faults = Rc::new(Faults::new(0, 0.0));
        let (store, bucket) = (FakeStore::new(faults.clone()), FakeArchive::new(faults));
        project(&store, "prj_a");
        let signer = AuditSigner::from_secret("audit-signing-key-0123");
        complete(store.insert_audit_rows(&[row("r1", T0 + 10), row("r2", T0 + 20), row("r3", T0 + 30)]))
            .unwrap();
        let cutoff = T0 + HOUR;
        let limits = RollUpLimits { rows_per_batch: 10, slices_per_run: 10, time_box_ms: i64::MAX };
        complete(roll_up(&store, &bucket, cutoff, limits, &crate::cron::RunBudget::unbounded(), || cutoff)).unwrap();
        let key = bucket.objects.borrow().keys().next().unwrap().clone();
        let written = bucket.objects.borrow()[&key].clone();
        let forged =
            String::from_utf8(written.clone()).unwrap().replace(r#""status":200"#, r#""status":201"#);
        assert_ne!(forged.as_bytes(), written.as_slice());
        bucket.objects.borrow_mut().insert(key.clone(), forged.into_bytes()); // same rows, ids, order
        complete(make_digests(&store, &bucket, &signer, HOUR, cutoff, || cutoff)).unwrap();
        let record = store.audit.digests.borrow().values().next().cloned().expect("a digest");
        let digest: AuditDigest = serde_json::from_slice(&bucket.objects.borrow()[&record.key]).unwrap();
        assert_eq!(digest.objects[0].sha256, sha256_hex(&written), "the digest signed the forged bytes");
    }

    /// Found by the review: an object gone from R2 holds up neither its own chain nor another
    /// project's.
    #[test]
    fn a_missing_object_stalls_no_chain() {
        let faults = Rc::new(Faults::new(0, 0.0));
        let (store, bucket) = (FakeStore::new(faults.clone()), FakeArchive::new(faults));
        project(&store, "prj_a");
        project(&store, "prj_b");
        let signer = AuditSigner::from_secret("audit-signing-key-0123");
        let mut b = row("r2", T0 + 20);
        b.project_id = Some("prj_b".into());
        complete(store.insert_audit_rows(&[row("r1", T0 + 10), b])).unwrap();
        let cutoff = T0 + HOUR;
        let limits = RollUpLimits { rows_per_batch: 10, slices_per_run: 10, time_box_ms: i64::MAX };
        complete(roll_up(&store, &bucket, cutoff, limits, &crate::cron::RunBudget::unbounded(), || cutoff)).unwrap();
        let gone = bucket.objects.borrow().keys().find(|k| k.starts_with("audit/prj_a/")).cloned().unwrap();
        bucket.objects.borrow_mut().remove(&gone);
        complete(make_digests(&store, &bucket, &signer, HOUR, cutoff, || cutoff)).unwrap();
        let digests = store.audit.digests.borrow();
        assert!(digests.contains_key(&("prj_b".to_owned(), T0)), "prj_b starved by prj_a's missing object");
        assert!(digests.contains_key(&("prj_a".to_owned(), T0)), "prj_a's chain stopped");
    }
}
