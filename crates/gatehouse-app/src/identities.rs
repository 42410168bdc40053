//! Identities of SPEC §20 (owner keys): create, list, read, change and delete. An identity's keys
//! share its limits; after a change or a deletion is written to D1, each of its keys' guards is
//! told the key's new record (`Apply`), so the next request runs under the new limits.

use serde::Deserialize;
use serde_json::{json, Value};

use super::keys::patch_field;
use super::{unavailable, Call, Gateway, Reply};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::error::ApiError;
use gatehouse_core::identity::{self, Identity, IdentityChanges};
use gatehouse_core::json_body;
use gatehouse_core::page::{Cursor, PageRequest};
use gatehouse_core::platform::WORKER_MAX_SUBREQUESTS;
use gatehouse_core::ports::{Directory, IdentityInsert, Ports};

/// The most keys of one identity whose guards a change or a deletion tells (newest first): with
/// the request's own calls (its guard, the D1 batch, its settlement) inside one invocation's
/// 1,000 subrequests. The others read D1 again within their record's freshness (10 minutes), as
/// docs/api/identities.md says.
pub const IDENTITY_CHANGE_TELLS: usize = WORKER_MAX_SUBREQUESTS - 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateIdentity {
    external_id: String,
    meta: Option<Value>,
    limits: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateIdentity {
    #[serde(default, deserialize_with = "patch_field")]
    meta: Option<Option<Value>>,
    #[serde(default, deserialize_with = "patch_field")]
    limits: Option<Option<Value>>,
}

impl<P: Ports> Gateway<'_, P> {
    pub(super) async fn create_identity(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let input: CreateIdentity = json_body::parse(&call.body)?;
        identity::check_external_id(&input.external_id)?;
        let meta = input.meta.filter(|m| !m.is_null()).map(identity::check_meta).transpose()?;
        let limits = match &input.limits {
            Some(v) if !v.is_null() => identity::parse_limits(v)?,
            _ => None,
        };
        // With an Idempotency-Key the id derives from the operation: executed again, it finds the
        // identity the first execution wrote (SPEC §19).
        let new = Identity {
            id: call.ids.next("idt"),
            project_id: call.project_id().to_owned(),
            external_id: input.external_id,
            meta,
            limits,
            created_at: call.now_ms,
            updated_at: call.now_ms,
        };
        match self.store.create_identity(&new).await.map_err(unavailable)? {
            IdentityInsert::Stored(stored) => Ok(Reply::created(stored.view())),
            IdentityInsert::Duplicate(existing) => Err(ApiError::conflict(
                "An identity of this project has this external_id already; change that one instead.",
            )
            .with_detail("field", "external_id")
            .with_detail("id", existing)),
            // The caller's project exists; a missing one is a deleted project: its key is no longer valid.
            IdentityInsert::NoProject => Err(ApiError::invalid_api_key()),
        }
    }

    pub(super) async fn list_identities(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let page = PageRequest::from_query(call.query, 50, 200)?;
        let rows = self.store.list_identities(call.project_id(), &page).await.map_err(unavailable)?;
        let position = |i: &Identity| Cursor { ts: i.created_at, id: i.id.clone() };
        Ok(Reply::ok(page.respond(rows, position, Identity::view)))
    }

    pub(super) async fn get_identity(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        match self.store.identity(call.project_id(), id).await.map_err(unavailable)? {
            Some(identity) => Ok(Reply::ok(identity.view())),
            None => Err(not_found(id)),
        }
    }

    /// Changes an identity's meta or limits (`null` clears), then tells its keys' guards.
    pub(super) async fn update_identity(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let input: UpdateIdentity = json_body::parse(&call.body)?;
        let changes = IdentityChanges {
            meta: input.meta.map(|m| m.map(identity::check_meta).transpose()).transpose()?,
            limits: input
                .limits
                .map(|l| l.map(|v| identity::parse_limits(&v)).transpose().map(Option::flatten))
                .transpose()?,
        };
        let changed = self
            .store
            .update_identity(call.project_id(), id, &changes, call.now_ms, IDENTITY_CHANGE_TELLS)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| not_found(id))?;
        if changes.limits.is_some() {
            let keys: Vec<&KeyRecord> = changed.keys.iter().collect();
            self.tell_guards(&keys).await;
        }
        Ok(Reply::ok(changed.identity.view()))
    }

    /// Deletes an identity: its keys belong to none from then on (their guards are told).
    pub(super) async fn delete_identity(&self, call: &Call<'_>) -> Result<Reply, ApiError> {
        let id = call.params[0];
        let deleted = self
            .store
            .delete_identity(call.project_id(), id, IDENTITY_CHANGE_TELLS)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| not_found(id))?;
        let keys: Vec<&KeyRecord> = deleted.keys.iter().collect();
        self.tell_guards(&keys).await;
        Ok(Reply::ok(json!({
            "id": deleted.identity.id,
            "status": "deleted",
            "keys_detached": deleted.key_count,
        })))
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found("identity").with_detail("id", id)
}
