//! Objects an earlier version wrote and nobody calls any more (SPEC §23): it set their alarms
//! decades ahead, so they would keep rows past their promise (an idle guard's `v1`-sealed
//! responses). The minute cron calls, once, each object the directory names that was made before
//! this version's migration (`before`); any command runs a purge pass and sets the alarm by this
//! version's rules.

use serde::{Deserialize, Serialize};

use super::PortError;

/// The lists of objects the directory names, in the order the wake walks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeList {
    /// Keys: each one's guard and claim objects.
    Keys,
    /// Projects: each one's authority.
    Projects,
    /// Identities: each one's authority.
    Identities,
}

/// Where the wake stands: the list it is in (`None`: done), the last entry it woke there, and
/// the time before which the entries it wakes were made (the migration's: its objects are the
/// earlier version's). No state at all: nothing to wake (a deployment that began with this version).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeState {
    pub list: Option<WakeList>,
    pub after: Option<String>,
    #[serde(default)]
    pub before: i64,
}

/// One entry of a list: its sort key (a key's hash, a project's or identity's id) and, for a
/// key, how many claim objects it spreads over (`CLAIM_SHARDS` when it was made; 1 otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WakeEntry {
    pub id: String,
    pub claim_shards: u32,
}

/// The wake's state and lists, in the main database.
pub trait WakeStore {
    /// Where the wake stands.
    async fn wake_state(&self) -> Result<WakeState, PortError>;
    /// The next `limit` entries of the list `at` is in, after `at.after`, of those made before
    /// `at.before` (none when it is done).
    async fn wake_next(&self, at: &WakeState, limit: usize) -> Result<Vec<WakeEntry>, PortError>;
    async fn save_wake(&self, state: &WakeState) -> Result<(), PortError>;
}
