//! The audit digests' routes (SPEC §22, §23): what a verifier (`gatehouse logs verify`) reads —
//! the public key, the signed chain head, the digests, the archive's objects and files — and the
//! operator's view of the digests' health. The job that writes them is `app::digest_job`.

use serde_json::json;

use super::digest_job::digest_lag_ms;
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::archive::project_prefix;
use gatehouse_core::audit_chain::start_at;
use gatehouse_core::digest::{period_start, AuditSigner};
use gatehouse_core::error::ApiError;
use gatehouse_core::ports::{Archive, AuditHeads, DigestStore, DigestsOf, Ports};
use gatehouse_core::time::{parse_rfc3339_checked, rfc3339};
use gatehouse_wire::digests::{
    ArchivedObject, ArchivedObjects, AuditPublicKey, DigestList, ListedDigest, SignedHead,
};

/// The longest range one listing of archive objects covers, in days.
pub const OBJECTS_RANGE_DAYS: i64 = 31;
/// Digests one listing answers at most.
const DIGESTS_PER_PAGE: usize = 1_000;

impl<P: Ports> Gateway<'_, P> {
    fn signer(&self) -> Result<AuditSigner, ApiError> {
        let secret = self.config.audit_signing_key.as_deref().ok_or_else(|| {
            ApiError::not_found("audit signing key").with_detail("setting", "AUDIT_SIGNING_KEY")
        })?;
        Ok(AuditSigner::from_secret(secret))
    }

    /// `GET /public/v1/audit/head`: the project's chain head, read from its Durable Object and
    /// signed now (SPEC §23): what a verifier checks the newest digest it finds against.
    pub(super) async fn audit_head(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let signer = self.signer()?;
        let state = self.guard.read_head(call.project_id(), 0).await.map_err(unavailable)?;
        let started = state.head.is_some();
        let head = state.head.unwrap_or_else(|| start_at(0));
        let signed = signer.sign_head(SignedHead {
            project_id: call.project_id().to_owned(),
            as_of: rfc3339(call.now_ms),
            started,
            sequence: head.sequence,
            covered_to: rfc3339(head.period_end),
            digest_key: head.key,
            digest_sha256: head.sha256,
            pending_objects: state.pending,
            oldest_pending: state.oldest_pending_ts.map(rfc3339),
            algorithm: String::new(),
            public_key: String::new(),
            signature: None,
        });
        Ok(Reply::ok(gatehouse_wire::to_json(&signed)))
    }

    /// `GET /admin/v1/audit/health`: the operator's view of the digests (SPEC §23): whether they
    /// are signed at all, how many projects have archived objects no digest lists past the
    /// documented lag (two periods), the oldest such row, and every project whose storage
    /// disagrees with its chain head (its digests stopped).
    pub(super) async fn audit_health(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let period = i64::from(self.config.audit_digest_seconds) * 1000;
        let lag = digest_lag_ms(period, self.config.audit_hot_seconds);
        let health = self.store.digest_health(call.now_ms - lag).await.map_err(unavailable)?;
        let alerts: Vec<_> = health
            .alerts
            .iter()
            .map(|(project, at, what)| json!({ "project_id": project, "at": rfc3339(*at), "alert": what }))
            .collect();
        Ok(Reply::ok(json!({
            "signing": self.config.audit_signing_key.is_some(),
            "lag_seconds": lag / 1000,
            "projects_behind": health.projects_behind,
            "oldest_undigested": health.oldest_undigested_ts.map(rfc3339),
            "alerts": alerts,
            "healthy": self.config.audit_signing_key.is_some() && health.projects_behind == 0 && alerts.is_empty(),
        })))
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
        // From the digest whose span holds `from`.
        let mut digests = self
            .store
            .digests(DigestsOf {
                project_id: call.project_id(),
                from_ms: from,
                to_ms: to,
                limit: DIGESTS_PER_PAGE + 1,
            })
            .await
            .map_err(unavailable)?;
        let more = digests.len() > DIGESTS_PER_PAGE;
        digests.truncate(DIGESTS_PER_PAGE);
        let data = digests
            .into_iter()
            .map(|d| ListedDigest {
                period_start: rfc3339(d.period_start),
                period_end: rfc3339(d.period_end),
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
