//! Bootstrap of SPEC §2: the operator (with `ADMIN_TOKEN`) creates a project and its first owner key.

use serde::Deserialize;
use serde_json::json;

use super::{keys::NewKey, random, unavailable, Call, Gateway, Reply};
use crate::core::api_key::KeyType;
use crate::core::encoding::object_id;
use crate::core::error::ApiError;
use crate::core::json_body;
use crate::ports::{Directory, Ports};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateProject {
    name: String,
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
        let project_id = object_id("prj", &random());
        let owner = NewKey::generate(
            self.config,
            &project_id,
            KeyType::Owner,
            Some("Owner key".into()),
            None,
            None,
            call.now_ms,
        )?;
        self.store
            .create_project(&project_id, name, call.now_ms, &owner.record)
            .await
            .map_err(unavailable)?;
        Ok(Reply::created(json!({
            "project_id": project_id,
            "name": name,
            "owner_key": { "id": owner.record.id, "key": owner.secret, "prefix": owner.record.prefix },
        })))
    }
}
