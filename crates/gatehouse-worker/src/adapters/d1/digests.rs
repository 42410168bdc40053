//! The audit digests' bookkeeping (SPEC §22, §23): the [`DigestStore`] port. Which projects have
//! work is read from their audit databases (`digest_due`, which the roll-up writes); a project's digests and
//! which of its objects they list are kept there too, beside `audit_objects`; the main database
//! keeps each project's first period (`projects.digest_next`) and the alerts (`audit_alerts`).

use super::{int, text, AuditLogs, D1Store};
use gatehouse_core::ports::{
    ChainStart, DigestDue, DigestHealth, DigestRecord, DigestStore, DigestWritten, DigestsOf, PortError,
    Settled, UndigestedObject,
};

impl D1Store {
    /// Every audit database bound (this one, when it keeps its own).
    fn audit_databases(&self) -> Vec<&D1Store> {
        match &self.audit {
            AuditLogs::Own => vec![self],
            AuditLogs::Placed(logs) => logs.iter().collect(),
        }
    }

    /// `projects` by the audit database that keeps each.
    async fn by_database<'a>(
        &self,
        projects: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<(&D1Store, Vec<&'a str>)>, PortError> {
        let projects: Vec<&str> = projects.collect();
        let placed = self.placed(&projects).await?;
        let mut groups: Vec<(u8, Vec<&str>)> = Vec::new();
        for p in projects {
            let index = placed.get(p).copied().unwrap_or(0);
            match groups.iter_mut().find(|(i, _)| *i == index) {
                Some((_, group)) => group.push(p),
                None => groups.push((index, vec![p])),
            }
        }
        let mut out = Vec::new();
        for (index, group) in groups {
            let log = match &self.audit {
                AuditLogs::Own => self,
                AuditLogs::Placed(logs) => Self::audit_log(logs, index)?,
            };
            out.push((log, group));
        }
        Ok(out)
    }
}

impl DigestStore for D1Store {
    async fn projects_due_for_digest(
        &self,
        period_ms: i64,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<DigestDue>, PortError> {
        #[derive(serde::Deserialize)]
        struct Behind {
            project_id: String,
            oldest: i64,
        }
        #[derive(serde::Deserialize)]
        struct First {
            id: String,
            first_period: i64,
        }
        let mut behind = Vec::new();
        for log in self.audit_databases() {
            let found: Vec<Behind> = log
                .rows(
                    "SELECT project_id, since AS oldest FROM digest_due WHERE since < ?1 ORDER BY since LIMIT ?2",
                    &[int(before_ms), int(limit as i64)],
                )
                .await?;
            behind.extend(found);
        }
        behind.sort_by(|a, b| (a.oldest, &a.project_id).cmp(&(b.oldest, &b.project_id)));
        behind.truncate(limit);
        if behind.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = behind.iter().map(|b| b.project_id.as_str()).collect();
        let firsts: Vec<First> = self
            .rows(
                "SELECT id, coalesce(digest_next, created_at - created_at % ?1) AS first_period FROM projects
                 WHERE id IN (SELECT value FROM json_each(?2))",
                &[int(period_ms), text(&serde_json::to_string(&ids).map_err(PortError::from_display)?)],
            )
            .await?;
        Ok(behind
            .into_iter()
            .map(|b| {
                let known = firsts.iter().find(|f| f.id == b.project_id).map(|f| f.first_period);
                // A project no longer in D1: its chain starts with its oldest object's period.
                let first_period = known.unwrap_or(b.oldest - b.oldest.rem_euclid(period_ms));
                DigestDue { project_id: b.project_id, first_period }
            })
            .collect())
    }

    async fn projects_waiting(&self, projects: &[String], before_ms: i64) -> Result<Vec<String>, PortError> {
        let mut waiting = Vec::new();
        for (log, group) in self.by_database(projects.iter().map(String::as_str)).await? {
            let ids = serde_json::to_string(&group).map_err(PortError::from_display)?;
            waiting.extend(
                log.ids(
                    "SELECT p.value AS id FROM json_each(?1) p
                     WHERE EXISTS (SELECT 1 FROM audit_log WHERE project_id = p.value AND ts < ?2)",
                    &[text(&ids), int(before_ms)],
                )
                .await?,
            );
        }
        Ok(waiting)
    }

    async fn chain_starts(&self, projects: &[String]) -> Result<Vec<ChainStart>, PortError> {
        let mut starts: Vec<ChainStart> =
            projects.iter().map(|p| ChainStart { project_id: p.clone(), ..Default::default() }).collect();
        for (log, group) in self.by_database(projects.iter().map(String::as_str)).await? {
            let ids = text(&serde_json::to_string(&group).map_err(PortError::from_display)?);
            let lasts: Vec<DigestRecord> = log
                .rows(
                    "SELECT d.project_id, d.period_start, d.period_end, d.key, d.sha256, d.objects
                     FROM json_each(?1) p JOIN audit_digests d ON d.project_id = p.value
                     WHERE d.period_start = (SELECT max(period_start) FROM audit_digests WHERE project_id = p.value)",
                    std::slice::from_ref(&ids),
                )
                .await?;
            let objects: Vec<UndigestedObject> = log
                .rows(
                    "SELECT o.project_id, o.key, json_extract(o.summary, '$.sha256') AS sha256, o.rows, o.first_id,
                            o.last_id, o.first_ts
                     FROM json_each(?1) p JOIN audit_objects o ON o.project_id = p.value AND o.digest_period IS NULL
                     ORDER BY o.first_ts",
                    &[ids],
                )
                .await?;
            for start in starts.iter_mut() {
                start.last = lasts
                    .iter()
                    .find(|d| d.project_id.as_ref() == Some(&start.project_id))
                    .cloned()
                    .or(start.last.take());
                start.objects.extend(objects.iter().filter(|o| o.project_id == start.project_id).cloned());
            }
        }
        Ok(starts)
    }

    async fn record_digests(&self, digests: &[DigestWritten]) -> Result<(), PortError> {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            project_id: &'a str,
            period_start: i64,
            period_end: i64,
            key: &'a str,
            sha256: &'a str,
            objects: u32,
            made_at: i64,
            listed: &'a [String],
        }
        for (log, group) in self.by_database(digests.iter().map(|d| d.project_id.as_str())).await? {
            let rows: Vec<Row<'_>> = digests
                .iter()
                .filter(|d| group.contains(&d.project_id.as_str()))
                .map(|d| Row {
                    project_id: &d.project_id,
                    period_start: d.record.period_start,
                    period_end: d.record.period_end,
                    key: &d.record.key,
                    sha256: &d.record.sha256,
                    objects: d.record.objects,
                    made_at: d.made_at,
                    listed: &d.listed,
                })
                .collect();
            // A few statements over JSON for the whole lot (a statement per digest runs D1 out of
            // memory at a few hundred digests), in parts well inside D1's 2 MB per value.
            let mut statements = Vec::new();
            for part in json_parts(&rows)? {
                statements.push(log.statement(
                    "INSERT OR REPLACE INTO audit_digests (project_id, period_start, period_end, key, sha256, objects, made_at)
                     SELECT value ->> '$.project_id', value ->> '$.period_start', value ->> '$.period_end',
                            value ->> '$.key', value ->> '$.sha256', value ->> '$.objects', value ->> '$.made_at'
                     FROM json_each(?1)",
                    std::slice::from_ref(&part),
                )?);
                statements.push(log.statement(
                    "UPDATE audit_objects SET digest_period = m.period
                     FROM (SELECT l.value AS key, d.value ->> '$.period_start' AS period
                           FROM json_each(?1) d, json_each(d.value, '$.listed') l) m
                     WHERE audit_objects.key = m.key AND audit_objects.digest_period IS NULL",
                    &[part],
                )?);
            }
            log.batch(statements).await?;
        }
        Ok(())
    }

    async fn settle_digests(
        &self,
        settled: &[Settled],
        alerts: &[(String, String)],
        now_ms: i64,
    ) -> Result<(), PortError> {
        #[derive(serde::Serialize)]
        struct Row<'a> {
            project_id: &'a str,
            covered_to: i64,
            since: Option<i64>,
        }
        let rows = |group: &[&str]| -> Vec<Row<'_>> {
            settled
                .iter()
                .filter(|s| group.contains(&s.project_id.as_str()))
                .map(|s| Row {
                    project_id: &s.project_id,
                    covered_to: s.covered_to,
                    since: s.oldest_pending_ts,
                })
                .collect()
        };
        for (log, group) in self.by_database(settled.iter().map(|s| s.project_id.as_str())).await? {
            let mut statements = Vec::new();
            for part in json_parts(&rows(&group))? {
                statements.push(log.statement(
                    "DELETE FROM digest_due WHERE project_id IN
                       (SELECT value ->> '$.project_id' FROM json_each(?1) WHERE value ->> '$.since' IS NULL)",
                    std::slice::from_ref(&part),
                )?);
                statements.push(log.statement(
                    "INSERT OR REPLACE INTO digest_due (project_id, since)
                     SELECT value ->> '$.project_id', value ->> '$.since' FROM json_each(?1)
                     WHERE value ->> '$.since' IS NOT NULL",
                    &[part],
                )?);
            }
            log.batch(statements).await?;
        }
        let all: Vec<&str> = settled.iter().map(|s| s.project_id.as_str()).collect();
        let mut statements = Vec::new();
        for part in json_parts(&rows(&all))? {
            statements.push(self.statement(
                "UPDATE projects SET digest_next = max(coalesce(digest_next, 0), m.covered_to)
                 FROM (SELECT value ->> '$.project_id' AS id, value ->> '$.covered_to' AS covered_to FROM json_each(?1)) m
                 WHERE projects.id = m.id",
                std::slice::from_ref(&part),
            )?);
            statements.push(self.statement(
                "DELETE FROM audit_alerts WHERE project_id IN (SELECT value ->> '$.project_id' FROM json_each(?1))",
                &[part],
            )?);
        }
        for part in json_parts(alerts)? {
            statements.push(self.statement(
                "INSERT OR REPLACE INTO audit_alerts (project_id, at, alert)
                 SELECT value ->> 0, ?2, value ->> 1 FROM json_each(?1)",
                &[part, int(now_ms)],
            )?);
        }
        self.batch(statements).await.map(drop)
    }

    async fn digest_health(&self, before_ms: i64) -> Result<DigestHealth, PortError> {
        #[derive(serde::Deserialize)]
        struct Behind {
            projects: u64,
            oldest: Option<i64>,
        }
        #[derive(serde::Deserialize)]
        struct Alert {
            project_id: String,
            at: i64,
            alert: String,
        }
        let mut health = DigestHealth::default();
        for log in self.audit_databases() {
            let rows: Vec<Behind> = log
                .rows(
                    "SELECT count(*) AS projects, min(since) AS oldest FROM digest_due WHERE since < ?1",
                    &[int(before_ms)],
                )
                .await?;
            for b in rows {
                health.projects_behind += b.projects;
                health.oldest_undigested_ts = health.oldest_undigested_ts.into_iter().chain(b.oldest).min();
            }
        }
        let alerts: Vec<Alert> = self
            .rows("SELECT project_id, at, alert FROM audit_alerts ORDER BY at DESC LIMIT 100", &[])
            .await?;
        health.alerts = alerts.into_iter().map(|a| (a.project_id, a.at, a.alert)).collect();
        Ok(health)
    }

    async fn digests(&self, of: DigestsOf<'_>) -> Result<Vec<DigestRecord>, PortError> {
        let DigestsOf { project_id, from_ms, to_ms, limit } = of;
        let log = self.log_of(Some(project_id)).await?;
        log.rows(
            "SELECT period_start, period_end, key, sha256, objects FROM audit_digests
             WHERE project_id = ?1 AND period_end > ?2 AND period_start < ?3 ORDER BY period_start LIMIT ?4",
            &[text(project_id), int(from_ms), int(to_ms), int(limit as i64)],
        )
        .await
    }
}

/// `items` as JSON arrays of at most 200 each (one statement's parameter, well inside D1's 2 MB
/// per value: a digest's record with its listed keys is a few KB at most).
fn json_parts<T: serde::Serialize>(items: &[T]) -> Result<Vec<wasm_bindgen::JsValue>, PortError> {
    items
        .chunks(200)
        .map(|part| serde_json::to_string(part).map(|json| text(&json)).map_err(PortError::from_display))
        .collect()
}
