//! The [`Rotations`] port over the main database (SPEC §26): a key's re-hash under the current
//! pepper, which keeps the name of its guard (`guard_hash`); the active keys a pepper rotation has
//! not reached yet (`pepper` is not the current pepper's id: another one, or not recorded); the
//! subscriptions whose secret is not sealed under the current `WEBHOOK_SECRETS_KEY`.

use super::keys::{result_count, result_keys, KEY_COLUMNS};
use super::{int, text, D1Store};
use gatehouse_core::api_key::KeyRecord;
use gatehouse_core::page::PageRequest;
use gatehouse_core::ports::{PortError, Rotations, SealedSecret};
use gatehouse_core::webhook::StoredSecret;

/// Active at `?2` and not known to be under the pepper `?1`.
const OFF_PEPPER: &str = "(pepper IS NULL OR pepper <> ?1) AND revoked_at IS NULL
     AND (expires_at IS NULL OR expires_at > ?2)";

impl Rotations for D1Store {
    async fn rehash_key(
        &self,
        id: &str,
        from: &str,
        to: &str,
        pepper: &str,
    ) -> Result<Option<KeyRecord>, PortError> {
        self.first_key(
            &format!(
                "UPDATE api_keys SET key_hash = ?3, pepper = ?4,
                   guard_hash = CASE WHEN key_hash = ?3 THEN guard_hash ELSE COALESCE(guard_hash, key_hash) END
                 WHERE id = ?1 AND key_hash = ?2
                 RETURNING {KEY_COLUMNS}"
            ),
            &[text(id), text(from), text(to), text(pepper)],
        )
        .await
    }

    async fn keys_off_pepper(
        &self,
        pepper: &str,
        now_ms: i64,
        page: &PageRequest,
    ) -> Result<(u64, Vec<KeyRecord>), PortError> {
        let (ts, id) = super::after(page.after.as_ref());
        let count = self.statement(
            &format!("SELECT COUNT(*) AS n FROM api_keys WHERE {OFF_PEPPER}"),
            &[text(pepper), int(now_ms)],
        )?;
        let keys = self.statement(
            &format!(
                "SELECT {KEY_COLUMNS} FROM api_keys
                 WHERE {OFF_PEPPER} AND (?3 IS NULL OR (created_at, id) < (?3, ?4))
                 ORDER BY created_at DESC, id DESC LIMIT ?5"
            ),
            &[text(pepper), int(now_ms), ts, id, int(page.fetch_len() as i64)],
        )?;
        let results = self.results(vec![count, keys]).await?;
        Ok((result_count(&results[0])?, result_keys(&results[1])?))
    }

    async fn secrets_off_key(
        &self,
        current_prefix: &str,
        page: &PageRequest,
    ) -> Result<(u64, Vec<SealedSecret>), PortError> {
        #[derive(serde::Deserialize)]
        struct Row {
            id: String,
            project_id: String,
            url: String,
            status: String,
            created_at: i64,
            secret: String,
        }
        let (ts, id) = super::after(page.after.as_ref());
        let off = "substr(secret, 1, length(?1)) <> ?1";
        let count = self
            .statement(&format!("SELECT COUNT(*) AS n FROM webhooks WHERE {off}"), &[text(current_prefix)])?;
        let rows = self.statement(
            &format!(
                "SELECT id, project_id, url, status, created_at, secret FROM webhooks
                 WHERE {off} AND (?2 IS NULL OR (created_at, id) < (?2, ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            &[text(current_prefix), ts, id, int(page.fetch_len() as i64)],
        )?;
        let results = self.results(vec![count, rows]).await?;
        let rows = results[1].results::<Row>().map_err(PortError::from_display)?;
        let secrets = rows
            .into_iter()
            .map(|r| SealedSecret {
                id: r.id,
                project_id: r.project_id,
                url: r.url,
                status: r.status,
                created_at: r.created_at,
                secret: StoredSecret::from_column(r.secret),
            })
            .collect();
        Ok((result_count(&results[0])?, secrets))
    }
}
