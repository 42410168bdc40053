//! Projects and API keys: the [`Directory`] port.

use wasm_bindgen::JsValue;

use super::{int, opt_int, opt_text, text, D1Store};
use gatehouse_core::api_key::{IdentityLimits, KeyRecord, KeyType};
use gatehouse_core::identity::Identity;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{
    Directory, IdentityChange, IdentityInsert, IdentityUpdate, KeyChanges, KeyUpdate, PlanChange, PortError,
    Revocation,
};
use gatehouse_core::rate_limit::LimitSpec;

/// How many owner keys of project `?2` other than key `?1` are lasting (`KeyRecord::is_lasting`):
/// the last-owner-key rule, inside the statement that would break it, so two changes cannot race.
const OTHER_LASTING_OWNERS: &str = "(SELECT count(*) FROM api_keys o
    WHERE o.project_id = ?2 AND o.id <> ?1 AND o.type = 'owner'
      AND o.revoked_at IS NULL AND o.expires_at IS NULL AND o.rolled_at IS NULL)";

/// The columns a key's row is written with.
const KEY_FIELDS: &str = "id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix,
    created_at, revoked_at, expires_at, rolled_from, rolled_at, rolled_to, identity_id, limits, claim_shards,
    allowed_origins, pepper";

/// A key's row as read ([`KeyRow`]): its columns and its identity's limits (SPEC §20), by a
/// sub-select that also works in a `RETURNING` clause (the join of `key_by_hash`).
pub(super) const KEY_COLUMNS: &str = "id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix,
    created_at, revoked_at, expires_at, rolled_from, rolled_at, rolled_to, identity_id, limits, claim_shards,
    allowed_origins, pepper, guard_hash, (SELECT i.limits FROM identities i WHERE i.id = identity_id) AS identity_limits";

/// A key's identity as its insert or change writes it (`?{n}`): only one of the key's project,
/// else none (one deleted meanwhile detached its keys, as this key would have been).
fn identity_of_project(n: u8) -> String {
    format!("(SELECT i.id FROM identities i WHERE i.id = ?{n} AND i.project_id = ?2)")
}

/// A row of `api_keys` as [`KEY_COLUMNS`] reads it.
#[derive(serde::Deserialize)]
pub(super) struct KeyRow {
    id: String,
    project_id: String,
    #[serde(rename = "type")]
    key_type: KeyType,
    name: Option<String>,
    plan: String,
    rate_limit_per_minute: Option<u32>,
    key_hash: String,
    prefix: String,
    created_at: i64,
    revoked_at: Option<i64>,
    expires_at: Option<i64>,
    rolled_from: Option<String>,
    rolled_at: Option<i64>,
    rolled_to: Option<String>,
    identity_id: Option<String>,
    limits: Option<String>,
    claim_shards: u32,
    /// A browser key's origins as a JSON list (NULL: any).
    allowed_origins: Option<String>,
    pepper: Option<String>,
    guard_hash: Option<String>,
    identity_limits: Option<String>,
}

/// Limits stored as JSON text (NULL, or text this version cannot read: none).
fn stored_limits(text: Option<&str>) -> Option<LimitSpec> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

/// A key's `allowed_origins` as stored: a JSON list, NULL for none.
fn origins_text(origins: &[String]) -> JsValue {
    match origins {
        [] => JsValue::NULL,
        some => text(&serde_json::to_string(some).unwrap_or_default()),
    }
}

fn limits_text(limits: Option<&LimitSpec>) -> JsValue {
    limits.and_then(|l| serde_json::to_string(l).ok()).map_or(JsValue::NULL, |t| text(&t))
}

impl From<KeyRow> for KeyRecord {
    fn from(row: KeyRow) -> Self {
        KeyRecord {
            identity: row.identity_id.map(|id| IdentityLimits {
                id,
                limits: stored_limits(row.identity_limits.as_deref()).unwrap_or_default(),
            }),
            limits: stored_limits(row.limits.as_deref()),
            id: row.id,
            project_id: row.project_id,
            key_type: row.key_type,
            name: row.name,
            plan: row.plan,
            rate_limit_per_minute: row.rate_limit_per_minute,
            key_hash: row.key_hash,
            prefix: row.prefix,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            expires_at: row.expires_at,
            rolled_from: row.rolled_from,
            rolled_at: row.rolled_at,
            rolled_to: row.rolled_to,
            claim_shards: row.claim_shards,
            allowed_origins: row
                .allowed_origins
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default(),
            pepper: row.pepper,
            guard_hash: row.guard_hash,
        }
    }
}

/// The keys a statement of a batch answered.
pub(super) fn result_keys(result: &worker::D1Result) -> Result<Vec<KeyRecord>, PortError> {
    Ok(result
        .results::<KeyRow>()
        .map_err(PortError::from_display)?
        .into_iter()
        .map(KeyRecord::from)
        .collect())
}

/// The identities' columns as [`IdentityRow`] reads them.
const IDENTITY_COLUMNS: &str = "id, project_id, external_id, meta, limits, created_at, updated_at";

#[derive(serde::Deserialize)]
struct IdentityRow {
    id: String,
    project_id: String,
    external_id: String,
    meta: Option<String>,
    limits: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl From<IdentityRow> for Identity {
    fn from(row: IdentityRow) -> Self {
        Identity {
            meta: row.meta.and_then(|m| serde_json::from_str(&m).ok()),
            limits: stored_limits(row.limits.as_deref()),
            id: row.id,
            project_id: row.project_id,
            external_id: row.external_id,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

fn result_identities(result: &worker::D1Result) -> Result<Vec<Identity>, PortError> {
    Ok(result
        .results::<IdentityRow>()
        .map_err(PortError::from_display)?
        .into_iter()
        .map(Identity::from)
        .collect())
}

#[derive(serde::Deserialize)]
struct Count {
    n: u32,
}

pub(super) fn result_count(result: &worker::D1Result) -> Result<u64, PortError> {
    let counts = result.results::<Count>().map_err(PortError::from_display)?;
    Ok(counts.first().map_or(0, |c| u64::from(c.n)))
}

impl D1Store {
    pub(super) async fn first_key(
        &self,
        sql: &str,
        args: &[JsValue],
    ) -> Result<Option<KeyRecord>, PortError> {
        Ok(self.rows::<KeyRow>(sql, args).await?.into_iter().next().map(KeyRecord::from))
    }

    async fn first_identity(&self, sql: &str, args: &[JsValue]) -> Result<Option<Identity>, PortError> {
        Ok(self.rows::<IdentityRow>(sql, args).await?.into_iter().next().map(Identity::from))
    }
}

/// The values of a key's row but its plan (`?5`, the project's): `?14` its identity, `?15` its
/// own limits, `?18` its pepper's id (a new key has no `guard_hash`: its guard is its hash's).
fn key_values(key: &KeyRecord) -> [JsValue; 18] {
    [
        text(&key.id),
        text(&key.project_id),
        text(key.key_type.as_str()),
        opt_text(key.name.as_deref()),
        opt_int(key.rate_limit_per_minute.map(i64::from)),
        text(&key.key_hash),
        text(&key.prefix),
        int(key.created_at),
        opt_int(key.revoked_at),
        opt_int(key.expires_at),
        opt_text(key.rolled_from.as_deref()),
        opt_int(key.rolled_at),
        opt_text(key.rolled_to.as_deref()),
        opt_text(key.identity.as_ref().map(|i| i.id.as_str())),
        limits_text(key.limits.as_ref()),
        int(key.claim_shards.into()),
        origins_text(&key.allowed_origins),
        opt_text(key.pepper.as_deref()),
    ]
}

impl Directory for D1Store {
    async fn create_project(&self, name: &str, owner_key: &KeyRecord) -> Result<KeyRecord, PortError> {
        let project_id = owner_key.project_id.as_str();
        // One batch is one transaction: never a project without its owner key. Both are left as
        // they are when an earlier execution of the same operation wrote them.
        // Its audit log's database, for good (SPEC §20).
        // Only a database that is bound: a project placed on a missing one could not log.
        let databases = match &self.audit {
            super::AuditLogs::Placed(logs) => u8::try_from(logs.len()).unwrap_or(u8::MAX),
            _ => 1,
        };
        let audit_db = gatehouse_core::audit::audit_database(project_id, databases);
        let project = self.statement(
            "INSERT INTO projects (id, name, plan, created_at, audit_db) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING",
            &[
                text(project_id),
                text(name),
                text(&owner_key.plan),
                int(owner_key.created_at),
                int(audit_db.into()),
            ],
        )?;
        let key = self.statement(&insert_key_sql(), &key_values(owner_key))?;
        self.batch(vec![project, key]).await?;
        self.find_key(project_id, &owner_key.id)
            .await?
            .ok_or_else(|| PortError::from_display("the project's owner key is not stored"))
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<Option<KeyRecord>, PortError> {
        let inserted = self.first_key(&insert_key_sql(), &key_values(key)).await?;
        match inserted {
            Some(key) => Ok(Some(key)),
            // Written already by an earlier execution of the same operation, or no such project.
            None => self.find_key(&key.project_id, &key.id).await,
        }
    }

    async fn set_project_plan(&self, project_id: &str, plan: &str) -> Result<Option<PlanChange>, PortError> {
        #[derive(serde::Deserialize)]
        struct Name {
            name: String,
        }
        let args = [text(project_id), text(plan)];
        let project = self.statement("UPDATE projects SET plan = ?2 WHERE id = ?1 RETURNING name", &args)?;
        let keys = self.statement(
            &format!("UPDATE api_keys SET plan = ?2 WHERE project_id = ?1 RETURNING {KEY_COLUMNS}"),
            &args,
        )?;
        let results = self.results(vec![project, keys]).await?;
        let name = results[0].results::<Name>().map_err(PortError::from_display)?.into_iter().next();
        let Some(Name { name }) = name else { return Ok(None) };
        let keys = result_keys(&results[1])?;
        Ok(Some(PlanChange { name, keys }))
    }

    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError> {
        let rows: Vec<KeyRow> = self.newest_first(KEY_COLUMNS, "api_keys", project_id, page).await?;
        Ok(rows.into_iter().map(KeyRecord::from).collect())
    }

    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError> {
        // A field the change leaves out keeps its value: ?3, ?5, ?7, ?9 and ?11 say whether name,
        // override, expiry, identity and limits are set. An expiry on an owner key needs another lasting owner key (SPEC §19).
        let updated = self
            .first_key(
                &format!(
                    "UPDATE api_keys SET
                       name = CASE WHEN ?3 THEN ?4 ELSE name END,
                       rate_limit_per_minute = CASE WHEN ?5 THEN ?6 ELSE rate_limit_per_minute END,
                       expires_at = CASE WHEN ?7 AND rolled_at IS NULL THEN ?8 ELSE expires_at END,
                       identity_id = CASE WHEN ?9 THEN {identity} ELSE identity_id END,
                       limits = CASE WHEN ?11 THEN ?12 ELSE limits END,
                       allowed_origins = CASE WHEN ?13 THEN ?14 ELSE allowed_origins END
                     WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL
                       AND (NOT ?7 OR ?8 IS NULL OR type <> 'owner' OR rolled_at IS NOT NULL
                            OR {OTHER_LASTING_OWNERS} > 0)
                     RETURNING {KEY_COLUMNS}",
                    identity = identity_of_project(10),
                ),
                &[
                    text(key_id),
                    text(project_id),
                    int(changes.name.is_some().into()),
                    opt_text(changes.name.clone().flatten().as_deref()),
                    int(changes.rate_limit_per_minute.is_some().into()),
                    opt_int(changes.rate_limit_per_minute.flatten().map(i64::from)),
                    int(changes.expires_at.is_some().into()),
                    opt_int(changes.expires_at.flatten()),
                    int(changes.identity.is_some().into()),
                    opt_text(changes.identity.as_ref().and_then(|i| i.as_ref()).map(|i| i.id.as_str())),
                    int(changes.limits.is_some().into()),
                    limits_text(changes.limits.flatten().as_ref()),
                    int(changes.allowed_origins.is_some().into()),
                    origins_text(changes.allowed_origins.as_deref().unwrap_or_default()),
                ],
            )
            .await?;
        if let Some(key) = updated {
            return Ok(KeyUpdate::Updated(key));
        }
        Ok(match self.find_key(project_id, key_id).await? {
            None => KeyUpdate::NotFound,
            Some(key) if key.is_revoked() => KeyUpdate::Revoked,
            Some(_) => KeyUpdate::LastOwnerKey,
        })
    }

    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError> {
        // One statement, so the last-owner rule cannot race with another change. A key refused
        // already (past its expiry or grace) may go; any other owner key needs a lasting one besides.
        let revoked = self
            .first_key(
                &format!(
                    "UPDATE api_keys SET revoked_at = ?3
                     WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL
                       AND (type <> 'owner' OR (expires_at IS NOT NULL AND expires_at <= ?3)
                            OR {OTHER_LASTING_OWNERS} > 0)
                     RETURNING {KEY_COLUMNS}"
                ),
                &[text(key_id), text(project_id), int(now_ms)],
            )
            .await?;
        if let Some(key) = revoked {
            return Ok(Revocation::Revoked(key));
        }
        Ok(match self.find_key(project_id, key_id).await? {
            None => Revocation::NotFound,
            Some(key) if key.is_revoked() => Revocation::AlreadyRevoked(key),
            Some(_) => Revocation::LastOwnerKey,
        })
    }

    async fn roll_key(
        &self,
        rolled: &KeyRecord,
        replacement: &KeyRecord,
        now_ms: i64,
    ) -> Result<Option<(KeyRecord, KeyRecord)>, PortError> {
        // One batch, one transaction: the replacement exists only if the old key was rolled to it,
        // and the old key is rolled only while it is active and not rolled before.
        let roll = self.statement(
            &format!(
                "UPDATE api_keys SET rolled_at = ?3, rolled_to = ?4, expires_at = ?5
                 WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL AND rolled_at IS NULL
                   AND (expires_at IS NULL OR expires_at > ?3)
                 RETURNING {KEY_COLUMNS}"
            ),
            &[
                text(&rolled.id),
                text(&rolled.project_id),
                int(now_ms),
                opt_text(rolled.rolled_to.as_deref()),
                opt_int(rolled.expires_at),
            ],
        )?;
        let insert = self.statement(
            &format!(
                "INSERT INTO api_keys ({KEY_FIELDS})
                 SELECT ?1, ?2, ?3, ?4, p.plan, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, {identity}, ?15, ?16, ?17, ?18
                 FROM projects p
                 WHERE p.id = ?2 AND EXISTS (SELECT 1 FROM api_keys o WHERE o.id = ?11 AND o.rolled_to = ?1)
                 RETURNING {KEY_COLUMNS}",
                identity = identity_of_project(14),
            ),
            &key_values(replacement),
        )?;
        let results = self.results(vec![roll, insert]).await?;
        let old = result_keys(&results[0])?;
        let new = result_keys(&results[1])?;
        Ok(old.into_iter().next().zip(new.into_iter().next()))
    }

    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError> {
        self.first_key(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1 AND project_id = ?2"),
            &[text(key_id), text(project_id)],
        )
        .await
    }

    async fn lasting_owner_keys(&self, project_id: &str, except_key_id: &str) -> Result<u32, PortError> {
        let rows: Vec<Count> = self
            .rows(&format!("SELECT {OTHER_LASTING_OWNERS} AS n"), &[text(except_key_id), text(project_id)])
            .await?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    /// By its hash, or by the name of its guard once re-hashed (SPEC §26: the guard's own load).
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        let sql =
            format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?1 OR guard_hash = ?1 LIMIT 1");
        self.first_key(&sql, &[text(key_hash)]).await
    }

    async fn create_identity(&self, identity: &Identity) -> Result<IdentityInsert, PortError> {
        let meta = identity.meta.as_ref().and_then(|m| serde_json::to_string(m).ok());
        // Create-or-find: the same id (the same operation executed again) is answered as stored;
        // another id with this external_id is a duplicate (the UNIQUE constraint wrote nothing).
        let inserted = self
            .first_identity(
                &format!(
                    "INSERT INTO identities ({IDENTITY_COLUMNS})
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?6 FROM projects p WHERE p.id = ?2
                     ON CONFLICT DO NOTHING
                     RETURNING {IDENTITY_COLUMNS}"
                ),
                &[
                    text(&identity.id),
                    text(&identity.project_id),
                    text(&identity.external_id),
                    opt_text(meta.as_deref()),
                    limits_text(identity.limits.as_ref()),
                    int(identity.created_at),
                ],
            )
            .await?;
        if let Some(stored) = inserted {
            return Ok(IdentityInsert::Stored(stored));
        }
        let found: Vec<Identity> = self
            .rows::<IdentityRow>(
                &format!(
                    "SELECT {IDENTITY_COLUMNS} FROM identities
                     WHERE project_id = ?2 AND (id = ?1 OR external_id = ?3)"
                ),
                &[text(&identity.id), text(&identity.project_id), text(&identity.external_id)],
            )
            .await?
            .into_iter()
            .map(Identity::from)
            .collect();
        if let Some(same) = found.iter().find(|i| i.id == identity.id) {
            return Ok(IdentityInsert::Stored(same.clone()));
        }
        Ok(match found.into_iter().next() {
            Some(other) => IdentityInsert::Duplicate(other.id),
            None => IdentityInsert::NoProject,
        })
    }

    async fn identity(&self, project_id: &str, identity_id: &str) -> Result<Option<Identity>, PortError> {
        self.first_identity(
            &format!("SELECT {IDENTITY_COLUMNS} FROM identities WHERE id = ?1 AND project_id = ?2"),
            &[text(identity_id), text(project_id)],
        )
        .await
    }

    async fn list_identities(
        &self,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<Identity>, PortError> {
        let rows: Vec<IdentityRow> =
            self.newest_first(IDENTITY_COLUMNS, "identities", project_id, page).await?;
        Ok(rows.into_iter().map(Identity::from).collect())
    }

    async fn update_identity(&self, update: IdentityUpdate<'_>) -> Result<Option<IdentityChange>, PortError> {
        let IdentityUpdate { project_id, identity_id, changes, now_ms, tell } = update;
        let meta = changes.meta.as_ref().and_then(|m| m.as_ref()).and_then(|m| serde_json::to_string(m).ok());
        // One batch, one transaction: the keys are read as the change left them.
        let update = self.statement(
            &format!(
                "UPDATE identities SET
                   meta = CASE WHEN ?3 THEN ?4 ELSE meta END,
                   limits = CASE WHEN ?5 THEN ?6 ELSE limits END,
                   updated_at = ?7
                 WHERE id = ?1 AND project_id = ?2
                 RETURNING {IDENTITY_COLUMNS}"
            ),
            &[
                text(identity_id),
                text(project_id),
                int(changes.meta.is_some().into()),
                opt_text(meta.as_deref()),
                int(changes.limits.is_some().into()),
                limits_text(changes.limits.flatten().as_ref()),
                int(now_ms),
            ],
        )?;
        let keys =
            self.statement(&identity_keys_sql(), &identity_keys_args(project_id, identity_id, tell))?;
        let count = self.statement(IDENTITY_KEY_COUNT, &[text(identity_id), text(project_id)])?;
        let results = self.results(vec![update, keys, count]).await?;
        let Some(identity) = result_identities(&results[0])?.into_iter().next() else { return Ok(None) };
        Ok(Some(IdentityChange {
            identity,
            keys: result_keys(&results[1])?,
            key_count: result_count(&results[2])?,
        }))
    }

    async fn delete_identity(
        &self,
        project_id: &str,
        identity_id: &str,
        tell: usize,
    ) -> Result<Option<IdentityChange>, PortError> {
        let args = [text(identity_id), text(project_id)];
        // One batch, one transaction: the identity and its keys as they were, then its keys
        // detached and the identity deleted (never a key of an identity that is gone).
        let identity = self.statement(
            &format!("SELECT {IDENTITY_COLUMNS} FROM identities WHERE id = ?1 AND project_id = ?2"),
            &args,
        )?;
        let keys =
            self.statement(&identity_keys_sql(), &identity_keys_args(project_id, identity_id, tell))?;
        let count = self.statement(IDENTITY_KEY_COUNT, &args)?;
        let detach = self.statement(
            "UPDATE api_keys SET identity_id = NULL WHERE identity_id = ?1 AND project_id = ?2",
            &args,
        )?;
        let delete = self.statement("DELETE FROM identities WHERE id = ?1 AND project_id = ?2", &args)?;
        let results = self.results(vec![identity, keys, count, detach, delete]).await?;
        let Some(identity) = result_identities(&results[0])?.into_iter().next() else { return Ok(None) };
        // The keys as the transaction left them: of no identity.
        let keys = result_keys(&results[1])?.into_iter().map(|k| KeyRecord { identity: None, ..k }).collect();
        Ok(Some(IdentityChange { identity, keys, key_count: result_count(&results[2])? }))
    }
}

/// How many keys identity `?1` of project `?2` has, revoked ones included.
const IDENTITY_KEY_COUNT: &str =
    "SELECT count(*) AS n FROM api_keys WHERE identity_id = ?1 AND project_id = ?2";

/// Up to `?3` keys of identity `?1` of project `?2` that are not revoked, newest first.
fn identity_keys_sql() -> String {
    format!(
        "SELECT {KEY_COLUMNS} FROM api_keys
         WHERE identity_id = ?1 AND project_id = ?2 AND revoked_at IS NULL
         ORDER BY created_at DESC, id DESC LIMIT ?3"
    )
}

fn identity_keys_args(project_id: &str, identity_id: &str, tell: usize) -> [JsValue; 3] {
    [text(identity_id), text(project_id), int(tell as i64)]
}

/// A key's insert on its project's plan, answering the stored row (none: no such project, or the
/// key exists already — an operation executed again derives the same id and secret).
fn insert_key_sql() -> String {
    format!(
        "INSERT INTO api_keys ({KEY_FIELDS})
         SELECT ?1, ?2, ?3, ?4, p.plan, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, {identity}, ?15, ?16, ?17, ?18
         FROM projects p WHERE p.id = ?2
         ON CONFLICT DO NOTHING
         RETURNING {KEY_COLUMNS}",
        identity = identity_of_project(14),
    )
}
