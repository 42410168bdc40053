//! The operator's routes of SPEC §2 and §13 (`ADMIN_TOKEN`): create a project with its first owner
//! key, and set a project's plan — plans belong to projects, and only the operator chooses them.

use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::json;

use super::{keys::check_plan, keys::NewKey, unavailable, Call, Gateway, Reply};
use crate::config::DEFAULT_PLAN;
use crate::core::api_key::KeyType;
use crate::core::error::ApiError;
use crate::core::json_body;
use crate::ports::{Directory, KeyGuard, Ports};

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
        let stored =
            self.store.create_project(&project_id, name, &owner.record).await.map_err(unavailable)?;
        let shown = owner.shown(&stored, call.now_ms)?;
        Ok(Reply::created(json!({
            "project_id": project_id,
            "name": name,
            "plan": plan,
            "owner_key": { "id": shown["id"], "key": shown["key"], "prefix": shown["prefix"] },
        })))
    }

    /// Puts a project and all its keys on another plan (one D1 transaction), then tells each active
    /// key's guard, in parallel, so its next request runs under the new limits. A guard that could
    /// not be told reads D1 again within its record's freshness (10 minutes).
    pub(super) async fn update_project(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let project_id = call.params[0];
        let input: UpdateProject = json_body::parse(&call.body)?;
        check_plan(self.config, &input.plan)?;
        let Some(change) = self.store.set_project_plan(project_id, &input.plan).await.map_err(unavailable)?
        else {
            return Err(ApiError::not_found("project").with_detail("id", project_id));
        };
        let active: Vec<_> = change.keys.iter().filter(|k| !k.is_revoked()).collect();
        let told = join_all(active.iter().map(|k| self.guard.apply(k, None))).await;
        Ok(Reply::ok(json!({
            "project_id": project_id,
            "name": change.name,
            "plan": input.plan,
            "keys": change.keys.len(),
            "keys_told": told.iter().filter(|t| t.is_ok()).count(),
        })))
    }
}
