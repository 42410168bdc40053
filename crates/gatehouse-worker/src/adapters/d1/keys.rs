//! Projects and API keys: the [`Directory`] port.

use wasm_bindgen::JsValue;

use super::{int, opt_int, opt_text, text, D1Store};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{Directory, KeyChanges, KeyUpdate, PlanChange, PortError, Revocation};

/// How many owner keys of project `?2` other than key `?1` are lasting (`KeyRecord::is_lasting`):
/// the last-owner-key rule, inside the statement that would break it, so two changes cannot race.
const OTHER_LASTING_OWNERS: &str = "(SELECT count(*) FROM api_keys o
    WHERE o.project_id = ?2 AND o.id <> ?1 AND o.type = 'owner'
      AND o.revoked_at IS NULL AND o.expires_at IS NULL AND o.rolled_at IS NULL)";

const KEY_COLUMNS: &str =
    "id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix, created_at,
    revoked_at, expires_at, rolled_from, rolled_at, rolled_to";

impl D1Store {
    async fn first_key(&self, sql: &str, args: &[JsValue]) -> Result<Option<KeyRecord>, PortError> {
        Ok(self.rows(sql, args).await?.into_iter().next())
    }
}

/// The values of a key's row but its plan (`?5`, the project's).
fn key_values(key: &KeyRecord) -> [JsValue; 13] {
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
    ]
}

impl Directory for D1Store {
    async fn create_project(&self, name: &str, owner_key: &KeyRecord) -> Result<KeyRecord, PortError> {
        let project_id = owner_key.project_id.as_str();
        // One batch is one transaction: never a project without its owner key. Both are left as
        // they are when an earlier execution of the same operation wrote them.
        let project = self.statement(
            "INSERT INTO projects (id, name, plan, created_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            &[text(project_id), text(name), text(&owner_key.plan), int(owner_key.created_at)],
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
        let keys = results[1].results::<KeyRecord>().map_err(PortError::from_display)?;
        Ok(Some(PlanChange { name, keys }))
    }

    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError> {
        self.newest_first(KEY_COLUMNS, "api_keys", project_id, page).await
    }

    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError> {
        // A field the change leaves out keeps its value: ?3 and ?5 say whether name and override are
        // set. An expiry on an owner key needs another lasting owner key (SPEC §19).
        let updated = self
            .first_key(
                &format!(
                    "UPDATE api_keys SET
                       name = CASE WHEN ?3 THEN ?4 ELSE name END,
                       rate_limit_per_minute = CASE WHEN ?5 THEN ?6 ELSE rate_limit_per_minute END,
                       expires_at = CASE WHEN ?7 AND rolled_at IS NULL THEN ?8 ELSE expires_at END
                     WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL
                       AND (NOT ?7 OR ?8 IS NULL OR type <> 'owner' OR rolled_at IS NOT NULL
                            OR {OTHER_LASTING_OWNERS} > 0)
                     RETURNING {KEY_COLUMNS}"
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
                "INSERT INTO api_keys ({KEY_COLUMNS})
                 SELECT ?1, ?2, ?3, ?4, p.plan, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13 FROM projects p
                 WHERE p.id = ?2 AND EXISTS (SELECT 1 FROM api_keys o WHERE o.id = ?11 AND o.rolled_to = ?1)
                 RETURNING {KEY_COLUMNS}"
            ),
            &key_values(replacement),
        )?;
        let results = self.results(vec![roll, insert]).await?;
        let old = results[0].results::<KeyRecord>().map_err(PortError::from_display)?;
        let new = results[1].results::<KeyRecord>().map_err(PortError::from_display)?;
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
        #[derive(serde::Deserialize)]
        struct Count {
            n: u32,
        }
        let rows: Vec<Count> = self
            .rows(&format!("SELECT {OTHER_LASTING_OWNERS} AS n"), &[text(except_key_id), text(project_id)])
            .await?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        self.first_key(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?1"), &[text(key_hash)])
            .await
    }
}

/// A key's insert on its project's plan, answering the stored row (none: no such project, or the
/// key exists already — an operation executed again derives the same id and secret).
fn insert_key_sql() -> String {
    format!(
        "INSERT INTO api_keys ({KEY_COLUMNS})
         SELECT ?1, ?2, ?3, ?4, p.plan, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13 FROM projects p WHERE p.id = ?2
         ON CONFLICT DO NOTHING
         RETURNING {KEY_COLUMNS}"
    )
}
