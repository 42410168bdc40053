//! Commands to the KeyGuard Durable Object and their answers, as JSON over its `ask` RPC method. Each
//! command is its own type with its own answer type ([`Ask::Answer`]), so a client that expects
//! the wrong answer, or an object that sends one, does not compile.

use serde::{de::DeserializeOwned, Deserialize, Deserializer, Serialize};

use crate::abuse::address_group;
use crate::api_key::{KeyRecord, RefusalReason, Scope};
use crate::audit_chain::{
    AdoptHead, AdvanceHead, Advanced, BindObjects, Bound, ConfirmObjects, HeadState, ReadHead,
};
use crate::idempotency::{ClaimDecision, KeptResponse};
use crate::lease::{Exchange, GiveBack, Grant, LeaseAsk, RecallGrant, Recalled};
use crate::ports::ClaimRequest;
use crate::rate_limit::{LimitSpec, Usage, Verdict};
use crate::tagged::{deserialize_tagged, unknown, Tagged};

/// The binding name of SPEC §1.
pub const BINDING: &str = "KEY_GUARD";
/// The object the deep health check pings.
pub const HEALTH_OBJECT: &str = "health";

/// The object that counts failed authentications from one client address: one per IPv4 address,
/// one per IPv6 /64 ([`address_group`]). Key guards are named by a 64-hex-digit key hash, so the
/// two kinds of names never meet.
pub fn client_guard_name(ip: &str) -> String {
    format!("ip:{}", address_group(ip))
}

/// The authority of a level above the key (SPEC §20, `lease`): one object per project and one per
/// identity, in the guards' namespace under names no key hash or client address takes.
pub fn project_authority(project_id: &str) -> String {
    format!("project:{project_id}")
}

pub fn identity_authority(identity_id: &str) -> String {
    format!("identity:{identity_id}")
}

/// A command and the type of its answer.
pub trait Ask: Into<GuardCommand> {
    type Answer: Serialize + DeserializeOwned;
}

/// Every command, as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "command", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // one per call to a guard, serialised at once
pub enum GuardCommand {
    Authorize(Authorize),
    Apply(Apply),
    RecordAuthFailure(RecordAuthFailure),
    CompleteClaim(CompleteClaim),
    ReleaseClaim(ReleaseClaim),
    HeldResponse(HeldResponse),
    Ping(Ping),
    TakeClaim(TakeClaim),
    Exchange(Exchange),
    GiveBackLeases(GiveBackLeases),
    RenewLease(RenewLease),
    SetLimits(SetLimits),
    BindObjects(BindObjects),
    ConfirmObjects(ConfirmObjects),
    ReadHead(ReadHead),
    AdoptHead(AdoptHead),
    AdvanceHead(AdvanceHead),
    RecallGrant(RecallGrant),
}

/// Is this key valid, may it make one more request now, and (when the request carries an
/// `Idempotency-Key` and the key's type may call the route) may it execute? One round trip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authorize {
    pub key_hash: String,
    /// What the route needs: a key refused for its type (403) takes no claim.
    pub scope: Scope,
    pub claim: Option<ClaimRequest>,
    /// The isolate would hold a lease of the key's credits (SPEC §20 hot keys), and gives back
    /// what it did not use of earlier ones.
    #[serde(default)]
    pub lease: Option<LeaseAsk>,
    /// Who sent a browser key's request (SPEC §24): its origin is checked and its window counted
    /// before the key's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitor: Option<crate::browser::Visitor>,
    /// The key's hash under the pepper the asking isolate holds current (SPEC §26): a record
    /// hashed otherwise is re-hashed to it, its guard staying the key's guard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<crate::api_key::CurrentHash>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // a wire message, made once per round trip
pub enum Authorized {
    Decided(Decided),
    Denied(Denied),
    /// The key asked for is re-hashed and its guard is another object (SPEC §26): ask `guard`.
    Moved(Moved),
}

/// Where a re-hashed key's guard is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub guard: String,
    pub d1_queries: u32,
}

/// The key is valid; `verdict` says whether this request is within its limits, `claim` what its
/// `Idempotency-Key` allows (only within its limits and its type's scope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub key: KeyRecord,
    pub verdict: Verdict,
    pub usage: Usage,
    pub claim: Option<ClaimDecision>,
    pub d1_queries: u32,
    /// A lease of the key's credits for the isolate, when it asked and the key is hot enough.
    #[serde(default)]
    pub lease: Option<Grant>,
    /// The refusal is the visitor's window's, not the key's (SPEC §24).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_visitor: bool,
}

/// No such key (`None`), or refused at the guard's clock (its record, and why: revoked, expired,
/// or rolled and past its grace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denied {
    pub key: Option<KeyRecord>,
    #[serde(default)]
    pub reason: Option<RefusalReason>,
    pub d1_queries: u32,
}

impl Tagged for GuardCommand {
    const TAG: &'static str = "command";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        Ok(match tag {
            "authorize" => Self::Authorize(Authorize::deserialize(fields)?),
            "apply" => Self::Apply(Apply::deserialize(fields)?),
            "record_auth_failure" => Self::RecordAuthFailure(RecordAuthFailure::deserialize(fields)?),
            "complete_claim" => Self::CompleteClaim(CompleteClaim::deserialize(fields)?),
            "release_claim" => Self::ReleaseClaim(ReleaseClaim::deserialize(fields)?),
            "held_response" => Self::HeldResponse(HeldResponse::deserialize(fields)?),
            "ping" => Self::Ping(Ping::deserialize(fields)?),
            "take_claim" => Self::TakeClaim(TakeClaim::deserialize(fields)?),
            "exchange" => Self::Exchange(Exchange::deserialize(fields)?),
            "give_back_leases" => Self::GiveBackLeases(GiveBackLeases::deserialize(fields)?),
            "renew_lease" => Self::RenewLease(RenewLease::deserialize(fields)?),
            "set_limits" => Self::SetLimits(SetLimits::deserialize(fields)?),
            "bind_objects" => Self::BindObjects(BindObjects::deserialize(fields)?),
            "confirm_objects" => Self::ConfirmObjects(ConfirmObjects::deserialize(fields)?),
            "read_head" => Self::ReadHead(ReadHead::deserialize(fields)?),
            "adopt_head" => Self::AdoptHead(AdoptHead::deserialize(fields)?),
            "advance_head" => Self::AdvanceHead(AdvanceHead::deserialize(fields)?),
            "recall_grant" => Self::RecallGrant(RecallGrant::deserialize(fields)?),
            other => {
                return Err(unknown(
                    other,
                    &[
                        "authorize",
                        "apply",
                        "record_auth_failure",
                        "complete_claim",
                        "release_claim",
                        "held_response",
                        "ping",
                        "take_claim",
                        "exchange",
                        "give_back_leases",
                        "renew_lease",
                        "set_limits",
                        "bind_objects",
                        "confirm_objects",
                        "read_head",
                        "adopt_head",
                        "advance_head",
                        "recall_grant",
                    ],
                ))
            }
        })
    }
}

impl Tagged for Authorized {
    const TAG: &'static str = "answer";
    fn variant<'de, D: Deserializer<'de>>(tag: &str, fields: D) -> Result<Self, D::Error> {
        match tag {
            "decided" => Decided::deserialize(fields).map(Self::Decided),
            "denied" => Denied::deserialize(fields).map(Self::Denied),
            "moved" => Moved::deserialize(fields).map(Self::Moved),
            other => Err(unknown(other, &["decided", "denied", "moved"])),
        }
    }
}

deserialize_tagged!(GuardCommand, Authorized);

/// A change to the key (revocation, plan, override) before it is written to D1: the guard holds
/// this record from now on, durably, so the change applies to the very next request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Apply {
    pub key: KeyRecord,
    /// The `revoked_at` of a revocation, or the `rolled_at` of a roll, to take back (D1 refused
    /// it, or the guard's answer to it was lost); any other revocation or roll the guard holds
    /// stays (see `KeyRecord::told`).
    pub undo: Option<i64>,
}

/// One failed authentication from this object's client address or network, counted in a minute
/// window of `per_minute` (20 when not given: an address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordAuthFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_minute: Option<u32>,
}

/// Failures from the client address so far in this minute, against the allowance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthFailures {
    pub verdict: Verdict,
    pub usage: Usage,
}

/// The claimed request succeeded: the claim is completed. With `api_key_id`, the claim's object
/// writes the response to the response store itself and keeps its own copy only until the store
/// shows it (SPEC §23); without (an older worker), it keeps the copy until the TTL ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteClaim {
    pub claim: ClaimRequest,
    pub response: KeptResponse,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_id: Option<String>,
}

/// A level's limits, told to its authority first when they change (SPEC §23): from then on it
/// grants under them, whatever limits the asking holder still has; a `version` lower than the one
/// it holds changes nothing (the change's time: a later change wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetLimits {
    pub limits: LimitSpec,
    pub version: i64,
}

/// The claimed request failed: forget the claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseClaim {
    pub claim: ClaimRequest,
    /// Set when the releaser does not know where the claim lives (its guard's answer was lost):
    /// the guard of this key releases it where the key's record says (SPEC §20 claim objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_key: Option<String>,
}

/// The response the guard keeps for a completed key (the fallback when the response store misses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldResponse {
    pub idempotency_key: String,
}

/// A claim decided without `Authorize`: for a principal without an API key (the operator's guard,
/// `ports::OPERATOR_GUARD`), with no key, window or quota; and for a key `Authorize` admitted a
/// moment before without one, whose body is read only after that (SPEC §19 "Memory").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeClaim {
    pub claim: ClaimRequest,
}

/// What an isolate did not use of the key's leases that ended (SPEC §20 hot keys), given back
/// without a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiveBackLeases {
    pub give_back: Vec<GiveBack>,
}

/// A hot key's isolate asks for a new lease while its current one still serves (SPEC §20), after
/// a response: no request is decided with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewLease {
    pub key_hash: String,
    pub lease: LeaseAsk,
}

/// The key's record as its guard holds it (`None`: unknown), and the new lease, if any: none for
/// a refused key, or one no longer hot, or when nothing is left to lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    pub key: Option<KeyRecord>,
    pub lease: Option<Grant>,
}

/// A round trip that reads and writes nothing (the deep health check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {}

/// Whether the claim is completed by this request: false when its lease ran out and another
/// request holds the claim now (its response must then not be stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completed {
    pub completed: bool,
    /// The object wrote the response to the response store (else the caller writes it).
    #[serde(default)]
    pub stored: bool,
}

/// The answer of commands that only act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}

macro_rules! asks {
    ($($command:ident => $answer:ty),* $(,)?) => {$(
        impl Ask for $command {
            type Answer = $answer;
        }
        impl From<$command> for GuardCommand {
            fn from(c: $command) -> Self {
                GuardCommand::$command(c)
            }
        }
    )*};
}

asks! {
    Authorize => Authorized,
    Apply => Done,
    RecordAuthFailure => AuthFailures,
    CompleteClaim => Completed,
    ReleaseClaim => Done,
    HeldResponse => Option<KeptResponse>,
    Ping => Done,
    TakeClaim => ClaimDecision,
    Exchange => Grant,
    GiveBackLeases => Done,
    RenewLease => Renewed,
    SetLimits => Done,
    BindObjects => Bound,
    ConfirmObjects => Done,
    ReadHead => HeadState,
    AdoptHead => HeadState,
    AdvanceHead => Advanced,
    RecallGrant => Recalled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_carry_their_tag_and_fields() {
        let c: GuardCommand = Authorize {
            key_hash: "ab".into(),
            scope: Scope::Ingest,
            claim: None,
            lease: None,
            visitor: None,
            current: None,
        }
        .into();
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"command":"authorize","key_hash":"ab","scope":"ingest","claim":null,"lease":null}"#
        );
        let c: GuardCommand = serde_json::from_str(r#"{"command":"record_auth_failure"}"#).unwrap();
        assert_eq!(c, GuardCommand::RecordAuthFailure(RecordAuthFailure { per_minute: None }));
        let c: GuardCommand = serde_json::from_str(r#"{"command":"ping"}"#).unwrap();
        assert_eq!(c, GuardCommand::Ping(Ping {}));
        // Unknown commands and missing fields are refused, not defaulted.
        assert!(serde_json::from_str::<GuardCommand>(r#"{"command":"invalidate","key_hash":"ab"}"#).is_err());
        assert!(serde_json::from_str::<GuardCommand>(r#"{"command":"authorize","key_hash":"ab"}"#).is_err());
    }

    #[test]
    fn answers_round_trip() {
        let a: Authorized = serde_json::from_str(r#"{"answer":"denied","key":null,"d1_queries":1}"#).unwrap();
        assert_eq!(a, Authorized::Denied(Denied { key: None, reason: None, d1_queries: 1 }));
        let moved = Authorized::Moved(Moved { guard: "ab".into(), d1_queries: 1 });
        assert_eq!(
            serde_json::from_str::<Authorized>(&serde_json::to_string(&moved).unwrap()).unwrap(),
            moved
        );
        let d: ClaimDecision = serde_json::from_str(r#"{"claim":"replay","response":null}"#).unwrap();
        assert_eq!(d, ClaimDecision::Replay { response: None });
        let held: <HeldResponse as Ask>::Answer = serde_json::from_str("null").unwrap();
        assert_eq!(held, None);
    }

    #[test]
    fn client_guard_names_cannot_be_key_hashes() {
        assert_eq!(client_guard_name("203.0.113.7"), "ip:203.0.113.7");
        assert!(client_guard_name("::1").contains(':'));
    }

    #[test]
    fn one_client_guard_counts_a_whole_ipv6_64() {
        assert_eq!(client_guard_name("2001:db8:7:8::1"), "ip:2001:db8:7:8::/64");
        assert_eq!(client_guard_name("2001:db8:7:8:ffff::2"), client_guard_name("2001:db8:7:8::1"));
        assert_ne!(client_guard_name("2001:db8:7:9::1"), client_guard_name("2001:db8:7:8::1"));
        assert_eq!(client_guard_name("::ffff:203.0.113.7"), "ip:203.0.113.7");
    }
}
