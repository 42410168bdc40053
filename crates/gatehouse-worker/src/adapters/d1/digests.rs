//! The audit digests' bookkeeping (SPEC §22): the [`DigestStore`] port. Which project is due is
//! in the main database (`projects.digest_next`); a project's digests and which of its objects
//! they list are in its audit database, beside `audit_objects`.

use super::{int, text, D1Store};
use gatehouse_core::ports::{DigestRecord, DigestStore, PortError, UndigestedObject};

impl DigestStore for D1Store {
    async fn projects_due_for_digest(
        &self,
        period_ms: i64,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, PortError> {
        #[derive(serde::Deserialize)]
        struct Due {
            id: String,
            start: i64,
        }
        let due: Vec<Due> = self
            .rows(
                "SELECT id, coalesce(digest_next, created_at - created_at % ?1) AS start FROM projects
                 WHERE coalesce(digest_next, created_at - created_at % ?1) + ?1 <= ?2
                 ORDER BY start, id LIMIT ?3",
                &[int(period_ms), int(cutoff_ms), int(limit as i64)],
            )
            .await?;
        Ok(due.into_iter().map(|d| (d.id, d.start)).collect())
    }

    async fn hot_rows_before(&self, project_id: &str, before_ms: i64) -> Result<bool, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let ids = log
            .ids(
                "SELECT request_id AS id FROM audit_log WHERE project_id = ?1 AND ts < ?2 LIMIT 1",
                &[text(project_id), int(before_ms)],
            )
            .await?;
        Ok(!ids.is_empty())
    }

    async fn last_digest(&self, project_id: &str) -> Result<Option<DigestRecord>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let rows: Vec<DigestRecord> = log
            .rows(
                "SELECT period_start, key, sha256, objects FROM audit_digests WHERE project_id = ?1
                 ORDER BY period_start DESC LIMIT 1",
                &[text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn undigested_objects(
        &self,
        project_id: &str,
        before_ms: i64,
    ) -> Result<Vec<UndigestedObject>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        log.rows(
            "SELECT key, json_extract(summary, '$.sha256') AS sha256, rows, first_id, last_id FROM audit_objects
             WHERE project_id = ?1 AND digest_period IS NULL AND first_ts < ?2 ORDER BY key",
            &[text(project_id), int(before_ms)],
        )
        .await
    }

    async fn record_digest(
        &self,
        project_id: &str,
        digest: &DigestRecord,
        objects: &[String],
        made_at: i64,
        next_start: i64,
    ) -> Result<(), PortError> {
        let log = self.log_of(Some(project_id)).await?;
        let keys = serde_json::to_string(objects).map_err(PortError::from_display)?;
        let statements = vec![
            log.statement(
                "INSERT OR REPLACE INTO audit_digests (project_id, period_start, key, sha256, objects, made_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                &[
                    text(project_id),
                    int(digest.period_start),
                    text(&digest.key),
                    text(&digest.sha256),
                    int(digest.objects.into()),
                    int(made_at),
                ],
            )?,
            log.statement(
                "UPDATE audit_objects SET digest_period = ?2
                 WHERE key IN (SELECT value FROM json_each(?1)) AND digest_period IS NULL",
                &[text(&keys), int(digest.period_start)],
            )?,
        ];
        log.batch(statements).await?;
        self.batch(vec![self.statement(
            "UPDATE projects SET digest_next = ?2 WHERE id = ?1",
            &[text(project_id), int(next_start)],
        )?])
        .await
        .map(drop)
    }

    async fn digests(
        &self,
        project_id: &str,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<DigestRecord>, PortError> {
        let log = self.log_of(Some(project_id)).await?;
        log.rows(
            "SELECT period_start, key, sha256, objects FROM audit_digests
             WHERE project_id = ?1 AND period_start >= ?2 AND period_start < ?3 ORDER BY period_start LIMIT ?4",
            &[text(project_id), int(from_ms), int(to_ms), int(limit as i64)],
        )
        .await
    }
}
