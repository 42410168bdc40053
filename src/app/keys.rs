//! Owner key management of SPEC §2: create (secret shown once), list, change, revoke. A key runs
//! on its project's plan, which only the operator sets (SPEC §13); an owner may lower a key's
//! per-minute limit below the plan's, never raise it, and never choose a plan.

use serde::Deserialize;
use serde_json::Value;

use super::{random, unavailable, Call, Gateway, Reply};
use crate::config::Config;
use crate::core::api_key::{self, KeyRecord, KeyType};
use crate::core::encoding::object_id;
use crate::core::error::ApiError;
use crate::core::json_body;
use crate::core::page::{Cursor, PageRequest};
use crate::ports::{Directory, KeyChanges, KeyGuard, KeyUpdate, Ports, Revocation};

/// A key just made: its record and the secret, which exists only in this response.
pub struct NewKey {
    pub record: KeyRecord,
    pub secret: String,
}

impl NewKey {
    /// A key on `plan` (the store puts it on its project's plan when it inserts it).
    pub fn generate(
        config: &Config,
        project_id: &str,
        key_type: KeyType,
        name: Option<String>,
        plan: &str,
        rate_limit_per_minute: Option<u32>,
        now_ms: i64,
    ) -> Self {
        let secret = api_key::generate(key_type, &random());
        let record = KeyRecord {
            id: object_id("key", &random()),
            project_id: project_id.to_owned(),
            key_type,
            name,
            plan: plan.to_owned(),
            rate_limit_per_minute,
            key_hash: api_key::hash(config.key_pepper.as_bytes(), &secret),
            prefix: api_key::prefix(&secret).to_owned(),
            created_at: now_ms,
            revoked_at: None,
        };
        NewKey { record, secret }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    #[serde(rename = "type")]
    key_type: KeyType,
    name: Option<String>,
    plan: Option<String>,
    rate_limit_per_minute: Option<u32>,
}

/// A field that may be absent (leave it), `null` (clear it) or a value.
fn patch_field<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateKey {
    #[serde(default, deserialize_with = "patch_field")]
    name: Option<Option<String>>,
    plan: Option<String>,
    #[serde(default, deserialize_with = "patch_field")]
    rate_limit_per_minute: Option<Option<u32>>,
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateKey = json_body::parse(&call.body)?;
        let name = clean_name(input.name)?;
        // The caller's record carries the project's plan (its guard is told of a plan change).
        let plan = &call.key().plan;
        check_plan_unchanged(plan, input.plan.as_deref())?;
        check_rate(self.config, plan, input.rate_limit_per_minute)?;
        let new = NewKey::generate(
            self.config,
            call.project_id(),
            input.key_type,
            name,
            plan,
            input.rate_limit_per_minute,
            call.now_ms,
        );
        let stored = self.store.insert_key(&new.record).await.map_err(unavailable)?;
        // The caller's project exists; a missing one is a deleted project: its key is no longer valid.
        let mut body = stored.ok_or_else(ApiError::invalid_api_key)?.view();
        body["key"] = Value::String(new.secret);
        Ok(Reply::created(body))
    }

    pub(super) async fn list_keys(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let rows = self.store.list_keys(call.project_id(), &page).await.map_err(unavailable)?;
        let position = |key: &KeyRecord| Cursor { ts: key.created_at, id: key.id.clone() };
        Ok(Reply::ok(page.respond(rows, position, KeyRecord::view)))
    }

    /// Changes a key's name or per-key rate override (`null` = the plan's limit). The key's
    /// guard is told first, so the next request runs under the new limits; if it cannot be told,
    /// nothing changes (503). Then D1; the guard ends up holding what D1 holds.
    pub(super) async fn update_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let input: UpdateKey = json_body::parse(&call.body)?;
        let changes = KeyChanges {
            name: input.name.map(clean_name).transpose()?,
            rate_limit_per_minute: input.rate_limit_per_minute,
        };
        let current = self.existing_key(call, key_id).await?;
        check_plan_unchanged(&current.plan, input.plan.as_deref())?;
        check_rate(self.config, &current.plan, changes.rate_limit_per_minute.flatten())?;
        if current.is_revoked() {
            return Err(ApiError::unprocessable("A revoked key cannot be changed.").with_detail("id", key_id));
        }
        self.tell_guard(&changes.applied_to(current.clone()), &current, None).await?;
        let written = self.store.update_key(call.project_id(), key_id, &changes).await;
        match written {
            Ok(KeyUpdate::Updated(record)) => {
                // A concurrent change may have told the guard later than D1 saw it.
                let _ = self.guard.apply(&record, None).await;
                Ok(Reply::ok(record.view()))
            }
            Ok(KeyUpdate::NotFound) => {
                self.restore(&current, None).await;
                Err(ApiError::not_found("API key").with_detail("id", key_id))
            }
            Ok(KeyUpdate::Revoked) => {
                // Revoked concurrently: the guard must not keep the change it was told.
                self.reconcile(call, key_id).await;
                Err(ApiError::unprocessable("A revoked key cannot be changed.").with_detail("id", key_id))
            }
            Err(e) => {
                self.reconcile(call, key_id).await;
                Err(unavailable(e))
            }
        }
    }

    /// Revokes a key of the caller's project. The guard is told first (it refuses the key from its
    /// very next request on); if it cannot be told, nothing changes (503). Revoking a revoked key
    /// answers the same record again, and tells the guard again.
    pub(super) async fn revoke_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let current = self.existing_key(call, key_id).await?;
        if current.is_revoked() {
            self.guard.apply(&current, None).await.map_err(unavailable)?;
            return Ok(Reply::ok(current.view()));
        }
        let last_owner = || {
            ApiError::unprocessable(
                "This is the project's last active owner key; create another owner key before revoking it.",
            )
            .with_detail("id", key_id)
        };
        if current.key_type == KeyType::Owner
            && self.store.active_owner_keys(call.project_id()).await.map_err(unavailable)? <= 1
        {
            return Err(last_owner());
        }
        let revoked = KeyRecord { revoked_at: Some(call.now_ms), ..current.clone() };
        self.tell_guard(&revoked, &current, revoked.revoked_at).await?;
        match self.store.revoke_key(call.project_id(), key_id, call.now_ms).await {
            Ok(Revocation::Revoked(record) | Revocation::AlreadyRevoked(record)) => {
                Ok(Reply::ok(record.view()))
            }
            Ok(Revocation::NotFound) => {
                self.restore(&current, revoked.revoked_at).await;
                Err(ApiError::not_found("API key").with_detail("id", key_id))
            }
            Ok(Revocation::LastOwnerKey) => {
                self.restore(&current, revoked.revoked_at).await;
                Err(last_owner())
            }
            Err(e) => {
                self.reconcile(call, key_id).await;
                Err(unavailable(e))
            }
        }
    }

    async fn existing_key(&self, call: &Call<'_>, key_id: &str) -> Result<KeyRecord, ApiError> {
        match self.store.find_key(call.project_id(), key_id).await.map_err(unavailable)? {
            Some(key) => Ok(key),
            None => Err(ApiError::not_found("API key").with_detail("id", key_id)),
        }
    }

    /// Tells the key's guard first; if that fails (it may still have landed: a timeout), the
    /// guard is given `current` back, as far as it can be (undoing the revocation `undo` when
    /// this change is one), and the change fails with 503.
    async fn tell_guard(
        &self,
        changed: &KeyRecord,
        current: &KeyRecord,
        undo: Option<i64>,
    ) -> Result<(), ApiError> {
        if let Err(e) = self.guard.apply(changed, None).await {
            self.restore(current, undo).await;
            return Err(unavailable(e));
        }
        Ok(())
    }

    /// Gives the guard back the record D1 still holds, after D1 refused the change (this change's
    /// revocation `undo` included; another revocation stays). If this fails too, the guard reads
    /// D1 again within its record's freshness (10 minutes).
    async fn restore(&self, record: &KeyRecord, undo: Option<i64>) {
        let _ = self.guard.apply(record, undo).await;
    }

    /// After a D1 write whose outcome is unknown (it may have landed), the guard is told what D1
    /// holds now — one-way: a revocation it holds stays, so a revocation whose write failed keeps
    /// the key refused (the safe side) until the guard re-reads D1 within 10 minutes.
    async fn reconcile(&self, call: &Call<'_>, key_id: &str) {
        if let Ok(Some(truth)) = self.store.find_key(call.project_id(), key_id).await {
            let _ = self.guard.apply(&truth, None).await;
        }
    }
}

fn clean_name(name: Option<String>) -> Result<Option<String>, ApiError> {
    let name = name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if name.as_ref().is_some_and(|n| n.chars().count() > 200) {
        return Err(ApiError::bad_request("name must be at most 200 characters").with_detail("field", "name"));
    }
    Ok(name)
}

/// A per-key limit must be at least 1 and at most the plan's: an owner may lower it, never raise it.
fn check_rate(config: &Config, plan: &str, rate: Option<u32>) -> Result<(), ApiError> {
    let Some(rate) = rate else { return Ok(()) };
    let ceiling = config.plan_or_trial(plan).per_minute;
    if rate == 0 {
        return Err(ApiError::bad_request(format!(
            "rate_limit_per_minute must be from 1 to {ceiling} (the plan's limit), or null for the plan's limit"
        ))
        .with_detail("field", "rate_limit_per_minute"));
    }
    if rate > ceiling {
        return Err(ApiError::forbidden(format!(
            "A key's limit can be lowered, not raised: the {plan:?} plan allows {ceiling} requests per minute."
        ))
        .with_detail("field", "rate_limit_per_minute")
        .with_detail("plan", plan)
        .with_detail("plan_per_minute", ceiling));
    }
    Ok(())
}

/// Plans are set by the operator for the whole project: naming the project's own plan is allowed
/// (it changes nothing), any other is refused.
fn check_plan_unchanged(project_plan: &str, asked: Option<&str>) -> Result<(), ApiError> {
    match asked {
        Some(plan) if plan != project_plan => Err(ApiError::forbidden(format!(
            "Plans belong to the project and are set by the operator; this project is on {project_plan:?}."
        ))
        .with_detail("field", "plan")
        .with_detail("plan", project_plan)),
        _ => Ok(()),
    }
}

/// A plan name the operator may give a project.
pub(super) fn check_plan(config: &Config, plan: &str) -> Result<(), ApiError> {
    if config.plan(plan).is_some() {
        return Ok(());
    }
    Err(ApiError::unprocessable(format!("There is no plan named {plan:?}."))
        .with_detail("field", "plan")
        .with_detail("plans", config.plans.keys().cloned().collect::<Vec<_>>()))
}
