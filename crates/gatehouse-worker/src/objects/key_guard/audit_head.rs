//! A project's chain of audit digests (SPEC §23, `core::audit_chain`), in its own object
//! (`audit:{project}`): the head (`audit_head`, one row: the newest digest, its file and what it
//! lists) and the objects the roll-up bound that no digest lists yet (`audit_bound`). A bound
//! object is kept until a digest lists it (about an hour and a half with the defaults; without
//! `AUDIT_SIGNING_KEY` until one is set: one row of about 250 bytes per archived hour); the head is
//! one row, replaced by each digest. These objects hold these two tables only (not every role's):
//! there is one per project, and a small schema is what keeps thousands of them cheap.

use serde::Deserialize;
use worker::Result;

use super::{from_json, rust_error, KeyGuardObject};
use gatehouse_core::audit_chain::{
    may_advance, AdoptHead, AdvanceHead, Advanced, BindObjects, BoundObject, ChainHead, HeadState,
};
use gatehouse_core::guard::protocol::Done;

pub(super) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), head TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_bound (key TEXT PRIMARY KEY, first_ts INTEGER NOT NULL, object TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_bound_by_time ON audit_bound (first_ts)",
];

impl KeyGuardObject {
    /// Whether this object holds a chain (its tables exist), created first when `create`.
    fn has_chain(&self, create: bool) -> Result<bool> {
        if self.chain_tables.get() {
            return Ok(true);
        }
        if create {
            for ddl in TABLES {
                self.sql.exec(ddl, None)?;
            }
        } else {
            #[derive(Deserialize)]
            struct Found {
                found: u32,
            }
            let found = self
                .sql
                .exec("SELECT count(*) AS found FROM sqlite_master WHERE type = 'table' AND name = 'audit_head'", None)?
                .to_array::<Found>()?;
            if found.first().is_none_or(|f| f.found == 0) {
                return Ok(false);
            }
        }
        self.chain_tables.set(true);
        Ok(true)
    }

    pub(super) fn bind_objects(&self, c: BindObjects) -> Result<Done> {
        self.has_chain(true)?;
        self.keep_bound(&c.objects, "REPLACE")?;
        Ok(Done {})
    }

    /// Keeps `objects` as bound; one bound already is replaced or kept, as `on_conflict` says
    /// (`REPLACE`: an object the roll-up wrote again; `IGNORE`: adoption keeps what was bound).
    fn keep_bound(&self, objects: &[BoundObject], on_conflict: &str) -> Result<()> {
        for o in objects {
            self.sql.exec(
                &format!("INSERT OR {on_conflict} INTO audit_bound (key, first_ts, object) VALUES (?, ?, ?)"),
                vec![
                    o.key.clone().into(),
                    o.first_ts.into(),
                    serde_json::to_string(o).map_err(rust_error)?.into(),
                ],
            )?;
        }
        Ok(())
    }

    pub(super) fn read_head(&self, objects: usize) -> Result<HeadState> {
        if !self.has_chain(false)? {
            return Ok(HeadState::default());
        }
        #[derive(Deserialize)]
        struct Pending {
            pending: u64,
            oldest: Option<i64>,
        }
        #[derive(Deserialize)]
        struct Bound {
            object: String,
        }
        let head = self.head()?;
        let Pending { pending, oldest } = self
            .sql
            .exec("SELECT count(*) AS pending, min(first_ts) AS oldest FROM audit_bound", None)?
            .to_array::<Pending>()?
            .pop()
            .unwrap_or(Pending { pending: 0, oldest: None });
        let objects = self
            .sql
            .exec(
                "SELECT object FROM audit_bound ORDER BY first_ts, key LIMIT ?",
                vec![(objects.min(100_000) as i64).into()],
            )?
            .to_array::<Bound>()?
            .into_iter()
            .map(|b| from_json::<BoundObject>(&b.object))
            .collect::<Result<Vec<_>>>()?;
        Ok(HeadState { head, pending, oldest_pending_ts: oldest, objects })
    }

    /// Starts the chain at `c.head` with `c.objects` bound, unless it started already.
    pub(super) fn adopt_head(&self, c: AdoptHead) -> Result<HeadState> {
        self.has_chain(true)?;
        if self.head()?.is_none() {
            self.write_head(&c.head)?;
            self.keep_bound(&c.objects, "IGNORE")?;
        }
        self.read_head(usize::MAX)
    }

    pub(super) fn advance_head(&self, c: AdvanceHead) -> Result<Advanced> {
        let head = match self.has_chain(false)? {
            true => self.head()?,
            false => None,
        };
        if !may_advance(head.as_ref(), &c) {
            return Ok(Advanced::Conflict { head });
        }
        for key in c.digests.iter().flat_map(|d| &d.listed) {
            self.sql.exec("DELETE FROM audit_bound WHERE key = ?", vec![key.clone().into()])?;
        }
        if let Some(head) = c.digests.last() {
            self.write_head(head)?;
        }
        Ok(Advanced::Moved)
    }

    fn head(&self) -> Result<Option<ChainHead>> {
        #[derive(Deserialize)]
        struct Row {
            head: String,
        }
        match self.sql.exec("SELECT head FROM audit_head WHERE id = 1", None)?.to_array::<Row>()?.pop() {
            Some(row) => from_json(&row.head).map(Some),
            None => Ok(None),
        }
    }

    fn write_head(&self, head: &ChainHead) -> Result<()> {
        self.sql.exec(
            "INSERT OR REPLACE INTO audit_head (id, head) VALUES (1, ?)",
            vec![serde_json::to_string(head).map_err(rust_error)?.into()],
        )?;
        Ok(())
    }
}
