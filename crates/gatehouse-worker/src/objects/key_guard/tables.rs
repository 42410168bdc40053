//! Which roles' tables an object has. Each role's tables are created on its first write of that
//! role, not with every other role's: a key's claim object holds only claims (SPEC §20) and a
//! level's authority only grants, and neither carries empty tables of roles it never plays (an
//! empty table or index is a page of storage; a key has up to 31 claim objects).

use serde::Deserialize;
use worker::Result;

use super::{admission, authority, claims, holder, isolate_leases, record, KeyGuardObject};

/// A role of the class whose tables are created together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Record,
    Admission,
    Holder,
    IsolateLeases,
    Authority,
    Claims,
}

impl Role {
    const ALL: [Role; 6] =
        [Role::Record, Role::Admission, Role::Holder, Role::IsolateLeases, Role::Authority, Role::Claims];

    fn tables(self) -> &'static [&'static str] {
        match self {
            Role::Record => record::TABLES,
            Role::Admission => admission::TABLES,
            Role::Holder => holder::TABLES,
            Role::IsolateLeases => isolate_leases::TABLES,
            Role::Authority => authority::TABLES,
            Role::Claims => claims::TABLES,
        }
    }

    /// Whether an object whose tables are `names` plays this role: one of the role's tables is
    /// there, or the first version's (`counters`, read once by admission; `claims`, moved over).
    fn played_with(self, names: &[String]) -> bool {
        let first_version = match self {
            Role::Admission => Some("counters"),
            Role::Claims => Some("claims"),
            _ => None,
        };
        names.iter().any(|name| {
            Some(name.as_str()) == first_version
                || self.tables().iter().any(|ddl| table_of(ddl) == Some(name))
        })
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The table a `CREATE TABLE IF NOT EXISTS name …` statement creates (`None` for an index).
fn table_of(ddl: &str) -> Option<&str> {
    ddl.strip_prefix("CREATE TABLE IF NOT EXISTS ")?.split(|c: char| c.is_whitespace() || c == '(').next()
}

impl KeyGuardObject {
    /// Whether this object's tables of `role` exist.
    pub(super) fn plays(&self, role: Role) -> Result<bool> {
        Ok(self.roles()? & role.bit() != 0)
    }

    /// Whether the object has stored anything yet (the tables of some role exist).
    pub(super) fn has_storage(&self) -> Result<bool> {
        Ok(self.roles()? != 0)
    }

    /// Before a write of `role`: its tables exist from now on.
    pub(super) fn create_tables(&self, role: Role) -> Result<()> {
        let roles = self.roles()?;
        if roles & role.bit() == 0 {
            self.run_ddl(role)?;
            self.tables.set(Some(roles | role.bit()));
        }
        Ok(())
    }

    /// The roles whose tables exist, as bits, looked up once per start. A role's table an older
    /// version did not have is created now (the object plays the role anyway), and so is a column
    /// (`lease_grants.holder`, SPEC §23: an object that has it already answers "duplicate column",
    /// which changes nothing). An object of the first version, which kept claims without an
    /// operation in `claims`, is upgraded here: its claims move over (each its owner's operation),
    /// so a completed key stays completed across the upgrade; if the move fails, the lookup runs
    /// again at the next command.
    fn roles(&self) -> Result<u8> {
        if let Some(known) = self.tables.get() {
            return Ok(known);
        }
        #[derive(Deserialize)]
        struct Table {
            name: String,
        }
        let names: Vec<String> = self
            .sql
            .exec("SELECT name FROM sqlite_master WHERE type = 'table'", None)?
            .to_array::<Table>()?
            .into_iter()
            .map(|t| t.name)
            .collect();
        let mut roles = 0;
        for role in Role::ALL.into_iter().filter(|role| role.played_with(&names)) {
            self.run_ddl(role)?;
            roles |= role.bit();
        }
        if roles & Role::Authority.bit() != 0 {
            let _ = self.sql.exec("ALTER TABLE lease_grants ADD COLUMN holder TEXT", None);
        }
        if names.iter().any(|n| n == "claims") {
            self.sql.exec(
                "INSERT OR IGNORE INTO idempotency_claims
                   (idempotency_key, fingerprint, owner, operation, until_ms, completed, released, keep_until_ms,
                    response, response_until_ms)
                 SELECT idempotency_key, fingerprint, owner, owner, until_ms, completed, 0,
                        CASE WHEN completed = 1 THEN until_ms ELSE until_ms + 86400000 END, response, response_until_ms
                 FROM claims",
                None,
            )?;
            self.sql.exec("DROP TABLE claims", None)?;
        }
        self.tables.set(Some(roles));
        Ok(roles)
    }

    /// Runs `role`'s statements (each is `IF NOT EXISTS`: tables an object has are left as they are).
    fn run_ddl(&self, role: Role) -> Result<()> {
        for ddl in role.tables() {
            self.sql.exec(ddl, None)?;
        }
        Ok(())
    }
}
