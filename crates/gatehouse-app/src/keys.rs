//! Owner key management of SPEC §2: create (secret shown once), list, change, revoke. A key runs
//! on its project's plan, which only the operator sets (SPEC §13); an owner may lower a key's
//! per-minute limit below the plan's, never raise it, and never choose a plan.

use serde::Deserialize;
use serde_json::Value;

use super::{random, unavailable, Call, Gateway, Ids, Reply};
use gatehouse_core::api_key::{self, IdentityLimits, KeyRecord, KeyType};
use gatehouse_core::config::Config;
use gatehouse_core::encoding::object_id;
use gatehouse_core::error::ApiError;
use gatehouse_core::identity;
use gatehouse_core::json_body;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::ports::{Directory, KeyChanges, KeyGuard, KeyUpdate, Ports, Revocation};
use gatehouse_core::rate_limit::LimitSpec;
use gatehouse_core::time;

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
        let (hash, prefix) = (api_key::hash(config.key_pepper.as_bytes(), &secret), api_key::prefix(&secret));
        let id = object_id("key", &random());
        let record = KeyRecord {
            name,
            rate_limit_per_minute,
            claim_shards: config.claim_shards,
            pepper: Some(config.key_pepper_id.clone()),
            ..KeyRecord::fresh(&id, project_id, key_type, plan, hash, prefix.to_owned(), now_ms)
        };
        NewKey { record, secret }
    }

    /// This key as the request's operation makes it (SPEC §19): its id and secret derive from
    /// the operation and the caller's credential ([`Ids`]), so the same operation executed again
    /// makes the same key, which the store finds instead of writing a second one. Outside an
    /// idempotent request both stay random.
    pub fn of_operation(mut self, config: &Config, ids: &Ids) -> Self {
        let secret = api_key::generate(self.record.key_type, &ids.secret("key"));
        self.record.id = ids.next("key");
        self.record.key_hash = api_key::hash(config.key_pepper.as_bytes(), &secret);
        self.record.prefix = api_key::prefix(&secret).to_owned();
        self.secret = secret;
        self
    }

    /// The answer that shows the secret (this once): `stored` is the key as written, by this
    /// execution or by an earlier one of the same operation. A key the operation made under
    /// another pepper cannot be shown again.
    pub fn shown(self, stored: &KeyRecord, now_ms: i64) -> Result<Value, ApiError> {
        if stored.key_hash != self.record.key_hash {
            return Err(ApiError::unprocessable(
                "This request's key was made before a change of the gateway's secrets, and its \
                 secret cannot be shown again; roll that key, or retry with a new Idempotency-Key.",
            )
            .with_detail("id", stored.id.as_str()));
        }
        let mut body = stored.view(now_ms);
        body["key"] = Value::String(self.secret);
        Ok(body)
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
    expires_at: Option<String>,
    identity_id: Option<String>,
    limits: Option<Value>,
    allowed_origins: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateOwnerKey {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateProjectKey {
    #[serde(rename = "type")]
    key_type: KeyType,
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RollKey {
    grace_seconds: Option<u64>,
}

/// A field that may be absent (leave it), `null` (clear it) or a value.
pub(super) fn patch_field<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
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
    #[serde(default, deserialize_with = "patch_field")]
    expires_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "patch_field")]
    identity_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "patch_field")]
    limits: Option<Option<Value>>,
    /// `null` or `[]`: any origin.
    #[serde(default, deserialize_with = "patch_field")]
    allowed_origins: Option<Option<Vec<String>>>,
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateKey = json_body::parse(&call.body)?;
        let name = clean_name(input.name)?;
        let expires_at = input.expires_at.as_deref().map(|at| future_instant(at, call.now_ms)).transpose()?;
        // The caller's record carries the project's plan (its guard is told of a plan change).
        let plan = &call.key().plan;
        check_plan_unchanged(plan, input.plan.as_deref())?;
        check_rate(self.config, plan, input.rate_limit_per_minute)?;
        let limits = read_limits(input.limits.as_ref())?;
        check_limits(self.config, plan, limits.as_ref())?;
        let allowed_origins = allowed_origins(input.key_type, input.allowed_origins)?;
        let identity = match &input.identity_id {
            Some(id) => Some(self.identity_of(call, id).await?),
            None => None,
        };
        let mut new = NewKey::generate(
            self.config,
            call.project_id(),
            input.key_type,
            name,
            plan,
            input.rate_limit_per_minute,
            call.now_ms,
        )
        .of_operation(self.config, &call.ids);
        new.record.expires_at = expires_at;
        new.record.identity = identity;
        new.record.limits = limits;
        new.record.allowed_origins = allowed_origins;
        let stored = self.store.insert_key(&new.record).await.map_err(unavailable)?;
        // The caller's project exists; a missing one is a deleted project: its key is no longer valid.
        let stored = stored.ok_or_else(ApiError::invalid_api_key)?;
        Ok(Reply::created(new.shown(&stored, call.now_ms)?))
    }

    /// `POST /admin/v1/projects/{id}/owner-keys` (the operator, SPEC §19): a new owner key for the
    /// project, on its plan, shown once — the way back into a project whose owner keys are lost.
    pub(super) async fn create_owner_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateOwnerKey = json_body::parse(&call.body)?;
        self.issue_key(call, KeyType::Owner, input.name).await
    }

    /// `POST /admin/v1/projects/{id}/keys` (the operator): a key of any type for the project, made
    /// without an owner key's request — nothing of a window or the project's quota is used (the
    /// test kit sets up its project so, SPEC §21).
    pub(super) async fn create_project_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateProjectKey = json_body::parse(&call.body)?;
        self.issue_key(call, input.key_type, input.name).await
    }

    async fn issue_key(
        &self,
        call: &Call<'_>,
        key_type: KeyType,
        name: Option<String>,
    ) -> Result<Reply, ApiError> {
        let project_id = call.params[0];
        let name = clean_name(name)?;
        // The store puts the key on the project's plan.
        let new = NewKey::generate(self.config, project_id, key_type, name, "", None, call.now_ms)
            .of_operation(self.config, &call.ids);
        let Some(stored) = self.store.insert_key(&new.record).await.map_err(unavailable)? else {
            return Err(ApiError::not_found("project").with_detail("id", project_id));
        };
        Ok(Reply::created(new.shown(&stored, call.now_ms)?))
    }

    pub(super) async fn list_keys(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let rows = self.store.list_keys(call.project_id(), &page).await.map_err(unavailable)?;
        let position = |key: &KeyRecord| Cursor { ts: key.created_at, id: key.id.clone() };
        Ok(Reply::ok(page.respond(rows, position, |key| key.view(call.now_ms))))
    }

    /// Changes a key's name or per-key rate override (`null` = the plan's limit). The key's
    /// guard is told first, so the next request runs under the new limits; if it cannot be told,
    /// nothing changes (503). Then D1; the guard ends up holding what D1 holds.
    pub(super) async fn update_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let input: UpdateKey = json_body::parse(&call.body)?;
        let mut changes = KeyChanges {
            name: input.name.map(clean_name).transpose()?,
            rate_limit_per_minute: input.rate_limit_per_minute,
            expires_at: input
                .expires_at
                .map(|at| at.map(|at| future_instant(&at, call.now_ms)).transpose())
                .transpose()?,
            identity: None,
            limits: input.limits.map(|l| read_limits(l.as_ref())).transpose()?,
            allowed_origins: None,
        };
        let current = self.existing_key(call, key_id).await?;
        if let Some(origins) = input.allowed_origins {
            changes.allowed_origins =
                Some(allowed_origins(current.key_type, Some(origins.unwrap_or_default()))?);
        }
        check_plan_unchanged(&current.plan, input.plan.as_deref())?;
        check_rate(self.config, &current.plan, changes.rate_limit_per_minute.flatten())?;
        check_limits(self.config, &current.plan, changes.limits.flatten().as_ref())?;
        changes.identity = match &input.identity_id {
            Some(Some(id)) => Some(Some(self.identity_of(call, id).await?)),
            Some(None) => Some(None),
            None => None,
        };
        if current.is_revoked() {
            return Err(ApiError::unprocessable("A revoked key cannot be changed.").with_detail("id", key_id));
        }
        if changes.expires_at.is_some() && current.refusal(call.now_ms).is_some() {
            return Err(ApiError::unprocessable("An expired key stays expired; create a new key instead.")
                .with_detail("field", "expires_at")
                .with_detail("id", key_id));
        }
        if changes.expires_at.is_some() && current.rolled_at.is_some() {
            return Err(ApiError::unprocessable(
                "A rolled key is refused when its grace period ends; its expiry cannot be changed.",
            )
            .with_detail("field", "expires_at")
            .with_detail("id", key_id));
        }
        // An expiry must not leave the project without an owner key (as a revocation must not).
        let last_owner = || {
            ApiError::unprocessable(
                "No other owner key of this project stays usable (without expiry, roll or revocation); \
                 create another owner key before giving this one an expiry.",
            )
            .with_detail("field", "expires_at")
            .with_detail("id", key_id)
        };
        if matches!(changes.expires_at, Some(Some(_)))
            && current.key_type == KeyType::Owner
            && self.store.lasting_owner_keys(call.project_id(), key_id).await.map_err(unavailable)? == 0
        {
            return Err(last_owner());
        }
        self.tell_guard(&changes.applied_to(current.clone()), &current, None).await?;
        let written = self.store.update_key(call.project_id(), key_id, &changes).await;
        match written {
            Ok(KeyUpdate::Updated(record)) => {
                // A concurrent change may have told the guard later than D1 saw it.
                let _ = self.guard.apply(&record, None).await;
                if changes.allowed_origins.is_some() {
                    // This isolate answers at once by the new list (others within a minute).
                    self.memory.borrow_mut().forget_refused_origins(record.guard());
                }
                Ok(Reply::ok(record.view(call.now_ms)))
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
            Ok(KeyUpdate::LastOwnerKey) => {
                // Another owner key lost its lastingness concurrently: nothing was written.
                self.restore(&current, None).await;
                Err(last_owner())
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
            return Ok(Reply::ok(current.view(call.now_ms)));
        }
        // SPEC §19: an owner key that still works goes only while another owner key stays usable
        // (an expiring or rolled one does not count: it lapses).
        let last_owner = || {
            ApiError::unprocessable(
                "No other owner key of this project stays usable (without expiry, roll or revocation); \
                 create another owner key before revoking this one.",
            )
            .with_detail("id", key_id)
        };
        if current.key_type == KeyType::Owner
            && current.refusal(call.now_ms).is_none()
            && self.store.lasting_owner_keys(call.project_id(), key_id).await.map_err(unavailable)? == 0
        {
            return Err(last_owner());
        }
        let revoked = KeyRecord { revoked_at: Some(call.now_ms), ..current.clone() };
        self.tell_guard(&revoked, &current, revoked.revoked_at).await?;
        match self.store.revoke_key(call.project_id(), key_id, call.now_ms).await {
            Ok(Revocation::Revoked(record) | Revocation::AlreadyRevoked(record)) => {
                Ok(Reply::ok(record.view(call.now_ms)))
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

    /// Rolls a key (SPEC §17): a new key with the same type, name and limit (`rolled_from` the old
    /// one), shown once; the old key keeps working until `now + grace_seconds`, then is refused
    /// (`rolled`). The old key's guard is told first, so it refuses the key at the grace's very
    /// end by its own clock; if it cannot be told, nothing changes (503). Then one D1 transaction
    /// marks the old key and inserts the new one; if that fails, the guard is given the old record
    /// back (this roll undone).
    pub(super) async fn roll_key(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let key_id = call.params[0];
        let input: RollKey = json_body::parse(&call.body)?;
        let grace = input.grace_seconds.unwrap_or(api_key::DEFAULT_ROLL_GRACE_SECONDS);
        if grace > api_key::MAX_ROLL_GRACE_SECONDS {
            return Err(ApiError::unprocessable(format!(
                "grace_seconds must be from 0 to {}",
                api_key::MAX_ROLL_GRACE_SECONDS
            ))
            .with_detail("field", "grace_seconds"));
        }
        let current = self.existing_key(call, key_id).await?;
        let mut new = NewKey::generate(
            self.config,
            call.project_id(),
            current.key_type,
            current.name.clone(),
            &current.plan,
            current.rate_limit_per_minute,
            call.now_ms,
        )
        .of_operation(self.config, &call.ids);
        // The replacement belongs to the same identity, with the same windows.
        new.record.identity.clone_from(&current.identity);
        new.record.limits = current.limits;
        new.record.allowed_origins.clone_from(&current.allowed_origins);
        if current.rolled_to.as_deref() == Some(new.record.id.as_str()) {
            // SPEC §19: this operation rolled the key already (its answer was lost): the same
            // replacement again, never a roll of the replacement. The guard holds the roll D1 holds.
            let _ = self.guard.apply(&current, None).await;
            let stored = self.existing_key(call, &new.record.id).await?;
            return Ok(Reply::created(new.shown(&stored, call.now_ms)?));
        }
        if let Some(reason) = current.refusal(call.now_ms) {
            return Err(ApiError::unprocessable(format!(
                "A {} key cannot be rolled; create a new key instead.",
                reason.as_str()
            ))
            .with_detail("id", key_id)
            .with_detail("reason", reason.as_str()));
        }
        if let Some(replacement) = &current.rolled_to {
            return Err(ApiError::unprocessable(
                "This key was rolled already; roll its replacement instead.",
            )
            .with_detail("id", key_id)
            .with_detail("rolled_to", replacement.as_str()));
        }
        new.record.rolled_from = Some(current.id.clone());
        let rolled = current.rolled(&new.record.id, call.now_ms, grace as i64 * 1000);
        self.tell_guard(&rolled, &current, rolled.rolled_at).await?;
        match self.store.roll_key(&rolled, &new.record, call.now_ms).await {
            Ok(Some((_, stored))) => Ok(Reply::created(new.shown(&stored, call.now_ms)?)),
            Ok(None) => {
                // Revoked, rolled or deleted concurrently: this roll is taken back from the guard.
                self.restore(&current, rolled.rolled_at).await;
                Err(ApiError::unprocessable("The key changed while it was being rolled; try again.")
                    .with_detail("id", key_id))
            }
            Err(e) => {
                // The write may have landed. Unless D1 shows this roll, it is taken back: a guard
                // that refused the old key with no replacement stored would be an outage, while
                // one that lets it live longer re-reads D1 within 10 minutes.
                let landed = self.store.find_key(call.project_id(), key_id).await;
                if !matches!(&landed, Ok(Some(k)) if k.rolled_to == rolled.rolled_to) {
                    self.restore(&current, rolled.rolled_at).await;
                }
                Err(unavailable(e))
            }
        }
    }

    /// The identity `identity_id` of the caller's project with its limits, as a key's record
    /// carries it; one unknown here (or another project's) is a 422 naming `identity_id`.
    async fn identity_of(&self, call: &Call<'_>, identity_id: &str) -> Result<IdentityLimits, ApiError> {
        match self.store.identity(call.project_id(), identity_id).await.map_err(unavailable)? {
            Some(identity) => {
                Ok(IdentityLimits { id: identity.id, limits: identity.limits.unwrap_or_default() })
            }
            None => Err(ApiError::unprocessable("There is no identity with this id in this project.")
                .with_detail("field", "identity_id")
                .with_detail("id", identity_id)),
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

/// An RFC 3339 instant that exists and lies after `now_ms` (SPEC §17: `expires_at`).
fn future_instant(text: &str, now_ms: i64) -> Result<i64, ApiError> {
    let invalid =
        |why: &str| ApiError::unprocessable(format!("expires_at {why}")).with_detail("field", "expires_at");
    let at = time::parse_rfc3339_checked(text)
        .map_err(|_| invalid("must be an RFC 3339 date and time that exists, e.g. 2027-01-31T12:00:00Z"))?;
    if at <= now_ms {
        return Err(invalid("must be in the future"));
    }
    Ok(at)
}

pub(super) fn clean_name(name: Option<String>) -> Result<Option<String>, ApiError> {
    let name = name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty());
    if name.as_ref().is_some_and(|n| n.chars().count() > 200) {
        return Err(ApiError::bad_request("name must be at most 200 characters").with_detail("field", "name"));
    }
    Ok(name)
}

/// A per-key limit must be at least 1 and at most the plan's: an owner may lower it, never raise it.
fn check_rate(config: &Config, plan: &str, rate: Option<u32>) -> Result<(), ApiError> {
    let Some(rate) = rate else { return Ok(()) };
    let ceiling = config.plan_or_trial(plan).per_minute.unwrap_or(u32::MAX);
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

/// A key's `limits` as sent (400 naming a malformed field); `None` for null or `{}`.
fn read_limits(limits: Option<&Value>) -> Result<Option<LimitSpec>, ApiError> {
    match limits {
        Some(v) if !v.is_null() => identity::parse_limits(v),
        _ => Ok(None),
    }
}

/// A key's own windows lower its plan's, never raise them or add one, and are never a quota
/// (`identity::check_key_limits`).
fn check_limits(config: &Config, plan: &str, limits: Option<&LimitSpec>) -> Result<(), ApiError> {
    let Some(limits) = limits else { return Ok(()) };
    identity::check_key_limits(limits, plan, config.plan_or_trial(plan))
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

/// A key's `allowed_origins` as given (SPEC §24): browser keys only, at most
/// [`MAX_ALLOWED_ORIGINS`](gatehouse_core::browser::MAX_ALLOWED_ORIGINS) origins, each in its one
/// spelling, without repeats. None given: any origin.
fn allowed_origins(key_type: KeyType, given: Option<Vec<String>>) -> Result<Vec<String>, ApiError> {
    use gatehouse_core::browser::{parse_origin, MAX_ALLOWED_ORIGINS};
    let field = |e: ApiError| e.with_detail("field", "allowed_origins");
    let Some(given) = given else { return Ok(Vec::new()) };
    if key_type != KeyType::Browser && !given.is_empty() {
        return Err(field(ApiError::unprocessable(
            "Only a browser key lists allowed_origins: other keys are not sent from web pages.",
        )));
    }
    if given.len() > MAX_ALLOWED_ORIGINS {
        return Err(field(ApiError::bad_request(format!(
            "allowed_origins lists at most {MAX_ALLOWED_ORIGINS} origins"
        ))));
    }
    let mut origins = Vec::with_capacity(given.len());
    for text in &given {
        let origin = parse_origin(text).map_err(|e| field(ApiError::bad_request(e)))?;
        if !origins.contains(&origin) {
            origins.push(origin);
        }
    }
    Ok(origins)
}
