//! The operator's routes of SPEC §2 and §13 (`ADMIN_TOKEN`): create a project with its first owner
//! key, and set a project's plan — plans belong to projects, and only the operator chooses them.

use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::json;

use super::{keys::check_plan, keys::NewKey, unavailable, Call, Gateway, Reply};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::api_key::KeyType;
use gatehouse_core::audit_chain::{start_at, AdoptHead};
use gatehouse_core::config::DEFAULT_PLAN;
use gatehouse_core::digest::period_start;
use gatehouse_core::error::ApiError;
use gatehouse_core::guard::protocol::project_authority;
use gatehouse_core::json_body;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::platform::WORKER_MAX_OPEN_CONNECTIONS;
use gatehouse_core::ports::{AuditHeads, Directory, KeyGuard, PortError, Ports};

/// The most keys one plan change tells first: with the pages of keys, the undo on a failure and
/// the D1 write, inside one invocation's 1,000 subrequests.
pub const PLAN_CHANGE_TELLS: usize = 400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateProject {
    name: String,
    plan: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateProject {
    plan: String,
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_project(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateProject = json_body::parse(&call.body)?;
        let name = input.name.trim();
        if name.is_empty() || name.chars().count() > 200 {
            return Err(
                ApiError::bad_request("name must be 1 to 200 characters").with_detail("field", "name")
            );
        }
        let plan = input.plan.as_deref().unwrap_or(DEFAULT_PLAN);
        check_plan(self.config, plan)?;
        // With an Idempotency-Key both ids and the key's secret derive from the operation, so an
        // execution of it again finds what the first wrote (SPEC §19).
        let project_id = call.ids.next("prj");
        let owner = NewKey::generate(
            self.config,
            &project_id,
            KeyType::Owner,
            Some("Owner key".into()),
            plan,
            None,
            call.now_ms,
        )
        .of_operation(self.config, &call.ids);
        // Its audit chain starts now, in its own object (SPEC §23): nothing D1 says later is taken
        // for its start. Idempotent: an execution again finds the head started.
        let period_ms = i64::from(self.config.audit_digest_seconds) * 1000;
        let start = AdoptHead { head: start_at(period_start(call.now_ms, period_ms)), objects: Vec::new() };
        self.guard.adopt_head(&project_id, &start).await.map_err(unavailable)?;
        let stored = self.store.create_project(name, &owner.record).await.map_err(unavailable)?;
        let shown = owner.shown(&stored, call.now_ms)?;
        Ok(Reply::created(json!({
            "project_id": project_id,
            "name": name,
            "plan": plan,
            "owner_key": { "id": shown["id"], "key": shown["key"], "prefix": shown["prefix"] },
        })))
    }

    /// Puts a project and all its keys on another plan, guards first (SPEC §12.1): the project's
    /// authority is told the plan's quota (SPEC §23: it grants under its own limits from then on,
    /// so no key whose record is older draws against the old quota), then each active key's guard
    /// is told the new plan, six at a time; if one cannot be told, those told are given their
    /// record back and the change fails with 503, nothing changed in D1. Then one D1 transaction
    /// writes the plan (on a failure, the guards are given their record back too).
    /// A project with more active keys than [`PLAN_CHANGE_TELLS`] has its newest ones told; the
    /// others read D1 again within their record's freshness (10 minutes), as docs/api/lifecycles.md says.
    pub(super) async fn update_project(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let project_id = call.params[0];
        let input: UpdateProject = json_body::parse(&call.body)?;
        check_plan(self.config, &input.plan)?;
        let keys = self.project_keys(project_id).await.map_err(unavailable)?;
        if keys.is_empty() {
            return Err(ApiError::not_found("project").with_detail("id", project_id));
        }
        let active: Vec<&KeyRecord> =
            keys.iter().filter(|k| !k.is_revoked()).take(PLAN_CHANGE_TELLS).collect();
        let authority = project_authority(project_id);
        let before = self.config.project_limits(&keys[0].plan);
        let after = self.config.project_limits(&input.plan);
        self.guard.set_level_limits(&authority, &after, call.now_ms).await.map_err(unavailable)?;
        // A change that fails from here gives the authority its limits back (a later version).
        let undo = || async { self.guard.set_level_limits(&authority, &before, call.now_ms + 1).await.ok() };
        let mut told: Vec<&KeyRecord> = Vec::new();
        for wave in active.chunks(WORKER_MAX_OPEN_CONNECTIONS) {
            let changed: Vec<KeyRecord> =
                wave.iter().map(|k| KeyRecord { plan: input.plan.clone(), ..(*k).clone() }).collect();
            let answers = join_all(changed.iter().map(|k| self.guard.apply(k, None))).await;
            told.extend(wave.iter().zip(&answers).filter(|(_, a)| a.is_ok()).map(|(k, _)| *k));
            if let Some(Err(e)) = answers.into_iter().find(Result::is_err) {
                self.give_back(&told).await;
                undo().await;
                return Err(unavailable(e));
            }
        }
        let change = match self.store.set_project_plan(project_id, &input.plan).await {
            Ok(Some(change)) => change,
            Ok(None) => {
                self.give_back(&told).await;
                undo().await;
                return Err(ApiError::not_found("project").with_detail("id", project_id));
            }
            Err(e) => {
                self.give_back(&told).await;
                undo().await;
                return Err(unavailable(e));
            }
        };
        Ok(Reply::ok(json!({
            "project_id": project_id,
            "name": change.name,
            "plan": input.plan,
            "keys": change.keys.len(),
            "keys_told": told.len(),
        })))
    }

    /// Every key of a project, newest first, page by page.
    async fn project_keys(&self, project_id: &str) -> Result<Vec<KeyRecord>, PortError> {
        const PAGE: usize = 200;
        let mut keys: Vec<KeyRecord> = Vec::new();
        loop {
            let after = keys.last().map(|k| Cursor { ts: k.created_at, id: k.id.clone() });
            let mut page = self.store.list_keys(project_id, &PageRequest { limit: PAGE, after }).await?;
            let more = page.len() > PAGE;
            page.truncate(PAGE);
            keys.extend(page);
            if !more {
                return Ok(keys);
            }
        }
    }

    /// Gives each guard its record as D1 has it again (best effort: one not reached reads D1
    /// within its record's freshness).
    async fn give_back(&self, told: &[&KeyRecord]) {
        self.tell_guards(told).await;
    }

    /// Tells each key's guard its record with `Apply`, six at a time (the open connections of one
    /// invocation), best effort: a guard not reached reads D1 again within its record's freshness
    /// (10 minutes). Answers how many were told. A plan change gives records back with it, and an
    /// identity's change tells its keys their identity's new limits (SPEC §20).
    pub(super) async fn tell_guards(&self, keys: &[&KeyRecord]) -> usize {
        let mut told = 0;
        for wave in keys.chunks(WORKER_MAX_OPEN_CONNECTIONS) {
            let answers = join_all(wave.iter().map(|k| self.guard.apply(k, None))).await;
            told += answers.iter().filter(|a| a.is_ok()).count();
        }
        told
    }
}
