//! A project's chain of audit digests (SPEC §23, `core::audit_chain`), in its own object
//! (`audit:{project}`): the head (`audit_head`, one row: the newest digest, its file and what it
//! lists) and the objects the roll-up bound that no digest lists yet (`audit_bound`). A bound
//! object is kept until a digest lists it (about an hour and a half with the defaults; without
//! `AUDIT_SIGNING_KEY` until one is set: one row of about 250 bytes per archived hour); the head is
//! one row, replaced by each digest. A put the roll-up announced is kept (`audit_writing`) until
//! it confirms it (then bound) or a digest lists the key; a write refused
//! (`core::audit_chain::may_bind`) keeps its alert (`audit_refused`) until a digest lists the object. These objects hold these two tables only (not every role's):
//! there is one per project, and a small schema is what keeps thousands of them cheap.

use serde::Deserialize;
use worker::Result;

use super::{from_json, rust_error, KeyGuardObject};
use gatehouse_core::audit_chain::{
    may_advance, may_bind, refused_binding, AdoptHead, AdvanceHead, Advanced, BindObjects, Bound,
    BoundObject, ChainHead, ConfirmObjects, HeadState,
};
use gatehouse_core::guard::protocol::Done;

pub(super) const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), head TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_bound (key TEXT PRIMARY KEY, first_ts INTEGER NOT NULL, object TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_bound_by_time ON audit_bound (first_ts)",
    "CREATE TABLE IF NOT EXISTS audit_refused (key TEXT PRIMARY KEY, alert TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_writing (key TEXT NOT NULL, sha256 TEXT NOT NULL, object TEXT NOT NULL,
       PRIMARY KEY (key, sha256))",
];

impl KeyGuardObject {
    /// Whether this object holds a chain (its tables exist), created first when `create` (and
    /// those a later version added, once per instance).
    fn has_chain(&self, create: bool) -> Result<bool> {
        if self.chain_tables.get() {
            return Ok(true);
        }
        if !create {
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
        for ddl in TABLES {
            self.sql.exec(ddl, None)?;
        }
        self.chain_tables.set(true);
        Ok(true)
    }

    /// Announces the puts of `c.objects` (see `core::audit_chain::may_bind`): each allowed is
    /// kept as being written (`audit_writing`) until [`Self::confirm_objects`] — or bound at once
    /// for an older worker, which binds after its put.
    pub(super) fn bind_objects(&self, c: BindObjects) -> Result<Bound> {
        self.has_chain(true)?;
        let mut refused = Vec::new();
        for o in c.objects {
            let bound = self.objects_in("audit_bound", &o.key)?.pop();
            let writing = self.writing(&o.key)?;
            if !may_bind(bound.as_ref(), &writing, &o, c.replaces.as_deref()) {
                self.sql.exec(
                    "INSERT OR REPLACE INTO audit_refused (key, alert) VALUES (?, ?)",
                    vec![
                        o.key.clone().into(),
                        refused_binding(bound.as_ref(), &o, c.replaces.as_deref()).into(),
                    ],
                )?;
                refused.push(o.key);
            } else if c.announce {
                self.sql.exec(
                    "INSERT OR REPLACE INTO audit_writing (key, sha256, object) VALUES (?, ?, ?)",
                    vec![
                        o.key.clone().into(),
                        o.sha256.clone().into(),
                        serde_json::to_string(&o).map_err(rust_error)?.into(),
                    ],
                )?;
            } else {
                self.keep_bound(std::slice::from_ref(&o), "REPLACE")?;
            }
        }
        Ok(Bound { refused })
    }

    /// Binds the objects announced whose puts are done with the bytes announced.
    pub(super) fn confirm_objects(&self, c: ConfirmObjects) -> Result<Done> {
        if !self.has_chain(false)? {
            return Ok(Done {});
        }
        for o in &c.objects {
            if self.writing(&o.key)?.iter().any(|w| w.sha256 == o.sha256) {
                self.keep_bound(std::slice::from_ref(o), "REPLACE")?;
                self.sql.exec("DELETE FROM audit_writing WHERE key = ?", vec![o.key.clone().into()])?;
            }
        }
        Ok(Done {})
    }

    /// The objects `table` (`audit_bound`: one at most; `audit_writing`: the puts announced
    /// since the last confirmation) holds under `key`.
    fn objects_in(&self, table: &str, key: &str) -> Result<Vec<BoundObject>> {
        #[derive(Deserialize)]
        struct Row {
            object: String,
        }
        let rows = self.sql.exec(&format!("SELECT object FROM {table} WHERE key = ?"), vec![key.into()])?;
        rows.to_array::<Row>()?.iter().map(|r| from_json::<BoundObject>(&r.object)).collect()
    }

    fn writing(&self, key: &str) -> Result<Vec<BoundObject>> {
        self.objects_in("audit_writing", key)
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
        #[derive(Deserialize)]
        struct Refused {
            alert: String,
        }
        let alerts = self.sql.exec("SELECT alert FROM audit_refused ORDER BY key LIMIT 100", None)?;
        let alerts = alerts.to_array::<Refused>()?.into_iter().map(|r| r.alert).collect();
        Ok(HeadState { head, pending, oldest_pending_ts: oldest, objects, alerts })
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
            self.sql.exec("DELETE FROM audit_refused WHERE key = ?", vec![key.clone().into()])?;
            self.sql.exec("DELETE FROM audit_writing WHERE key = ?", vec![key.clone().into()])?;
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
