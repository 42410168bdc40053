//! The [`Directory`] and [`Resources`] ports over D1.

use std::rc::Rc;

use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::core::api_key::KeyRecord;
use crate::core::audit::{AuditRow, DayCount, EndpointCount, LogFilter};
use crate::core::events::EventMessage;
use crate::core::page::{Cursor, PageRequest};
use crate::core::resources::{Contact, Message, ReleaseMarker, Scenario, ScenarioRun};
use crate::core::webhook::{Attempt, Delivery, OutgoingEvent, Webhook, INTERRUPTED_ATTEMPT};
use crate::ports::{
    AuditStore, Directory, EventStore, KeyChanges, KeyUpdate, Meter, PortError, Resources, Revocation,
    RunStart, WebhookStore,
};

pub struct D1Store {
    db: D1Database,
    meter: Rc<Meter>,
}

const KEY_COLUMNS: &str =
    "id, project_id, type, name, plan, rate_limit_per_minute, key_hash, prefix, created_at, revoked_at";

impl D1Store {
    pub fn new(db: D1Database, meter: Rc<Meter>) -> Self {
        Self { db, meter }
    }

    fn statement(&self, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, PortError> {
        self.db.prepare(sql).bind(args).map_err(PortError::from_display)
    }

    async fn rows<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        args: &[JsValue],
    ) -> Result<Vec<T>, PortError> {
        Meter::count(&self.meter.d1_queries);
        let result = self.statement(sql, args)?.all().await.map_err(PortError::from_display)?;
        result.results().map_err(PortError::from_display)
    }

    /// A page of a project's rows, newest first, keyset on `(created_at, id)`.
    async fn newest_first<T: serde::de::DeserializeOwned>(
        &self,
        columns: &str,
        table: &str,
        project_id: &str,
        page: &PageRequest,
    ) -> Result<Vec<T>, PortError> {
        let (ts, id) = after(page.after.as_ref());
        self.rows(
            &format!(
                "SELECT {columns} FROM {table}
                 WHERE project_id = ?1 AND (?2 IS NULL OR (created_at, id) < (?2, ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            &[text(project_id), ts, id, int(page.fetch_len() as i64)],
        )
        .await
    }

    async fn first_key(&self, sql: &str, args: &[JsValue]) -> Result<Option<KeyRecord>, PortError> {
        Ok(self.rows(sql, args).await?.into_iter().next())
    }

    /// Runs statements as one D1 batch (one transaction); answers each statement's changed rows.
    async fn batch(&self, statements: Vec<D1PreparedStatement>) -> Result<Vec<usize>, PortError> {
        Ok(self.batch_with_deliveries(statements, Vec::new()).await?.0)
    }

    /// Runs the statements and then the delivery inserts of their events in one batch; answers the
    /// statements' changed rows and the ids of the deliveries written.
    async fn batch_with_deliveries(
        &self,
        statements: Vec<D1PreparedStatement>,
        deliveries: Vec<D1PreparedStatement>,
    ) -> Result<(Vec<usize>, Vec<String>), PortError> {
        if statements.is_empty() && deliveries.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        Meter::count(&self.meter.d1_queries);
        let split = statements.len();
        let all = statements.into_iter().chain(deliveries).collect();
        let results = self.db.batch(all).await.map_err(PortError::from_display)?;
        let changes = results[..split]
            .iter()
            .map(|r| Ok(r.meta().map_err(PortError::from_display)?.and_then(|m| m.changes).unwrap_or(0)))
            .collect::<Result<Vec<_>, PortError>>()?;
        #[derive(serde::Deserialize)]
        struct Id {
            id: String,
        }
        let mut ids = Vec::new();
        for r in &results[split..] {
            ids.extend(r.results::<Id>().map_err(PortError::from_display)?.into_iter().map(|i| i.id));
        }
        Ok((changes, ids))
    }

    /// One delivery per active subscription of the event's project that wants its type, written
    /// only if the row the event is about exists (so a failed item emits nothing).
    fn delivery_statements(&self, events: &[OutgoingEvent]) -> Result<Vec<D1PreparedStatement>, PortError> {
        events
            .iter()
            .map(|e| {
                let subject_table = match e.event_type {
                    "contact.created" => "contacts",
                    "message.created" => "messages",
                    "scenario.run.started" => "scenario_runs",
                    _ => "release_markers",
                };
                self.statement(
                    &format!(
                        "INSERT INTO webhook_deliveries (id, project_id, webhook_id, event_id, event, payload,
                           request_id, status, attempts, scheduled_at, created_at, updated_at)
                         SELECT 'dlv_' || lower(hex(randomblob(13))), ?1, w.id, ?2, ?3, ?4, ?5, 'pending', 0, ?6, ?6, ?6
                         FROM webhooks w
                         WHERE w.project_id = ?1 AND w.status = 'active'
                           AND EXISTS (SELECT 1 FROM json_each(w.events) WHERE value IN ('*', ?3))
                           AND EXISTS (SELECT 1 FROM {subject_table} WHERE id = ?7)
                         RETURNING id"
                    ),
                    &[
                        text(&e.project_id),
                        text(&e.event_id),
                        text(e.event_type),
                        text(&e.payload),
                        text(&e.request_id),
                        int(e.created_at),
                        text(&e.subject_id),
                    ],
                )
            })
            .collect()
    }

    fn insert_key_statement(&self, key: &KeyRecord) -> Result<D1PreparedStatement, PortError> {
        self.statement(
            &format!("INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
            &[
                text(&key.id),
                text(&key.project_id),
                text(key.key_type.as_str()),
                opt_text(key.name.as_deref()),
                text(&key.plan),
                opt_int(key.rate_limit_per_minute.map(i64::from)),
                text(&key.key_hash),
                text(&key.prefix),
                int(key.created_at),
                opt_int(key.revoked_at),
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

fn opt_int(n: Option<i64>) -> JsValue {
    n.map_or(JsValue::NULL, int)
}

/// The keyset position of a page as the two bound values of `(created_at, id) < (?, ?)`.
fn after(cursor: Option<&Cursor>) -> (JsValue, JsValue) {
    match cursor {
        Some(c) => (int(c.ts), text(&c.id)),
        None => (JsValue::NULL, JsValue::NULL),
    }
}

/// Statements per D1 batch when storing queued events.
const STORE_BATCH: usize = 500;

const CONTACT_COLUMNS: &str = "id, project_id, name, phone, email, external_id, created_at";

impl Directory for D1Store {
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
        Meter::count(&self.meter.d1_queries);
        self.db.batch(vec![project, key]).await.map_err(PortError::from_display)?;
        Ok(())
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<(), PortError> {
        Meter::count(&self.meter.d1_queries);
        self.insert_key_statement(key)?.run().await.map_err(PortError::from_display)?;
        Ok(())
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
        // A field the change leaves out keeps its value: ?3 and ?6 say whether name and override are set.
        let updated = self
            .first_key(
                &format!(
                    "UPDATE api_keys SET
                       name = CASE WHEN ?3 THEN ?4 ELSE name END,
                       plan = COALESCE(?5, plan),
                       rate_limit_per_minute = CASE WHEN ?6 THEN ?7 ELSE rate_limit_per_minute END
                     WHERE id = ?1 AND project_id = ?2 AND revoked_at IS NULL
                     RETURNING {KEY_COLUMNS}"
                ),
                &[
                    text(key_id),
                    text(project_id),
                    int(changes.name.is_some().into()),
                    opt_text(changes.name.clone().flatten().as_deref()),
                    opt_text(changes.plan.as_deref()),
                    int(changes.rate_limit_per_minute.is_some().into()),
                    opt_int(changes.rate_limit_per_minute.flatten().map(i64::from)),
                ],
            )
            .await?;
        if let Some(key) = updated {
            return Ok(KeyUpdate::Updated(key));
        }
        Ok(match self.find_key(project_id, key_id).await? {
            None => KeyUpdate::NotFound,
            Some(_) => KeyUpdate::Revoked,
        })
    }

    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError> {
        // One statement, so the last-owner rule cannot race with another revocation.
        let revoked = self
            .first_key(
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
        if let Some(key) = revoked {
            return Ok(Revocation::Revoked(key));
        }
        Ok(match self.find_key(project_id, key_id).await? {
            None => Revocation::NotFound,
            Some(key) if key.is_revoked() => Revocation::AlreadyRevoked(key),
            Some(_) => Revocation::LastOwnerKey,
        })
    }

    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError> {
        self.first_key(
            &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1 AND project_id = ?2"),
            &[text(key_id), text(project_id)],
        )
        .await
    }

    async fn active_owner_keys(&self, project_id: &str) -> Result<u32, PortError> {
        #[derive(serde::Deserialize)]
        struct Count {
            n: u32,
        }
        let rows: Vec<Count> = self
            .rows(
                "SELECT count(*) AS n FROM api_keys
                 WHERE project_id = ?1 AND type = 'owner' AND revoked_at IS NULL",
                &[text(project_id)],
            )
            .await?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError> {
        self.first_key(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = ?1"), &[text(key_hash)])
            .await
    }
}

impl Resources for D1Store {
    async fn create_contacts(
        &self,
        contacts: &[Contact],
        events: &[OutgoingEvent],
    ) -> Result<Vec<String>, PortError> {
        let statements = contacts
            .iter()
            .map(|c| {
                self.statement(
                    &format!("INSERT INTO contacts ({CONTACT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                    &[
                        text(&c.id),
                        text(&c.project_id),
                        opt_text(c.name.as_deref()),
                        opt_text(c.phone.as_deref()),
                        opt_text(c.email.as_deref()),
                        opt_text(c.external_id.as_deref()),
                        int(c.created_at),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.batch_with_deliveries(statements, self.delivery_statements(events)?).await?.1)
    }

    async fn contact(&self, project_id: &str, id: &str) -> Result<Option<Contact>, PortError> {
        let rows = self
            .rows(
                &format!("SELECT {CONTACT_COLUMNS} FROM contacts WHERE id = ?1 AND project_id = ?2"),
                &[text(id), text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn list_contacts(&self, project_id: &str, page: &PageRequest) -> Result<Vec<Contact>, PortError> {
        self.newest_first(CONTACT_COLUMNS, "contacts", project_id, page).await
    }

    async fn create_messages(
        &self,
        messages: &[Message],
        events: &[OutgoingEvent],
    ) -> Result<(Vec<bool>, Vec<String>), PortError> {
        // Inserts nothing for a contact that is not in the project: the item fails, the rest go on.
        let statements = messages
            .iter()
            .map(|m| {
                self.statement(
                    "INSERT INTO messages (id, project_id, contact_id, text, status, created_at)
                     SELECT ?1, ?2, ?3, ?4, 'queued', ?5
                     WHERE EXISTS (SELECT 1 FROM contacts WHERE id = ?3 AND project_id = ?2)",
                    &[
                        text(&m.id),
                        text(&m.project_id),
                        text(&m.contact_id),
                        text(&m.text),
                        int(m.created_at),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (changes, deliveries) =
            self.batch_with_deliveries(statements, self.delivery_statements(events)?).await?;
        Ok((changes.into_iter().map(|c| c == 1).collect(), deliveries))
    }

    async fn create_scenario(&self, scenario: &Scenario) -> Result<(), PortError> {
        let insert = self.statement(
            "INSERT INTO scenarios (id, project_id, name, created_at) VALUES (?1, ?2, ?3, ?4)",
            &[text(&scenario.id), text(&scenario.project_id), text(&scenario.name), int(scenario.created_at)],
        )?;
        self.batch(vec![insert]).await?;
        Ok(())
    }

    async fn start_run(
        &self,
        run: &ScenarioRun,
        events: &[OutgoingEvent],
    ) -> Result<(RunStart, Vec<String>), PortError> {
        let variables = serde_json::to_string(&run.variables).map_err(PortError::from_display)?;
        let insert = self.statement(
            "INSERT INTO scenario_runs (id, project_id, scenario_id, contact_id, variables, status, created_at)
             SELECT ?1, ?2, ?3, ?4, ?5, 'started', ?6
             WHERE EXISTS (SELECT 1 FROM scenarios WHERE id = ?3 AND project_id = ?2)
               AND EXISTS (SELECT 1 FROM contacts WHERE id = ?4 AND project_id = ?2)",
            &[
                text(&run.id),
                text(&run.project_id),
                text(&run.scenario_id),
                text(&run.contact_id),
                text(&variables),
                int(run.created_at),
            ],
        )?;
        let (changes, deliveries) =
            self.batch_with_deliveries(vec![insert], self.delivery_statements(events)?).await?;
        if changes == [1] {
            return Ok((RunStart::Started, deliveries));
        }
        // Nothing inserted: say which of the two was missing.
        #[derive(serde::Deserialize)]
        struct Found {
            scenario: i64,
        }
        let found: Vec<Found> = self
            .rows(
                "SELECT EXISTS (SELECT 1 FROM scenarios WHERE id = ?1 AND project_id = ?2) AS scenario",
                &[text(&run.scenario_id), text(&run.project_id)],
            )
            .await?;
        let missing = if found.first().is_some_and(|f| f.scenario == 1) {
            RunStart::UnknownContact
        } else {
            RunStart::UnknownScenario
        };
        Ok((missing, Vec::new()))
    }

    async fn create_release_marker(
        &self,
        marker: &ReleaseMarker,
        events: &[OutgoingEvent],
    ) -> Result<Vec<String>, PortError> {
        let insert = self.statement(
            "INSERT INTO release_markers (id, project_id, version, ts, environment, commit_sha, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            &[
                text(&marker.id),
                text(&marker.project_id),
                text(&marker.version),
                text(&marker.ts.to_string()),
                opt_text(marker.environment.as_deref()),
                opt_text(marker.commit.as_deref()),
                int(marker.created_at),
            ],
        )?;
        Ok(self.batch_with_deliveries(vec![insert], self.delivery_statements(events)?).await?.1)
    }
}

impl EventStore for D1Store {
    async fn store_events(&self, messages: &[EventMessage]) -> Result<(), PortError> {
        let statements = messages
            .iter()
            .map(|m| match m {
                EventMessage::Event(e) => self.statement(
                    "INSERT OR IGNORE INTO events (project_id, key_type, event_id, event, anonymous_id, user_id,
                       timestamp, properties, received_at, generated_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    &[
                        text(&e.project_id),
                        text(e.key_type.as_str()),
                        text(&e.event_id),
                        text(&e.event),
                        opt_text(e.anonymous_id.as_deref()),
                        opt_text(e.user_id.as_deref()),
                        opt_text(e.timestamp.as_ref().map(|t| t.to_string()).as_deref()),
                        text(&serde_json::Value::Object(e.properties.clone()).to_string()),
                        int(e.received_at),
                        int(e.generated_id.into()),
                    ],
                ),
                EventMessage::Link { project_id, anonymous_id, user_id, linked_at } => self.statement(
                    "INSERT OR IGNORE INTO identity_links (project_id, anonymous_id, user_id, linked_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    &[text(project_id), text(anonymous_id), text(user_id), int(*linked_at)],
                ),
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Each batch is a transaction; a consumer batch of packed messages can hold many
        // thousands of events, so write them in bounded batches (each insert is idempotent).
        let mut statements = statements.into_iter().peekable();
        while statements.peek().is_some() {
            self.batch(statements.by_ref().take(STORE_BATCH).collect()).await?;
        }
        Ok(())
    }

    async fn store_session_chunk(
        &self,
        project_id: &str,
        session_id: &str,
        chunk: u32,
        data: &str,
        now_ms: i64,
    ) -> Result<bool, PortError> {
        let insert = self.statement(
            "INSERT OR IGNORE INTO replay_chunks (project_id, session_id, chunk, data, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[text(project_id), text(session_id), int(chunk.into()), text(data), int(now_ms)],
        )?;
        Ok(self.batch(vec![insert]).await? == [1])
    }
}

const AUDIT_COLUMNS: &str = "ts, request_id, project_id, key_id, key_prefix, method, path, route, status,
  response_bytes, response_time_ms, ip, user_agent, idempotency_key, replayed, original_request_id,
  rate_limit_remaining, error_code";

impl AuditStore for D1Store {
    async fn insert_audit_rows(&self, rows: &[AuditRow]) -> Result<(), PortError> {
        let statements = rows
            .iter()
            .map(|r| {
                self.statement(
                    &format!(
                        "INSERT OR IGNORE INTO audit_log ({AUDIT_COLUMNS})
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
                    ),
                    &[
                        int(r.ts),
                        text(&r.request_id),
                        opt_text(r.project_id.as_deref()),
                        opt_text(r.key_id.as_deref()),
                        opt_text(r.key_prefix.as_deref()),
                        text(&r.method),
                        text(&r.path),
                        opt_text(r.route.as_deref()),
                        int(r.status.into()),
                        int(r.response_bytes as i64),
                        int(r.response_time_ms),
                        opt_text(r.ip.as_deref()),
                        opt_text(r.user_agent.as_deref()),
                        opt_text(r.idempotency_key.as_deref()),
                        int(r.replayed.into()),
                        opt_text(r.original_request_id.as_deref()),
                        opt_int(r.rate_limit_remaining.map(i64::from)),
                        opt_text(r.error_code.as_deref()),
                    ],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.batch(statements).await?;
        Ok(())
    }

    async fn audit_rows(
        &self,
        project_id: &str,
        filter: &LogFilter,
        page: &PageRequest,
    ) -> Result<Vec<AuditRow>, PortError> {
        // Every filter is bound (NULL = not filtering), so the statement text never varies.
        let (status_min, status_max) = match filter.status.map(|s| s.range()) {
            Some((a, b)) => (int(a.into()), int(b.into())),
            None => (JsValue::NULL, JsValue::NULL),
        };
        let (after_ts, after_id) = after(page.after.as_ref());
        self.rows(
            &format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_log
                 WHERE project_id = ?1
                   AND (?2 IS NULL OR method = ?2)
                   AND (?3 IS NULL OR status BETWEEN ?3 AND ?4)
                   AND (?5 IS NULL OR path LIKE ?5 ESCAPE '\\')
                   AND (?6 IS NULL OR request_id = ?6)
                   AND (?7 IS NULL OR key_id = ?7)
                   AND (?8 IS NULL OR idempotency_key = ?8)
                   AND (?9 IS NULL OR ts >= ?9)
                   AND (?10 IS NULL OR ts <= ?10)
                   AND (?11 IS NULL OR (ts, request_id) < (?11, ?12))
                 ORDER BY ts DESC, request_id DESC LIMIT ?13"
            ),
            &[
                text(project_id),
                opt_text(filter.method.as_deref()),
                status_min,
                status_max,
                opt_text(filter.path_like.as_deref()),
                opt_text(filter.request_id.as_deref()),
                opt_text(filter.key_id.as_deref()),
                opt_text(filter.idempotency_key.as_deref()),
                opt_int(filter.from_ms),
                opt_int(filter.to_ms),
                after_ts,
                after_id,
                int(page.fetch_len() as i64),
            ],
        )
        .await
    }

    async fn key_stats(
        &self,
        project_id: &str,
        key_id: &str,
        since_ms: i64,
    ) -> Result<(Vec<DayCount>, Vec<EndpointCount>), PortError> {
        let args = [text(project_id), text(key_id), int(since_ms)];
        let days = self
            .rows(
                "SELECT date(ts / 1000, 'unixepoch') AS day, count(*) AS total,
                        sum(status BETWEEN 400 AND 499) AS client_errors, sum(status >= 500) AS server_errors
                 FROM audit_log WHERE project_id = ?1 AND key_id = ?2 AND ts >= ?3
                 GROUP BY day ORDER BY day",
                &args,
            )
            .await?;
        let endpoints = self
            .rows(
                "SELECT method, coalesce(route, path) AS route, count(*) AS total, sum(status >= 400) AS errors
                 FROM audit_log WHERE project_id = ?1 AND key_id = ?2 AND ts >= ?3
                 GROUP BY method, coalesce(route, path) ORDER BY total DESC, route LIMIT 10",
                &args,
            )
            .await?;
        Ok((days, endpoints))
    }

    async fn oldest_expired(&self, before_ms: i64) -> Result<Option<(Option<String>, Cursor)>, PortError> {
        #[derive(serde::Deserialize)]
        struct Oldest {
            project_id: Option<String>,
            ts: i64,
            request_id: String,
        }
        let rows: Vec<Oldest> = self
            .rows(
                "SELECT project_id, ts, request_id FROM audit_log WHERE ts < ?1
                 ORDER BY ts, request_id LIMIT 1",
                &[int(before_ms)],
            )
            .await?;
        Ok(rows.into_iter().next().map(|r| (r.project_id, Cursor { ts: r.ts, id: r.request_id })))
    }

    async fn rows_between(
        &self,
        project_id: Option<&str>,
        from: &Cursor,
        to: &Cursor,
        limit: usize,
    ) -> Result<Vec<AuditRow>, PortError> {
        // The plain `ts` bounds let the index start at `from` instead of the day's first row.
        self.rows(
            &format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_log
                 WHERE project_id IS ?1 AND ts >= ?2 AND ts <= ?4
                   AND (ts, request_id) >= (?2, ?3) AND (ts, request_id) < (?4, ?5)
                 ORDER BY ts, request_id LIMIT ?6"
            ),
            &[
                opt_text(project_id),
                int(from.ts),
                text(&from.id),
                int(to.ts),
                text(&to.id),
                int(limit as i64),
            ],
        )
        .await
    }

    async fn delete_archived(
        &self,
        project_id: Option<&str>,
        first: &Cursor,
        last: &Cursor,
        count: usize,
    ) -> Result<usize, PortError> {
        // One statement, so all or nothing; the count guard keeps a row that arrived in the range
        // after the chunk was read (it is not in the object yet).
        const RANGE: &str = "project_id IS ?1 AND ts >= ?2 AND ts <= ?4
            AND (ts, request_id) >= (?2, ?3) AND (ts, request_id) <= (?4, ?5)";
        let delete = self.statement(
            &format!(
                "DELETE FROM audit_log WHERE {RANGE} AND (SELECT count(*) FROM audit_log WHERE {RANGE}) = ?6"
            ),
            &[
                opt_text(project_id),
                int(first.ts),
                text(&first.id),
                int(last.ts),
                text(&last.id),
                int(count as i64),
            ],
        )?;
        Ok(self.batch(vec![delete]).await?.first().copied().unwrap_or(0))
    }
}

const WEBHOOK_COLUMNS: &str = "id, project_id, url, events, secret, status, disabled_reason, created_at";
const DELIVERY_COLUMNS: &str =
    "id, project_id, webhook_id, event_id, event, payload, request_id, status, attempts,
  scheduled_at, last_response_code, last_error, created_at, updated_at";

/// A subscription as SQLite returns it (`events` is JSON text).
#[derive(serde::Deserialize)]
struct WebhookRecord {
    id: String,
    project_id: String,
    url: String,
    events: String,
    secret: String,
    status: String,
    disabled_reason: Option<String>,
    created_at: i64,
}

impl WebhookRecord {
    fn into_webhook(self) -> Result<Webhook, PortError> {
        Ok(Webhook {
            events: serde_json::from_str(&self.events).map_err(PortError::from_display)?,
            id: self.id,
            project_id: self.project_id,
            url: self.url,
            secret: self.secret,
            status: self.status,
            disabled_reason: self.disabled_reason,
            created_at: self.created_at,
        })
    }
}

impl D1Store {
    async fn webhook_rows(&self, sql: &str, args: &[JsValue]) -> Result<Vec<Webhook>, PortError> {
        let rows: Vec<WebhookRecord> = self.rows(sql, args).await?;
        rows.into_iter().map(WebhookRecord::into_webhook).collect()
    }

    async fn attempts_of(&self, delivery_ids: &[String]) -> Result<Vec<Attempt>, PortError> {
        if delivery_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(delivery_ids).map_err(PortError::from_display)?;
        self.rows(
            "SELECT * FROM webhook_attempts WHERE delivery_id IN (SELECT value FROM json_each(?1))
             ORDER BY delivery_id, attempt",
            &[text(&ids)],
        )
        .await
    }
}

impl WebhookStore for D1Store {
    async fn create_webhook(&self, w: &Webhook) -> Result<(), PortError> {
        let events = serde_json::to_string(&w.events).map_err(PortError::from_display)?;
        let insert = self.statement(
            &format!("INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
            &[
                text(&w.id),
                text(&w.project_id),
                text(&w.url),
                text(&events),
                text(&w.secret),
                text(&w.status),
                opt_text(w.disabled_reason.as_deref()),
                int(w.created_at),
            ],
        )?;
        self.batch(vec![insert]).await?;
        Ok(())
    }

    async fn webhooks(&self, project_id: &str) -> Result<Vec<Webhook>, PortError> {
        self.webhook_rows(
            &format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE project_id = ?1 AND status <> 'deleted'
                 ORDER BY created_at DESC, id DESC"
            ),
            &[text(project_id)],
        )
        .await
    }

    async fn webhook(&self, project_id: &str, id: &str) -> Result<Option<Webhook>, PortError> {
        let rows = self
            .webhook_rows(
                &format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted'"
                ),
                &[text(id), text(project_id)],
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn delete_webhook(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        let args = [text(id), text(project_id), int(now_ms)];
        let delete = self.statement(
            "UPDATE webhooks SET status = 'deleted' WHERE id = ?1 AND project_id = ?2 AND status <> 'deleted'",
            &args[..2],
        )?;
        let fail_pending = self.statement(
            "UPDATE webhook_deliveries SET status = 'failed', last_error = 'subscription deleted',
               retry_requested = 0, updated_at = ?3
             WHERE webhook_id = ?1 AND project_id = ?2 AND status = 'pending'",
            &args,
        )?;
        Ok(self.batch(vec![delete, fail_pending]).await?.first() == Some(&1))
    }

    async fn deliveries(
        &self,
        webhook_id: &str,
        status: Option<&str>,
        page: &PageRequest,
    ) -> Result<(Vec<Delivery>, Vec<Attempt>), PortError> {
        let (ts, id) = after(page.after.as_ref());
        let deliveries: Vec<Delivery> = self
            .rows(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                     WHERE webhook_id = ?1 AND (?2 IS NULL OR status = ?2)
                       AND (?3 IS NULL OR (created_at, id) < (?3, ?4))
                     ORDER BY created_at DESC, id DESC LIMIT ?5"
                ),
                &[text(webhook_id), opt_text(status), ts, id, int(page.fetch_len() as i64)],
            )
            .await?;
        let ids: Vec<String> = deliveries.iter().map(|d| d.id.clone()).collect();
        Ok((deliveries, self.attempts_of(&ids).await?))
    }

    async fn delivery(
        &self,
        project_id: &str,
        id: &str,
    ) -> Result<Option<(Delivery, Vec<Attempt>)>, PortError> {
        let rows: Vec<Delivery> = self
            .rows(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = ?1 AND project_id = ?2"
                ),
                &[text(id), text(project_id)],
            )
            .await?;
        match rows.into_iter().next() {
            Some(d) => {
                let attempts = self.attempts_of(std::slice::from_ref(&d.id)).await?;
                Ok(Some((d, attempts)))
            }
            None => Ok(None),
        }
    }

    async fn reschedule(&self, project_id: &str, id: &str, now_ms: i64) -> Result<bool, PortError> {
        // The hold (`locked_until`) is left alone: an attempt in flight sees `retry_requested`.
        let update = self.statement(
            "UPDATE webhook_deliveries SET status = 'pending', scheduled_at = ?3, updated_at = ?3,
               retry_requested = CASE WHEN locked_until >= ?3 THEN 1 ELSE 0 END
             WHERE id = ?1 AND project_id = ?2",
            &[text(id), text(project_id), int(now_ms)],
        )?;
        Ok(self.batch(vec![update]).await? == [1])
    }

    async fn take_delivery(
        &self,
        id: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<(Delivery, Webhook)>, PortError> {
        const TAKEABLE: &str = "id = ?1 AND status = 'pending' AND scheduled_at <= ?2
            AND (locked_until IS NULL OR locked_until < ?2)";
        let args = [text(id), int(now_ms), int(until_ms)];
        let statements = vec![
            // An earlier attempt whose hold ran out unrecorded: its number gets a row saying so.
            self.statement(
                &format!(
                    "INSERT OR IGNORE INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, error)
                     SELECT id, attempts, attempt_started_at, locked_until - attempt_started_at, ?3
                     FROM webhook_deliveries
                     WHERE {TAKEABLE} AND locked_until IS NOT NULL AND attempts > 0
                       AND attempt_started_at IS NOT NULL"
                ),
                &[text(id), int(now_ms), text(INTERRUPTED_ATTEMPT)],
            )?,
            // A subscription deleted or disabled since: the delivery fails, with no attempt.
            self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET status = 'failed', locked_until = NULL, retry_requested = 0,
                       last_error = 'subscription ' || (SELECT w.status FROM webhooks w WHERE w.id = webhook_id),
                       updated_at = ?2
                     WHERE {TAKEABLE}
                       AND (SELECT w.status FROM webhooks w WHERE w.id = webhook_id) <> 'active'"
                ),
                &args[..2],
            )?,
            // The take: a hold, and the next attempt number, in one statement.
            self.statement(
                &format!(
                    "UPDATE webhook_deliveries SET attempts = attempts + 1, locked_until = ?3,
                       attempt_started_at = ?2, retry_requested = 0
                     WHERE {TAKEABLE}
                     RETURNING {DELIVERY_COLUMNS}"
                ),
                &args,
            )?,
            self.statement(
                &format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                     WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1)"
                ),
                &args[..1],
            )?,
        ];
        Meter::count(&self.meter.d1_queries);
        let results = self.db.batch(statements).await.map_err(PortError::from_display)?;
        let taken: Vec<Delivery> = results[2].results().map_err(PortError::from_display)?;
        let Some(delivery) = taken.into_iter().next() else { return Ok(None) };
        let hooks: Vec<WebhookRecord> = results[3].results().map_err(PortError::from_display)?;
        match hooks.into_iter().next() {
            Some(hook) => Ok(Some((delivery, hook.into_webhook()?))),
            None => Err(PortError(format!("delivery {id} has no subscription"))),
        }
    }

    async fn record_attempt(
        &self,
        a: &Attempt,
        status: &str,
        disable_subscription: bool,
    ) -> Result<Option<i64>, PortError> {
        let now = a.started_at + a.duration_ms;
        let mut statements = vec![
            // A real outcome replaces an "interrupted" row written after this attempt's hold ran out.
            self.statement(
                "INSERT OR REPLACE INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms,
                   response_code, response_excerpt, error, next_retry_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                &[
                    text(&a.delivery_id),
                    int(a.attempt.into()),
                    int(a.started_at),
                    int(a.duration_ms),
                    opt_int(a.response_code.map(i64::from)),
                    opt_text(a.response_excerpt.as_deref()),
                    opt_text(a.error.as_deref()),
                    opt_int(a.next_retry_at),
                ],
            )?,
            // Only while this attempt holds the delivery and it is pending (a subscription deleted
            // meanwhile wins); a manual retry requested meanwhile makes it due now.
            self.statement(
                "UPDATE webhook_deliveries SET
                   status = CASE WHEN retry_requested = 1 AND ?2 = 'failed' THEN 'pending' ELSE ?2 END,
                   scheduled_at = CASE WHEN retry_requested = 1 AND ?2 <> 'delivered' THEN ?7
                                       ELSE coalesce(?4, scheduled_at) END,
                   locked_until = NULL, retry_requested = 0, last_response_code = ?5, last_error = ?6,
                   updated_at = ?7
                 WHERE id = ?1 AND attempts = ?3 AND status = 'pending' AND locked_until IS NOT NULL",
                &[
                    text(&a.delivery_id),
                    text(status),
                    int(a.attempt.into()),
                    opt_int(a.next_retry_at),
                    opt_int(a.response_code.map(i64::from)),
                    opt_text(a.error.as_deref()),
                    int(now),
                ],
            )?,
        ];
        if disable_subscription {
            let args = [text(&a.delivery_id), int(now)];
            statements.push(self.statement(
                "UPDATE webhooks SET status = 'disabled', disabled_reason = 'the receiver answered 410 Gone'
                 WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1) AND status = 'active'",
                &args[..1],
            )?);
            statements.push(self.statement(
                "UPDATE webhook_deliveries SET status = 'failed', retry_requested = 0,
                   last_error = 'the subscription was disabled (410 Gone)', updated_at = ?2
                 WHERE webhook_id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?1) AND status = 'pending'",
                &args,
            )?);
        }
        statements.push(self.statement(
            "SELECT scheduled_at FROM webhook_deliveries
             WHERE id = ?1 AND status = 'pending' AND locked_until IS NULL",
            &[text(&a.delivery_id)],
        )?);
        Meter::count(&self.meter.d1_queries);
        let results = self.db.batch(statements).await.map_err(PortError::from_display)?;
        #[derive(serde::Deserialize)]
        struct Due {
            scheduled_at: i64,
        }
        let due: Vec<Due> =
            results.last().map_or(Ok(Vec::new()), |r| r.results()).map_err(PortError::from_display)?;
        Ok(due.first().map(|d| d.scheduled_at))
    }

    async fn overdue_deliveries(
        &self,
        due_before_ms: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<String>, PortError> {
        #[derive(serde::Deserialize)]
        struct Id {
            id: String,
        }
        let rows: Vec<Id> = self
            .rows(
                "SELECT id FROM webhook_deliveries
                 WHERE status = 'pending' AND scheduled_at <= ?1 AND (locked_until IS NULL OR locked_until < ?2)
                 ORDER BY scheduled_at LIMIT ?3",
                &[int(due_before_ms), int(now_ms), int(limit as i64)],
            )
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }
}
