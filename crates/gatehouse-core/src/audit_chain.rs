//! A project's chain of audit digests as the gateway keeps it where no D1 or R2 writer can reach
//! (SPEC §23): the chain's head and the objects the roll-up wrote that no digest lists yet, in the
//! project's own Durable Object (`audit:{project}`).
//!
//! What an attacker holds: write access to D1 and R2, not `AUDIT_SIGNING_KEY`. What does not
//! suffice: the digest job signs only what the roll-up bound here in the invocation that computed
//! the bytes (key, SHA-256, rows), never what D1 lists; a digest starts where the head ends, so no
//! span is signed twice however `projects.digest_next` or `audit_digests` are set back; and the
//! head, signed on request (`GET /public/v1/audit/head`), tells a verifier which digest is the
//! newest, so deleting the newest digests reads as a cut-off history, not as lag.

use serde::{Deserialize, Serialize};

/// The Durable Object that holds a project's chain (the `KEY_GUARD` class, its own name).
pub fn head_object_name(project_id: &str) -> String {
    format!("audit:{project_id}")
}

/// An archive object as the roll-up wrote it: bound to its project's head before its rows leave D1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundObject {
    pub key: String,
    /// Hex SHA-256 of the bytes written.
    pub sha256: String,
    pub rows: u64,
    pub first_id: String,
    pub last_id: String,
    /// Its first row's time (Unix ms): the period that lists it.
    pub first_ts: i64,
}

/// The chain's newest digest, as its head holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// Digests in the chain (0: none yet; the chain starts at `period_end`).
    pub sequence: u64,
    pub period_start: i64,
    /// Everything archived before this is digested; the next digest starts here.
    pub period_end: i64,
    pub key: String,
    pub sha256: String,
    /// The digest file's bytes (JSON text): written to R2 again if R2 lost it.
    pub file: String,
    /// The objects it lists (D1 marks them digested).
    pub listed: Vec<String>,
}

/// Binds the objects the roll-up is about to write for the project (before their put): each is
/// bound once [`ConfirmObjects`] says its put is done. An object bound already under its key with
/// other bytes may be written again only when `replaces` names the bytes R2 holds (see
/// [`may_bind`]); otherwise it is refused, not written, and the refusal kept as an alert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindObjects {
    pub objects: Vec<BoundObject>,
    /// The SHA-256 of the bytes the roll-up read back under the key before it writes it again,
    /// keeping every row they held.
    #[serde(default)]
    pub replaces: Option<String>,
    /// The put is still to come (a confirmation follows). An older worker sends none and binds
    /// after its put, as before: bound at once.
    #[serde(default)]
    pub announce: bool,
}

/// The puts of objects [`BindObjects`] announced are done: each is bound with those bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmObjects {
    pub objects: Vec<BoundObject>,
}

/// What [`BindObjects`] answers: the keys whose binding was kept instead (see [`may_bind`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    #[serde(default)]
    pub refused: Vec<String>,
}

/// Whether `object` may be written where `bound` is (the bytes a confirmed put stored), `writing`
/// being the puts announced since, none confirmed (any of them may have landed): a key never stored, or written again with the same
/// bytes, or by a roll-up that read back (`replaces`) the bytes bound — or those of the put
/// announced, which may have landed before its confirmation was lost — and kept their rows.
/// Storage alone cannot make the roll-up rewrite an object without its rows (SPEC §23): deleting
/// its D1 row (and its R2 object) and planting a row at its first position makes the roll-up
/// write the key again, and what it reads back is the roll-up's own bytes only if R2 still holds
/// them.
///
/// A key R2 holds that the head neither binds nor was told of (`replaces` without either) is an
/// object a digest listed already (the head forgets what it listed): written again only by storage
/// (its D1 row deleted and a row planted), never by the roll-up, so it is refused too.
pub fn may_bind(
    bound: Option<&BoundObject>,
    writing: &[BoundObject],
    object: &BoundObject,
    replaces: Option<&str>,
) -> bool {
    let read_back = |o: Option<&BoundObject>| o.is_some_and(|o| replaces == Some(o.sha256.as_str()));
    match (bound, replaces) {
        (Some(b), _) if b.sha256 == object.sha256 => true,
        (_, None) => bound.is_none(),
        (_, Some(_)) => read_back(bound) || writing.iter().any(|w| read_back(Some(w))),
    }
}

/// A chain that starts at `period` (sequence 0, no digest yet): a new project's, from its creation.
pub fn start_at(period: i64) -> ChainHead {
    ChainHead {
        sequence: 0,
        period_start: period,
        period_end: period,
        key: String::new(),
        sha256: String::new(),
        file: String::new(),
        listed: Vec::new(),
    }
}

/// The alert a refused write keeps until a digest lists the object (with the bytes bound), or
/// the roll-up reports (a listed object written again).
pub fn refused_binding(bound: Option<&BoundObject>, object: &BoundObject, replaces: Option<&str>) -> String {
    let read = replaces.unwrap_or("nothing: R2 lost it");
    match bound {
        Some(b) => format!(
            "object {} was written again over bytes that were not the ones bound (SHA-256 {} bound, {read} read back): \
             storage changed it; digests list the bytes bound",
            object.key, b.sha256
        ),
        None => format!(
            "object {} was written again over bytes the chain head never bound (SHA-256 {read} read back): \
             a digest listed it already and storage made the roll-up write it again; refused",
            object.key
        ),
    }
}

/// The head, and the first `objects` of the objects no digest lists yet (oldest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadHead {
    pub objects: usize,
}

/// What [`ReadHead`] answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadState {
    /// `None`: the chain was never started here (a project from before SPEC §23, or a new one).
    pub head: Option<ChainHead>,
    /// Objects bound and not listed yet, and the oldest one's first row time.
    pub pending: u64,
    pub oldest_pending_ts: Option<i64>,
    pub objects: Vec<BoundObject>,
    /// Bindings refused since the last digest (see [`refused_binding`]): reported by the digest job.
    #[serde(default)]
    pub alerts: Vec<String>,
}

/// Starts the chain once (a head already there is kept): at `head` (a digest of a project from
/// before SPEC §23, or sequence 0 at the project's first period), with the objects D1 lists as
/// not digested yet — the one time the chain takes D1's word, as it moves here, and only for what
/// was archived before `AUDIT_CHAIN_SINCE` (see [`trusted_start`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptHead {
    pub head: ChainHead,
    pub objects: Vec<BoundObject>,
}

/// Moves the head along `digests` (in order; the last becomes the head) if it is still at
/// sequence `after`, and they follow it and each other without a gap; the objects they list are no
/// longer pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvanceHead {
    pub after: u64,
    pub digests: Vec<ChainHead>,
}

/// What [`AdvanceHead`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "advance", rename_all = "snake_case")]
pub enum Advanced {
    Moved,
    /// Another run moved it first (or it never started): nothing changed.
    Conflict {
        head: Option<ChainHead>,
    },
}

/// Whether `advance` moves the head `current`: only from the head it was made after (its
/// sequence), each digest the next sequence, starting where the one before ends (no span signed
/// twice, none left out). The first digest of a chain may start before the chain's start (at its
/// oldest object the roll-up bound: rows dated before the project's creation), as nothing was
/// signed before it.
pub fn may_advance(current: Option<&ChainHead>, advance: &AdvanceHead) -> bool {
    let Some(mut at) = current.filter(|h| h.sequence == advance.after) else { return false };
    for next in &advance.digests {
        let starts = match at.sequence {
            0 => next.period_start <= at.period_end,
            _ => next.period_start == at.period_end,
        };
        if next.sequence != at.sequence + 1 || !starts || next.period_end <= next.period_start {
            return false;
        }
        at = next;
    }
    !advance.digests.is_empty()
}

/// The end of the digest that starts at `start`, given the first row times of the objects no
/// digest lists (`pending`) and the end of the last closed period (`closed_end`, a period
/// boundary): a run of periods without objects is one digest, up to the first period that has
/// one; a period with objects is a digest of its own. Objects of periods already digested (rows
/// that arrived late) are listed by one digest up to `closed_end` when no later period has
/// objects. `None`: nothing is due — a project idle since its last digest has none, however many
/// periods pass (its chain head says nothing waits).
pub fn digest_end(start: i64, closed_end: i64, period_ms: i64, pending: &[i64]) -> Option<i64> {
    if start >= closed_end {
        return None;
    }
    let first_due = pending
        .iter()
        .copied()
        .filter(|ts| *ts >= start && *ts < closed_end)
        .min()
        .map(|ts| crate::digest::period_start(ts, period_ms));
    match first_due {
        Some(p) if p > start => Some(p),
        Some(_) => Some(start + period_ms),
        None if pending.iter().any(|ts| *ts < start) => Some(closed_end),
        None => None,
    }
}

/// Whether D1's word on a chain's start may be taken: only for what ended before
/// `chain_since_ms` (`AUDIT_CHAIN_SINCE`, set by the operator when upgrading from a version before
/// SPEC §23: a deploy-time value no D1 writer reaches). Everything archived since was bound by the
/// roll-up; a digest or object D1 claims for that time is ignored, so planting one before a new
/// project's first digest signs nothing.
pub fn trusted_start(ended_ms: i64, chain_since_ms: i64) -> bool {
    ended_ms <= chain_since_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn head(sequence: u64, period_start: i64, period_end: i64) -> ChainHead {
        ChainHead {
            sequence,
            period_start,
            period_end,
            key: String::new(),
            sha256: String::new(),
            file: String::new(),
            listed: Vec::new(),
        }
    }

    #[test]
    fn a_head_moves_once_from_where_it_ends_and_never_back() {
        let now = head(3, 2 * H, 3 * H);
        let advance = |digests: Vec<ChainHead>| AdvanceHead { after: 3, digests };
        let next = advance(vec![head(4, 3 * H, 4 * H), head(5, 4 * H, 9 * H)]);
        assert!(may_advance(Some(&now), &next));
        assert!(!may_advance(None, &next), "a chain that never started");
        assert!(!may_advance(Some(&head(4, 3 * H, 4 * H)), &next), "another run moved it first");
        let again = advance(vec![head(4, 2 * H, 3 * H)]);
        assert!(!may_advance(Some(&now), &again), "the span the head holds, signed twice");
        assert!(!may_advance(Some(&now), &advance(vec![head(4, 4 * H, 5 * H)])), "a gap");
        let inner = advance(vec![head(4, 3 * H, 4 * H), head(5, 5 * H, 6 * H)]);
        assert!(!may_advance(Some(&now), &inner), "a gap between two");
        assert!(!may_advance(Some(&now), &advance(vec![head(4, 3 * H, 3 * H)])), "an empty span");
        assert!(!may_advance(Some(&now), &advance(vec![])), "nothing");
        // A chain's first digest may begin before its start (its oldest object bound).
        let started = head(0, 5 * H, 5 * H);
        let first = |start| AdvanceHead { after: 0, digests: vec![head(1, start, 6 * H)] };
        assert!(may_advance(Some(&started), &first(2 * H)));
        assert!(may_advance(Some(&started), &first(5 * H)));
        assert!(!may_advance(Some(&started), &first(5 * H + 1)), "a gap");
    }

    #[test]
    fn idle_periods_are_one_digest_and_a_period_with_objects_is_its_own() {
        // Six idle hours, then objects in hour 6 and hour 8; hours up to 10 are closed. Each step
        // sees what the digests before it left.
        let pending = [6 * H + 5, 8 * H + 1, 8 * H + 2];
        assert_eq!(digest_end(0, 10 * H, H, &pending), Some(6 * H));
        assert_eq!(digest_end(6 * H, 10 * H, H, &pending), Some(7 * H));
        assert_eq!(digest_end(7 * H, 10 * H, H, &pending[1..]), Some(8 * H));
        assert_eq!(digest_end(8 * H, 10 * H, H, &pending[1..]), Some(9 * H));
        // After the last period with objects: nothing, however many periods pass.
        assert_eq!(digest_end(9 * H, 10 * H, H, &[]), None);
        assert_eq!(digest_end(9 * H, 1_000 * H, H, &[]), None);
        assert_eq!(digest_end(10 * H, 10 * H, H, &pending), None);
        // A late object (of a period already digested) goes into the next digest, whatever it spans.
        assert_eq!(digest_end(9 * H, 20 * H, H, &[2 * H]), Some(20 * H));
        // Objects of a period not closed yet wait for it.
        assert_eq!(digest_end(0, 5 * H, H, &[5 * H + 1]), None);
    }

    #[test]
    fn an_object_is_bound_again_only_over_the_bytes_bound() {
        let object = |sha256: &str| BoundObject {
            key: "k".into(),
            sha256: sha256.into(),
            rows: 1,
            first_id: "a".into(),
            last_id: "a".into(),
            first_ts: 0,
        };
        let a = Some(object("a"));
        let (c, cd) = ([object("c")], [object("c"), object("d")]);
        assert!(may_bind(None, &[], &object("b"), None), "new");
        assert!(may_bind(None, &c, &object("b"), None), "a first put that did not land");
        assert!(may_bind(a.as_ref(), &[], &object("a"), None), "the same bytes again");
        assert!(may_bind(a.as_ref(), &[], &object("b"), Some("a")), "read back and kept");
        assert!(may_bind(a.as_ref(), &c, &object("b"), Some("c")), "a put that landed unconfirmed");
        assert!(may_bind(None, &cd, &object("b"), Some("c")), "an earlier put landed, a later one did not");
        assert!(!may_bind(a.as_ref(), &[], &object("b"), None), "R2 lost it: written over without its rows");
        assert!(!may_bind(a.as_ref(), &c, &object("b"), Some("x")), "read back other bytes");
        assert!(!may_bind(None, &[], &object("b"), Some("x")), "a listed object written again");
        assert!(!may_bind(None, &cd, &object("b"), Some("x")), "bytes nobody announced");
        assert!(refused_binding(a.as_ref(), &object("b"), Some("x")).contains("SHA-256 a bound, x read back"));
        assert!(refused_binding(None, &object("b"), Some("x")).contains("never bound"));
    }
}
