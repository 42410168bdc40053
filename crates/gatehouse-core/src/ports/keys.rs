//! Keys: the guard of each API key, the directory of keys and projects in D1, and the kept
//! responses of idempotent requests.

use super::PortError;
use crate::api_key::{IdentityLimits, KeyRecord, RefusalReason, Scope};
use crate::idempotency::{ClaimDecision, Entry, KeptResponse};
use crate::identity::{Identity, IdentityChanges};
use crate::lease::{GiveBack, Grant, LeaseAsk};
use crate::page::PageRequest;
use crate::rate_limit::{LimitSpec, Usage, Verdict};

/// A valid key and the rate decision its guard made for this request, with the decision on the
/// request's `Idempotency-Key` when it had one and was within its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub key: KeyRecord,
    pub verdict: Verdict,
    pub usage: Usage,
    pub claim: Option<ClaimDecision>,
    /// A lease of the key's credits for this isolate (SPEC §20 hot keys), when it asked for one
    /// and the key is hot enough.
    pub lease: Option<Grant>,
    /// Refused by the visitor's window, not the key's (SPEC §24).
    pub by_visitor: bool,
}

/// An idempotency claim to take in the same round trip as the rate decision.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimRequest {
    pub idempotency_key: String,
    pub fingerprint: String,
    /// Identifies the claimer: only it may complete or release the claim.
    pub request_id: String,
}

/// Where a request's claim is, to release it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimHolder {
    /// The object that took it: a key's guard or claim object ([`KeyRecord::claim_object`]), or
    /// the operator's guard.
    Object(String),
    /// Wherever the guard of this key (by its hash) put it: the guard's answer was lost, so the
    /// request never learnt the key's record, which says where its claims live.
    GuardOf(String),
}

/// What the guard of a key says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    Admitted(Box<Admission>),
    /// No key has this hash (`None`), or it is refused (its record, so the refusal can be logged
    /// for its project, and why: revoked, expired, or rolled and past its grace): all are 401.
    Denied(Option<(Box<KeyRecord>, RefusalReason)>),
    /// The key is re-hashed and this is the name of its guard (SPEC §26): ask that one.
    Moved(String),
}

/// The guard that holds the operator's idempotency claims (admin routes have no API key, SPEC
/// §19): a name no key hash (64 hex digits) or client address (`ip:…`) takes. Its claims are
/// scoped to the operator, as a key's are to the key, and its responses are sealed under the
/// admin token.
pub const OPERATOR_GUARD: &str = "operator";

/// A claim's completion (see [`KeyGuard::complete_claim`]): the object that holds it (`key_hash`,
/// or one of the key's claim objects), the key's id, the claim, and its response, sealed.
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    pub key_hash: &'a str,
    pub api_key_id: &'a str,
    pub claim: &'a ClaimRequest,
    pub response: &'a KeptResponse,
}

/// One request's ask of its key's guard (see [`KeyGuard::authorize`]): the key, what the route
/// needs, the claim to take, and the lease the isolate would hold.
#[derive(Debug, Clone, Copy)]
pub struct AuthorizeCall<'a> {
    pub key_hash: &'a str,
    pub scope: Scope,
    pub claim: Option<&'a ClaimRequest>,
    pub lease: Option<&'a LeaseAsk>,
    /// A browser key's visitor (SPEC §24).
    pub visitor: Option<&'a crate::browser::Visitor>,
    /// The key's hash under the current pepper (SPEC §26): the guard re-hashes a record
    /// hashed otherwise to it.
    pub current: Option<&'a crate::api_key::CurrentHash>,
}

/// The per-key Durable Object (SPEC §1 `KEY_GUARD`): one round trip per authenticated request.
/// It is the source of truth for the key's limits and claims, and for "completed".
pub trait KeyGuard {
    /// Authenticates the key and makes the rate and quota decision for one request; takes the
    /// claim only when the request is within its limits and the key's type may call the route —
    /// itself, or, when the claim lives in one of the key's claim objects, through that object
    /// (one round trip for the caller either way).
    async fn authorize(&self, ask: AuthorizeCall<'_>) -> Result<Authorization, PortError>;
    /// Gives back what this isolate did not use of the key's leases that ended (SPEC §20): the
    /// key's guard counts them as unused again. Safe to repeat.
    async fn give_back_leases(&self, key_hash: &str, give_back: &[GiveBack]) -> Result<(), PortError>;
    /// Asks the key's guard for a new lease while this isolate's current one still serves (SPEC
    /// §20); answers the key's record as the guard holds it and the lease, if any.
    async fn renew_lease(
        &self,
        key_hash: &str,
        lease: &LeaseAsk,
    ) -> Result<(Option<KeyRecord>, Option<Grant>), PortError>;
    /// Takes a claim for a principal without an API key (the operator, [`OPERATOR_GUARD`]): the
    /// claims of the guard named `principal`, decided as `authorize` decides a key's. Also the
    /// claim of a key `authorize` admitted without one a moment before: its body is read only
    /// after its key is authenticated (SPEC §19 "Memory"), and the fingerprint needs the body.
    async fn take_claim(&self, principal: &str, claim: &ClaimRequest) -> Result<ClaimDecision, PortError>;
    /// The claimed operation succeeded: the claim is completed; its object writes the response
    /// (sealed: the guard never sees it in clear) to the response store under `api_key_id` and
    /// keeps its own copy only until the store shows it. Safe to repeat. `completed: false`: the
    /// claim is no longer this request's (its lease ran out and another request took it), so its
    /// response must not be stored; `stored: false`: the caller writes the store itself.
    async fn complete_claim(
        &self,
        completion: Completion<'_>,
    ) -> Result<crate::guard::protocol::Completed, PortError>;
    /// Tells the authority of `level` (`project:…`, `identity:…`) its limits, first when they
    /// change (SPEC §23): it grants under them from then on. Safe to repeat; an older `version`
    /// changes nothing.
    async fn set_level_limits(&self, level: &str, limits: &LimitSpec, version: i64) -> Result<(), PortError>;
    /// The claimed operation failed: forget the claim, so a retry executes again. Safe to repeat.
    async fn release_claim(&self, holder: &ClaimHolder, claim: &ClaimRequest) -> Result<(), PortError>;
    /// The response of a completed claim, as the guard keeps it (the response store missed).
    async fn held_response(
        &self,
        key_hash: &str,
        idempotency_key: &str,
    ) -> Result<Option<KeptResponse>, PortError>;
    /// The guard holds this record of its key from now on (a revocation or a change, told to the
    /// guard before D1 is written). A revocation or roll the guard holds stays (`KeyRecord::told`)
    /// unless it is the one `undo` names (by its `revoked_at` or `rolled_at`).
    async fn apply(&self, key: &KeyRecord, undo: Option<i64>) -> Result<(), PortError>;
    /// One round trip to a guard that does nothing: the deep health check.
    async fn ping(&self) -> Result<(), PortError>;
    /// The same to the object named `object` (a key's guard or claim object, an authority): it
    /// runs a purge pass when one is due and sets its alarm (`ports::wake`).
    async fn wake(&self, object: &str) -> Result<(), PortError>;
    /// Counts a failed authentication from a client address; `RateLimited` once it has too many.
    async fn record_auth_failure(&self, group: &str, per_minute: u32) -> Result<(Verdict, Usage), PortError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    Revoked(KeyRecord),
    AlreadyRevoked(KeyRecord),
    /// The project would be left without an owner key that stays usable (SPEC §19).
    LastOwnerKey,
    NotFound,
}

/// What a key's owner may change (`PATCH /public/v1/keys/{id}`); `None` leaves a field as it is.
/// The plan is the project's, set by the operator (SPEC §13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyChanges {
    pub name: Option<Option<String>>,
    pub rate_limit_per_minute: Option<Option<u32>>,
    /// A rolled key keeps its grace's end (the store leaves it).
    pub expires_at: Option<Option<i64>>,
    /// The identity the key belongs to from now on (with its limits), or none.
    pub identity: Option<Option<IdentityLimits>>,
    /// The key's own windows (SPEC §20), or none: its plan's.
    pub limits: Option<Option<LimitSpec>>,
    /// A browser key's origins from now on (empty: any).
    pub allowed_origins: Option<Vec<String>>,
}

impl KeyChanges {
    /// The record as it is after the change.
    pub fn applied_to(&self, mut key: KeyRecord) -> KeyRecord {
        if let Some(name) = &self.name {
            key.name = name.clone();
        }
        if let Some(rate) = self.rate_limit_per_minute {
            key.rate_limit_per_minute = rate;
        }
        if let Some(expires_at) = self.expires_at.filter(|_| key.rolled_at.is_none()) {
            key.expires_at = expires_at;
        }
        if let Some(identity) = &self.identity {
            key.identity = identity.clone();
        }
        if let Some(limits) = self.limits {
            key.limits = limits;
        }
        if let Some(origins) = &self.allowed_origins {
            key.allowed_origins.clone_from(origins);
        }
        key
    }
}

/// A project put on another plan by the operator: its name and its keys as they are now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanChange {
    pub name: String,
    pub keys: Vec<KeyRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // made once per PATCH
pub enum KeyUpdate {
    Updated(KeyRecord),
    Revoked,
    /// An expiry would leave the project without an owner key that stays usable (SPEC §19).
    LastOwnerKey,
    NotFound,
}

/// A change of an identity (see [`Directory::update_identity`]): its `updated_at` becomes
/// `now_ms`; up to `tell` of its keys are answered with it.
#[derive(Debug, Clone, Copy)]
pub struct IdentityUpdate<'a> {
    pub project_id: &'a str,
    pub identity_id: &'a str,
    pub changes: &'a IdentityChanges,
    pub now_ms: i64,
    pub tell: usize,
}

/// Projects and keys in D1.
pub trait Directory {
    /// The owner key's project (`owner_key.project_id`, named `name`, on the key's plan), and that
    /// key: both or neither. Create-or-find by id (an earlier execution of the same operation
    /// wrote them): answers the owner key as stored.
    async fn create_project(&self, name: &str, owner_key: &KeyRecord) -> Result<KeyRecord, PortError>;
    /// Inserts a key of an existing project, on the project's plan whatever `key.plan` says;
    /// answers the stored record (`None`: no such project). Create-or-find by id: a key of the
    /// project with this id (an earlier execution of the same operation) is answered as stored.
    async fn insert_key(&self, key: &KeyRecord) -> Result<Option<KeyRecord>, PortError>;
    /// Puts the project and all its keys on `plan` in one transaction; answers the project's name
    /// and its keys as changed (`None`: no such project).
    async fn set_project_plan(&self, project_id: &str, plan: &str) -> Result<Option<PlanChange>, PortError>;
    /// The project's keys, newest first, after the page's cursor.
    async fn list_keys(&self, project_id: &str, page: &PageRequest) -> Result<Vec<KeyRecord>, PortError>;
    /// Changes a key that is not revoked. An expiry on a lasting owner key is written only while
    /// another lasting owner key exists (checked in the same statement), else `LastOwnerKey`.
    async fn update_key(
        &self,
        project_id: &str,
        key_id: &str,
        changes: &KeyChanges,
    ) -> Result<KeyUpdate, PortError>;
    /// Revokes a key; an owner key that is not refused yet only while another lasting owner key
    /// exists (checked in the same statement), else `LastOwnerKey`.
    async fn revoke_key(&self, project_id: &str, key_id: &str, now_ms: i64) -> Result<Revocation, PortError>;
    /// In one transaction: marks the key rolled as `rolled` says (its replacement, its grace's
    /// end) and inserts `replacement` on the project's plan — only while the key is not revoked,
    /// not rolled before and not expired at `now_ms`. Answers both as stored, or `None` (nothing
    /// written).
    async fn roll_key(
        &self,
        rolled: &KeyRecord,
        replacement: &KeyRecord,
        now_ms: i64,
    ) -> Result<Option<(KeyRecord, KeyRecord)>, PortError>;
    async fn find_key(&self, project_id: &str, key_id: &str) -> Result<Option<KeyRecord>, PortError>;
    /// How many owner keys of the project other than `except_key_id` are lasting
    /// ([`KeyRecord::is_lasting`]): the last-owner-key rule counts only these (SPEC §19).
    async fn lasting_owner_keys(&self, project_id: &str, except_key_id: &str) -> Result<u32, PortError>;
    /// The key whose hash this is, with its identity's limits (a key of no identity: `None`; an
    /// identity without limits: empty ones).
    async fn key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRecord>, PortError>;

    /// Inserts an identity, create-or-find by id (an earlier execution of the same operation wrote
    /// it: answered as stored). `Duplicate`: another identity of the project has its
    /// `external_id`; `NoProject`: the project does not exist.
    async fn create_identity(&self, identity: &Identity) -> Result<IdentityInsert, PortError>;
    async fn identity(&self, project_id: &str, identity_id: &str) -> Result<Option<Identity>, PortError>;
    /// The project's identities, newest first, after the page's cursor.
    async fn list_identities(&self, project_id: &str, page: &PageRequest)
        -> Result<Vec<Identity>, PortError>;
    /// Changes an identity (its `updated_at` becomes `now_ms`); answers it as changed, with up to
    /// `tell` of its keys that are not revoked, newest first, as they are now (`None`: no such
    /// identity in the project).
    async fn update_identity(&self, update: IdentityUpdate<'_>) -> Result<Option<IdentityChange>, PortError>;
    /// In one transaction: every key of the identity belongs to none from now on, and the identity
    /// is deleted. Answers it with up to `tell` of those keys that are not revoked, newest first, as
    /// they are now, and how many keys it had (`None`: no such identity in the project).
    async fn delete_identity(
        &self,
        project_id: &str,
        identity_id: &str,
        tell: usize,
    ) -> Result<Option<IdentityChange>, PortError>;
}

/// What [`Directory::create_identity`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum IdentityInsert {
    Stored(Identity),
    /// Another identity of the project has this `external_id`: its id.
    Duplicate(String),
    NoProject,
}

/// An identity changed or deleted, with the keys whose guards are told (SPEC §20).
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityChange {
    pub identity: Identity,
    /// Up to the asked number of its keys that are not revoked, newest first, as they are now.
    pub keys: Vec<KeyRecord>,
    /// How many keys it has (had, for a deletion), revoked ones included.
    pub key_count: u64,
}

/// Completed idempotent responses (SPEC §5: Workers KV, `papi:idem:{apiKeyId}:{key}`), sealed
/// before they get here (SPEC §13).
pub trait ResponseStore {
    async fn put(&self, entry: Entry<'_>, response: &KeptResponse) -> Result<(), PortError>;
    async fn get(&self, entry: Entry<'_>) -> Result<Option<KeptResponse>, PortError>;
}
