//! The [`WakeStore`] port over the main database (`object_wake`, SPEC §23): the lists are read by
//! their unique columns (a key's hash, a project's or identity's id), a page after the last.

use super::{int, opt_text, text, D1Store};
use gatehouse_core::ports::{PortError, WakeEntry, WakeList, WakeState, WakeStore};

#[derive(serde::Deserialize)]
struct StateRow {
    state: String,
}

impl WakeStore for D1Store {
    async fn wake_state(&self) -> Result<WakeState, PortError> {
        let rows: Vec<StateRow> = self.rows("SELECT state FROM object_wake WHERE id = 1", &[]).await?;
        match rows.into_iter().next() {
            Some(row) => serde_json::from_str(&row.state).map_err(PortError::from_display),
            None => Ok(WakeState::default()),
        }
    }

    async fn wake_next(&self, at: &WakeState, limit: usize) -> Result<Vec<WakeEntry>, PortError> {
        let Some(list) = at.list else { return Ok(Vec::new()) };
        let (column, claim_shards, table) = match list {
            // A re-hashed key (SPEC §26) is listed by its new hash, whose object only points to its
            // guard: that guard was called by the request that re-hashed it, and purged then.
            WakeList::Keys => ("key_hash", "claim_shards", "api_keys"),
            WakeList::Projects => ("id", "1", "projects"),
            WakeList::Identities => ("id", "1", "identities"),
        };
        self.rows(
            &format!(
                "SELECT {column} AS id, {claim_shards} AS claim_shards FROM {table}
                 WHERE (?1 IS NULL OR {column} > ?1) AND created_at < ?3 ORDER BY {column} LIMIT ?2"
            ),
            &[opt_text(at.after.as_deref()), int(limit as i64), int(at.before)],
        )
        .await
    }

    async fn save_wake(&self, state: &WakeState) -> Result<(), PortError> {
        let json = serde_json::to_string(state).map_err(PortError::from_display)?;
        self.rows::<StateRow>(
            "INSERT INTO object_wake (id, state) VALUES (1, ?1)
             ON CONFLICT (id) DO UPDATE SET state = excluded.state RETURNING state",
            &[text(&json)],
        )
        .await
        .map(drop)
    }
}
