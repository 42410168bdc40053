//! The [`Directory`] port over D1: projects and API keys.

use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::core::api_key::KeyRecord;
use crate::core::page::PageRequest;
use crate::ports::{Directory, PortError, Revocation};

pub struct D1Directory {
    db: D1Database,
}

impl D1Directory {
    pub fn new(db: D1Database) -> Self {
        Self { db }
    }

    fn statement(&self, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, PortError> {
        self.db
            .prepare(sql)
            .bind(args)
            .map_err(PortError::from_display)
    }

    async fn rows<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        args: &[JsValue],
    ) -> Result<Vec<T>, PortError> {
        let result = self
            .statement(sql, args)?
            .all()
            .await
            .map_err(PortError::from_display)?;
        result.results().map_err(PortError::from_display)
    }

    fn insert_key_statement(&self, key: &KeyRecord) -> Result<D1PreparedStatement, PortError> {
        self.statement(
            "INSERT INTO api_keys (id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix, created_at, revoked_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &[
                text(&key.id),
                text(&key.project_id),
                text(key.key_type.as_str()),
                opt_text(key.name.as_deref()),
                text(&key.plan),
                key.rate_limit_per_minute.map_or(JsValue::NULL, JsValue::from),
                text(&key.key_hash),
                text(&key.prefix),
                int(key.created_at),
                key.revoked_at.map_or(JsValue::NULL, int),
            ],
        )
    }
}

fn text(s: &str) -> JsValue {
    JsValue::from_str(s)
}

fn opt_text(s: Option<&str>) -> JsValue {
    s.map_or(JsValue::NULL, JsValue::from_str)
}

/// D1 numbers are JS numbers: exact for Unix milliseconds (< 2^53).
fn int(n: i64) -> JsValue {
    JsValue::from_f64(n as f64)
}

const KEY_COLUMNS: &str =
    "id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix, created_at, revoked_at";

impl Directory for D1Directory {
    async fn create_project(
        &self,
        project_id: &str,
        name: &str,
        created_at: i64,
        owner_key: &KeyRecord,
    ) -> Result<(), PortError> {
        // One batch is one transaction: never a project without its owner key.
        let project = self.statement(
            "INSERT INTO projects (id, name, created_at) VALUES (?1, ?2, ?3)",
            &[text(project_id), text(name), int(created_at)],
        )?;
        let key = self.insert_key_statement(owner_key)?;
        self.db
            .batch(vec![project, key])
            .await
            .map_err(PortError::from_display)?;
        Ok(())
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<(), PortError> {
        self.insert_key_statement(key)?
            .run()
            .await
            .map_err(PortError::from_display)?;
        Ok(())
    }

    async fn list_keys(
        &self,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<KeyRecord>, PortError> {
        let (ts, id) = match &page.after {
            Some(c) => (int(c.ts), text(&c.id)),
            None => (JsValue::NULL, JsValue::NULL),
        };
        self.rows(
            &format!(
                "SELECT {KEY_COLUMNS} FROM api_keys
                 WHERE project_id = ?1 AND (?2 IS NULL OR (created_at, id) < (?2, ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            &[
                text(project_id),
                ts,
                id,
                JsValue::from(page.fetch_len() as u32),
            ],
        )
        .await
    }

    async fn revoke_key(
        &self,
        project_id: &str,
        key_id: &str,
        now_ms: i64,
    ) -> Result<Revocation, PortError> {
        // One statement, so the last-owner rule cannot race with another revocation.
        let revoked: Vec<KeyRecord> = self
            .rows(
                &format!(
                    "UPDATE api_keys SET revoked_at = ?3
                     WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL
                       AND (type <> 'owner' OR (SELECT count(*) FROM api_keys
                            WHERE project_id = ?2 AND type = 'owner' AND revoked_at IS NULL) > 1)
                     RETURNING {KEY_COLUMNS}"
                ),
                &[text(key_id), text(project_id), int(now_ms)],
            )
            .await?;
        if let Some(key) = revoked.into_iter().next() {
            return Ok(Revocation::Revoked(key));
        }
        let existing: Vec<KeyRecord> = self
            .rows(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1 AND project_id = ?2"),
                &[text(key_id), text(project_id)],
            )
            .await?;
        Ok(match existing.into_iter().next() {
            None => Revocation::NotFound,
            Some(key) if key.is_revoked() => Revocation::AlreadyRevoked(key),
            Some(_) => Revocation::LastOwnerKey,
        })
    }

    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        let rows: Vec<KeyRecord> = self
            .rows(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?1"),
                &[text(key_hash)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }
}
